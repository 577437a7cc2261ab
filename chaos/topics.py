"""What a run reads of its data topics: their ends, and every record read_committed (the
checker's dumps)."""

from __future__ import annotations

import time
from typing import Any

from chaos.settings import RunError


def end_offsets(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    """Each partition's end offset now."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = consumer.end_offsets(tps)
        return {tp.partition: int(offset) for tp, offset in ends.items()}
    finally:
        consumer.close()


def read_output(bootstrap: str, topic: str, partitions: int) -> list[dict[str, Any]]:
    """``eos`` runs: the input record each output record names (read_committed)."""
    return [{"p": int(p), "o": int(o)} for p, _, o in
            (dict(r.headers)["src"].decode().partition("/")
             for r in read_committed(bootstrap, topic, partitions))]


def read_topic(bootstrap: str, topic: str, partitions: int) -> list[dict[str, Any]]:
    """Every record's partition, offset and key (read_committed)."""
    rows: list[dict[str, Any]] = []
    for r in read_committed(bootstrap, topic, partitions):
        key = r.key.decode("utf-8", "replace") if r.key is not None else None
        rows.append({"p": r.partition, "o": r.offset, "k": key})
    return rows


def read_committed(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every record of ``topic`` up to its end now, read read_committed."""
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, isolation_level="read_committed")
    found: list[Any] = []
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise RunError(f"could not read {topic} to its end")
            for records in consumer.poll(timeout_ms=500).values():
                found.extend(records)
    finally:
        consumer.close()
    return found
