"""decode_records reads fetched record batches exactly as kafka-python's own reader does.

Batches are built with kafka-python's batch builder (keys, headers, null values, large
varints, CreateTime and LogAppendTime, compression, transactions and their markers), read
both ways, and compared record by record; corrupt bytes fail both ways.
"""

from __future__ import annotations

import struct
from collections import namedtuple

import pytest
from kafka import TopicPartition
from kafka.consumer.fetcher import Fetcher
from kafka.errors import CorruptRecordError
from kafka.protocol.consumer.offsets import IsolationLevel
from kafka.record.default_records import DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c

from marshal_py.log.kafka_fetch import RecordRun, install
from marshal_py.log.record_batches import AbortedTransactions, decode_records

TP = TopicPartition("__marshal", 0)
Aborted = namedtuple("Aborted", "producer_id first_offset")
GZIP = 1


def batch(base_offset: int, records: list[tuple[bytes | None, bytes | None]], *,
          base_ts: int = 1_700_000_000_000, log_append_ms: int | None = None,
          codec: int = 0, producer_id: int = -1, transactional: bool = False,
          control: bool = False, headers: list[tuple[str, bytes]] | None = None,
          offset_step: int = 1) -> bytes:
    """One v2 batch of (key, value) records at consecutive offsets (``offset_step`` apart)."""
    builder = DefaultRecordBatchBuilder(2, codec, transactional, producer_id,
                                        0 if producer_id >= 0 else -1,
                                        0 if producer_id >= 0 else -1, 1 << 20)
    for i, (key, value) in enumerate(records):
        builder.append(i * offset_step, base_ts + 7 * i, key, value, headers or [])
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, base_offset)
    attributes = struct.unpack_from(">h", data, 21)[0]
    if log_append_ms is not None:
        attributes |= 0x08
        struct.pack_into(">q", data, 35, log_append_ms)
    if control:
        attributes |= 0x20
    struct.pack_into(">h", data, 21, attributes)
    struct.pack_into(">I", data, 17, calc_crc32c(memoryview(data)[21:]))
    return bytes(data)


def marker(offset: int, producer_id: int, commit: bool) -> bytes:
    """A transaction marker: a control batch whose one record's key says abort or commit."""
    return batch(offset, [(struct.pack(">hh", 0, 1 if commit else 0), b"\x00\x00\x00\x00")],
                 producer_id=producer_id, transactional=True, control=True)


def kafka_python(data: bytes, start: int, aborted: list[Aborted] | None = None
                 ) -> list[tuple[int, int, bytes | None]]:
    level = IsolationLevel.READ_COMMITTED if aborted is not None else \
        IsolationLevel.READ_UNCOMMITTED
    part = Fetcher.PartitionRecords(start, TP, MemoryRecords(data), check_crcs=True,
                                    isolation_level=level, aborted_transactions=aborted)
    return [(r.offset, r.timestamp, r.value) for r in part.take()]


def ours(data: bytes, start: int, aborted: list[Aborted] | None = None
         ) -> list[tuple[int, int, bytes | None]]:
    decoded = decode_records(data, start, aborted=None if aborted is None
                             else AbortedTransactions.of(aborted))
    assert not decoded.legacy
    return list(zip(decoded.offsets, decoded.timestamps, decoded.values, strict=True))


def test_plain_batches_read_alike() -> None:
    long_value = b"Heartbeat/1/" + b"x" * 70_000  # a two- and three-byte varint length
    data = (batch(0, [(None, b"ClaimingPartition/1/a"), (b"key", None), (None, long_value)],
                  headers=[("h", b"v")])
            + batch(3, [(None, bytes([i % 256]) * i) for i in range(200)])
            + batch(203, [(None, b"x")], log_append_ms=1_700_000_123_456))
    expected = kafka_python(data, 0)
    assert ours(data, 0) == expected
    assert len(expected) == 204 and expected[-1] == (203, 1_700_000_123_456, b"x")
    assert ours(data, 100) == kafka_python(data, 100)  # a batch returned whole is cut
    assert decode_records(data, 0).next_offset == 204


def test_offset_gaps_and_compression() -> None:
    data = (batch(10, [(None, b"a"), (None, b"b")], offset_step=5)  # compacted-away gaps
            + batch(20, [(None, b"c" * 100)] * 50, codec=GZIP))
    assert ours(data, 0) == kafka_python(data, 0)
    assert [o for o, _, _ in ours(data, 0)][:3] == [10, 15, 20]


def test_transactions_read_committed_and_uncommitted() -> None:
    aborted_pid, committed_pid = 7, 8
    data = (batch(0, [(None, b"plain")])
            + batch(1, [(None, b"aborted-1"), (None, b"aborted-2")],
                    producer_id=aborted_pid, transactional=True)
            + batch(3, [(None, b"committed")], producer_id=committed_pid, transactional=True)
            + marker(4, aborted_pid, commit=False)
            + marker(5, committed_pid, commit=True)
            + batch(6, [(None, b"after")], producer_id=aborted_pid, transactional=True)
            + marker(7, aborted_pid, commit=True))
    listed = [Aborted(aborted_pid, 1)]
    committed = ours(data, 0, listed)
    assert committed == kafka_python(data, 0, listed)
    assert [v for _, _, v in committed] == [b"plain", b"committed", b"after"]
    uncommitted = ours(data, 0)
    assert uncommitted == kafka_python(data, 0)
    assert len(uncommitted) == 5  # markers are never records
    assert decode_records(data, 0).next_offset == 8


def test_an_incomplete_last_batch_is_left_for_the_next_fetch() -> None:
    whole = batch(0, [(None, b"a")])
    data = whole + batch(1, [(None, b"b" * 100)])[:50]
    decoded = decode_records(data, 0)
    assert decoded.values == [b"a"] and decoded.next_offset == 1 and decoded.size == len(whole)
    assert decode_records(b"", 0).next_offset is None


@pytest.mark.parametrize("where", [30, 70, -3])
def test_corrupt_bytes_fail_like_kafka_python(where: int) -> None:
    data = bytearray(batch(0, [(None, b"ClaimingPartition/1/" + b"z" * 40)] * 3))
    data[where] ^= 0xFF
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(data), 0)
    with pytest.raises(CorruptRecordError):
        kafka_python(bytes(data), 0)


def test_a_record_cut_short_inside_a_valid_crc_is_corrupt() -> None:
    data = bytearray(batch(0, [(None, b"abc")]))
    struct.pack_into(">i", data, 57, 2)  # claims two records, holds one
    struct.pack_into(">I", data, 17, calc_crc32c(memoryview(data)[21:]))
    with pytest.raises(CorruptRecordError):
        decode_records(bytes(data), 0)


def test_older_message_formats_fall_back() -> None:
    data = bytearray(batch(0, [(None, b"a")]))
    data[16] = 1
    assert decode_records(bytes(data), 0).legacy


def test_install_makes_runs_for_the_coordination_topic_only() -> None:
    class FakeFetcher:
        PartitionRecords = Fetcher.PartitionRecords

    class FakeConsumer:
        _fetcher = FakeFetcher()

    consumer = FakeConsumer()
    assert install(consumer, ["__marshal"])  # type: ignore[arg-type]
    cls = consumer._fetcher.PartitionRecords
    data = batch(0, [(None, b"a"), (None, b"b")])
    runs = cls(1, TP, MemoryRecords(data)).take()
    assert len(runs) == 1 and isinstance(runs[0], RecordRun)
    assert runs[0].offsets == [1] and runs[0].values == [b"b"]
    other = cls(0, TopicPartition("__marshal-index", 0), MemoryRecords(data)).take()
    assert [r.value for r in other] == [b"a", b"b"]
