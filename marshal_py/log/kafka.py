"""KafkaLog: the coordination log on a real Kafka topic (kafka-python).

Produces with ``acks=all`` and idempotence, so an acknowledged coordination record survives
broker failover (given replication and ``unclean.leader.election.enable=false``), and reads
with a group-less consumer on manually assigned partitions, ``read_committed``: exactly-once
members write their commit records inside Kafka transactions (PROTOCOL.md 7.2), and a record
of an aborted or open transaction must never reach the world state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    SaslAuthenticationFailedError,
    TopicAlreadyExistsError,
)

from marshal_py.errors import (
    BrokerUnavailableError,
    CoordinationTopicError,
    MarshalError,
    RecordTooLargeError,
)
from marshal_py.identity import new_instance_id
from marshal_py.log.base import Fetched, Keep
from marshal_py.log.kafka_auth import (
    check_credentials,
    connection_error,
    is_authorization_failure,
    not_authorized,
)
from marshal_py.log.kafka_config import (
    DEFAULT_COORDINATION_PARTITIONS,
    DEFAULT_COORDINATION_TOPIC,
    DEFAULT_RETENTION_MS,
    METADATA_BACKOFF_MS,
    SEND_BLOCK_MS,
    KafkaLogConfig,
    close_producer,
    kafka_topic_id,
    quick_metadata,
)
from marshal_py.log.kafka_fetch import collect, install
from marshal_py.log.kafka_identity import TopicWatch, patiently, topic_id_of
from marshal_py.log.kafka_index import (
    IndexClients,
    IndexSoFar,
    append_index,
    check_counts,
    load_layout,
    read_index,
)
from marshal_py.protocol.index import Declared, IndexRecord, declared_key, encode_entry
from marshal_py.protocol.records import CoordinationRecord

__all__ = [  # the client settings live in kafka_config; imported from here as before
    "DEFAULT_COORDINATION_PARTITIONS",
    "DEFAULT_COORDINATION_TOPIC",
    "DEFAULT_RETENTION_MS",
    "METADATA_BACKOFF_MS",
    "KafkaLog",
    "KafkaLogConfig",
    "close_producer",
    "kafka_topic_id",
    "quick_metadata",
]

log = logging.getLogger(__name__)

_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29
T = TypeVar("T")
#: The coordination reader's fetch sizes: coordination records are small and a replay reads
#: many, so each fetch brings up to 8 MiB of a partition (kafka-python's default is 1 MiB).
READER_FETCH_BYTES = {"max_partition_fetch_bytes": 8 * 1024 * 1024,
                      "fetch_max_bytes": 64 * 1024 * 1024}
#: What a record batch adds to a record's value, at most (header, varints, a key).
_BATCH_OVERHEAD = 512


def _replication(described: dict[str, Any]) -> int:
    """The replication factor of a described topic (its first partition's replicas)."""
    partitions = described.get("partitions") or [{}]
    return max(1, len(partitions[0].get("replica_nodes") or partitions[0].get("replicas") or []))


def _sending(producer: KafkaProducer, topic: str, partition: int,
             value: bytes) -> Callable[[float], Any]:
    """Send one record (send() itself waits up to max_block_ms for the topic's metadata)."""
    return lambda _: producer.send(topic, value=value, partition=partition)


def _awaiting(future: Any) -> Callable[[float], Any]:
    """A producer future's result, waited for up to the given seconds."""
    return lambda timeout_s: future.get(timeout=timeout_s)


#: A long poll of the coordination log looks this often (seconds) whether its reader has
#: passed positions that hold no record.
_MARKER_CHECK_S = 0.1


def _poll_or_passed(consumer: KafkaConsumer, wanted: Mapping[TopicPartition, int],
                    timeout_s: float) -> dict[TopicPartition, list[Any]]:
    """``consumer.poll`` for up to ``timeout_s``, returning early (nothing) once the reader
    has moved past a start of ``wanted`` without a record: those positions hold transaction
    markers or records of aborted transactions, which every exactly-once commit leaves
    behind, and the caller skips them (``read_position``) instead of waiting out the poll."""
    deadline = time.monotonic() + timeout_s
    while True:
        left = deadline - time.monotonic()
        polled = consumer.poll(timeout_ms=int(max(0.0, min(left, _MARKER_CHECK_S)) * 1000),
                               max_records=10_000)
        if polled or left <= _MARKER_CHECK_S:
            return dict(polled)
        if any(consumer.position(tp) > start for tp, start in wanted.items()):
            return {}


def _retry_until(probe: Callable[[], T], timeout_s: float, interval_s: float = 0.1) -> T:
    """Call ``probe`` until it returns something truthy or ``timeout_s`` has passed (at
    least once); return its last answer."""
    deadline = time.monotonic() + timeout_s
    answer = probe()
    while not answer and time.monotonic() < deadline:
        time.sleep(interval_s)
        answer = probe()
    return answer


@contextmanager
def _kafka_errors(config: KafkaLogConfig, action: str, operation: str = "read") -> Iterator[None]:
    """Turn kafka-python's errors into one-line marshal_py errors (``operation``: what an
    authorization failure was refused, see :func:`~marshal_py.log.kafka_auth.not_authorized`).
    """
    try:
        yield
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        raise _unreachable(config, exc) from exc
    except (MessageSizeTooLargeError, RecordListTooLargeError) as exc:
        raise RecordTooLargeError(
            f"{action} on {config.topic} failed: the record is larger than the topic's "
            f"max.message.bytes or the producer's max_request_size ({exc})") from exc
    except KafkaError as exc:
        if is_authorization_failure(exc):
            raise not_authorized(config, operation) from exc
        if isinstance(exc, SaslAuthenticationFailedError):
            raise connection_error(config, exc) from exc
        raise BrokerUnavailableError(
            f"{action} on {config.topic} failed: {type(exc).__name__}: {exc}"
        ) from exc


def _unreachable(config: KafkaLogConfig, exc: BaseException) -> MarshalError:
    """BrokerUnavailableError, or the authentication / TLS failure that kept the client out."""
    return connection_error(config, exc)


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
            self._admin = KafkaAdminClient(**config.client_config(KafkaAdminClient))
            described = self._ensure_topic()
            self.metadata_partition_count = len(described["partitions"])
            self._partition_count = load_layout(
                config, IndexClients(self._admin, self._get_consumer, self._get_producer,
                                     self._index_so_far),
                topic_id=kafka_topic_id(self.topic_id),
                metadata_count=self.metadata_partition_count,
                replication=_replication(described), writer=new_instance_id())
            if self.created_topic:
                self._declare()
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            self.close()
            raise _unreachable(config, exc) from exc
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
        for topic in self._admin.describe_topics([self.config.topic]):
            if topic["name"] == self.config.topic:
                if topic.get("error_code", 0) == _TOPIC_AUTHORIZATION_FAILED:
                    raise not_authorized(self.config, "describe")
                if topic.get("error_code", 0) == _UNKNOWN_TOPIC or not topic.get("partitions"):
                    return None
                return dict(topic)
        return None

    def _ensure_topic(self) -> dict[str, Any]:
        assert self._admin is not None
        described = self._describe()
        created = False
        if described is None:
            created = True
            if not self.config.create_topic:
                raise CoordinationTopicError(
                    f"coordination topic {self.config.topic!r} does not exist on "
                    f"{self.config.bootstrap_servers}; create it with `marshal init` (or let a "
                    "consumer create it), or name the right one with --coordination-topic"
                )
            self._create_topic()
            # In a cluster the new topic's metadata reaches every broker a moment later.
            described = _retry_until(self._describe, self.config.timeout_s)
            if described is None:
                raise CoordinationTopicError(
                    f"created {self.config.topic!r} but the brokers did not describe it within "
                    f"{self.config.timeout_s:g} s; try again"
                )
        self._check_timestamp_type(created=created)
        self.topic_id = self._watch.topic_id = topic_id_of(described)
        self.created_topic = created
        return described

    def _create_topic(self) -> None:
        assert self._admin is not None
        brokers = len(self._admin.describe_cluster().get("brokers", [])) or 1
        rf = self.config.replication_factor or min(3, brokers)
        configs = {
            "message.timestamp.type": "LogAppendTime",
            "retention.ms": str(self.config.retention_ms),
            "unclean.leader.election.enable": "false",
            "min.insync.replicas": str(min(2, rf)),
            "cleanup.policy": "delete",
        }
        log.info(
            "creating coordination topic %s (%d partitions, replication %d)",
            self.config.topic, self.config.partitions, rf,
        )
        if self.config.replication_factor is None and 1 < rf < 3:
            # A cluster that is still starting may list fewer brokers than it will have.
            log.warning(
                "only %d brokers are registered, so %s gets replication %d: losing one broker "
                "then stops coordination (min.insync.replicas %d); create it with `marshal init "
                "--replication-factor 3` once the cluster is up to survive a broker loss",
                brokers, self.config.topic, rf, min(2, rf))
        try:
            self._admin.create_topics(
                {
                    self.config.topic: {
                        "num_partitions": self.config.partitions,
                        "replication_factor": rf,
                        "configs": configs,
                    }
                },
                wait_for_metadata=True,
            )
        except TopicAlreadyExistsError:
            return  # another client created it first
        except KafkaError as exc:
            if is_authorization_failure(exc):
                raise not_authorized(self.config, "create") from exc
            raise CoordinationTopicError(
                f"could not create coordination topic {self.config.topic!r}: {exc}"
            ) from exc

    def _check_timestamp_type(self, created: bool = False) -> None:
        """Refuse a CreateTime topic; note its retention. ``created``: this client has just
        created it, and the broker answering may not know it yet (in a cluster)."""
        assert self._admin is not None
        resource = ConfigResource(
            ConfigResourceType.TOPIC, self.config.topic,
            configs=["message.timestamp.type", "retention.ms", "max.message.bytes"],
        )
        # "all": an authorized answer holds both settings even at their defaults, so an empty
        # one means DESCRIBE_CONFIGS was refused (kafka-python drops the error code) -- or,
        # right after creating the topic, that the broker asked has not learnt of it yet.
        admin = self._admin

        def entry_now() -> dict[str, Any]:
            described = admin.describe_configs([resource], config_filter="all")
            return dict(described.get("topic", {}).get(self.config.topic, {}))

        entry = _retry_until(entry_now, self.config.timeout_s if created else 0.0) or {}
        if not entry and not self.config.allow_create_time:
            raise not_authorized(self.config, "describe_configs")
        retention = entry.get("retention.ms", {}).get("value")
        largest = entry.get("max.message.bytes", {}).get("value")
        try:
            self.retention_ms = int(retention) if retention is not None else None
            self.max_message_bytes = int(largest) if largest is not None else None
        except ValueError:
            self.retention_ms = None
        value = entry.get("message.timestamp.type", {}).get("value", "CreateTime")
        if value != "LogAppendTime" and not self.config.allow_create_time:
            raise CoordinationTopicError(
                f"coordination topic {self.config.topic!r} uses message.timestamp.type={value}: "
                "claims would then be decided by each client's own clock, so clock skew could "
                "give a partition two owners; set it with `kafka-configs --alter --entity-type "
                f"topics --entity-name {self.config.topic} --add-config "
                "message.timestamp.type=LogAppendTime` (or pass allow_create_time to accept "
                "the risk)"
            )

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
            try:
                # Idempotence also keeps each partition's records in the order they were
                # sent: kafka-python then sends one batch per partition at a time and
                # retries it before the next (signed records' sequence numbers need it).
                self._producer = quick_metadata(KafkaProducer(**{
                    **self._config_for(KafkaProducer),
                    "acks": "all",
                    "enable_idempotence": True,
                    "linger_ms": 0,
                    # send() waits this long for the topic's metadata, then is retried
                    # (:meth:`_patiently`): a deleted topic is asked about in between.
                    "max_block_ms": SEND_BLOCK_MS,
                }))
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                raise _unreachable(self.config, exc) from exc
        return self._producer

    def _get_consumer(self) -> KafkaConsumer:
        if self._consumer is None:
            try:
                self._consumer = quick_metadata(KafkaConsumer(**{
                    "group_id": None,
                    "enable_auto_commit": False,
                    "auto_offset_reset": "earliest",
                    "fetch_max_wait_ms": 100,
                    **READER_FETCH_BYTES,
                    **self._config_for(KafkaConsumer),
                    # Whatever kafka_config says for data topics: records of aborted
                    # transactions are not records of the log (PROTOCOL.md 7.2).
                    "isolation_level": "read_committed",
                }))
                install(self._consumer, [self.config.topic])
            except (KafkaConnectionError, KafkaTimeoutError) as exc:
                raise _unreachable(self.config, exc) from exc
        return self._consumer

    def warm_up(self) -> None:
        """Open the producer and the reader now and learn the topic's metadata with both, so
        the first claim or read does not wait for connections (each costs about 0.1 s the
        first time)."""
        tp = self._tp(0)
        with _kafka_errors(self.config, "connecting to the coordination topic"):
            self._get_producer().partitions_for(self.config.topic)
            self._get_consumer().end_offsets([tp])

    def _patiently(self, call: Callable[[float], T]) -> T:
        """``call(timeout_s)`` within the configured timeout, asking the brokers every
        :attr:`identity_check_s` whether the topic is still there while it waits."""
        return patiently(self._watch, call, self.config.timeout_s)

    def append(self, partition: int, value: bytes) -> CoordinationRecord:
        tp = self._tp(partition)
        with _kafka_errors(self.config, "writing a coordination record", "write"):
            producer = self._get_producer()
            future = self._patiently(
                lambda _: producer.send(tp.topic, value=value, partition=tp.partition))
            meta = self._patiently(_awaiting(future))
        return CoordinationRecord(partition, int(meta.offset), int(meta.timestamp), value)

    def append_all(self, items: Sequence[tuple[int, bytes]]) -> list[CoordinationRecord]:
        """Send every record before awaiting any: one round trip for all of them when they
        go to one broker (the producer pipelines them)."""
        with _kafka_errors(self.config, "writing coordination records", "write"):
            producer = self._get_producer()
            futures = [self._patiently(_sending(producer, self.config.topic,
                                                self._tp(partition).partition, value))
                       for partition, value in items]
            metas = [self._patiently(_awaiting(future)) for future in futures]
        return [CoordinationRecord(partition, int(meta.offset), int(meta.timestamp), value)
                for (partition, value), meta in zip(items, metas, strict=True)]

    def start_position(self, partition: int) -> int:
        tp = self._tp(partition)
        consumer = self._get_consumer()
        with _kafka_errors(self.config, "listing offsets"):
            return int(self._patiently(lambda timeout_s: consumer.beginning_offsets(
                [tp], timeout_ms=int(timeout_s * 1000)))[tp])

    def end_position(self, partition: int) -> int:
        tp = self._tp(partition)
        consumer = self._get_consumer()
        with _kafka_errors(self.config, "listing offsets"):
            return int(self._patiently(lambda timeout_s: consumer.end_offsets(
                [tp], timeout_ms=int(timeout_s * 1000)))[tp])

    def position_for_time(self, partition: int, timestamp_ms: int) -> int:
        """The first record at or after ``timestamp_ms``, or the end when there is none. The
        end is read before the broker is asked for the time: read after, it could lie past
        records appended in between (with their newer times), which the answer would skip."""
        tp = self._tp(partition)
        end = self.end_position(partition)
        consumer = self._get_consumer()
        with _kafka_errors(self.config, "listing offsets by time"):
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
        with _kafka_errors(self.config, "reading coordination records"):
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
        polled = _poll_or_passed(consumer, wanted, timeout_s)
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
