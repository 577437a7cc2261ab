"""A data fetcher's batches start at the fetch position: the records below it are read past
undecoded (marshal_py.client.fetch_skipping), and what is handed out is exactly what
kafka-python's own reader hands out -- every field, every fetch position, compressed,
transactional and compacted batches, corrupt bytes -- only without decoding the rest."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.record import default_records
from kafka.record.memory_records import MemoryRecords

from marshal_py.client import fetch_skipping
from tests.unit.test_record_batches import GZIP, TP, Aborted, batch, marker

FromPosition = fetch_skipping._partition_records_class(Fetcher.PartitionRecords)


def read(cls: type, data: bytes, start: int, aborted: list[Aborted] | None = None
         ) -> list[tuple[Any, ...]]:
    level = IsolationLevel.READ_COMMITTED if aborted is not None else \
        IsolationLevel.READ_UNCOMMITTED
    part = cls(start, TP, MemoryRecords(data), check_crcs=True, isolation_level=level,
               aborted_transactions=aborted)
    return [(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers,
             r.serialized_key_size, r.serialized_value_size, r.serialized_header_size)
            for r in part.take()]


def records(n: int, tag: bytes = b"v") -> list[tuple[bytes | None, bytes | None]]:
    return [(None if i % 3 == 0 else b"k%d" % i, None if i % 5 == 4 else tag * (i % 200))
            for i in range(n)]


@pytest.mark.parametrize("start", [0, 1, 2, 149, 150, 151, 299, 300, 301, 450, 10_000])
def test_every_fetch_position_reads_as_kafka_python_does(start: int) -> None:
    data = (batch(0, records(150), headers=[("h", b"x"), ("empty", b"")])
            + batch(150, records(150, b"w"), log_append_ms=1_700_000_999_000)
            + batch(300, records(150), codec=GZIP))
    assert read(FromPosition, data, start) == read(Fetcher.PartitionRecords, data, start)


def test_long_records_and_compacted_offsets_read_alike() -> None:
    big = [(b"key", b"x" * 70_000), (None, b"y" * 300), (b"k", None)] * 3  # multi-byte varints
    data = batch(1_000, big, offset_step=3) + batch(1_027, records(10))
    for start in range(995, 1_040):
        assert read(FromPosition, data, start) == \
            read(Fetcher.PartitionRecords, data, start), start


def test_transactions_and_markers_read_alike_under_read_committed() -> None:
    data = (batch(0, records(20), producer_id=7, transactional=True)
            + marker(20, 7, commit=False)
            + batch(21, records(20), producer_id=8, transactional=True)
            + marker(41, 8, commit=True))
    aborted = [Aborted(7, 0)]
    for start in (0, 5, 20, 21, 30, 41):
        assert read(FromPosition, data, start, aborted) == \
            read(Fetcher.PartitionRecords, data, start, aborted), start
        assert read(FromPosition, data, start) == read(Fetcher.PartitionRecords, data, start)


def test_records_below_the_position_are_never_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    decoded: list[int] = []
    original = default_records.DefaultRecordBatch._read_msg

    def counting(self: Any, *args: Any) -> Any:
        record = original(self, *args)
        decoded.append(record.offset)
        return record

    monkeypatch.setattr(default_records.DefaultRecordBatch, "_read_msg", counting)
    data = batch(0, records(4_000))
    part = FromPosition(3_000, TP, MemoryRecords(data), check_crcs=True)
    taken = part.take(125)
    assert [r.offset for r in taken] == list(range(3_000, 3_125))
    assert decoded[0] == 3_000 and len(decoded) <= 126


def test_a_record_running_past_its_batch_is_corrupt() -> None:
    cut = batch(0, records(10))[:-3]  # the last record runs past the batch's bytes
    batch_of = default_records.DefaultRecordBatch(cut)
    iter(batch_of)
    with pytest.raises(CorruptRecordError):
        fetch_skipping.skip_below(batch_of, 10)
    truncated = default_records.DefaultRecordBatch(batch(0, records(10))[:62])
    iter(truncated)
    with pytest.raises(CorruptRecordError):
        fetch_skipping.skip_below(truncated, 10)


@pytest.mark.parametrize("start", [0, 1, 3, 4, 9, 10, 11])
def test_the_c_and_python_builds_skip_alike(start: int) -> None:
    from marshal_py.client import _fastpath

    data = default_records.DefaultRecordBatch(batch(100, [(b"k", b"x" * 70_000)] * 3
                                                    + records(7)))
    iter(data)
    args = (data._buffer, data._pos, 0, data._num_records, 100, 100 + start)
    assert _fastpath.skip_records(*args) == fetch_skipping.skip_records_py(*args)
    for cut in (5, 70_010, 70_080):
        short = (data._buffer[:cut], data._pos, 0, data._num_records, 100, 120)
        with pytest.raises(ValueError):
            fetch_skipping.skip_records_py(*short)
        with pytest.raises(ValueError):
            _fastpath.skip_records(*short)


def test_install_on_a_consumer_swaps_its_reader() -> None:
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(3, 0),
                             enable_auto_commit=False)
    try:
        assert fetch_skipping.install(consumer)
        assert issubclass(consumer._fetcher.PartitionRecords, Fetcher.PartitionRecords)
    finally:
        consumer.close()
