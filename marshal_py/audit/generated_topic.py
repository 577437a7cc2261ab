"""Writing a generated coordination log (:mod:`~marshal_py.audit.generate`) to Kafka: a topic
stamped with ``CreateTime`` and kept forever, and a producer that keeps each record's own
timestamp."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["create_topic", "produce"]

# Logged as the generator, as before this module was split off.
log = logging.getLogger("marshal_py.audit.generate")

#: A generated record: (coordination partition, timestamp in ms, value).
GeneratedRecord = tuple[int, int, bytes]


def create_topic(bootstrap_servers: str, topic: str, partitions: int,
                 kafka_config: dict[str, Any] | None = None) -> None:
    """Create an audit test topic stamped with CreateTime and kept forever (generated logs
    carry their own, old, timestamps, which time-based retention would delete), and its
    index with its layout (``partitions``), as a member would."""
    from kafka import KafkaAdminClient

    from marshal_py.log.kafka import KafkaLog, KafkaLogConfig
    from marshal_py.log.kafka_config import new_client

    admin = new_client(KafkaAdminClient, bootstrap_servers=bootstrap_servers,
                       **(kafka_config or {}))
    try:
        admin.create_topics({topic: {
            "num_partitions": partitions, "replication_factor": 1,
            "configs": {"message.timestamp.type": "CreateTime", "retention.ms": "-1",
                        "retention.bytes": "-1", "cleanup.policy": "delete"}}},
            wait_for_metadata=True)
    finally:
        admin.close()
    KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap_servers, topic=topic,
                            allow_create_time=True, kafka_config=dict(kafka_config or {}))
             ).close()


def produce(bootstrap_servers: str, topic: str, records: Iterator[GeneratedRecord], *,
            progress: Callable[[int, float], None] | None = None,
            kafka_config: dict[str, Any] | None = None) -> int:
    """Write generated records to ``topic`` with their own timestamps; return how many.

    Batches generously (linger 20 ms, 1 MiB batches); ordering within a partition is kept by
    one producer with one request in flight per connection.
    """
    from kafka import KafkaProducer

    from marshal_py.log.kafka_config import new_client

    producer = new_client(KafkaProducer, bootstrap_servers=bootstrap_servers, linger_ms=20,
                          batch_size=1 << 20, max_in_flight_requests_per_connection=1,
                          acks=1, **(kafka_config or {}))
    sent = 0
    started = time.monotonic()
    last_report = started
    try:
        for cp, ts, value in records:
            producer.send(topic, value=value, partition=cp, timestamp_ms=ts)
            sent += 1
            if progress is not None and sent % 50_000 == 0:
                now = time.monotonic()
                if now - last_report >= 1.0:
                    last_report = now
                    progress(sent, sent / (now - started))
        producer.flush()
    finally:
        producer.close()
    log.info("produced %d generated records to %s in %.1f s", sent, topic,
             time.monotonic() - started)
    return sent
