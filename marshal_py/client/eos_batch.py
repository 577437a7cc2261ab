"""Transaction batches: one input partition's records, processed in one Kafka transaction.

A :class:`TransactionBatch` holds records of one held partition, in offset order, handed out
together. The application sends what it makes of them with :meth:`TransactionBatch.send` and
ends the batch with :meth:`~TransactionBatch.commit` -- the output records and a
``CommittingTransaction`` for the offset after the batch, on the topic's coordination
partition, in ONE transaction (PROTOCOL.md 7.2) -- or :meth:`~TransactionBatch.abort`.

What decides, in :class:`BatchCommitter` (no thread, no clock of its own: the threaded
consumer and the simulations share it):

* a batch is committed only while the lease of its claim is valid (checked right before the
  commit); otherwise it is aborted. Fencing makes this safe even when a lease lapses during
  the commit: a new owner fences the transactional id before it reads the committed offset;
* a fenced producer means the partition has a new owner (or is being taken up again): the
  batch is not committed, and nothing more is handed out of the claim;
* a commit or abort whose outcome is unknown (it timed out) is not guessed at: the partition
  is taken up again (fence, read the log, start at the committed offset);
* every batch that is not committed gives its records back: fetching restarts at its first
  offset (the same member hands them out again while it holds the partition).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from marshal_py.client.lease import PartitionLease, offset_of
from marshal_py.errors import ConfigurationError, MarshalError
from marshal_py.protocol import CommittingTransaction, Message

log = logging.getLogger(__name__)

#: The Kafka convention for a record's headers.
Headers = Sequence[tuple[str, bytes]]


class TransactionFencedError(MarshalError):
    """Another producer initialized this partition's transactional id: the partition has a
    new owner (or is being taken up again), and this producer can commit nothing more."""


class TransactionOutcomeUnknownError(MarshalError):
    """A commit (or abort) did not end within the timeout: whether it committed is unknown
    until the transactional id is fenced and the log read again."""


class BatchProducer(Protocol):
    """A partition's transactional producer, as a batch uses it."""

    def begin(self) -> None:
        """Begin a transaction."""
        ...

    def send(self, topic: str, value: bytes | None, key: bytes | None,
             headers: Headers | None, partition: int | None) -> Any:
        """Send an output record in the transaction."""
        ...

    def commit(self, coordination_topic: str, coordination_partition: int,
               record: bytes) -> None:
        """Add the commit record and commit."""
        ...

    def abort(self) -> None:
        """Abort the transaction."""
        ...


class ProducerRegistry(Protocol):
    """Where batches get their partition's producer (:class:`~.transactions.KafkaFencing`)."""

    def acquire(self, topic: str, partition: int,
                still_held: Callable[[], bool]) -> Any:
        """The partition's producer, or None when the partition is gone."""
        ...

    def release(self, producer: Any) -> None:
        """The batch using ``producer`` is over."""
        ...


def _as_bytes(value: bytes | bytearray | memoryview | str | None, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"{what} must be bytes, str or None, not {type(value).__name__}")


class TransactionBatch:
    """Records of one input partition, processed in one transaction.

    Iterate it (or read :attr:`records`), :meth:`send` the output, then :meth:`commit` (or
    :meth:`abort`). As a context manager it commits when the block ends normally and aborts
    when it raises. Use it from the thread that got it.
    """

    def __init__(self, committer: BatchCommitter, lease: PartitionLease, producer: Any,
                 records: Sequence[Any], next_offset: int) -> None:
        self._committer = committer
        self.lease = lease
        self._producer = producer
        #: The records, in offset order.
        self.records: list[Any] = list(records)
        self.topic = lease.topic
        self.partition = lease.partition
        #: The offset of the first record.
        self.first_offset = offset_of(self.records[0])
        #: The next offset to consume after the batch: what the commit records.
        self.next_offset = next_offset
        #: ``"open"``, ``"committed"`` or ``"aborted"``.
        self.state = "open"
        self.sent = 0
        #: A send failed: the batch was aborted at once (see :meth:`send`).
        self.failed = False

    def __iter__(self) -> Iterator[Any]:
        return iter(self.records)

    def __len__(self) -> int:
        return len(self.records)

    def __repr__(self) -> str:
        return (f"TransactionBatch({self.topic}/{self.partition} "
                f"[{self.first_offset}, {self.next_offset}), {self.state})")

    def send(self, topic: str, value: bytes | str | None, key: bytes | str | None = None,
             headers: Headers | None = None, partition: int | None = None) -> None:
        """Produce a record to ``topic`` in this batch's transaction: read_committed
        readers see it if, and only if, the batch commits.

        A send that fails (the broker went away, the producer was fenced) aborts the batch at
        once: its records come again, later sends of it do nothing and :meth:`commit`
        returns False. Only what can never work raises (a ``ConfigurationError``: no
        permission to write the topic, say)."""
        if self.failed:
            return
        if self.state != "open":
            raise ConfigurationError(f"this batch is {self.state}: send output before "
                                     "commit() or abort()")
        payload, key_bytes = _as_bytes(value, "value"), _as_bytes(key, "key")
        try:
            self._producer.send(topic, payload, key_bytes, headers, partition)
        except MarshalError as exc:
            self.failed = True
            self._committer.failed(self, exc, f"sending to {topic!r}")
            if isinstance(exc, ConfigurationError):
                raise
            return
        self.sent += 1

    def commit(self) -> bool:
        """Commit the output sent and the batch's input offset in one transaction. True when
        committed; False when it was aborted instead (the partition's lease lapsed, another
        member fenced it, or the transaction failed): its records are then delivered again,
        by this member or by the partition's next owner, and none of its output is visible
        to read_committed readers."""
        if self.state != "open":
            return self.state == "committed"
        return self._committer.commit(self)

    def abort(self) -> None:
        """Abort the transaction: nothing sent is visible; the records come again."""
        if self.state == "open":
            self._committer.abort(self)

    def __enter__(self) -> TransactionBatch:
        return self

    def __exit__(self, kind: object, exc: object, tb: object) -> None:
        if kind is None:
            self.commit()
        else:
            self.abort()


class BatchCommitter:
    """Makes, commits and aborts the batches of one exactly-once member.

    ``engine_lock`` guards the engine (the threaded consumer's host lock); ``retake(lease)``
    takes the lease's partition up again if the lease is still the held claim's (under that
    lock); ``give_back(batch)`` makes the
    batch's records come again (fetching restarts at its first offset); ``encode`` turns the
    commit message into the record's bytes (signed in authenticated groups);
    ``coordination_partition(topic)`` places it; ``now_ms`` is the engine's (broker) clock
    and ``monotonic_ms`` the clock leases are kept on.
    """

    def __init__(self, *, group: str, client_id: str, writer_instance: Callable[[int], str],
                 registry: ProducerRegistry, coordination_topic: str,
                 coordination_partition: Callable[[str], int], encode: Callable[[Message], bytes],
                 now_ms: Callable[[], int], monotonic_ms: Callable[[], float],
                 engine_lock: AbstractContextManager[Any],
                 retake: Callable[[PartitionLease], None],
                 give_back: Callable[[TransactionBatch], None]) -> None:
        self.group = group
        self.client_id = client_id
        self.writer_instance = writer_instance
        self.registry = registry
        self.coordination_topic = coordination_topic
        self.coordination_partition = coordination_partition
        self.encode = encode
        self.now_ms = now_ms
        self.monotonic_ms = monotonic_ms
        self.engine_lock = engine_lock
        self.retake = retake
        self.give_back = give_back
        self.committed = 0
        self.aborted = 0

    def lease_valid(self, lease: PartitionLease) -> bool:
        """May records of ``lease`` go out, or a batch of it commit, now?"""
        return not lease.revoked and self.monotonic_ms() < lease.deadline

    def open(self, lease: PartitionLease, records: Sequence[Any],
             next_offset: int) -> TransactionBatch | None:
        """A batch of ``records`` (handed out under ``lease``), its transaction begun; None
        when the partition is gone (the records are given back)."""
        producer = self.registry.acquire(lease.topic, lease.partition,
                                         lambda: self.lease_valid(lease))
        batch = TransactionBatch(self, lease, producer, records, next_offset)
        if producer is None:
            batch.state = "aborted"
            self.give_back(batch)
            return None
        try:
            producer.begin()
        except MarshalError as exc:
            self.failed(batch, exc, "beginning its transaction")
            if isinstance(exc, ConfigurationError):
                raise
            return None
        return batch

    def commit(self, batch: TransactionBatch) -> bool:
        """See :meth:`TransactionBatch.commit`."""
        if not self.lease_valid(batch.lease):
            log.warning("%s/%d: the claim's lease lapsed before the commit; aborted the batch "
                        "at offsets %d..%d", batch.topic, batch.partition, batch.first_offset,
                        batch.next_offset - 1)
            self.abort(batch)
            return False
        message = CommittingTransaction(
            self.now_ms() // 1000, self.writer_instance(batch.partition), self.client_id,
            self.group, batch.topic, batch.partition, batch.next_offset)
        try:
            batch._producer.commit(self.coordination_topic,
                                   self.coordination_partition(batch.topic),
                                   self.encode(message))
        except MarshalError as exc:
            self.failed(batch, exc, "committing")
            if isinstance(exc, ConfigurationError):
                raise
            return False
        batch.state = "committed"
        batch.lease.cursor.commit_through(batch.next_offset - 1)
        self.committed += 1
        self.registry.release(batch._producer)
        return True

    def abort(self, batch: TransactionBatch) -> None:
        """See :meth:`TransactionBatch.abort`."""
        try:
            batch._producer.abort()
        except MarshalError as exc:
            self.failed(batch, exc, "aborting")
            return
        self._end(batch)

    def _end(self, batch: TransactionBatch) -> None:
        batch.state = "aborted"
        self.aborted += 1
        self.registry.release(batch._producer)
        self.give_back(batch)

    def failed(self, batch: TransactionBatch, exc: MarshalError, doing: str) -> None:
        """The batch's transaction failed while ``doing``: abort it when the producer still
        can, else (fenced, outcome unknown) take the partition up again."""
        log.warning("%s/%d: %s the batch at offsets %d..%d failed: %s", batch.topic,
                    batch.partition, doing, batch.first_offset, batch.next_offset - 1, exc)
        retake = isinstance(exc, TransactionFencedError | TransactionOutcomeUnknownError)
        if not retake and doing != "aborting":
            try:
                batch._producer.abort()
            except MarshalError as again:
                log.warning("%s/%d: aborting failed too: %s", batch.topic, batch.partition,
                            again)
                retake = True
        elif doing == "aborting":
            retake = True
        if retake:
            # The producer can say nothing more about what is committed: fence it (the next
            # step takes the partition up again: fence, read the log, start at the
            # committed offset) -- unless the claim is gone already.
            with self.engine_lock:
                self.retake(batch.lease)
        self._end(batch)
