"""Resetting an empty group's offsets: share groups move their SPSO
(``ResettingSharePartition``); exclusive and key-shared groups get a ``ResettingOffsets`` per
partition, which sets the claim's committed offset and every key-hash slot's.

Only an **empty** group can be reset: the rationalizer ignores a reset while the group has a
live member on the topic, and these functions refuse before writing anything when they see
one. After writing they read the log back and report, per partition, whether the reset
applied (a member that joined meanwhile makes it not apply, never corrupt).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace

from marshal_py.admin.groups import member_name
from marshal_py.admin.lag import exclusive_committed, group_topics
from marshal_py.admin.world_view import WorldView, load_world
from marshal_py.errors import MarshalError
from marshal_py.identity import new_instance_id
from marshal_py.log.base import CoordinationLog
from marshal_py.log.history import record_history
from marshal_py.log.signing import MessageWriter
from marshal_py.protocol import (
    GroupKey,
    Message,
    ResettingOffsets,
    ResettingSharePartition,
    coordination_partition,
)
from marshal_py.replay.reading import catch_up
from marshal_py.world import Outcome, Verdict
from marshal_py.world.lifecycle import DEFAULT_OFFSETS_RETENTION_MS

#: The client id of what the admin commands write; each run is a fresh instance (its signed
#: records carry sequence numbers, which must never repeat under one instance id).
ADMIN_CLIENT = "marshal-admin"


@dataclass(frozen=True)
class ResetPlan:
    """One share-partition's move."""

    partition: int
    current_spso: int
    new_spso: int
    in_flight: int


@dataclass(frozen=True)
class OffsetResetPlan:
    """One partition's move in an exclusive or key-shared group. ``applied`` is None before
    the reset is written (and in a dry run), then what the log decided."""

    partition: int
    current_offset: int | None
    new_offset: int
    applied: bool | None = None

    def as_dict(self) -> dict[str, object]:
        return {"partition": self.partition, "current_offset": self.current_offset,
                "new_offset": self.new_offset, "applied": self.applied}


@dataclass
class ResetResult:
    """What ``marshal reset-offsets`` did to one group on one topic."""

    group: str
    topic: str
    mode: str  # "share", "exclusive" or "key-shared"
    dry_run: bool
    share_plans: list[ResetPlan] = field(default_factory=list)
    plans: list[OffsetResetPlan] = field(default_factory=list)

    @property
    def refused(self) -> list[int]:
        """Partitions whose reset the log did not apply."""
        return [p.partition for p in self.plans if p.applied is False]

    def as_json(self) -> dict[str, object]:
        partitions: list[dict[str, object]]
        if self.mode == "share":
            applied = None if self.dry_run else True
            partitions = [{"partition": p.partition, "current_offset": p.current_spso,
                           "new_offset": p.new_spso, "in_flight_discarded": p.in_flight,
                           "applied": applied} for p in self.share_plans]
        else:
            partitions = [p.as_dict() for p in self.plans]
        return {"group": self.group, "topic": self.topic, "mode": self.mode,
                "dry_run": self.dry_run, "partitions": partitions}


def group_mode(view: WorldView, group: str, topic: str) -> str | None:
    """How ``group`` consumes ``topic`` per the log: share, key-shared, exclusive, or None
    when the log does not know the pair."""
    r = view.rationalizer
    if r.share_partitions(group, topic):
        return "share"
    if r.key_shared_partitions(group, topic):
        return "key-shared"
    if topic in group_topics(r, group):
        return "exclusive"
    return None


def _refuse_live(view: WorldView, group: str, topic: str, kind: str) -> None:
    live = view.rationalizer.members(group, topic, view.now_ms)
    if live:
        names = ", ".join(member_name(m) for m in live)
        raise MarshalError(f"{kind} group {group!r} has live members: {names}; stop them "
                           "first (offsets of a group can be reset only while it is empty)")


def _write_and_read_back(log: CoordinationLog, view: WorldView, topic: str,
                         messages: list[Message]) -> list[Outcome | None]:
    cp = coordination_partition(topic, log.partition_count())
    for group in sorted({m.group_id for m in messages}):  # a writer's duty (PROTOCOL.md 6)
        record_history(log, group, topic)
    writer = MessageWriter(log, view.rationalizer.config.group_keys)
    written = [record.position for record in writer.write([(cp, m) for m in messages])]
    outcomes: dict[int, Outcome] = {}
    view.rationalizer.observe(lambda o: outcomes.__setitem__(o.record.position, o))
    catch_up(log, view.rationalizer, [cp])
    return [outcomes.get(position) for position in written]


def load_group(log: CoordinationLog, group: str, topic: str, *, heartbeat_interval_ms: int,
               window_ms: int, offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
               group_keys: Mapping[str, tuple[GroupKey, ...]] | None = None,
               progress: Callable[[int, int], None] | None = None) -> WorldView:
    """The world of ``group`` on ``topic``: its coordination partition replayed from the
    group's newest checkpoint (or the window's start). With the group's keys in
    ``group_keys``, what a reset writes is signed."""
    return load_world(log, heartbeat_interval_ms=heartbeat_interval_ms, window_ms=window_ms,
                      topic=topic, group=group, offsets_retention_ms=offsets_retention_ms,
                      group_keys=group_keys, progress=progress)


def reset_offsets(
    log: CoordinationLog,
    group: str,
    topic: str,
    target: Callable[[int], int],
    partitions: int,
    *,
    heartbeat_interval_ms: int,
    window_ms: int,
    offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
    group_keys: Mapping[str, tuple[GroupKey, ...]] | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> ResetResult:
    """Move every partition of ``group`` on ``topic`` to ``target(partition)``.

    Share groups: every share-partition's SPSO, as :func:`reset_share_offsets`. Exclusive
    and key-shared groups: each of the topic's ``partitions`` (Kafka's count) and any other
    partition the log mentions get a ``ResettingOffsets``; the result says per partition
    whether the log applied it. Refuses (MarshalError naming them) while the group has live
    members, and for a group the log does not know on the topic.
    """
    view = load_group(log, group, topic, heartbeat_interval_ms=heartbeat_interval_ms,
                      window_ms=window_ms, offsets_retention_ms=offsets_retention_ms,
                      group_keys=group_keys, progress=progress)
    mode = group_mode(view, group, topic)
    if mode is None:
        raise MarshalError(f"unknown group: no share group {group!r}, nor an exclusive or "
                           f"key-shared one, on topic {topic!r} in {log.topic} (marshal "
                           "groups lists the groups)")
    if mode == "share":
        plans = _reset_shares(log, view, group, topic, target, dry_run)
        return ResetResult(group, topic, mode, dry_run, share_plans=plans)
    _refuse_live(view, group, topic, mode)
    r = view.rationalizer
    claims = {c.key.partition: c for c in r.claims(group, topic)}
    keyed = {k.partition: s for k, s in r.key_shared_partitions(group, topic)}
    numbers = sorted(set(range(partitions)) | set(claims) | set(keyed))
    offset_plans = []
    for p in numbers:
        current = (keyed[p].lowest_committed() if p in keyed
                   else exclusive_committed(claims[p]) if p in claims else None)
        offset_plans.append(OffsetResetPlan(p, current, target(p)))
    result = ResetResult(group, topic, mode, dry_run, plans=offset_plans)
    if dry_run:
        return result
    instance = new_instance_id()
    messages: list[Message] = [
        ResettingOffsets(int(time.time()), instance, ADMIN_CLIENT, group, topic,
                         plan.partition, plan.new_offset) for plan in offset_plans]
    outcomes = _write_and_read_back(log, view, topic, messages)
    result.plans = [replace(plan, applied=o is not None and o.verdict is Verdict.OFFSETS_RESET)
                    for plan, o in zip(offset_plans, outcomes, strict=True)]
    return result


def _reset_shares(log: CoordinationLog, view: WorldView, group: str, topic: str,
                  target: Callable[[int], int], dry_run: bool) -> list[ResetPlan]:
    shares = view.rationalizer.share_partitions(group, topic)
    if not shares:
        raise MarshalError(f"no share group {group!r} on topic {topic!r} in {log.topic}")
    _refuse_live(view, group, topic, "share")
    plans = [ResetPlan(key.partition, share.spso, target(key.partition),
                       share.speo - share.spso) for key, share in shares]
    if dry_run:
        return plans
    instance = new_instance_id()
    messages: list[Message] = [
        ResettingSharePartition(int(time.time()), instance, ADMIN_CLIENT, group, topic,
                                plan.partition, plan.new_spso) for plan in plans]
    outcomes = _write_and_read_back(log, view, topic, messages)
    refused = [p for p, o in zip(plans, outcomes, strict=True)
               if o is None or o.verdict is not Verdict.SHARE_RESET]
    if refused:
        which = ", ".join(str(p.partition) for p in refused)
        raise MarshalError(f"the log refused the reset of partition(s) {which} (a member "
                           "joined meanwhile?); run marshal state and try again")
    return plans


def reset_share_offsets(
    log: CoordinationLog,
    group: str,
    topic: str,
    target: Callable[[int], int],
    *,
    heartbeat_interval_ms: int,
    window_ms: int,
    group_keys: Mapping[str, tuple[GroupKey, ...]] | None = None,
    dry_run: bool = False,
) -> list[ResetPlan]:
    """Move every share-partition of ``group`` on ``topic`` to ``target(partition)``.

    Refuses (MarshalError naming them) while the group has live members; the rationalizer
    enforces the same rule, so a member joining meanwhile makes the reset fail, not corrupt.
    """
    view = load_group(log, group, topic, heartbeat_interval_ms=heartbeat_interval_ms,
                      window_ms=window_ms, group_keys=group_keys)
    return _reset_shares(log, view, group, topic, target, dry_run)
