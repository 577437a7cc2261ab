"""Loading the world state from a coordination log, and flattening it into rows."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from marshal_py.log.base import CoordinationLog
from marshal_py.log.history import read_index_view
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.placement import coordination_partition
from marshal_py.replay.checkpoints import start_from_checkpoints
from marshal_py.replay.reading import DEFAULT_REPLAY_WINDOW_MS, catch_up, replay_start
from marshal_py.world.lifecycle import DEFAULT_OFFSETS_RETENTION_MS
from marshal_py.world.rationalizer import (
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    Outcome,
    Rationalizer,
    RationalizerConfig,
)
from marshal_py.world.share import RecordState
from marshal_py.world.state import PartitionClaim

#: Column order of ``marshal state`` (and the exact keys of its JSON objects).
STATE_COLUMNS = (
    "group",
    "topic",
    "partition",
    "client_id",
    "instance_id",
    "status",
    "heartbeat_age_s",
    "committed_offset",
    "amo_claimed_offset",
)


@dataclass(frozen=True)
class WorldView:
    """A rationalizer caught up to the log's end, and the time it was read at."""

    rationalizer: Rationalizer
    now_ms: int
    partitions: tuple[int, ...]
    applied: int


@dataclass(frozen=True)
class StateRow:
    """One line of ``marshal state``."""

    group: str
    topic: str
    partition: int
    client_id: str | None
    instance_id: str | None
    status: str
    heartbeat_age_s: float | None
    committed_offset: int | None
    amo_claimed_offset: int | None

    def as_dict(self) -> dict[str, object]:
        """The row as a JSON-ready mapping with exactly :data:`STATE_COLUMNS` as keys."""
        return {name: getattr(self, name) for name in STATE_COLUMNS}


def load_world(
    log: CoordinationLog,
    *,
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
    window_ms: int = DEFAULT_REPLAY_WINDOW_MS,
    topic: str | None = None,
    group: str | None = None,
    offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
    group_keys: Mapping[str, tuple[GroupKey, ...]] | None = None,
    now_ms: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    until: Mapping[int, int] | None = None,
) -> WorldView:
    """Replay the coordination log's window up to its current end.

    With ``topic`` only that topic's coordination partition is read; with ``group`` as well,
    the replay starts from that group's newest checkpoint on the topic (the window's start
    when it has none), so only the group's state on the topic is complete. ``now_ms``
    defaults to this machine's clock (used to place the replay window and to judge
    freshness). ``group_keys``: the keys of authenticated groups, to verify their records.

    ``until`` (time travel, with ``now_ms`` the moment): only the partitions it names are
    read, each below its position there, from the newest checkpoint whose records are all
    below it (with ``group`` and ``topic``) or the window before ``now_ms``.
    """
    now = int(time.time() * 1000) if now_ms is None else now_ms
    count = log.partition_count()
    partitions = (
        (coordination_partition(topic, count),) if topic is not None else tuple(range(count))
    )
    if until is not None:
        partitions = tuple(p for p in partitions if p in until)
    config = RationalizerConfig(
        coordination_partitions=count, heartbeat_interval_ms=heartbeat_interval_ms,
        offsets_retention_ms=offsets_retention_ms, group_keys=dict(group_keys or {}),
    )
    rationalizer = Rationalizer(config)
    if on_outcome is not None:
        rationalizer.observe(on_outcome)
    # The group's checkpoint pointer (a view trusts no absence in the index: section 6.1).
    index = read_index_view(log) if group is not None and topic is not None else None
    for partition in partitions:
        start = replay_start(log, partition, now, window_ms)
        if group is not None and topic is not None:
            start_from_checkpoints(log, rationalizer, partition, group, [topic], start,
                                   index=index,
                                   ceiling=None if until is None else until[partition])
        else:
            rationalizer.skip_to(partition, start)
    applied = catch_up(log, rationalizer, partitions, progress=progress, until=until)
    if now_ms is None:  # judge freshness as of the end of the replay, not its start
        now = int(time.time() * 1000)
    return WorldView(rationalizer, now, partitions, applied)


def state_rows(
    view: WorldView, group: str | None = None, topic: str | None = None
) -> list[StateRow]:
    """The world as ``marshal state`` prints it, sorted by group, topic, partition."""
    rows = []
    for claim in view.rationalizer.claims(group=group, topic=topic):
        rows.append(_row(claim, view.now_ms))
    return rows


def _row(claim: PartitionClaim, now_ms: int) -> StateRow:
    age = claim.heartbeat_age_ms(now_ms)
    return StateRow(
        group=claim.key.group,
        topic=claim.key.topic,
        partition=claim.key.partition,
        client_id=claim.owner.client_id if claim.owner else None,
        instance_id=claim.owner.instance_id if claim.owner else None,
        status=claim.status(now_ms).value,
        heartbeat_age_s=None if age is None else round(age / 1000.0, 3),
        committed_offset=claim.committed_offset,
        amo_claimed_offset=claim.amo_claimed_offset,
    )


#: Columns of ``marshal state``'s share-partition table (and keys of ``--shares --json``).
SHARE_COLUMNS = (
    "group",
    "topic",
    "partition",
    "spso",
    "speo",
    "available",
    "acquired",
    "acknowledged",
    "archived",
    "dead_letter",
    "oldest_lock_expires_in_s",
)

#: Columns of ``marshal state --records`` (and its JSON keys).
RECORD_COLUMNS = (
    "group",
    "topic",
    "partition",
    "offset",
    "state",
    "delivery_count",
    "client_id",
    "instance_id",
    "lock_expires_in_s",
)


def share_rows(view: WorldView, group: str | None = None,
               topic: str | None = None) -> list[dict[str, object]]:
    """One row per share-partition: SPSO, SPEO, in-flight records per state, oldest lock."""
    rows: list[dict[str, object]] = []
    for key, share in view.rationalizer.share_partitions(group, topic):
        records = share.in_flight(view.now_ms)
        counts = {state: 0 for state in RecordState}
        expiries = []
        for record in records:
            counts[record.state] += 1
            if record.lock_expiry_ms is not None:
                expiries.append(record.lock_expiry_ms)
        rows.append({
            "group": key.group, "topic": key.topic, "partition": key.partition,
            "spso": share.spso, "speo": share.speo,
            "available": counts[RecordState.AVAILABLE],
            "acquired": counts[RecordState.ACQUIRED],
            "acknowledged": counts[RecordState.ACKNOWLEDGED],
            "archived": counts[RecordState.ARCHIVED],
            "dead_letter": counts[RecordState.DEAD_LETTER],
            "oldest_lock_expires_in_s":
                round((min(expiries) - view.now_ms) / 1000, 3) if expiries else None,
        })
    return rows


def record_rows(view: WorldView, group: str | None = None,
                topic: str | None = None) -> list[dict[str, object]]:
    """One row per in-flight record of every share-partition."""
    rows: list[dict[str, object]] = []
    for key, share in view.rationalizer.share_partitions(group, topic):
        for record in share.in_flight(view.now_ms):
            rows.append({
                "group": key.group, "topic": key.topic, "partition": key.partition,
                "offset": record.offset, "state": record.state.value,
                "delivery_count": record.delivery_count,
                "client_id": record.holder.client_id if record.holder else None,
                "instance_id": record.holder.instance_id if record.holder else None,
                "lock_expires_in_s": None if record.lock_expiry_ms is None
                else round((record.lock_expiry_ms - view.now_ms) / 1000, 3),
            })
    return rows
