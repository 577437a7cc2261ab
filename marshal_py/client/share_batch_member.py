"""Share-mode batch members: acquire records for a micro-batch engine and accept them when
the batch is done. See :mod:`marshal_py.client.batch_member`."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from marshal_py.client.batch_base import TP, BackgroundMember, PlannedRange, ShareHolder
from marshal_py.client.share_engine import ShareEngine
from marshal_py.client.source import KafkaPartitionSource
from marshal_py.protocol.auth import holder_key

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

log = logging.getLogger(__name__)


class ShareBatchMember(BackgroundMember):
    """A batch member of a share group. Thread-safe."""

    def __init__(self, host: MemberHost, engine: ShareEngine,
                 source: KafkaPartitionSource, tick_interval_s: float,
                 max_batch_ms: int | None = None) -> None:
        self.engine = engine
        self.source = source
        self.mode = "share"
        #: a batch running longer than this (ms) gives its records back (None: never)
        self.max_batch_ms = max_batch_ms
        #: batches planned and not completed -> when they were planned (monotonic seconds)
        self._running: dict[tuple[PlannedRange, ...], float] = {}
        #: batches that ran too long and gave their records back
        self._expired: set[tuple[PlannedRange, ...]] = set()
        super().__init__(host, self._tick, engine.close, tick_interval_s)

    def _tick(self) -> None:
        self._expire_stalled()
        self.engine.tick()

    @property
    def holder(self) -> ShareHolder:
        """Who holds this member's records, for workers writing ``gap`` in its name."""
        me = self.engine.me
        group = self.engine.config.group_id
        keys = self.engine.channel.rationalizer.config.group_keys.get(group)
        return ShareHolder(me.instance_id, me.client_id, group,
                           tuple(sorted(self.engine.channel.partitions.items())),
                           holder_key(keys[0], me.instance_id, me.client_id) if keys else None)

    @property
    def instance_id(self) -> str:
        """This member's instance id (new for every process)."""
        return self.engine.me.instance_id

    def wait_settled(self, timeout_s: float) -> None:
        """Wait until the share-partitions are initialized (the first engine step)."""
        self.wait_ticks(1, timeout_s)

    def end_offsets(self) -> dict[TP, int]:
        """End offsets of every partition of the consumed topics, now."""
        with self._lock:
            return self.source.end_offsets(self.engine.config.topics)

    def plan(self, max_records: int | None, until: Mapping[TP, int] | None = None,
             floors: Mapping[TP, int] | None = None) -> list[PlannedRange]:
        """Acquire up to ``max_records`` records over every partition (in-flight limits
        apply), never at or past ``until``; return them as ranges of one delivery count."""
        self._raise_background_error()
        del floors  # the share-partition state in the log is the only record of progress
        with self._lock:
            # Read our own acceptances back first: they move the start offset (SPSO) and so
            # make room under the in-flight limit.
            self.engine.channel.catch_up()
            tps = sorted(self.source.end_offsets(self.engine.config.topics))
            if until is not None:
                tps = [tp for tp in tps if tp in until]
            planned: list[PlannedRange] = []
            left = max_records
            for i, tp in enumerate(tps):
                if left is not None and left <= 0:
                    break
                ask = None if left is None else max(1, left // (len(tps) - i))
                granted = self.engine.acquire(tp[0], tp[1], ask or self._unbounded(tp),
                                              until=None if until is None else until[tp])
                planned.extend(_runs(tp, granted))
                if left is not None:
                    left -= len(granted)
            if planned:
                self._running[tuple(planned)] = time.monotonic()
            return planned

    def _unbounded(self, tp: TP) -> int:
        share = self.engine.rationalizer.share_partition(self.engine.config.group_id, *tp)
        return share.inflight_limit if share is not None else self.engine.config.inflight_limit

    def skip_processed(self, floors: Mapping[TP, int]) -> None:
        """Share-partitions keep their own progress in the log: nothing to skip."""
        del floors

    def adopt(self, ranges: Iterable[PlannedRange]) -> list[PlannedRange]:
        """Records another process acquired are its own until their locks elapse; then
        they are available again to anyone. Nothing to adopt."""
        del ranges
        return []

    def complete(self, ranges: Iterable[PlannedRange]) -> None:
        """The batch holding ``ranges`` is processed: accept its records.

        The workers wrote ``gap`` for offsets of it that held no record (in this member's
        name, before the batch could complete): the log is read first, so those are no longer
        held here and only the records delivered are accepted. A batch that gave its records
        back (``max_batch_ms``) accepts nothing: they are someone else's now.
        """
        batch = tuple(ranges)
        if not batch:
            return
        with self._lock:
            self._running.pop(batch, None)
            if batch in self._expired:
                self._expired.discard(batch)
                log.warning("a micro-batch of %d records completed after it had given them "
                            "back (it ran longer than max.poll.interval, %g s): they are "
                            "delivered again", sum(r.size for r in batch),
                            (self.max_batch_ms or 0) / 1000)
                return
            self.engine.channel.catch_up()
            gaps = sum(self.engine.forget_unheld(topic, partition)
                       for topic, partition in sorted({(r.topic, r.partition) for r in batch}))
            accepted = 0
            for r in batch:
                for offset in range(r.start, r.end):
                    accepted += self.engine.ack(r.topic, r.partition, offset, "accept")
            self.engine.flush()
            log.debug("batch complete: %d records accepted, %d offsets no longer held "
                      "(gaps the workers acknowledged, or locks elapsed)", accepted, gaps)

    def _expire_stalled(self) -> None:
        """Give back the records of batches running longer than ``max_batch_ms``: release
        them (their delivery counts stay: a batch that always stalls ends at the delivery
        limit) and stop renewing their locks. Runs under the lock."""
        if self.max_batch_ms is None:
            return
        now = time.monotonic()
        for batch, planned_at in list(self._running.items()):
            if (now - planned_at) * 1000 <= self.max_batch_ms:
                continue
            del self._running[batch]
            self._expired.add(batch)
            self.engine.channel.catch_up()  # gaps its workers wrote are not released again
            for topic, partition in sorted({(r.topic, r.partition) for r in batch}):
                self.engine.forget_unheld(topic, partition)
            released = 0
            for r in batch:
                for offset in range(r.start, r.end):
                    released += self.engine.ack(r.topic, r.partition, offset, "release")
            self.engine.flush()
            log.warning("a micro-batch has run for %.0f s, longer than max.poll.interval "
                        "(%g s): its %d share records are released to the group with their "
                        "delivery counts; the batch's acceptance will not count",
                        now - planned_at, self.max_batch_ms / 1000, released)


def _runs(tp: TP, granted: list[tuple[int, int]]) -> list[PlannedRange]:
    """(offset, delivery count) pairs in offset order -> ranges of consecutive offsets with
    one delivery count."""
    out: list[PlannedRange] = []
    for offset, count in granted:
        last = out[-1] if out else None
        if last is not None and last.end == offset and last.delivery_count == count:
            out[-1] = PlannedRange(tp[0], tp[1], last.start, offset + 1, count)
        else:
            out.append(PlannedRange(tp[0], tp[1], offset, offset + 1, count))
    return out
