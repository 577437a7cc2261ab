"""Input with offset gaps, written on a real broker: transactions and compacted topics.

Kafka Streams, Flink and every exactly-once producer write transactions: each commit or abort
leaves a control record (a marker) in the partition, so data offsets have gaps, and aborted
records stay in the log for read_uncommitted readers. Compaction leaves gaps too. The tests of
every mode and of the Spark source build their input here.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic

#: A transaction of the plan: ("commit" | "abort", how many records).
Txn = tuple[str, int]


@dataclass
class TxnInput:
    """What :func:`write_transactions` wrote to one partition."""

    topic: str
    partition: int
    committed: list[bytes] = field(default_factory=list)
    aborted: list[bytes] = field(default_factory=list)
    end: int = 0

    @property
    def every(self) -> list[bytes]:
        """What read_uncommitted reads: committed and aborted values, in write order."""
        return sorted(self.committed + self.aborted, key=_order)


def _order(value: bytes) -> tuple[int, int]:
    txn, _, index = value.decode().partition(":")[2].partition("-")
    return int(txn), int(index)


def create_topic(bootstrap: str, topic: str, partitions: int = 1,
                 configs: dict[str, str] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1, topic_configs=configs or {})])
    finally:
        admin.close()


def transactional_producer(bootstrap: str, name: str) -> KafkaProducer:
    """A producer with ``transactional_id`` = ``name``, its transactions initialized."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=name)
    producer.init_transactions()
    return producer


def write_transactions(bootstrap: str, topic: str, plan: Sequence[Txn], partition: int = 0,
                       producer: KafkaProducer | None = None) -> TxnInput:
    """Write ``plan`` to ``topic``/``partition``, one transaction after another. Values are
    ``c:T-I`` (committed) or ``a:T-I`` (aborted) for record I of transaction T. Aborted
    records are flushed before the abort, so that they reach the broker and sit in the log."""
    own = producer is None
    producer = producer or transactional_producer(bootstrap, f"txn-{topic}-{partition}")
    out = TxnInput(topic, partition)
    try:
        for t, (outcome, count) in enumerate(plan):
            assert outcome in ("commit", "abort"), outcome
            producer.begin_transaction()
            values = [f"{outcome[0]}:{t}-{i}".encode() for i in range(count)]
            for value in values:
                producer.send(topic, value, partition=partition)
            producer.flush()
            if outcome == "commit":
                producer.commit_transaction()
                out.committed += values
            else:
                producer.abort_transaction()
                out.aborted += values
    finally:
        if own:
            producer.close()
    out.end = end_offset(bootstrap, topic, partition)
    return out


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The partition's high watermark (read_uncommitted: past every marker written)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, partition)
        return int(consumer.end_offsets([tp])[tp])
    finally:
        consumer.close()


#: Topic settings that let the log cleaner compact a topic within seconds.
COMPACT_FAST = {"cleanup.policy": "compact", "segment.ms": "100",
                "min.cleanable.dirty.ratio": "0.01", "min.compaction.lag.ms": "0",
                "delete.retention.ms": "100", "max.compaction.lag.ms": "100"}


def write_compacted(bootstrap: str, topic: str, keys: int, rounds: int,
                    timeout_s: float = 90.0) -> dict[bytes, bytes]:
    """Write ``rounds`` values for each of ``keys`` keys to a partition of a topic created
    with :data:`COMPACT_FAST`, then a record a second until the cleaner has removed older
    values (offsets disappear from the beginning of the log). Returns the latest value per
    key (the fillers included)."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    latest: dict[bytes, bytes] = {}
    try:
        for r in range(rounds):
            for k in range(keys):
                key, value = f"k{k}".encode(), f"v{r}-{k}".encode()
                producer.send(topic, value, key=key, partition=0).get(timeout=10)
                latest[key] = value
        deadline = time.monotonic() + timeout_s
        filler = 0
        while present_offsets(bootstrap, topic) == list(range(keys * rounds + filler)):
            if time.monotonic() > deadline:
                raise AssertionError(f"the log cleaner did not compact {topic} in "
                                     f"{timeout_s} s")
            # New segments roll only when records arrive: keep writing so the dirty ones
            # become cleanable.
            key, value = b"filler", f"f{filler}".encode()
            producer.send(topic, value, key=key, partition=0).get(timeout=10)
            latest[key] = value
            filler += 1
            time.sleep(0.5)
    finally:
        producer.close()
    return latest


def present_offsets(bootstrap: str, topic: str, partition: int = 0) -> list[int]:
    """The offsets that hold a record, read with read_uncommitted from the beginning."""
    return [r.offset for r in read_all(bootstrap, topic, partition)]


def read_all(bootstrap: str, topic: str, partition: int = 0,
             isolation_level: str = "read_uncommitted") -> list[object]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             isolation_level=isolation_level, auto_offset_reset="earliest",
                             enable_auto_commit=False)
    try:
        tp = TopicPartition(topic, partition)
        consumer.assign([tp])
        end = int(consumer.end_offsets([tp])[tp])
        consumer.seek_to_beginning(tp)
        records: list[object] = []
        deadline = time.monotonic() + 30
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                records += batch
        return records
    finally:
        consumer.close()


def values_of(records: Iterable[object]) -> list[bytes]:
    return [r.value for r in records]  # type: ignore[attr-defined]
