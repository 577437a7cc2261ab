"""A data fetcher's kafka-python consumer decodes its fetches with our reader
(marshal_py.client.fetch_decoding): what it hands out is exactly what kafka-python's own
reader hands out -- every field of every ConsumerRecord, at every fetch position, for
compressed, transactional and compacted batches, in both builds (C and Python) -- and
corrupt bytes fail both ways; the records below the fetch position are never decoded."""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaConsumer
from kafka.consumer.fetcher import ConsumerRecord, Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c

from marshal_py.client import _fastpath, fetch_decoding
from tests.unit.test_record_batches import GZIP, TP, Aborted, batch, marker

Ours = fetch_decoding._partition_records_class(Fetcher.PartitionRecords)
BUILDS = {"c": _fastpath.decode_records, "python": fetch_decoding.decode_records_py}


@pytest.fixture(params=sorted(BUILDS))
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(fetch_decoding, "decode_records", BUILDS[request.param])
    return str(request.param)


def read(cls: type, data: bytes, start: int, aborted: list[Aborted] | None = None,
         n: int | None = None) -> tuple[list[Any], int]:
    """The records a poll of ``n`` takes, and the position after it."""
    level = IsolationLevel.READ_COMMITTED if aborted is not None else \
        IsolationLevel.READ_UNCOMMITTED
    part = cls(start, TP, MemoryRecords(data), check_crcs=True, isolation_level=level,
               aborted_transactions=aborted)
    taken = part.take(n)
    assert all(type(r) is ConsumerRecord for r in taken)
    return taken, part.next_fetch_offset


def records(n: int, tag: bytes = b"v") -> list[tuple[bytes | None, bytes | None]]:
    return [(None if i % 3 == 0 else b"k%d" % i, None if i % 5 == 4 else tag * (i % 200))
            for i in range(n)]


@pytest.mark.parametrize("start", [0, 1, 2, 149, 150, 151, 299, 300, 301, 450, 10_000])
@pytest.mark.parametrize("n", [None, 1, 7, 300])
def test_every_fetch_position_reads_as_kafka_python_does(build: str, start: int,
                                                         n: int | None) -> None:
    data = (batch(0, records(150), headers=[("h", b"x"), ("empty", b""), ("é", b"\xff")])
            + batch(150, records(150, b"w"), log_append_ms=1_700_000_999_000)
            + batch(300, records(150), codec=GZIP))
    assert read(Ours, data, start, n=n) == read(Fetcher.PartitionRecords, data, start, n=n)


def test_long_records_and_compacted_offsets_read_alike(build: str) -> None:
    big = [(b"key", b"x" * 70_000), (None, b"y" * 300), (b"k", None)] * 3  # multi-byte varints
    data = batch(1_000, big, offset_step=3) + batch(1_027, records(10))
    for start in range(995, 1_040):
        assert read(Ours, data, start) == read(Fetcher.PartitionRecords, data, start), start


def test_transactions_and_markers_read_alike_under_read_committed(build: str) -> None:
    data = (batch(0, records(20), producer_id=7, transactional=True)
            + marker(20, 7, commit=False)
            + batch(21, records(20), producer_id=8, transactional=True)
            + marker(41, 8, commit=True)
            + batch(42, records(3)))
    aborted = [Aborted(7, 0)]
    for start in (0, 5, 20, 21, 30, 41, 42, 44):
        assert read(Ours, data, start, aborted) == \
            read(Fetcher.PartitionRecords, data, start, aborted), start
        assert read(Ours, data, start) == read(Fetcher.PartitionRecords, data, start)


def test_records_below_the_position_are_never_decoded(build: str) -> None:
    # A header key that is not UTF-8 in the records below the position: kafka-python
    # decodes them (and fails); ours passes them by their lengths.
    data = bytearray(batch(0, records(40), headers=[("\x00HK", b"v")]))
    data[:] = data.replace(b"\x00HK", b"\x00\xff\xfe")
    data[17:21] = calc_crc32c(memoryview(data)[21:]).to_bytes(4, "big")
    data += batch(40, records(10))
    with pytest.raises(CorruptRecordError, match="utf-8"):
        read(Fetcher.PartitionRecords, bytes(data), 40)
    with pytest.raises(CorruptRecordError, match="utf-8"):
        read(Ours, bytes(data), 39)
    taken, position = read(Ours, bytes(data), 40)
    assert [r.offset for r in taken] == list(range(40, 50)) and position == 50
    big = batch(0, records(4_000)) + batch(4_000, records(10))
    taken, position = read(Ours, big, 3_000, n=125)
    assert [r.offset for r in taken] == list(range(3_000, 3_125)) and position == 3_125


@pytest.mark.parametrize("cut", [5, 70, 70_010, 70_080])
def test_cut_or_corrupt_records_fail_alike(build: str, cut: int) -> None:
    whole = batch(100, [(b"k", b"x" * 70_000)] * 3 + records(7))
    body = DefaultRecordBatch(whole)
    iter(body)
    with pytest.raises(ValueError):
        fetch_decoding.decode_records(body._buffer[:cut], body._pos, 0, body._num_records,
                                      100, 0, False, 0, 100, 1_000, ("t", 0, -1),
                                      ConsumerRecord)


def test_a_batch_with_bytes_after_its_records_is_corrupt(build: str) -> None:
    data = bytearray(batch(0, records(3)))
    data[57:61] = (2).to_bytes(4, "big")  # the count says 2 records: the third is left over
    data[17:21] = calc_crc32c(memoryview(data)[21:]).to_bytes(4, "big")
    for cls in (Fetcher.PartitionRecords, Ours):
        part = cls(0, TP, MemoryRecords(bytes(data)), check_crcs=True)
        assert [r.offset for r in part.take()] == [0, 1]
        with pytest.raises(CorruptRecordError):  # (raised by the next take)
            part.take()


def test_install_on_a_consumer_swaps_its_reader() -> None:
    consumer = KafkaConsumer(bootstrap_servers="127.0.0.1:1", api_version=(3, 0),
                             enable_auto_commit=False)
    try:
        assert fetch_decoding.install(consumer)
        assert issubclass(consumer._fetcher.PartitionRecords, Fetcher.PartitionRecords)
    finally:
        consumer.close()
