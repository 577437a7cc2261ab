"""Consumer: delivers the records of the partitions this member holds (exclusive modes).

Two threads, and no lock between them on the at-least-once path. The coordination thread
drives the :class:`~marshal_py.client.engine.MemberEngine` (claims, heartbeats, leases,
at-most-once windows, balance) and otherwise sleeps in a long poll of the coordination log.
The application's thread fetches the held partitions (kafka-python or librdkafka, on manual
assignment: no Kafka consumer group) and hands them out through a
:class:`~marshal_py.client.handout.HandOut`, which checks each partition's lease once per
batch. The two meet only in the leases and commit cursors the engine publishes
(:mod:`marshal_py.client.lease`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from kafka import TopicPartition

from marshal_py.client.coordinator import FollowingCoordinator
from marshal_py.client.delivery import PollWatch, StopAndErrors, warn_suspended
from marshal_py.client.engine import EngineStats, MemberEngine
from marshal_py.client.fastpath import COMPILED, Committer
from marshal_py.client.fetchers import DataFetcher, FetcherKind, OpeningFetcher
from marshal_py.client.handout import HandOut
from marshal_py.client.lease import REVOKED, PartitionLease
from marshal_py.errors import CommitFailedError
from marshal_py.log.kafka import KafkaLogConfig

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

log = logging.getLogger(__name__)

TP = tuple[str, int]
_monotonic = time.monotonic


class Consumer(StopAndErrors):
    """Iterate (or :meth:`poll`) to receive records; commit them when done.

    Create it with :meth:`Marshaler.consumer`. At-least-once (``mode="alo"``): a record is
    committed when you call :meth:`commit` (or :meth:`commit_batch`, :meth:`commit_offsets`);
    out-of-order commits advance the committed offset over the contiguous run; after a crash,
    at most about one heartbeat interval of records is delivered again. At-most-once
    (``mode="amo"``): records are confirmed in the coordination log in windows before they
    are handed out and count as done when handed out; a crash loses at most the records of
    two windows that were confirmed but not handed out, never delivers one twice; a close or
    hand-over loses nothing; the commit calls are accepted and change nothing.

    Records are those of the fetcher: kafka-python's ``ConsumerRecord``, or with
    ``fetcher="confluent"`` records of the same shape (``topic``, ``partition``, ``offset``,
    ``key``, ``value``, ``headers``, ``timestamp``). Use it from one thread, as Kafka's
    consumers: iteration, :meth:`poll` and the commits from the same thread; :meth:`stop`
    from any thread or a signal handler. :meth:`close` (or leaving the ``with`` block)
    releases every partition with its committed offset so others take over at once.
    """

    def __init__(self, host: MemberHost, engine: MemberEngine, topics: tuple[str, ...],
                 kafka: KafkaLogConfig, *, fetcher: FetcherKind | OpeningFetcher = "kafka-python",
                 max_poll_records: int = 500) -> None:
        self._host = host
        self._engine = engine
        self.topics = topics
        self.mode = engine.config.mode
        self._max_batch = max_poll_records
        super().__init__()
        opening = fetcher if isinstance(fetcher, OpeningFetcher) \
            else OpeningFetcher(fetcher, kafka, topics)
        self._guard = threading.Lock() if self.mode == "amo" else None
        if self._guard is not None:
            engine.handout_guard = self._guard
        engine.follows_log = True
        self._poll_watch = self._watch = PollWatch(engine.config.max_poll_interval_ms)
        self._coordinator = FollowingCoordinator(
            name="marshal-coordinator", lock=host.lock, step=self._step,
            follow=engine.follow, next_due_ms=self._next_due_ms,
            now_ms=engine.clock.now_ms, stop=self._stop,
            poll_cap_s=0.05 if self.mode == "amo" else 0.2, wake_driven=self.mode == "amo",
            retry_s=max(0.05, min(1.0, engine.hi / 10000)),
            is_closed=lambda: self._closed, on_fatal=self._set_error)
        engine.on_leases = self._coordinator.stepped.set
        self._handout = HandOut(self.mode, window_records=engine.config.amo_window_records,
                                window_ms=engine.config.amo_window_ms,
                                wake=self._coordinator.wake)
        self._held: dict[TP, PartitionLease] = {}
        #: commit(record) in order without a Python call where the C build is there
        #: (client/fastpath.py); every other case is :meth:`_commit_record`.
        self._in_order_commit: Committer | None = None
        if self.mode == "alo" and type(self).commit is Consumer.commit:
            self._in_order_commit = Committer(self._commit_record)
            # Shadows the method (same behaviour): one call per record, no frame of ours.
            self.__dict__["commit"] = self._in_order_commit if COMPILED \
                else self._commit_record
        self._last_poll: list[Any] | None = None
        #: The fetcher reads some partition (kept by :meth:`_follow_engine`).
        self._reading = False
        self._last_slices: list[tuple[PartitionLease, int, int]] = []
        # Claim while the fetcher connects: the claim's round trip and the connection overlap.
        self._coordinator.start()
        try:
            self._fetcher: DataFetcher = opening.result()
        except BaseException:
            opening.abandon()
            self._stop.set()
            self._coordinator.join()
            raise

    # -- the bound on processing time (max_poll_interval) -----------------------------------

    def _step(self) -> None:
        """One coordination step (the coordination thread, with the host's lock held)."""
        self._watch_poll_interval()
        self._engine.tick()

    def _next_due_ms(self) -> int:
        due = self._engine.next_due_ms()
        if self._engine.suspended:
            return due
        left_ms = int(self._poll_watch.left_s() * 1000)
        return min(due, self._engine.clock.now_ms() + max(0, left_ms) + 1)

    def _watch_poll_interval(self) -> None:
        """Suspend the engine (release every partition, leave the group) when the application
        has asked for no records for longer than max_poll_interval, as Kafka's consumers
        leave their group (KIP-62): a hung handler must not hold its partitions forever."""
        watch = self._poll_watch
        if watch.expired(self.records_delivered) and not self._engine.suspended:
            watch.timed_out = True
            warn_suspended(self._engine.config.group_id, watch, "every partition")
            self._engine.suspend("max_poll_interval exceeded")

    def _rejoin_if_suspended(self) -> None:
        if self._engine.suspended:
            with self._host.lock:
                self._engine.resume()
            self._poll_watch.timed_out = False
            self._coordinator.wake()
            log.info("%s: the application asks for records again: joining the group",
                     self._engine.config.group_id)

    def _commit_failed(self) -> CommitFailedError:
        return self._poll_watch.failure("commit")

    # -- the engine's leases and the fetch plan ---------------------------------------------

    def _follow_engine(self) -> None:
        engine = self._engine
        handout = self._handout
        handout.follow(engine.leases, engine.lease_version)
        if handout.lapses:
            handout.renew_lapsed(_monotonic() * 1000.0)
        plan = handout.take_plan()
        if plan is None:
            return
        reading, seeks = plan
        self._held = {key: feed.lease for key, feed in handout.feeds.items()}
        if self._in_order_commit is not None:
            self._in_order_commit.held = self._held
        assigned = self._fetcher.assignment()
        starts = {key: offset for key, offset in seeks if key in reading}
        if reading != assigned:
            self._fetcher.assign(reading, {k: o for k, o in starts.items() if k not in assigned})
        self._reading = bool(reading)
        for (topic, partition), offset in starts.items():
            if (topic, partition) in assigned:  # kept, but under a new claim or resumed
                self._fetcher.seek(topic, partition, offset)

    def _fill(self, timeout_s: float) -> None:
        """Fetch more records into the hand-out buffer (or wait for the engine); call right
        after :meth:`_follow_engine`."""
        handout = self._handout
        if not handout.feeds or not self._reading:
            # Nothing held yet: wait for the coordination step that grants a lease (it sets
            # ``stepped``), not for a fixed period. Cleared first, then the leases checked
            # again, so a step that ends in between is not missed.
            stepped = self._coordinator.stepped
            stepped.clear()
            if not handout.is_current(self._engine.lease_version):
                return
            stepped.wait(min(timeout_s, 0.05))
            return
        if handout.waiting_for_confirmation():
            # Wait for the engine's next step (it confirms the window) without holding the
            # interpreter; fetch on only while little is buffered.
            if handout.buffered_count() >= self._max_batch:
                self._coordinator.stepped.clear()
                self._coordinator.stepped.wait(min(timeout_s, 0.02))
                return
            timeout_s = min(timeout_s, 0.005)
        amo = self._guard is not None  # only at-most-once sizes windows by what is known
        for batch in self._fetcher.poll(timeout_s, self._max_batch):
            handout.add((batch.topic, batch.partition), batch.records, batch.next_position,
                        self.high_watermark(batch.topic, batch.partition) if amo else None)

    # -- handing out ------------------------------------------------------------------------------

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Any]:
        """Up to ``max_records`` records, waiting at most about ``timeout_s`` for the first.

        One check of each partition's lease per call, no work per record. Commit what it
        returned with :meth:`commit_batch` (O(partitions)) or record by record."""
        self._raise_background_error()
        watch = self._poll_watch
        watch.asking = True
        watch.asks += 1
        try:
            self._rejoin_if_suspended()
            deadline = _monotonic() + timeout_s
            while True:
                self._follow_engine()
                out = self._take(max_records)
                if out or self._closed or self._stop.is_set():
                    break
                left = deadline - _monotonic()
                if left <= 0:
                    break
                self._fill(left)
                out = self._take(max_records)
                if out:
                    break
                self._raise_background_error()
        finally:
            watch.asking = False
        self.records_delivered += len(out)
        self._last_poll = out
        return out

    def _take(self, max_records: int) -> list[Any]:
        handout = self._handout
        if self._guard is None:
            out = handout.take(max_records, _monotonic() * 1000.0)
        else:
            with self._guard:
                out = handout.take(max_records, _monotonic() * 1000.0)
        self._last_slices = handout.slices
        return out

    def __iter__(self) -> Iterator[Any]:
        """Records one by one until :meth:`stop` or :meth:`close`; the lease is checked per
        record (a float comparison), so hand-out stops at a lapse."""
        handout = self._handout
        amo = self._guard is not None
        guard = self._guard or threading.Lock()
        watch = self._poll_watch
        while True:
            watch.asking = True  # until a record goes out: the application is waiting
            self._raise_background_error()
            self._rejoin_if_suspended()
            self._follow_engine()
            found = handout.next_batch(_monotonic() * 1000.0)
            if found is None:
                if self._stop.is_set() or self._closed:
                    watch.asking = False
                    return
                self._fill(0.2)
                continue
            watch.asking = False
            feed, limit = found
            lease = feed.lease
            records = feed.records
            first = feed.i
            end_position = feed.next_position if limit == len(records) \
                else records[limit].offset
            cursor = lease.cursor
            if not amo:
                cursor.handed(records[first:limit], end_position)
            j = first
            while j < limit:
                record = records[j]
                if amo:
                    with guard:
                        if _monotonic() * 1000.0 >= lease.deadline:
                            break
                        cursor.committed = record.offset + 1
                elif _monotonic() * 1000.0 >= lease.deadline:
                    break
                j += 1
                feed.i = j
                self.records_delivered += 1
                yield record
            if amo:
                with guard:
                    cursor.handed_done(records[first:j], end_position if j == limit
                                       else records[j].offset)
                feed.handed_since_ask += j - first
            if j < limit and feed.i == j:  # the lease lapsed at record j
                if not amo:
                    cursor.rewind(records[j].offset)
                handout.lapse(feed)

    # -- committing ----------------------------------------------------------------------------

    def commit(self, record: Any) -> bool:
        """Mark ``record`` processed (at-least-once; at-most-once counts a record as done when
        it is handed out). O(1) in order, and in C where the extension was built
        (``marshal_py.client.fastpath``). False if its partition is no longer held;
        CommitFailedError if it was given up because the application asked for no records
        for longer than max_poll_interval (until the next poll or next())."""
        return self._commit_record(record)

    def _commit_record(self, record: Any) -> bool:
        lease = self._held.get((record.topic, record.partition))
        if lease is None or lease.deadline == REVOKED:
            if self._poll_watch.timed_out:
                raise self._commit_failed()
            return False
        if self._guard is None:
            lease.cursor.commit(record.offset)
        return True

    def commit_batch(self, records: Sequence[Any]) -> None:
        """Mark every record of ``records`` processed: O(partitions) for a list that
        :meth:`poll` returned, record by record otherwise. CommitFailedError after
        max_poll_interval was exceeded (until the next poll)."""
        if self._poll_watch.timed_out:
            raise self._commit_failed()
        if self._guard is not None:
            return
        if records is self._last_poll:
            for lease, first, last in self._last_slices:
                cursor = lease.cursor
                if cursor.expect == first:
                    cursor.commit_through(last)
                else:
                    self._commit_range(records, lease, first, last)
            return
        for record in records:
            self.commit(record)

    def _commit_range(self, records: Sequence[Any], lease: PartitionLease, first: int,
                      last: int) -> None:
        for record in records:
            if record.partition == lease.partition and record.topic == lease.topic \
                    and first <= record.offset <= last:
                lease.cursor.commit(record.offset)

    def commit_offsets(self, offsets: Mapping[TopicPartition | TP, int]) -> None:
        """Mark everything handed out before ``offsets[partition]`` (the next offset to
        consume, Kafka's convention) processed. O(partitions). CommitFailedError after
        max_poll_interval was exceeded (until the next poll)."""
        if self._poll_watch.timed_out:
            raise self._commit_failed()
        if self._guard is not None:
            return
        for tp, next_offset in offsets.items():
            lease = self._held.get((tp[0], tp[1]))
            if lease is not None and lease.deadline != REVOKED:
                lease.cursor.commit_through(next_offset - 1)

    # -- state and life cycle ------------------------------------------------------------------

    @property
    def stats(self) -> EngineStats:
        """The engine's counters: claims, heartbeats, at-most-once windows, claim latencies
        (read them between calls; they change under the coordination thread)."""
        return self._engine.stats

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The end of ``topic``/``partition`` as the last fetch saw it (no request)."""
        return self._fetcher.high_watermark(topic, partition)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member holds now."""
        return {TopicPartition(t, p) for t, p in self._engine.leases}

    def close(self) -> None:
        """Stop the coordination thread, release every partition with its committed offset
        and leave the group, then close the Kafka clients. Idempotent."""
        if self._closed:
            return
        self._stop.set()
        self._coordinator.join()
        with self._host.lock:
            self._closed = True
            try:
                self._engine.close()
            finally:
                try:
                    self._fetcher.close()
                except Exception:  # closing must not mask the error that led here
                    log.debug("error closing the fetcher", exc_info=True)
                self._host.member_closed(self)

    def __enter__(self) -> Consumer:
        return self

