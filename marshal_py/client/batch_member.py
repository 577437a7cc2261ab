"""Batch members: a group member that plans offset ranges for a micro-batch engine.

A micro-batch engine (the Spark source) does not hand records out one by one: its driver
plans a batch of offset ranges, executors read them, and much later the engine reports the
batch done. A batch member is the driver's membership in the group. A background thread
drives the engine (claims, heartbeats, balance, lock renewals) exactly as for a
:class:`~marshal_py.client.consumer.Consumer`; the caller plans with :meth:`plan` and reports
completion with :meth:`complete`.

* Exclusive modes: :class:`ExclusiveBatchMember` plans ``[position, end)`` of the partitions it
  holds. At-least-once commits a range when it is completed; at-most-once confirms each range
  with a ``ClaimingMessages`` before it is planned, and counts it done at once.
* Key-shared mode: :class:`KeySharedBatchMember` plans, per partition, the range its workers
  read and the key slots whose records they keep (:mod:`marshal_py.client.key_shared_batch_member`).
* Share mode: :class:`ShareBatchMember` acquires records (with their delivery counts) under
  locks the background thread keeps renewing, and accepts them when the batch is completed.
  The workers that read a batch write ``gap`` acknowledgements, in the member's name
  (:class:`ShareHolder`), for offsets of it that held no record; completion reads those back
  and accepts only the rest. With ``max_batch_ms``, a batch still running after that long
  gives its records back (released with their delivery counts) and stops holding them.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from marshal_py.client.batch_base import (
    TP,
    BackgroundMember,
    PlannedRange,
    ShareHolder,
    share_budget,
)
from marshal_py.client.engine import MemberEngine
from marshal_py.client.key_shared_batch_member import KeySharedBatchMember
from marshal_py.client.share_batch_member import ShareBatchMember
from marshal_py.client.source import KafkaPartitionSource

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

__all__ = ["BatchMember", "ExclusiveBatchMember", "KeySharedBatchMember", "PlannedRange",
           "ShareBatchMember", "ShareHolder", "share_budget"]

log = logging.getLogger(__name__)


class ExclusiveBatchMember(BackgroundMember):
    """A batch member of an exclusive group (``alo`` or ``amo``). Thread-safe."""

    def __init__(self, host: MemberHost, engine: MemberEngine,
                 source: KafkaPartitionSource, tick_interval_s: float) -> None:
        self.engine = engine
        self.source = source
        self.mode = engine.config.mode
        # (topic, partition, start) of a planned range -> the claim epoch it was planned under
        self._epochs: dict[tuple[str, int, int], int] = {}
        super().__init__(host, engine.tick, engine.close, tick_interval_s)

    @property
    def instance_id(self) -> str:
        """This member's instance id (new for every process)."""
        return self.engine.me.instance_id

    def wait_settled(self, timeout_s: float) -> None:
        """Wait until the first claims are made (and a predecessor's partitions reclaimed).

        Returns as soon as a step has left the member holding its share of every topic (a
        new member of a quiet group: after the first step, which claims and reads the claims
        back), else after at most three steps, or once a process restarting under the same
        client id has its predecessor's partitions back (one heartbeat interval and a
        quarter).
        """
        self._wait_until_settled(timeout_s, self.engine.hi / 1000, self.engine.reclaim_pending,
                                 self._holds_its_share)

    def _holds_its_share(self) -> bool:
        """True when this member holds its target of every topic (under the lock)."""
        engine, now = self.engine, self.engine.clock.now_ms()
        for topic in engine.config.topics:
            count = self.source.partition_count(topic)
            if count is None:
                return False
            held = sum(1 for t, _ in engine.holdings if t == topic)
            if held < engine.target(topic, count, now):
                return False
        return True

    def end_offsets(self) -> dict[TP, int]:
        """End offsets of every partition of the consumed topics, now."""
        with self._lock:
            return self.source.end_offsets(self.engine.config.topics)

    def plan(self, max_records: int | None, until: Mapping[TP, int] | None = None,
             floors: Mapping[TP, int] | None = None) -> list[PlannedRange]:
        """Plan the next ranges of the held partitions, at most ``max_records`` in all.

        ``until``: never plan past these offsets (trigger-available-now targets); partitions
        missing from it are not planned at all. ``floors``: offsets the caller knows are
        already processed (a checkpoint); planning starts no lower.
        """
        self._raise_background_error()
        with self._lock:
            held = {tp: (epoch, position)
                    for tp, (epoch, position) in self.engine.assignments().items()
                    if self.engine.holds(tp[0], tp[1], epoch)}
            if not held:
                return []
            ends = self.source.end_offsets_of(list(held))
            self._skip_processed(held, ends, floors or {})
            available = {}
            for tp, (_, position) in held.items():
                end = ends[tp]
                if until is not None:
                    end = min(end, until.get(tp, position))
                available[tp] = end - position
            planned = []
            for tp, count in sorted(share_budget(available, max_records).items()):
                if count <= 0:
                    continue
                epoch, position = held[tp]
                if self._hand_out(tp, epoch, position, position + count):
                    planned.append(PlannedRange(tp[0], tp[1], position, position + count))
            return planned

    def skip_processed(self, floors: Mapping[TP, int]) -> None:
        """Records below ``floors`` were processed (say the caller's checkpoint): never plan
        them again in the partitions held now."""
        with self._lock:
            held = {tp: (epoch, position)
                    for tp, (epoch, position) in self.engine.assignments().items()
                    if self.engine.holds(tp[0], tp[1], epoch)}
            wanted = [tp for tp in held if tp in floors]
            if wanted:
                self._skip_processed(held, self.source.end_offsets_of(wanted), floors)

    def _skip_processed(self, held: dict[TP, tuple[int, int]], ends: Mapping[TP, int],
                        floors: Mapping[TP, int]) -> None:
        for tp, floor in floors.items():
            if tp in held and tp in ends and held[tp][1] < floor <= ends[tp]:
                epoch, position = held[tp]
                if self._skip_to(tp, epoch, position, floor):
                    held[tp] = (epoch, floor)

    def adopt(self, ranges: Iterable[PlannedRange]) -> list[PlannedRange]:
        """Take on ranges another process planned and never completed (at-least-once).

        Only the partitions this member holds now are kept, from where this member stands
        (its position already includes the group's committed offset), so a range another
        member has processed meanwhile is not read twice; it is planned like a new range.
        """
        if self.mode != "alo":
            return []
        adopted = []
        with self._lock:
            assignments = self.engine.assignments()
            for r in ranges:
                tp = (r.topic, r.partition)
                if tp not in assignments:
                    continue
                epoch, position = assignments[tp]
                if position >= r.end or not self.engine.holds(r.topic, r.partition, epoch):
                    continue
                if self._hand_out(tp, epoch, position, r.end):
                    adopted.append(PlannedRange(r.topic, r.partition, position, r.end))
                    assignments[tp] = (epoch, r.end)
        return adopted

    def complete(self, ranges: Iterable[PlannedRange]) -> None:
        """The batch holding ``ranges`` is processed: commit them (at-least-once)."""
        with self._lock:
            for r in ranges:
                epoch = self._epochs.pop((r.topic, r.partition, r.start), None)
                if epoch is not None and self.mode == "alo":
                    self.engine.commit(r.topic, r.partition, r.start, epoch)

    def _hand_out(self, tp: TP, epoch: int, start: int, end: int) -> bool:
        """Count ``[start, end)`` as handed out (at-most-once: confirmed first)."""
        topic, partition = tp
        if self.mode == "alo":
            if not self.engine.accept(topic, partition, epoch, [start], end):
                return False
            self._epochs[(topic, partition, start)] = epoch
            return True
        if not self.engine.accept(topic, partition, epoch, [start, end - 1], end):
            return False
        if self.engine.deliver(topic, partition, epoch, end - 1):
            return True
        # Confirmed in the log, but the lease lapsed while confirming: nothing was handed out.
        # Under the same claim the range is planned again once a heartbeat restores the lease
        # (its confirmation stands); only a new claim starts past it.
        self.engine.rewind(topic, partition, epoch, start)
        return False

    def _skip_to(self, tp: TP, epoch: int, position: int, floor: int) -> bool:
        """Records before ``floor`` were processed by an earlier run: commit past them."""
        if not self._hand_out(tp, epoch, position, floor):
            return False
        if self.mode == "alo":
            self._epochs.pop((tp[0], tp[1], position), None)
            self.engine.commit(tp[0], tp[1], position, epoch)
        log.info("%s/%d: skipped to offset %d, processed before this process started",
                 tp[0], tp[1], floor)
        return True


BatchMember = ExclusiveBatchMember | ShareBatchMember | KeySharedBatchMember
