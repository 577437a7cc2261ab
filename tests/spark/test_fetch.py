"""What one Spark task reads (marshal_py.spark.fetch), on the real broker, without Spark.

Every test runs with both fetchers (librdkafka and kafka-python): they must produce the same
rows and the same gaps.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from pyspark.sql.pandas.types import to_arrow_schema

from marshal_py.client.batch_member import PlannedRange, ShareHolder
from marshal_py.devbroker.jvm import free_port
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.spark.fetch import DataLossError, read_task
from marshal_py.spark.gaps import write_gaps
from marshal_py.spark.planning import ReadTask
from marshal_py.spark.source import SCHEMA
from tests.integration.consumer_support import Producer, create_topic

pytestmark = pytest.mark.integration

ARROW = to_arrow_schema(SCHEMA, timezone="UTC")
FETCHERS = ("confluent", "kafka-python")


@pytest.fixture(params=FETCHERS)
def fetcher(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def topic(kafka_bootstrap: str, unique_name: str) -> Iterator[str]:
    create_topic(kafka_bootstrap, unique_name, partitions=2)
    producer = Producer(kafka_bootstrap, unique_name, partitions=2)
    producer.send_raw(((f"k{i}".encode(), f"v{i}".encode()) for i in range(100)), partition=0)
    producer.send_raw([(None, b"x", )] * 10, partition=1)
    producer.close()
    yield unique_name


def rows(task: ReadTask, bootstrap: str, **kwargs: object) -> list[dict[str, object]]:
    batches = list(read_task(task, KafkaLogConfig(bootstrap_servers=bootstrap), ARROW,
                             **kwargs))  # type: ignore[arg-type]
    assert all(b.num_rows for b in batches)
    assert all(b.schema.equals(ARROW) for b in batches)
    return pa.Table.from_batches(batches, schema=ARROW).to_pylist()


def test_a_task_reads_exactly_its_ranges_with_their_delivery_counts(
        kafka_bootstrap: str, topic: str, fetcher: str) -> None:
    task = ReadTask((PlannedRange(topic, 0, 5, 10, 1), PlannedRange(topic, 0, 20, 23, 3),
                     PlannedRange(topic, 1, 0, 4)))
    # Each partition's rows in offset order; the partitions' rows may interleave.
    got = sorted(rows(task, kafka_bootstrap, fetcher=fetcher),
                 key=lambda r: r["partition"])  # type: ignore[arg-type, return-value]
    assert [(r["partition"], r["offset"], r["delivery_count"]) for r in got] == (
        [(0, o, 1) for o in range(5, 10)] + [(0, o, 3) for o in range(20, 23)]
        + [(1, o, 1) for o in range(4)])
    first = got[0]
    assert (first["key"], first["value"], first["topic"], first["headers"]) == (
        b"k5", b"v5", topic, [])
    assert got[-1]["key"] is None
    assert first["timestamp"] is not None


def test_records_deleted_before_the_task_ran_fail_the_task_or_are_skipped(
        kafka_bootstrap: str, topic: str, fetcher: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_records({TopicPartition(topic, 0): 50})
    finally:
        admin.close()
    task = ReadTask((PlannedRange(topic, 0, 10, 80),))
    with pytest.raises(DataLossError, match=r"offsets 10\.\.49 were deleted by retention"):
        rows(task, kafka_bootstrap, fetcher=fetcher)
    reported: list[object] = []
    got = rows(task, kafka_bootstrap, fail_on_data_loss=False, on_gaps=reported.append,
               fetcher=fetcher)
    assert [r["offset"] for r in got] == list(range(50, 80))
    # The deleted offsets hold no record any more: gaps (share mode archives them undelivered).
    assert reported == [{(topic, 0): [(10, 49)]}]


def test_a_task_reads_headers_and_timestamps_and_batches_of_at_most_10000_rows(
        kafka_bootstrap: str, unique_name: str, fetcher: str) -> None:
    """Records with and without headers side by side; a range larger than one Arrow batch
    comes as several, in offset order, each within the limit."""
    create_topic(kafka_bootstrap, unique_name, partitions=1)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=20)
    # Timestamps of the last hour: older ones (past the broker's 7-day retention) let the
    # broker delete the topic's first segments while the test runs.
    base_ms = int(time.time() * 1000) - 3_600_000
    for i in range(25_000):
        headers = [("h", f"{i}".encode()), ("empty", b"")] if i % 7 == 0 else None
        producer.send(unique_name, key=None if i % 2 else f"k{i}".encode(), value=b"v",
                      partition=0, headers=headers, timestamp_ms=base_ms + i)
    producer.flush()
    producer.close()
    batches = list(read_task(ReadTask((PlannedRange(unique_name, 0, 0, 25_000),)),
                             KafkaLogConfig(bootstrap_servers=kafka_bootstrap), ARROW,
                             fetcher=fetcher))  # type: ignore[arg-type]
    assert max(b.num_rows for b in batches) <= 10_000
    got = pa.Table.from_batches(batches, schema=ARROW).to_pylist()
    assert [r["offset"] for r in got] == list(range(25_000))
    for r in (got[0], got[1], got[7], got[24_997]):
        i = r["offset"]
        assert r["key"] == (None if i % 2 else f"k{i}".encode())
        assert r["headers"] == ([{"key": "h", "value": f"{i}".encode()},
                                 {"key": "empty", "value": b""}] if i % 7 == 0 else [])
        assert int(r["timestamp"].timestamp() * 1000) == base_ms + i


def test_gaps_that_cannot_be_written_are_a_warning_not_a_failed_task(
        caplog: pytest.LogCaptureFixture) -> None:
    """The driver then accepts those offsets with the batch (they stay held)."""
    holder = ShareHolder("ab12cd34", "spark-q", "jobs.g", (("jobs", 0),))
    nowhere = KafkaLogConfig(bootstrap_servers=f"127.0.0.1:{free_port()}", timeout_s=1)
    with caplog.at_level(logging.WARNING, logger="marshal_py.spark.gaps"):
        assert write_gaps(holder, nowhere, {("jobs", 0): [(3, 4), (9, 9)]}) is False
    assert "could not write gap acknowledgements for 3 offsets" in caplog.text
