"""Resetting a share group's offsets (empty groups only)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from marshal_py.admin.world_view import load_world
from marshal_py.errors import MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.log.replay import catch_up
from marshal_py.protocol import ResettingSharePartition, coordination_partition, encode
from marshal_py.world import Outcome, Verdict


@dataclass(frozen=True)
class ResetPlan:
    """One share-partition's move."""

    partition: int
    current_spso: int
    new_spso: int
    in_flight: int


def reset_share_offsets(
    log: CoordinationLog,
    group: str,
    topic: str,
    target: Callable[[int], int],
    *,
    heartbeat_interval_ms: int,
    window_ms: int,
    dry_run: bool = False,
    instance_id: str = "00000000",
    client_id: str = "marshal-admin",
) -> list[ResetPlan]:
    """Move every share-partition of ``group`` on ``topic`` to ``target(partition)``.

    Refuses (MarshalError naming them) while the group has live members; the rationalizer
    enforces the same rule, so a member joining meanwhile makes the reset fail, not corrupt.
    """
    view = load_world(log, heartbeat_interval_ms=heartbeat_interval_ms, window_ms=window_ms,
                      topic=topic)
    shares = view.rationalizer.share_partitions(group, topic)
    if not shares:
        raise MarshalError(f"no share group {group!r} on topic {topic!r} in {log.topic}")
    live = view.rationalizer.members(group, topic, view.now_ms)
    if live:
        names = ", ".join(f"{m.client_id} (instance {m.instance_id})" for m in live)
        raise MarshalError(f"share group {group!r} has live members: {names}; stop them "
                           "first (offsets of a group can be reset only while it is empty)")
    plans = [ResetPlan(key.partition, share.spso, target(key.partition),
                       share.speo - share.spso) for key, share in shares]
    if dry_run:
        return plans
    cp = coordination_partition(topic, log.partition_count())
    written = []
    for plan in plans:
        message = ResettingSharePartition(int(time.time()), instance_id, client_id, group,
                                          topic, plan.partition, plan.new_spso)
        written.append(log.append(cp, encode(message)).position)
    outcomes: dict[int, Outcome] = {}
    view.rationalizer.observe(lambda o: outcomes.__setitem__(o.record.position, o))
    catch_up(log, view.rationalizer, [cp])
    refused = [p for p, pos in zip(plans, written, strict=True)
               if outcomes.get(pos) is None or outcomes[pos].verdict is not Verdict.SHARE_RESET]
    if refused:
        which = ", ".join(str(p.partition) for p in refused)
        raise MarshalError(f"the log refused the reset of partition(s) {which} (a member "
                           "joined meanwhile?); run marshal state and try again")
    return plans
