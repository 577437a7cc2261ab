"""KafkaLog: the coordination log on a real Kafka topic (kafka-python).

Produces with ``acks=all`` and idempotence, so an acknowledged coordination record survives
broker failover (given replication and ``unclean.leader.election.enable=false``), and reads
with a group-less consumer on manually assigned partitions, ``read_committed``: exactly-once
members write their commit records inside Kafka transactions (PROTOCOL.md 7.2), and a record
of an aborted or open transaction must never reach the world state.

:class:`KafkaLog` is the log contract over its parts: opening the topic
(:mod:`~marshal_py.log.kafka_topic`), its reader and writer
(:mod:`~marshal_py.log.kafka_clients`), the client settings
(:mod:`~marshal_py.log.kafka_config`), the index (:mod:`~marshal_py.log.kafka_index`) and
the topic's identity (:mod:`~marshal_py.log.kafka_identity`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from marshal_py.identity import new_instance_id
from marshal_py.log.base import Fetched, Keep
from marshal_py.log.kafka_auth import check_credentials, is_authorization_failure, not_authorized
from marshal_py.log.kafka_clients import (
    READER_FETCH_BYTES,
    awaiting,
    kafka_errors,
    open_reader,
    open_writer,
    poll_or_passed,
    sending,
    unreachable,
)
from marshal_py.log.kafka_config import (
    DEFAULT_COORDINATION_PARTITIONS,
    DEFAULT_COORDINATION_TOPIC,
    DEFAULT_RETENTION_MS,
    METADATA_BACKOFF_MS,
    KafkaLogConfig,
    close_producer,
    kafka_topic_id,
    new_client,
    quick_metadata,
)
from marshal_py.log.kafka_fetch import collect
from marshal_py.log.kafka_identity import TopicWatch, patiently, topic_id_of
from marshal_py.log.kafka_index import (
    IndexClients,
    IndexSoFar,
    append_index,
    check_counts,
    load_layout,
    read_index,
)
from marshal_py.log.kafka_topic import describe_topic, ensure_topic, replication
from marshal_py.protocol.index import Declared, IndexRecord, declared_key, encode_entry
from marshal_py.protocol.records import CoordinationRecord

__all__ = [  # settings live in kafka_config, clients in kafka_clients: importable here as before
    "DEFAULT_COORDINATION_PARTITIONS",
    "DEFAULT_COORDINATION_TOPIC",
    "DEFAULT_RETENTION_MS",
    "METADATA_BACKOFF_MS",
    "READER_FETCH_BYTES",
    "KafkaLog",
    "KafkaLogConfig",
    "close_producer",
    "kafka_topic_id",
    "quick_metadata",
]

log = logging.getLogger(__name__)

T = TypeVar("T")
#: What a record batch adds to a record's value, at most (header, varints, a key).
_BATCH_OVERHEAD = 512


class KafkaLog:
    """The coordination log on a Kafka topic. Not thread-safe: one thread reads at a time."""

    def __init__(self, config: KafkaLogConfig) -> None:
        self.config = config
        self._config_for = config.client_config
        self._admin: KafkaAdminClient | None = None
        self._producer: KafkaProducer | None = None
        self._consumer: KafkaConsumer | None = None
        #: Per partition, (start, position) of the last fetch that passed only positions
        #: without a record: asked again from that start, it answers nothing at once.
        self._passed: dict[TopicPartition, tuple[int, int]] = {}
        #: The coordination topic's retention.ms as the broker reports it (-1: forever).
        self.retention_ms: int | None = None
        #: The coordination topic's max.message.bytes as the broker reports it.
        self.max_message_bytes: int | None = None
        #: True when this log created the coordination topic (and declared its history).
        self.created_topic = False
        #: The topic id (KIP-516) of the topic opened: a recreated one has another.
        self.topic_id: str | None = None
        self._watch = TopicWatch(config.topic, None, self._describe, self._note_metadata_count)
        #: The coordination topic's partition count in its metadata (at least the layout's).
        self.metadata_partition_count = 0
        self._partition_count = 0
        #: The last read of the index, continued by the next one (kafka_index.IndexSoFar).
        self._index_so_far = IndexSoFar()
        try:
            check_credentials(config)  # a refused login now, not after the timeout
            self._admin = new_client(KafkaAdminClient, **config.client_config(KafkaAdminClient))
            described = self._ensure_topic()
            self.metadata_partition_count = len(described["partitions"])
            self._partition_count = load_layout(
                config, IndexClients(self._admin, self._get_consumer, self._get_producer,
                                     self._index_so_far),
                topic_id=kafka_topic_id(self.topic_id),
                metadata_count=self.metadata_partition_count,
                replication=replication(described), writer=new_instance_id())
            if self.created_topic:
                self._declare()
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            self.close()
            raise unreachable(config, exc) from exc
        except KafkaError as exc:
            self.close()
            if is_authorization_failure(exc):
                raise not_authorized(config, "describe") from exc
            raise
        except Exception:
            self.close()
            raise

    # -- topic checks ----------------------------------------------------------------------

    def _describe(self) -> dict[str, Any] | None:
        assert self._admin is not None
        return describe_topic(self._admin, self.config)

    def _ensure_topic(self) -> dict[str, Any]:
        """Open the topic (create it when missing and allowed; check its settings)."""
        assert self._admin is not None
        opened = ensure_topic(self._admin, self.config)
        self.retention_ms, self.max_message_bytes = opened.retention_ms, opened.max_message_bytes
        self.topic_id = self._watch.topic_id = topic_id_of(opened.described)
        self.created_topic = opened.created
        return opened.described

    # -- the log contract ------------------------------------------------------------------

    @property
    def identity_check_s(self) -> float:
        """How often (seconds, at most) :meth:`verify_identity` asks the brokers, and how long
        a request to the topic waits before they are asked (default
        :data:`~marshal_py.log.kafka_identity.IDENTITY_CHECK_S`)."""
        return self._watch.every_s

    @identity_check_s.setter
    def identity_check_s(self, seconds: float) -> None:
        self._watch.every_s = seconds

    def verify_identity(self) -> None:
        """Every :attr:`identity_check_s` at most, ask the brokers for the topic: another id
        than at open means it was deleted and recreated; missing (three answers in a row, a
        fraction of a second apart), that it was deleted. Silent while they cannot be
        asked."""
        if self._admin is not None:
            self._watch.check()

    def _note_metadata_count(self, count: int) -> None:
        """Warn once when partitions were added to the topic while it was open."""
        if count > self.metadata_partition_count:
            if self.metadata_partition_count <= self._partition_count:
                check_counts(self.config, self._partition_count, count)  # warns
            self.metadata_partition_count = count

    @property
    def topic(self) -> str:
        return self.config.topic

    def partition_count(self) -> int:
        """The placement count: the partitions records go to, fixed by the topic's layout
        in its index when the topic was created (PROTOCOL.md section 3). Partitions added
        later (:attr:`metadata_partition_count` shows them) stay unused."""
        return self._partition_count

    def _tp(self, partition: int) -> TopicPartition:
        if not 0 <= partition < self._partition_count:
            raise ValueError(f"partition {partition} is outside the layout of "
                             f"{self.config.topic} (0..{self._partition_count - 1})")
        return TopicPartition(self.config.topic, partition)

    def _get_producer(self) -> KafkaProducer:
        if self._producer is None:
            self._producer = open_writer(self.config)
        return self._producer

    def _get_consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            self._consumer = open_reader(self.config)
        return self._consumer

    def warm_up(self) -> None:
        """Open the producer and the reader now and learn the topic's metadata with both, so
        the first claim or read does not wait for connections (each costs about 0.1 s the
        first time)."""
        tp = self._tp(0)
        with kafka_errors(self.config, "connecting to the coordination topic"):
            self._get_producer().partitions_for(self.config.topic)
            self._get_consumer().end_offsets([tp])

    def _patiently(self, call: Callable[[float], T]) -> T:
        """``call(timeout_s)`` within the configured timeout, asking the brokers every
        :attr:`identity_check_s` whether the topic is still there while it waits."""
        return patiently(self._watch, call, self.config.timeout_s)

    def append(self, partition: int, value: bytes) -> CoordinationRecord:
        tp = self._tp(partition)
        with kafka_errors(self.config, "writing a coordination record", "write"):
            producer = self._get_producer()
            future = self._patiently(
                lambda _: producer.send(tp.topic, value=value, partition=tp.partition))
            meta = self._patiently(awaiting(future))
        return CoordinationRecord(partition, int(meta.offset), int(meta.timestamp), value)

    def append_all(self, items: Sequence[tuple[int, bytes]]) -> list[CoordinationRecord]:
        """Send every record before awaiting any: one round trip for all of them when they
        go to one broker (the producer pipelines them)."""
        with kafka_errors(self.config, "writing coordination records", "write"):
            producer = self._get_producer()
            futures = [self._patiently(sending(producer, self.config.topic,
                                                self._tp(partition).partition, value))
                       for partition, value in items]
            metas = [self._patiently(awaiting(future)) for future in futures]
        return [CoordinationRecord(partition, int(meta.offset), int(meta.timestamp), value)
                for (partition, value), meta in zip(items, metas, strict=True)]

    def start_position(self, partition: int) -> int:
        tp = self._tp(partition)
        consumer = self._get_consumer()
        with kafka_errors(self.config, "listing offsets"):
            return int(self._patiently(lambda timeout_s: consumer.beginning_offsets(
                [tp], timeout_ms=int(timeout_s * 1000)))[tp])

    def end_position(self, partition: int) -> int:
        tp = self._tp(partition)
        consumer = self._get_consumer()
        with kafka_errors(self.config, "listing offsets"):
            return int(self._patiently(lambda timeout_s: consumer.end_offsets(
                [tp], timeout_ms=int(timeout_s * 1000)))[tp])

    def position_for_time(self, partition: int, timestamp_ms: int) -> int:
        """The first record at or after ``timestamp_ms``, or the end when there is none. The
        end is read before the broker is asked for the time: read after, it could lie past
        records appended in between (with their newer times), which the answer would skip."""
        tp = self._tp(partition)
        end = self.end_position(partition)
        consumer = self._get_consumer()
        with kafka_errors(self.config, "listing offsets by time"):
            found = self._patiently(lambda timeout_s: consumer.offsets_for_times(
                {tp: max(0, timestamp_ms)}, timeout_ms=int(timeout_s * 1000)))[tp]
        if found is None:
            return end
        return int(found.offset)

    def read_position(self, partition: int) -> int | None:
        """Where the reading consumer's fetch position is (kafka-python moves it past control
        records it does not return); None when it is not reading the partition or the broker
        cannot be asked now."""
        consumer = self._consumer
        tp = self._tp(partition)
        if consumer is None or tp not in consumer.assignment():
            return None
        try:
            return int(consumer.position(tp, timeout_ms=1000))
        except Exception as exc:  # the broker is away: cannot say
            log.debug("no read position for %s: %s", tp, exc)
            return None

    def fetch(self, starts: Mapping[int, int], timeout_s: float) -> list[CoordinationRecord]:
        return self.fetch_matching(starts, timeout_s, None).records

    def fetch_matching(self, starts: Mapping[int, int], timeout_s: float,
                       keep: Keep | None) -> Fetched:
        with kafka_errors(self.config, "reading coordination records"):
            return self._fetch(starts, timeout_s, keep)

    def _fetch(self, starts: Mapping[int, int], timeout_s: float, keep: Keep | None) -> Fetched:
        consumer = self._get_consumer()
        wanted = {self._tp(p): start for p, start in starts.items()}
        if set(consumer.assignment()) != set(wanted):
            consumer.assign(list(wanted))
            for tp, start in wanted.items():
                consumer.seek(tp, start)
        else:
            passed = False
            for tp, start in wanted.items():
                position = consumer.position(tp)
                if position == start:
                    continue
                if self._passed.get(tp) == (start, position):
                    passed = True  # start..position-1 hold no record (read_position tells)
                else:
                    consumer.seek(tp, start)
            if passed:
                return Fetched([], {})
        # Each item is a whole fetch of a partition (a RecordRun), unless kafka-python reads.
        polled = poll_or_passed(consumer, wanted, timeout_s)
        if not polled:
            self._passed = {tp: (start, position) for tp, start in wanted.items()
                            if (position := consumer.position(tp)) > start}
        return collect(polled, wanted, keep)

    @property
    def max_value_bytes(self) -> int:
        """The largest value an append can write: the topic's ``max.message.bytes`` and the
        producer's ``max_request_size``, less a batch's overhead."""
        producer = int(self._config_for(KafkaProducer).get(
            "max_request_size", KafkaProducer.DEFAULT_CONFIG["max_request_size"]))
        topic = self.max_message_bytes or producer
        return min(topic, producer) - _BATCH_OVERHEAD

    def read_index(self) -> list[IndexRecord]:
        return read_index(self.config, self._get_consumer(), self._index_so_far)

    def append_index(self, key: bytes, value: bytes) -> None:
        append_index(self.config, self._get_producer(), key, value)

    @property
    def index_topic_id(self) -> str:
        return kafka_topic_id(self.topic_id) or ""

    def _declare(self) -> None:
        """Declare the history of the topic this log has just created: it holds no record,
        so a pair without a History record has none (PROTOCOL.md section 6)."""
        self.append_index(declared_key(new_instance_id()),
                          encode_entry(Declared(self.config.topic, self.index_topic_id)))

    def close(self) -> None:
        # Every append awaited its record: what the producer still holds failed already
        # (and would keep it waiting, say for a deleted topic).
        closing: list[Callable[[], object]] = []
        if self._producer is not None:
            producer = self._producer
            closing.append(lambda: close_producer(producer, 1.0))
        closing += [client.close for client in (self._consumer, self._admin)
                    if client is not None]
        for close in closing:
            try:
                close()
            except Exception:  # closing must not mask the error that led here
                log.debug("error while closing a Kafka client", exc_info=True)
        self._producer = self._consumer = self._admin = None

    def __enter__(self) -> KafkaLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
