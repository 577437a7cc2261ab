"""The exclusive consumer's public API on a real broker, with either fetcher: iteration and
poll() batches, commit(record), commit_batch(records), commit_offsets({...}), and the
at-most-once windows; after a close every partition is released with its end committed."""

from __future__ import annotations

import sys
import time
from collections import Counter
from typing import Any

import pytest
from kafka import TopicPartition

from marshal_py import Marshaler
from marshal_py.client.consumer import Consumer
from marshal_py.errors import ConfigurationError
from tests.integration.test_cli_admin import make_topic

HI = 1.0
PARTITIONS = 4
PER_PARTITION = 2_500
TOTAL = PARTITIONS * PER_PARTITION


def read_all(consumer: Consumer, how: str) -> list[Any]:
    """Every record once (or more), taken as ``how`` says, committed as it says."""
    got: list[Any] = []
    deadline = time.monotonic() + 60
    if how == "iterate":
        for record in consumer:
            got.append(record)
            consumer.commit(record)
            if len({(r.partition, r.offset) for r in got}) >= TOTAL \
                    or time.monotonic() > deadline:
                break
        return got
    while len({(r.partition, r.offset) for r in got}) < TOTAL and time.monotonic() < deadline:
        records = consumer.poll(timeout_s=0.5)
        got.extend(records)
        if how == "batch":
            consumer.commit_batch(records)
        elif how == "offsets":
            ends: dict[TopicPartition, int] = {}
            for r in records:
                ends[TopicPartition(r.topic, r.partition)] = r.offset + 1
            consumer.commit_offsets(ends)
        else:
            for r in records:
                consumer.commit(r)
    return got


@pytest.mark.parametrize(("fetcher", "mode", "how"), [
    ("kafka-python", "alo", "batch"),
    ("kafka-python", "alo", "offsets"),
    ("kafka-python", "amo", "iterate"),
    ("confluent", "alo", "iterate"),
    ("confluent", "alo", "poll"),
    ("confluent", "amo", "poll"),
])
def test_every_record_is_read_and_committed_to_the_end(
        kafka_bootstrap: str, unique_name: str, fetcher: str, mode: str, how: str) -> None:
    topic = unique_name
    make_topic(kafka_bootstrap, topic, PARTITIONS, PER_PARTITION)
    with Marshaler(kafka_bootstrap, f"{topic}.g", "w1", heartbeat_interval=HI,
                   coordination_topic=f"__marshal-{topic}",
                   fetcher=fetcher) as m:  # type: ignore[arg-type]
        consumer = m.consumer([topic], mode, offset_reset="earliest")  # type: ignore[call-overload]
        got = read_all(consumer, how)
        counts = Counter((r.partition, r.offset) for r in got)
        assert len(counts) == TOTAL
        if mode == "amo":
            assert max(counts.values()) == 1
            assert consumer.stats.amo_batches_confirmed >= PARTITIONS
        first = min(got, key=lambda r: (r.partition, r.offset))
        assert (first.topic, first.partition, first.offset) == (topic, 0, 0)
        assert first.value == b"0-0" and first.key is None and first.headers == []
        assert isinstance(first.timestamp, int)
        consumer.close()
        claims = m.claims(topic)
    assert [c.committed_offset for c in claims] == [PER_PARTITION] * PARTITIONS
    assert all(c.owner is None for c in claims)


def test_out_of_order_commits_hold_the_committed_offset_back(
        kafka_bootstrap: str, unique_name: str) -> None:
    topic = unique_name
    make_topic(kafka_bootstrap, topic, 1, 10)
    with Marshaler(kafka_bootstrap, f"{topic}.g", "w1", heartbeat_interval=HI,
                   coordination_topic=f"__marshal-{topic}") as m:
        consumer = m.consumer([topic], offset_reset="earliest")
        got: list[Any] = []
        deadline = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < deadline:
            got.extend(consumer.poll(timeout_s=0.5))
        assert [r.offset for r in got] == list(range(10))
        for r in got:
            if r.offset != 4:
                consumer.commit(r)
        consumer.close()
        assert [c.committed_offset for c in m.claims(topic)] == [4]


def test_a_missing_librdkafka_is_one_clear_error(kafka_bootstrap: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "confluent_kafka", None)
    with pytest.raises(ConfigurationError, match=r"pip install 'marshal_py\[librdkafka\]'"):
        Marshaler(kafka_bootstrap, "g", "w1", fetcher="confluent")
