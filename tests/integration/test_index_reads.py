"""A read of the coordination index may continue the client's last read (``IndexSoFar``):
it then fetches only what was appended since, and gives the view a full read would."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kafka import KafkaConsumer

from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.log.kafka_index import INDEX_REUSE_S, IndexSoFar, read_index
from marshal_py.protocol.index import index_view

pytestmark = pytest.mark.integration


@pytest.fixture
def log(kafka_bootstrap: str, unique_name: str) -> Iterator[KafkaLog]:
    opened = KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap,
                                     topic=f"__marshal-{unique_name}", partitions=2))
    yield opened
    opened.close()


@pytest.fixture
def reader(kafka_bootstrap: str) -> Iterator[KafkaConsumer]:
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    yield consumer
    consumer.close()


def test_a_continued_read_gives_what_a_full_read_gives(log: KafkaLog,
                                                        reader: KafkaConsumer) -> None:
    so_far = IndexSoFar()
    read_index(log.config, reader, so_far)
    log.append_index(b"history/g/t/w1", b"History/2/x")
    log.append_index(b"checkpoint/g/t", b"CheckpointAt/2/y")
    log.append_index(b"checkpoint/g/t", b"CheckpointAt/2/z")  # replaces the one before
    continued = read_index(log.config, reader, so_far)
    full = read_index(log.config, reader)
    assert continued == full
    assert index_view(continued, log.topic, log.index_topic_id) == \
        index_view(full, log.topic, log.index_topic_id)
    assert so_far.end == full[-1][0] + 1


def test_a_continued_read_starts_where_the_last_one_ended(log: KafkaLog,
                                                          reader: KafkaConsumer) -> None:
    so_far = IndexSoFar()
    first = read_index(log.config, reader, so_far)
    # A record only this client's memory holds: a continued read keeps it, not reading
    # the index's beginning again.
    marker = (-1, b"history/marker/t/w", b"only in memory")
    so_far.records = [marker, *first]
    log.append_index(b"history/g/t/w2", b"History/2/x")
    continued = read_index(log.config, reader, so_far)
    assert continued[0] == marker
    assert continued[-1][1] == b"history/g/t/w2"


def test_an_old_read_is_not_continued(log: KafkaLog, reader: KafkaConsumer) -> None:
    so_far = IndexSoFar()
    first = read_index(log.config, reader, so_far)
    marker = (-1, b"history/marker/t/w", b"only in memory")
    so_far.records = [marker, *first]
    assert so_far.read_at is not None
    so_far.read_at -= INDEX_REUSE_S + 1
    again = read_index(log.config, reader, so_far)
    assert marker not in again
    assert again == first
    assert so_far.read_at is not None and time.monotonic() - so_far.read_at < INDEX_REUSE_S


def test_a_read_past_the_index_end_starts_over(log: KafkaLog, reader: KafkaConsumer) -> None:
    """An index whose end is below the last read's (deleted and created again) is read from
    its beginning."""
    so_far = IndexSoFar()
    first = read_index(log.config, reader, so_far)
    marker = (-1, b"history/marker/t/w", b"only in memory")
    so_far.records = [marker, *first]
    so_far.end += 1_000
    again = read_index(log.config, reader, so_far)
    assert marker not in again
    assert again == first
