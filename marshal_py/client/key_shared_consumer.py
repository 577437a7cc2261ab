"""KeySharedConsumer: key-shared consumption (more members than partitions, per-key order).

A background thread drives the :class:`~marshal_py.client.key_shared_engine.KeySharedEngine`
(membership, slot claims and releases, heartbeats). The iterating thread fetches every
partition where this member owns key slots with a kafka-python consumer on manually assigned
partitions (no Kafka consumer group), from the lowest cursor of its slots, and offers each
record to the engine right before handing it out: only the records of its own slots are
handed out, in offset order per partition.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, NamedTuple

from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord

from marshal_py.client.delivery import PollWatch
from marshal_py.client.fetchers import OpeningFetcher
from marshal_py.client.key_shared_engine import KeySharedEngine
from marshal_py.client.member_consumer import MemberConsumer
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.protocol import key_slot

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

log = logging.getLogger(__name__)

CommitMode = Literal["implicit", "explicit"]
TP = tuple[str, int]

#: Records fetched per poll of the data consumer.
FETCH_RECORDS = 500


@dataclass
class FetchStats:
    """What the data consumer fetched, against what this member handed out. Every member
    fetches the whole partition (from its lowest slot cursor) and drops other slots' records."""

    records_fetched: int = 0
    bytes_fetched: int = 0
    records_delivered: int = 0
    bytes_delivered: int = 0


class _Passed(NamedTuple):
    """In the fetch buffer after the records before it: the fetch passed every offset below
    ``offset`` (those without a record too: transaction markers, aborted records)."""

    topic: str
    partition: int
    offset: int


def _size(record: ConsumerRecord) -> int:
    return max(0, int(record.serialized_key_size)) + max(0, int(record.serialized_value_size))


class KeySharedConsumer(MemberConsumer[ConsumerRecord]):
    """Iterate to receive kafka-python ``ConsumerRecord``\\ s of the key slots this member
    owns; at most one member of the group handles a key at any time, in offset order.

    Create it with ``Marshaler.consumer(topics, "key-shared")``. ``commit_mode="implicit"``
    (default): the records handed out by one ``next()`` / :meth:`poll` are committed when the
    application asks for more (or closes) — at-least-once. ``"explicit"``: call
    :meth:`commit` for every record when it is processed (in any order); a slot moves to
    another member only once every record of it handed out here is committed, so a record
    never committed holds its slot (and the committed offset of the partition) back.

    After a crash, the successors re-deliver the records committed since this member's last
    heartbeat (about one heartbeat interval) and everything from its oldest uncommitted
    record on. When slots move (a member joins, leaves or closes), nothing is re-delivered.

    Iteration blocks until a record arrives; :meth:`stop` (from any thread or a signal
    handler) ends it. :meth:`close` (or leaving the ``with`` block) commits (implicit mode),
    releases every slot at its position so others take over at once, and leaves the group.
    """

    _engine: KeySharedEngine

    def __init__(self, host: MemberHost, engine: KeySharedEngine, kafka: KafkaLogConfig,
                 tick_interval_s: float, commit_mode: CommitMode = "implicit",
                 fetcher: OpeningFetcher | None = None) -> None:
        if commit_mode not in ("implicit", "explicit"):
            raise ConfigurationError(
                f"commit_mode must be 'implicit' or 'explicit', not {commit_mode!r}")
        super().__init__(host, kafka, fetcher)
        self._engine = engine
        self.topics = engine.config.topics
        self.commit_mode: CommitMode = commit_mode
        self.stats = FetchStats()
        self._buffer: deque[tuple[Any, int]] = deque()  # (record or _Passed, epoch)
        #: Handed out by the last next() / poll(), committed by the next one (implicit mode).
        self._handed: list[ConsumerRecord] = []
        # Commits wait here (deque appends are thread-safe) until the engine's lock is held.
        self._pending_commits: deque[tuple[str, int, int]] = deque()
        self._watch = PollWatch(engine.config.max_poll_interval_ms)
        self._start_coordination("marshal-key-shared", tick_interval_s)

    # -- background coordination --------------------------------------------------------------

    def _step(self) -> None:
        self._apply_commits()
        self._watch_poll_interval("its key slots")
        self._engine.tick()

    def _after_rejoin(self) -> None:
        self._handed.clear()  # their slots were released at these records' offsets
        self._pending_commits.clear()

    def _apply_commits(self) -> None:
        """Hand queued commits to the engine (call with the lock held)."""
        while self._pending_commits:
            self._engine.commit(*self._pending_commits.popleft())

    # -- fetching -------------------------------------------------------------------------------

    def _reconcile(self) -> None:
        with self._lock:
            wanted = self._engine.fetch_plan()
        if self._follow_plan(wanted):
            self._buffer = self._current(self._buffer)

    def _fetch(self, timeout_s: float) -> None:
        self._reconcile()
        if not self._epochs:
            self._stop.wait(min(timeout_s, 0.1))
            return
        polled = self._poll_data(timeout_s, FETCH_RECORDS)
        for batch in polled:
            epoch = self._epochs.get((batch.topic, batch.partition))
            if epoch is None:
                continue
            for record in batch.records:
                self.stats.records_fetched += 1
                self.stats.bytes_fetched += _size(record)
                self._buffer.append((record, epoch))
            last = batch.records[-1].offset if batch.records else -1
            if batch.next_position > last + 1:  # offsets that hold no record come next
                self._buffer.append((_Passed(batch.topic, batch.partition,
                                             batch.next_position), epoch))

    # -- handing out ----------------------------------------------------------------------------

    def _next_buffered(self) -> ConsumerRecord | None:
        while self._buffer:
            record, epoch = self._buffer.popleft()
            if type(record) is _Passed:
                with self._lock:
                    self._engine.passed(record.topic, record.partition, epoch, record.offset)
                continue
            slot = key_slot(record.key)
            with self._lock:
                if self._closed:
                    return None
                self._apply_commits()
                handed = self._engine.deliver(record.topic, record.partition, epoch,
                                              record.offset, slot)
            if handed:
                self.stats.records_delivered += 1
                self.stats.bytes_delivered += _size(record)
                self._handed.append(record)
                return record
        return None

    def _settle(self) -> None:
        """Implicit mode: commit what the previous next() / poll() handed out."""
        if self.commit_mode == "implicit" and self._handed:
            for record in self._handed:
                self._pending_commits.append((record.topic, record.partition, record.offset))
        self._handed.clear()

    def __next__(self) -> ConsumerRecord:
        self._settle()
        return super().__next__()

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[ConsumerRecord]:
        """Up to ``max_records`` records, waiting at most about ``timeout_s`` for the first.
        Implicit mode first commits what the previous call handed out."""
        return self._poll_buffer(timeout_s, max_records, self._settle)

    def commit(self, record: ConsumerRecord) -> bool:
        """Mark a handed-out ``record`` processed (explicit mode; in implicit mode records are
        committed by the next call anyway). False if its slot is no longer this member's (a
        successor will deliver it again). CommitFailedError after max_poll_interval was
        exceeded (until the next poll or next())."""
        if self._watch is not None and self._watch.timed_out:
            raise self._watch.failure("commit")
        self._pending_commits.append((record.topic, record.partition, record.offset))
        return self._engine.owns(record.topic, record.partition, key_slot(record.key))

    def slots(self, topic: str, partition: int) -> set[int]:
        """The key slots of a partition this member owns now."""
        with self._lock:
            return self._engine.slots(topic, partition)

    def assignment(self) -> set[TopicPartition]:
        """The partitions this member fetches now (where it owns key slots)."""
        with self._lock:
            return {TopicPartition(t, p) for t, p in self._engine.fetch_plan()}

    def _before_close(self) -> None:
        self._settle()  # implicit mode: commit what the last call handed out

    def _close_engine(self) -> None:
        """Release every slot at its position and leave the group."""
        self._apply_commits()
        self._engine.close()

    def __enter__(self) -> KeySharedConsumer:
        return self
