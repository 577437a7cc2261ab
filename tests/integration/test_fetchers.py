"""The data fetchers (kafka-python and confluent-kafka) against the real broker: reading
several partitions in order, seek, assign, position, the shape of confluent records, missing
topics, a missing confluent_kafka and an unreachable broker."""

from __future__ import annotations

import gc
import logging
import socket
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import KafkaProducer

from marshal_py import Marshaler
from marshal_py.client.confluent_fetcher import librdkafka_config
from marshal_py.client.confluent_records import ConfluentRecord
from marshal_py.client.fetchers import (
    FETCHER_KINDS,
    DataFetcher,
    FetchedBatch,
    FetcherKind,
    open_fetcher,
)
from marshal_py.errors import BrokerUnavailableError, ConfigurationError
from marshal_py.log import KafkaLogConfig
from tests.integration.consumer_support import create_topic

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 25
T0 = int(time.time() * 1000) - 3_600_000  # explicit, yet recent: retention keeps them


def produce(bootstrap: str, topic: str, partition: int, count: int, first: int = 0) -> None:
    """``count`` records to ``partition``: every 5th without key, some with a null value, every
    3rd with headers, explicit CreateTime timestamps."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for i in range(first, first + count):
            producer.send(topic, partition=partition, timestamp_ms=T0 + 1000 * partition + i,
                          key=None if i % 5 == 0 else f"k{partition}-{i}".encode(),
                          value=None if i % 5 == 3 else f"v{partition}-{i}".encode() * 3,
                          headers=[("h", f"{i}".encode()), ("empty", b"")] if i % 3 == 0
                          else None)
        producer.flush()
    finally:
        producer.close()


@pytest.fixture(scope="module")
def topic(kafka_bootstrap: str) -> str:
    """A topic of PARTITIONS partitions holding PER_PARTITION records each."""
    name = f"fetch-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_bootstrap, name, PARTITIONS)
    for partition in range(PARTITIONS):
        produce(kafka_bootstrap, name, partition, PER_PARTITION)
    return name


@pytest.fixture(params=FETCHER_KINDS)
def fetcher(request: pytest.FixtureRequest, kafka_bootstrap: str) -> Iterator[DataFetcher]:
    kind: FetcherKind = request.param
    opened = open_fetcher(kind, KafkaLogConfig(bootstrap_servers=kafka_bootstrap, timeout_s=10))
    try:
        yield opened
    finally:
        opened.close()


def drain(fetcher: DataFetcher, count: int, max_records: int = 7,
          timeout_s: float = 30.0) -> list[FetchedBatch]:
    """Poll until ``count`` records came (failing after ``timeout_s``)."""
    batches: list[FetchedBatch] = []
    deadline = time.monotonic() + timeout_s
    while sum(len(b.records) for b in batches) < count:
        assert time.monotonic() < deadline, f"only {batches} of {count} records came"
        batches.extend(fetcher.poll(0.5, max_records))
    return batches


def by_partition(batches: list[FetchedBatch]) -> dict[tuple[str, int], list[Any]]:
    """The records of each (topic, partition), in the order they came."""
    out: dict[tuple[str, int], list[Any]] = {}
    for batch in batches:
        out.setdefault((batch.topic, batch.partition), []).extend(batch.records)
    return out


def test_reads_several_partitions_in_order_with_their_next_position(
        fetcher: DataFetcher, topic: str) -> None:
    fetcher.assign([(topic, p) for p in range(PARTITIONS)])
    assert fetcher.assignment() == {(topic, p) for p in range(PARTITIONS)}
    batches = drain(fetcher, PARTITIONS * PER_PARTITION)
    for batch in batches:
        assert 0 < len(batch.records) <= 7
        offsets = [r.offset for r in batch.records]
        assert offsets == sorted(offsets)
        assert batch.next_position == offsets[-1] + 1
        assert {(r.topic, r.partition) for r in batch.records} == {(topic, batch.partition)}
        assert batch.topic == topic
    for (_, partition), records in by_partition(batches).items():
        assert [r.offset for r in records] == list(range(PER_PARTITION))
        assert records[1].value == f"v{partition}-1".encode() * 3
        assert fetcher.position(topic, partition) == PER_PARTITION
    assert fetcher.poll(0.2, 100) == []


def test_seek_moves_the_position_and_assign_replaces_the_set(
        fetcher: DataFetcher, topic: str, kafka_bootstrap: str, unique_name: str) -> None:
    create_topic(kafka_bootstrap, unique_name, 2)
    produce(kafka_bootstrap, unique_name, 0, 10)
    fetcher.assign([(topic, 0), (topic, 1)])
    assert fetcher.position(topic, 2) is None  # not assigned
    fetcher.seek(topic, 0, 20)
    assert fetcher.position(topic, 0) == 20
    first = by_partition(drain(fetcher, 5 + PER_PARTITION))
    assert [r.offset for r in first[(topic, 0)]] == list(range(20, PER_PARTITION))
    assert fetcher.position(topic, 1) == PER_PARTITION
    fetcher.seek(topic, 1, 3)  # back: records are fetched again from there
    assert [b.records[0].offset for b in drain(fetcher, 2, max_records=1)] == [3, 4]

    # The set is replaced: (topic, 1) stays where it is, (topic, 0) goes, two come.
    fetcher.assign([(topic, 1), (topic, 2), (unique_name, 0)])
    assert fetcher.assignment() == {(topic, 1), (topic, 2), (unique_name, 0)}
    assert fetcher.position(topic, 0) is None
    with pytest.raises(ValueError):
        fetcher.seek(topic, 0, 0)
    again = by_partition(drain(fetcher, (PER_PARTITION - 5) + PER_PARTITION + 10))
    assert set(again) == {(topic, 1), (topic, 2), (unique_name, 0)}
    assert [r.offset for r in again[(topic, 1)]] == list(range(5, PER_PARTITION))
    assert [r.offset for r in again[(unique_name, 0)]] == list(range(10))
    assert fetcher.position(unique_name, 0) == 10

    fetcher.assign([])
    assert fetcher.assignment() == set()
    assert fetcher.poll(0.2, 10) == []


def attributes(record: Any) -> tuple[Any, ...]:
    return (record.topic, record.partition, record.offset, record.key, record.value,
            record.headers, record.timestamp, record.timestamp_type)


def test_confluent_records_read_like_kafka_python_records(kafka_bootstrap: str,
                                                          topic: str) -> None:
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, timeout_s=10)
    seen: dict[str, list[tuple[Any, ...]]] = {}
    for kind in FETCHER_KINDS:
        fetcher = open_fetcher(kind, config)  # type: ignore[arg-type]
        try:
            fetcher.assign([(topic, p) for p in range(PARTITIONS)])
            records = [r for b in drain(fetcher, PARTITIONS * PER_PARTITION, 500)
                       for r in b.records]
        finally:
            fetcher.close()
        seen[kind] = sorted(map(attributes, records), key=lambda a: (a[1], a[2]))
    assert seen["confluent"] == seen["kafka-python"]
    by_offset = {(a[1], a[2]): a for a in seen["confluent"]}
    assert by_offset[(1, 3)][3:] == (b"k1-3", None, [("h", b"3"), ("empty", b"")],
                                     T0 + 1003, 0)
    assert by_offset[(2, 0)][3:5] == (None, b"v2-0" * 3)
    assert by_offset[(2, 1)][5] == []


def test_a_confluent_record_is_built_in_c_around_its_message(kafka_bootstrap: str,
                                                             topic: str) -> None:
    fetcher = open_fetcher("confluent", KafkaLogConfig(bootstrap_servers=kafka_bootstrap))
    try:
        fetcher.assign([(topic, 0)])
        record = drain(fetcher, 1, 1)[0].records[0]
    finally:
        fetcher.close()
    assert isinstance(record, ConfluentRecord)
    assert type(record).__module__ == "marshal_py.client._fastpath"
    assert not gc.is_tracked(record)  # polls may take 500 Messages, not 300
    assert (record.topic, record.partition, record.offset) == (topic, 0, 0)
    assert record.message.offset() == 0
    assert repr(record) == f"ConfluentRecord(topic={topic!r}, partition=0, offset=0)"


def test_a_missing_topic_or_partition_yields_nothing_and_is_logged(
        fetcher: DataFetcher, topic: str, unique_name: str,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    missing = f"missing-{unique_name}"
    fetcher.assign([(missing, 0), (topic, 99), (topic, 0)])
    records = by_partition(drain(fetcher, PER_PARTITION))
    assert list(records) == [(topic, 0)]
    assert [r.offset for r in records[(topic, 0)]] == list(range(PER_PARTITION))
    assert fetcher.position(missing, 0) is None
    assert fetcher.position(topic, 99) is None
    if fetcher.kind != "confluent":
        return  # kafka-python logs a missing topic itself, when its metadata says so
    deadline = time.monotonic() + 10
    while missing not in caplog.text and time.monotonic() < deadline:
        fetcher.poll(0.2, 10)
    assert missing in caplog.text
    assert f"{topic} [99] does not exist" in caplog.text


def test_open_fetcher_confluent_without_confluent_kafka_names_the_fix(
        monkeypatch: pytest.MonkeyPatch, kafka_bootstrap: str) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)
    with pytest.raises(ConfigurationError) as caught:
        open_fetcher("confluent", KafkaLogConfig(bootstrap_servers=kafka_bootstrap))
    assert "pip install 'marshal_py[librdkafka]'" in str(caught.value)
    assert "\n" not in str(caught.value)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("kind", FETCHER_KINDS)
def test_an_unreachable_broker_is_broker_unavailable_in_bounded_time(kind: FetcherKind) -> None:
    bootstrap = f"127.0.0.1:{closed_port()}"
    before = set(threading.enumerate())
    started = time.monotonic()
    with pytest.raises(BrokerUnavailableError, match=f"cannot reach Kafka at {bootstrap}"):
        open_fetcher(kind, KafkaLogConfig(bootstrap_servers=bootstrap, timeout_s=2.0))
    assert time.monotonic() - started < 15
    # No client thread left retrying (kafka-python's constructor leaves its own running).
    assert [t.name for t in threading.enumerate() if t not in before] == []


def test_kafka_python_settings_become_librdkafka_properties(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, "marshal_py.client.confluent_fetcher")
    settings = {"security_protocol": "sasl_ssl", "sasl_mechanism": "SCRAM-SHA-512",
                "sasl_plain_username": "alice", "sasl_plain_password": "secret",
                "ssl_cafile": "/ca.pem", "ssl_check_hostname": False, "client_id": "me",
                "max_poll_records": 10, "acks": "all"}
    props = librdkafka_config(KafkaLogConfig(bootstrap_servers="b:9092", timeout_s=3,
                                             kafka_config=settings))
    assert props == {"bootstrap.servers": "b:9092", "socket.timeout.ms": 8000,
                     "reconnect.backoff.max.ms": 1000, "security.protocol": "SASL_SSL",
                     "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
                     "sasl.password": "secret", "ssl.ca.location": "/ca.pem",
                     "ssl.endpoint.identification.algorithm": "none", "client.id": "me",
                     "allow.auto.create.topics": False}  # never re-create a deleted topic
    assert "max_poll_records" in caplog.text
    with pytest.raises(ConfigurationError, match="ssl_context"):
        librdkafka_config(KafkaLogConfig(kafka_config={"ssl_context": object()}))
    with pytest.raises(ConfigurationError, match="unknown fetcher"):
        open_fetcher("java", KafkaLogConfig())  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", FETCHER_KINDS)
def test_a_share_member_hands_out_every_record_as_fetched(kafka_bootstrap: str, topic: str,
                                                          kind: FetcherKind) -> None:
    """A share member builds its ShareRecords from either fetcher's records (in C where the
    extension is built): every record once, its key, value, headers and timestamp as the
    fetcher read them, delivery count 1."""
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, timeout_s=10)
    reader = open_fetcher(kind, config)
    try:
        reader.assign([(topic, p) for p in range(PARTITIONS)])
        expected = {(r.partition, r.offset): (r.key, r.value, list(r.headers or []),
                                              r.timestamp)
                    for b in drain(reader, PARTITIONS * PER_PARTITION, 500) for r in b.records}
    finally:
        reader.close()
    group = f"{topic}.share-{kind}"
    with Marshaler(kafka_bootstrap, group, "w1", heartbeat_interval=1.0,
                   coordination_topic=f"__marshal-{group}", fetcher=kind) as m:
        consumer = m.consumer([topic], "share", offset_reset="earliest",
                              acknowledgement="explicit")
        got: dict[tuple[int, int], Any] = {}
        deadline = time.monotonic() + 60
        while len(got) < len(expected) and time.monotonic() < deadline:
            for record in consumer.poll(timeout_s=0.5):
                assert (record.partition, record.offset) not in got
                got[(record.partition, record.offset)] = record
                consumer.ack(record, "accept")
        consumer.close()
    assert {key: (r.key, r.value, r.headers, r.timestamp) for key, r in got.items()} == expected
    assert {(r.topic, r.delivery_count) for r in got.values()} == {(topic, 1)}


def test_expect_records_sizes_the_kafka_python_fetch_for_what_is_wanted(
        kafka_bootstrap: str) -> None:
    """A share member takes a short run of offsets and then seeks to its next region:
    ``expect_records`` has the broker send about that run, not ``max_partition_fetch_bytes``
    (1 MiB) for each; ``None`` restores full-size fetches."""
    name = f"fetch-sized-{uuid.uuid4().hex[:10]}"
    create_topic(kafka_bootstrap, name, 1)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", linger_ms=20)
    try:
        for i in range(4_000):  # ~4 MB in batches of ~16 KB
            producer.send(name, partition=0, value=b"v" * 1_000, timestamp_ms=T0 + i)
        producer.flush()
    finally:
        producer.close()
    fetcher = open_fetcher("kafka-python", KafkaLogConfig(bootstrap_servers=kafka_bootstrap,
                                                          timeout_s=10))
    try:
        fetcher.assign([(name, 0)], starts={(name, 0): 0})
        first = drain(fetcher, 1, max_records=1)  # learns the records' size
        assert first[0].records[0].offset == 0

        def one_fetch_from(offset: int) -> int:
            """Records one fetch from ``offset`` brings (the first poll that has any)."""
            fetcher.seek(name, 0, offset)
            return sum(len(b.records) for b in drain(fetcher, 1, max_records=10_000))

        fetcher.expect_records(20)  # 2 x 20 x ~1 KB, raised to the 64 KiB floor
        sized = one_fetch_from(1_000)
        fetcher.expect_records(None)
        full = one_fetch_from(2_000)
    finally:
        fetcher.close()
    assert 20 <= sized <= 64 + 16, sized  # the floor, and the batch holding the first offset
    assert full >= 900, full  # ~1 MiB: the configured maximum
