"""The Kafka clients of :class:`~marshal_py.log.kafka.KafkaLog` (the reading and writing
side): the writer (idempotent, ``acks=all``) and the reader (group-less,
``read_committed``, large fetches) it opens, sending and awaiting records, a long poll that
notices positions without a record, and kafka-python's errors turned into one-line marshal_py
errors."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    RecordListTooLargeError,
    SaslAuthenticationFailedError,
)

from marshal_py.errors import BrokerUnavailableError, MarshalError, RecordTooLargeError
from marshal_py.log.kafka_auth import connection_error, is_authorization_failure, not_authorized
from marshal_py.log.kafka_config import (
    GROUPLESS,
    SAFE_PRODUCER,
    SEND_BLOCK_MS,
    KafkaLogConfig,
    new_client,
    quick_metadata,
)
from marshal_py.log.kafka_fetch import install

__all__ = ["READER_FETCH_BYTES", "awaiting", "kafka_errors", "open_reader", "open_writer",
           "poll_or_passed", "sending", "unreachable"]

#: The coordination reader's fetch sizes: coordination records are small and a replay reads
#: many, so each fetch brings up to 8 MiB of a partition (kafka-python's default is 1 MiB).
READER_FETCH_BYTES = {"max_partition_fetch_bytes": 8 * 1024 * 1024,
                      "fetch_max_bytes": 64 * 1024 * 1024}
#: A long poll of the coordination log looks this often (seconds) whether its reader has
#: passed positions that hold no record.
_MARKER_CHECK_S = 0.1
#: How long the broker holds the reader's fetch when it has nothing new (Kafka's default).
#: Records arriving end the wait at once, so this is the rate at which an idle member asks:
#: two fetches a second instead of ten at 100 ms, a quarter less of an idle member's CPU.
READER_FETCH_WAIT_MS = 500


def open_writer(config: KafkaLogConfig) -> KafkaProducer:
    """The producer of coordination records."""
    try:
        # Idempotence also keeps each partition's records in the order they were sent:
        # kafka-python then sends one batch per partition at a time and retries it before
        # the next (signed records' sequence numbers need it).
        return quick_metadata(new_client(KafkaProducer, **config.client_config(
            KafkaProducer, fixed={
                **SAFE_PRODUCER,
                "linger_ms": 0,
                # send() waits this long for the topic's metadata, then is retried
                # (KafkaLog._patiently): a deleted topic is asked about in between.
                "max_block_ms": SEND_BLOCK_MS,
            })))
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        raise unreachable(config, exc) from exc


def open_reader(config: KafkaLogConfig) -> KafkaConsumer:
    """The group-less reader of the coordination topic (record batches decoded by
    :mod:`~marshal_py.log.kafka_fetch`)."""
    try:
        consumer = quick_metadata(new_client(KafkaConsumer, **config.client_config(
            KafkaConsumer,
            defaults={"fetch_max_wait_ms": READER_FETCH_WAIT_MS, **READER_FETCH_BYTES},
            # Whatever kafka_config says for data topics, isolation_level included: records
            # of aborted transactions are not records of the log (PROTOCOL.md 7.2).
            fixed={**GROUPLESS, "auto_offset_reset": "earliest",
                   "isolation_level": "read_committed"})))
        install(consumer, [config.topic])
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        raise unreachable(config, exc) from exc
    return consumer


def sending(producer: KafkaProducer, topic: str, partition: int,
            value: bytes) -> Callable[[float], Any]:
    """Send one record (send() itself waits up to max_block_ms for the topic's metadata)."""
    return lambda _: producer.send(topic, value=value, partition=partition)


def awaiting(future: Any) -> Callable[[float], Any]:
    """A producer future's result, waited for up to the given seconds."""
    return lambda timeout_s: future.get(timeout=timeout_s)


def poll_or_passed(consumer: KafkaConsumer, wanted: Mapping[TopicPartition, int],
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


@contextmanager
def kafka_errors(config: KafkaLogConfig, action: str, operation: str = "read") -> Iterator[None]:
    """Turn kafka-python's errors into one-line marshal_py errors (``operation``: what an
    authorization failure was refused, see :func:`~marshal_py.log.kafka_auth.not_authorized`).
    """
    try:
        yield
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        raise unreachable(config, exc) from exc
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


def unreachable(config: KafkaLogConfig, exc: BaseException) -> MarshalError:
    """BrokerUnavailableError, or the authentication / TLS failure that kept the client out."""
    return connection_error(config, exc)
