"""Consumer: delivers the records of the partitions this member holds.

A background thread drives the :class:`~marshal_py.client.engine.MemberEngine` (claims,
heartbeats, balance); the thread that iterates fetches with a kafka-python consumer on
manually assigned partitions (no Kafka consumer group) and asks the engine before handing
out each record.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import TYPE_CHECKING

from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from marshal_py.client.engine import MemberEngine
from marshal_py.client.member_consumer import MemberConsumer
from marshal_py.errors import BrokerUnavailableError
from marshal_py.log.kafka import KafkaLogConfig

if TYPE_CHECKING:
    from marshal_py.client.marshaler import Marshaler

log = logging.getLogger(__name__)


class Consumer(MemberConsumer[ConsumerRecord]):
    """Iterate to receive records; ``commit(record)`` when done with one (at-least-once).

    Create it with :meth:`Marshaler.consumer`. At-least-once (``mode="alo"``): a record is
    committed when you call :meth:`commit` (out-of-order commits advance the committed offset
    over the contiguous run); after a crash, at most about one heartbeat interval of records
    is delivered again. At-most-once (``mode="amo"``): every batch is confirmed in the
    coordination log before its first record is handed out, and never handed out twice,
    whatever crashes (a crash loses the rest of the batch being handed out; a close or a
    hand-over loses nothing); :meth:`commit` is accepted and changes nothing.

    Iteration blocks until a record arrives; :meth:`stop` (from any thread or a signal
    handler) ends it. :meth:`close` (or leaving the ``with`` block) commits, releases every
    partition with its offset so others take over at once, and leaves the group.
    """

    def __init__(self, marshaler: Marshaler, engine: MemberEngine, topics: tuple[str, ...],
                 kafka: KafkaLogConfig, tick_interval_s: float,
                 amo_batch_size: int = 100) -> None:
        super().__init__(marshaler, kafka)
        self._engine = engine
        self.topics = topics
        self.mode = engine.config.mode
        self._tick_interval_s = tick_interval_s
        # At-most-once confirms each fetched batch before handing it out; a crash loses at
        # most the rest of one batch, so batches stay small there.
        self._max_batch = amo_batch_size if self.mode == "amo" else 500
        # Commits from the application thread wait here (deque appends are thread-safe) and
        # are applied by the coordination thread right before it heartbeats.
        self._pending_commits: deque[tuple[str, int, int, int | None]] = deque()
        self._buffer: deque[tuple[ConsumerRecord, int]] = deque()
        self._start_coordination("marshal-coordinator", tick_interval_s)

    # -- background coordination --------------------------------------------------------------

    def _step(self) -> None:
        self._apply_commits()
        self._engine.tick()

    # -- fetching -------------------------------------------------------------------------------

    def _reconcile(self) -> None:
        with self._lock:
            wanted = self._engine.assignments()
        if self._follow_plan(wanted):
            self._buffer = self._current(self._buffer)

    def _fetch(self, timeout_s: float) -> None:
        self._reconcile()
        if not self._epochs:
            self._stop.wait(min(timeout_s, 0.2))
            return
        polled = self._poll_data(timeout_s, self._max_batch)
        for tp, records in polled.items():
            key = (tp.topic, tp.partition)
            epoch = self._epochs.get(key)
            if epoch is None or not records:
                continue
            offsets = [r.offset for r in records]
            with self._lock:
                try:
                    accepted = self._engine.accept(tp.topic, tp.partition, epoch, offsets,
                                                   offsets[-1] + 1)
                except BrokerUnavailableError as exc:
                    # The broker is away for a moment: the batch is not confirmed, so it is
                    # not handed out; it is fetched again once the claim is confirmed.
                    log.warning("cannot confirm a batch of %s/%d now: %s", tp.topic,
                                tp.partition, exc)
                    accepted = False
                still = self._engine.assignments().get(key)
            if accepted:
                self._buffer.extend((r, epoch) for r in records)
            elif still is not None and still[0] == epoch:
                # Not confirmed (at-most-once could not write its claim): fetch them again.
                self._data.seek(tp, still[1])

    def _apply_commits(self) -> None:
        """Hand queued commits to the engine (call with the lock held)."""
        while self._pending_commits:
            topic, partition, offset, epoch = self._pending_commits.popleft()
            self._engine.commit(topic, partition, offset, epoch)

    # -- the public surface ---------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[ConsumerRecord]:
        """Up to ``max_records`` records, waiting at most about ``timeout_s`` for the first."""
        self._raise_background_error()
        if not self._buffer and not self._closed:
            self._fetch(timeout_s)
        return self._drain(max_records)

    def _next_buffered(self) -> ConsumerRecord | None:
        while self._buffer:
            record, epoch = self._buffer.popleft()
            if self.mode == "alo":
                # Read-only check, no lock: the coordination thread may be in a network call.
                deliverable = self._engine.holds(record.topic, record.partition, epoch)
            else:
                with self._lock:
                    deliverable = self._engine.deliver(record.topic, record.partition, epoch,
                                                       record.offset)
            if deliverable:
                return record
            # Lost, released or lease lapsed: drop everything buffered for that partition,
            # and if the claim is still ours, fetch those records again later.
            key = (record.topic, record.partition)
            self._buffer = deque(
                (r, e) for r, e in self._buffer if (r.topic, r.partition) != key
            )
            with self._lock:
                position = self._engine.rewind(record.topic, record.partition, epoch,
                                               record.offset)
            if position is not None and self._epochs.get(key) == epoch:
                self._data.seek(TopicPartition(*key), position)
        return None

    def commit(self, record: ConsumerRecord) -> bool:
        """Mark ``record`` processed (at-least-once; at-most-once counts a record as done when
        it is handed out). False if its partition is no longer held."""
        epoch = self._epochs.get((record.topic, record.partition))
        if epoch is None or not self._engine.holds(record.topic, record.partition, epoch):
            return False
        if self.mode == "alo":
            self._pending_commits.append((record.topic, record.partition, record.offset, epoch))
        return True

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member holds now."""
        with self._lock:
            return {TopicPartition(t, p) for t, p in self._engine.assignments()}

    def _close_engine(self) -> None:
        """Commit, release every partition with its offset, leave the group."""
        self._apply_commits()
        self._engine.close()

    def __enter__(self) -> Consumer:
        return self

