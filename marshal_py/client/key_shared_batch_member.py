"""Key-shared batch members: plan the records of this member's key slots for a micro-batch
engine. See :mod:`marshal_py.client.batch_member` for batch members in general.

Every member of a key-shared group reads whole partitions and keeps the records of the key
slots it owns (PROTOCOL.md section 9). A batch member plans, per partition where it owns
active slots (its lease valid), one range from its scan position to the end: the workers
read the range and keep the records whose key falls in the range's slots (and, for a slot
just won below the scan, only from its own cursor on). Planning hands the range out at once
(:meth:`~marshal_py.client.key_shared_engine.KeySharedEngine.hand_out_range`); completing the
batch commits it, so a slot moving to another member is released only after the batch that
delivered its records is complete, at the offset after them: no key is processed by two
members at once, nor out of order.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from marshal_py.client.batch_base import (
    TP,
    BackgroundMember,
    PlannedRange,
    share_budget,
)
from marshal_py.client.key_shared_engine import KeySharedEngine
from marshal_py.client.source import KafkaPartitionSource
from marshal_py.protocol import ranges_of

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

log = logging.getLogger(__name__)


class KeySharedBatchMember(BackgroundMember):
    """A batch member of a key-shared group. Thread-safe."""

    def __init__(self, host: MemberHost, engine: KeySharedEngine,
                 source: KafkaPartitionSource, tick_interval_s: float) -> None:
        self.engine = engine
        self.source = source
        self.mode = "key-shared"
        super().__init__(host, engine.tick, engine.close, tick_interval_s)

    @property
    def instance_id(self) -> str:
        """This member's instance id (new for every process)."""
        return self.engine.me.instance_id

    def wait_settled(self, timeout_s: float) -> None:
        """Wait until the member owns its target slots of every partition (a new member of
        a quiet group: after the first step), else at most three steps; a process restarting
        under the same client id waits until its predecessor's slots are back."""
        self._wait_until_settled(timeout_s, self.engine.hi / 1000, self.engine.reclaim_pending,
                                 self._owns_its_target)

    def _owns_its_target(self) -> bool:
        engine, now = self.engine, self.engine.clock.now_ms()
        me = engine.me
        for topic in engine.config.topics:
            count = self.source.partition_count(topic)
            if count is None:
                return False
            for partition in range(count):
                wanted = {s for s, o in enumerate(engine.target(topic, partition, now))
                          if o is me}
                if not wanted <= engine.slots(topic, partition):
                    return False
        return True

    def end_offsets(self) -> dict[TP, int]:
        """End offsets of every partition of the consumed topics, now."""
        with self._lock:
            return self.source.end_offsets(self.engine.config.topics)

    def plan(self, max_records: int | None, until: Mapping[TP, int] | None = None,
             floors: Mapping[TP, int] | None = None) -> list[PlannedRange]:
        """Plan, per partition where this member may hand records out, the range from its
        scan position on, at most ``max_records`` offsets in all (split fairly), never past
        ``until`` (partitions missing from it are not planned). ``floors`` are ignored: the
        slots' committed offsets in the log are the record of progress (a checkpointed
        offset says nothing of slots owned by others meanwhile)."""
        self._raise_background_error()
        del floors
        with self._lock:
            plan = self.engine.fetch_plan()
            if until is not None:
                plan = {tp: v for tp, v in plan.items() if tp in until}
            if not plan:
                return []
            ends = self.source.end_offsets_of(list(plan))
            available = {}
            for tp, (_, scan) in plan.items():
                end = ends[tp] if until is None else min(ends[tp], until[tp])
                available[tp] = end - scan
            planned = []
            for tp, count in sorted(share_budget(available, max_records).items()):
                if count <= 0:
                    continue
                _, scan = plan[tp]
                handed = self.engine.hand_out_range(tp[0], tp[1], scan + count)
                if handed is None:
                    continue
                start, slots, starts = handed
                planned.append(PlannedRange(
                    tp[0], tp[1], start, scan + count, slots=ranges_of(slots),
                    slot_starts=tuple(sorted(starts.items()))))
            return planned

    def skip_processed(self, floors: Mapping[TP, int]) -> None:
        """The slots' committed offsets in the log are the record of progress: nothing to
        skip (see :meth:`plan`)."""
        del floors

    def adopt(self, ranges: Iterable[PlannedRange]) -> list[PlannedRange]:
        """Re-run an interrupted batch of an earlier process: plan again, up to its ends,
        the partitions of it where this member hands records out now, from where it stands
        (its slots start at their committed offsets: what was read and not committed is read
        again, at-least-once)."""
        until: dict[TP, int] = {}
        for r in ranges:
            key = (r.topic, r.partition)
            until[key] = max(until.get(key, 0), r.end)
        return self.plan(None, until) if until else []

    def complete(self, ranges: Iterable[PlannedRange]) -> None:
        """The batch holding ``ranges`` is processed: commit them (the next heartbeat of
        each partition carries the offset after them, and slots waiting to move are
        released there)."""
        with self._lock:
            for r in ranges:
                self.engine.commit_range(r.topic, r.partition, r.start)
