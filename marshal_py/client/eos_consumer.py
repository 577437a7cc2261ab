"""ExactlyOnceConsumer: consume -> transform -> produce, exactly once, with no group coordinator.

Kafka's own exactly-once pipelines commit the input offsets in the output's transaction
through the group coordinator (``sendOffsetsToTransaction``). marshal_py keeps offsets in the
coordination topic, an ordinary topic, so the transaction writes the output records and the
``CommittingTransaction`` record that commits the input offset, and commits both atomically
(PROTOCOL.md 7.2). Each held input partition has its own transactional producer, whose
transactional id belongs to the partition's claim (``marshal/<group>/<topic>/<partition>``):
taking a partition up fences the previous owner, and reads the offset only afterwards.

The consumer hands records out in batches of ONE input partition
(:class:`~marshal_py.client.eos_batch.TransactionBatch`); the application sends the output
of a batch through it and commits it. On a crash the open transaction is aborted (by the next
owner's fence, or by the broker after ``transaction_timeout``) and the next owner starts at
the last committed offset: read_committed readers of the output see each input record's
output exactly once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from kafka import TopicPartition

from marshal_py.client.consumer import Consumer
from marshal_py.client.engine import MemberEngine
from marshal_py.client.eos_batch import BatchCommitter, TransactionBatch
from marshal_py.client.fetchers import FetcherKind, OpeningFetcher
from marshal_py.client.lease import PartitionLease
from marshal_py.client.transactions import KafkaFencing, commit_writer
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.log.signing import record_value
from marshal_py.protocol import GroupKey, Message, coordination_partition

if TYPE_CHECKING:
    from marshal_py.client.host import MemberHost

log = logging.getLogger(__name__)

_monotonic = time.monotonic

#: Default bound of a transaction, in milliseconds (as Kafka Streams' exactly-once default):
#: a batch must be committed within it, and a member that dies in the middle of a commit
#: holds its coordination partition back at most about this long.
DEFAULT_TRANSACTION_TIMEOUT_MS = 10_000
#: Default largest batch, in records (as Kafka's max.poll.records).
DEFAULT_MAX_BATCH_RECORDS = 500


class ExactlyOnceConsumer(Consumer):
    """Batches of one input partition's records, each processed in one Kafka transaction.

    Create it with ``Marshaler.consumer(topics, "eos")``. Iterate :meth:`batches` (or call
    :meth:`poll_batch`); for each batch, :meth:`TransactionBatch.send` its output and
    :meth:`TransactionBatch.commit` it (or use it as a context manager: committed at the end
    of the block, aborted if the block raises). A batch not committed gives its records back;
    one left open when the next is asked for is aborted. The record-at-a-time calls of
    :class:`Consumer` (``poll``, iteration, ``commit``) are not available: offsets move only
    with transactions. Use it from one thread; :meth:`stop` from any thread.
    """

    def __init__(self, host: MemberHost, engine: MemberEngine, topics: tuple[str, ...],
                 kafka: KafkaLogConfig, *, fencing: KafkaFencing, coordination_topic: str,
                 coordination_partitions: int, group_keys: Mapping[str, Sequence[GroupKey]],
                 fetcher: FetcherKind | OpeningFetcher = "kafka-python") -> None:
        self._fencing = fencing
        self._open: TransactionBatch | None = None
        super().__init__(host, engine, topics, kafka, fetcher=fetcher)
        me = engine.me
        keys = dict(group_keys)

        def encode(message: Message) -> bytes:
            return record_value(message, keys)

        self._committer = BatchCommitter(
            group=engine.config.group_id, client_id=me.client_id,
            writer_instance=lambda partition: commit_writer(me.instance_id, partition),
            registry=fencing, coordination_topic=coordination_topic,
            coordination_partition=lambda topic: coordination_partition(
                topic, coordination_partitions),
            encode=encode, now_ms=engine.clock.now_ms,
            monotonic_ms=lambda: _monotonic() * 1000.0, engine_lock=host.lock,
            retake=self._retake, give_back=self._give_back)

    # -- batches ----------------------------------------------------------------------------

    def poll_batch(self, timeout_s: float = 1.0,
                   max_records: int = DEFAULT_MAX_BATCH_RECORDS) -> TransactionBatch | None:
        """The next batch (at most ``max_records`` records of one held partition, its
        transaction begun), waiting at most about ``timeout_s``; None if none came. A batch
        still open from the last call is aborted first (its records come again)."""
        self._raise_background_error()
        if max_records < 1:
            raise ConfigurationError("max_records must be at least 1")
        self._abandon_open()
        watch = self._poll_watch
        watch.asking = True
        watch.asks += 1
        try:
            self._rejoin_if_suspended()
            deadline = _monotonic() + timeout_s
            while not (self._closed or self._stop.is_set()):
                self._follow_engine()
                batch = self._take_batch(max_records)
                if batch is not None:
                    self.records_delivered += len(batch)
                    self._open = batch
                    return batch
                left = deadline - _monotonic()
                if left <= 0:
                    break
                self._fill(left)
                self._raise_background_error()
        finally:
            watch.asking = False
        return None

    def batches(self, timeout_s: float | None = None,
                max_records: int = DEFAULT_MAX_BATCH_RECORDS) -> Iterator[TransactionBatch]:
        """Batches until :meth:`stop` or :meth:`close` (or, with ``timeout_s``, until none
        came for that many seconds, as kafka-python's ``consumer_timeout_ms``)."""
        idle_since = _monotonic()
        while not (self._closed or self._stop.is_set()):
            wait = 0.2 if timeout_s is None else max(0.0, min(0.2, idle_since + timeout_s
                                                                  - _monotonic()))
            batch = self.poll_batch(wait, max_records)
            if batch is not None:
                yield batch
                idle_since = _monotonic()
            elif timeout_s is not None and _monotonic() - idle_since >= timeout_s:
                return
        self._abandon_open()

    def _take_batch(self, max_records: int) -> TransactionBatch | None:
        while True:
            taken = self._handout.take_partition(max_records, _monotonic() * 1000.0)
            if taken is None:
                return None
            lease, records, next_position = taken
            self._held[(lease.topic, lease.partition)] = lease
            batch = self._committer.open(lease, records, next_position)
            if batch is not None:
                return batch

    def _abandon_open(self) -> None:
        batch, self._open = self._open, None
        if batch is not None and batch.state == "open":
            log.warning("%s/%d: a batch was neither committed nor aborted before the next was "
                        "asked for; aborted it (its records come again)", batch.topic,
                        batch.partition)
            batch.abort()

    def _give_back(self, batch: TransactionBatch) -> None:
        self._handout.give_back(batch.lease, batch.first_offset)

    def _retake(self, lease: PartitionLease) -> None:
        self._engine.retake(lease.topic, lease.partition, lease.epoch)
        self._coordinator.wake()

    @property
    def transactions(self) -> tuple[int, int]:
        """How many batches this consumer committed and aborted."""
        return self._committer.committed, self._committer.aborted

    # -- what an exactly-once consumer does not do --------------------------------------------

    def _by_batches(self, *_: Any, **__: Any) -> NoReturn:
        raise ConfigurationError("an exactly-once consumer hands records out in batches, "
                                 "committed by transactions: use batches() or poll_batch()")

    def poll(self, timeout_s: float = 1.0, max_records: int = 500) -> list[Any]:
        """Not available: use :meth:`poll_batch`."""
        self._by_batches()

    def __iter__(self) -> Iterator[Any]:
        """Not available: use :meth:`batches`."""
        self._by_batches()

    def commit(self, record: Any) -> bool:
        """Not available: commit a batch (:meth:`TransactionBatch.commit`)."""
        self._by_batches()

    def commit_batch(self, records: Sequence[Any]) -> None:
        """Not available: commit a batch (:meth:`TransactionBatch.commit`)."""
        self._by_batches()

    def commit_offsets(self, offsets: Mapping[TopicPartition | tuple[str, int], int]) -> None:
        """Not available: commit a batch (:meth:`TransactionBatch.commit`)."""
        self._by_batches()

    # -- life cycle ------------------------------------------------------------------------

    def close(self) -> None:
        """Abort an open batch, release every partition and leave the group (as
        :meth:`Consumer.close`), then close the transactional producers. Idempotent."""
        if self._closed:
            return
        try:
            self._abandon_open()
        finally:
            try:
                super().close()
            finally:
                self._fencing.close()

    def __enter__(self) -> ExactlyOnceConsumer:
        return self
