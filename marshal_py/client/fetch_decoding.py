"""Decoding a kafka-python data fetch: records from the fetch position, in C when built.

kafka-python turns every record of a fetched batch into a ``ConsumerRecord`` in pure Python
(a dozen calls and varint reads per record), and a fetch at offset *p* inside a batch of *n*
records returns the batch from its first record: kafka-python decodes the records below *p*
too, then drops them. Both showed in profiles of share members (cProfile, 2026-11-28,
``MARSHAL_BENCH_SHARE_PROFILE``): with eight members reading their acquired runs between each
other's (a producer's 512 KiB batches hold about 4,000 records of 100 bytes; a run is 125),
a member decoded 9.4 records for every one it handed out, 84% of its fetching thread's time;
one member alone spent 80% of that thread decoding.

:func:`install` gives a kafka-python consumer a reader of its own for message-format-2
batches: the records below the fetch position are passed by their length and offset delta
(three varints each), the others become the same ``ConsumerRecord`` s kafka-python makes --
every field alike, ``tests/unit/test_fetch_decoding.py`` compares them -- a few hundred at a
time, in C when ``marshal_py.client._fastpath`` was built. What decides *which* batches are
read stays kafka-python's rule, and its code where it can: CRC checks, control batches,
aborted transactions under ``read_committed``, the position's bookkeeping. A fetch holding a
batch of message format 0 or 1, or a consumer with deserializers, is read by kafka-python
as before. This reaches into kafka-python 3.x (``Fetcher.PartitionRecords`` and the slots of
``DefaultRecordBatch``); :func:`install` checks that they are there and otherwise leaves the
consumer as it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

from kafka import KafkaConsumer
from kafka.consumer.fetcher import ConsumerRecord
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch

from marshal_py.client.fastpath import compiled_module
from marshal_py.log.record_batches import all_format_2

log = logging.getLogger(__name__)

__all__ = ["decode_records", "decode_records_py", "install"]

_BATCH_SLOTS = ("_buffer", "_pos", "_next_record_index", "_num_records")
_PARTITION_RECORDS_METHODS = ("_unpack_records", "_consume_aborted_transactions_up_to",
                              "_contains_abort_marker", "_is_batch_aborted")
#: Records decoded at a time: a poll for fewer than a batch holds does not decode all of it.
CHUNK = 256
_READ_COMMITTED = 1  # kafka-python's IsolationLevel.READ_COMMITTED


def _varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """Kafka's zigzag varint at ``pos`` (before ``end``): (value, position after)."""
    shift = result = 0
    while True:
        if pos >= end:
            raise ValueError("a field runs past its record")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 64 bits")


def _bytes(buf: Any, pos: int, end: int) -> tuple[bytes | None, int, int]:
    """A length-prefixed byte string (length -1: None): (it, its length, position after)."""
    length, pos = _varint(buf, pos, end)
    if length > end - pos:
        raise ValueError("a field runs past its record")
    if length < 0:
        return None, -1, pos
    return bytes(buf[pos:pos + length]), length, pos + length


def decode_records_py(buf: Any, pos: int, index: int, count: int, base: int, first_ts: int,
                      log_append: bool, max_ts: int, start: int, limit: int,
                      prefix: tuple[str, int, int], record_type: Any
                      ) -> tuple[list[Any], int, int]:
    """Up to ``limit`` records of a batch body ``buf`` at or after offset ``start`` (records
    ``index`` to ``count``, from byte ``pos``), as ``record_type`` (kafka-python's
    ``ConsumerRecord`` fields, ``prefix`` = topic, partition, leader epoch): (them, the byte
    position and index after). The records below ``start`` are passed undecoded. ValueError
    for a record whose bytes do not hold together. (The C build: ``_fastpath.decode_records``.)
    """
    out: list[Any] = []
    size = len(buf)
    topic, partition, epoch = prefix
    ts_type = 1 if log_append else 0
    while index < count and len(out) < limit:
        length, at = _varint(buf, pos, size)
        if length < 0 or length > size - at:
            raise ValueError("a record runs past its batch")
        after = at + length
        ts_delta, at = _varint(buf, at + 1, after)  # after the attributes (one byte)
        offset_delta, at = _varint(buf, at, after)
        pos, index = after, index + 1
        if base + offset_delta < start:
            continue
        key, key_size, at = _bytes(buf, at, after)
        value, value_size, at = _bytes(buf, at, after)
        header_count, at = _varint(buf, at, after)
        if header_count < 0:
            raise ValueError("a record's header count is invalid")
        headers: list[tuple[str, bytes | None]] = []
        header_size = 0
        for _ in range(header_count):
            key_length, at = _varint(buf, at, after)
            if key_length < 0 or key_length > after - at:
                raise ValueError("a record header's key is invalid")
            name = bytes(buf[at:at + key_length]).decode("utf-8")
            header_value, header_value_size, at = _bytes(buf, at + key_length, after)
            header_size += key_length + max(header_value_size, 0)
            headers.append((name, header_value))
        if at != after:
            raise ValueError("a record's size does not match its fields")
        out.append(record_type(topic, partition, epoch, base + offset_delta,
                               max_ts if log_append else first_ts + ts_delta, ts_type, key,
                               value, headers, None, key_size, value_size,
                               header_size if headers else -1))
    return out, pos, index


_compiled = compiled_module()
#: :func:`decode_records_py`, in C when the extension was built.
decode_records: Callable[..., tuple[list[Any], int, int]] = \
    _compiled.decode_records if _compiled is not None else decode_records_py


def _all_format_2(records: Any) -> bool:
    """Whether every batch of a fetched partition's ``MemoryRecords`` is of message format 2."""
    data = getattr(records, "_buffer", None)
    return data is not None and all_format_2(data)


def _partition_records_class(base: type) -> type:
    """A subclass of kafka-python's ``Fetcher.PartitionRecords`` with this reader."""

    class DecodingPartitionRecords(base):  # type: ignore[misc]
        def _unpack_records(self, tp: Any, records: Any, key_deserializer: Any,
                            value_deserializer: Any) -> Iterator[Any]:
            if key_deserializer is not None or value_deserializer is not None \
                    or not _all_format_2(records):
                yield from super()._unpack_records(tp, records, key_deserializer,
                                                   value_deserializer)
                return
            batch = last = records.next_batch()
            while batch is not None:
                last = batch
                if self.check_crcs and not batch.validate_crc():
                    raise CorruptRecordError(f"record batch of {tp} at offset "
                                             f"{batch.base_offset} failed its CRC check")
                self.leader_epoch = batch.leader_epoch
                if self._passed_over(batch):
                    self.next_fetch_offset = batch.next_offset
                else:
                    yield from self._decoded(tp, batch)
                batch = records.next_batch()
            if last is not None:
                self.next_fetch_offset = last.next_offset
            self.drain()

        def _passed_over(self, batch: DefaultRecordBatch) -> bool:
            """A control batch, or (read_committed) a batch of an aborted transaction."""
            level = getattr(self.isolation_level, "value", self.isolation_level)
            if level == _READ_COMMITTED and batch.has_producer_id():
                self._consume_aborted_transactions_up_to(batch.last_offset)
                if self._contains_abort_marker(batch):
                    self.aborted_producer_ids.discard(batch.producer_id)
                elif self._is_batch_aborted(batch):
                    return True
            return bool(batch.is_control_batch)

        def _decoded(self, tp: Any, batch: DefaultRecordBatch) -> Iterator[Any]:
            iter(batch)  # decompresses a compressed batch
            buf, pos, index = batch._buffer, batch._pos, batch._next_record_index
            count, base = batch._num_records, batch.base_offset
            log_append = batch.timestamp_type == 1
            prefix = (tp.topic, tp.partition, batch.leader_epoch)
            while index < count:
                try:
                    got, pos, index = decode_records(
                        buf, pos, index, count, base, batch.first_timestamp, log_append,
                        batch.max_timestamp, self.fetch_offset, CHUNK, prefix,
                        ConsumerRecord)
                except (ValueError, IndexError) as exc:
                    raise CorruptRecordError(
                        f"record batch of {tp} at offset {base}: {exc}") from exc
                self.records_read += len(got)
                for record in got:
                    self.next_fetch_offset = record[3] + 1
                    yield record
            if pos != len(buf):
                raise CorruptRecordError(f"record batch of {tp} at offset {base}: "
                                         f"{len(buf) - pos} bytes after its last record")
            self.bytes_read += len(buf)

    return DecodingPartitionRecords


def install(consumer: KafkaConsumer) -> bool:
    """Give ``consumer`` this reader. False (and the consumer unchanged) when this
    kafka-python lacks the pieces it builds on."""
    fetcher = getattr(consumer, "_fetcher", None)
    base = getattr(type(fetcher), "PartitionRecords", None)
    if fetcher is None or base is None \
            or not all(hasattr(base, name) for name in _PARTITION_RECORDS_METHODS) \
            or not all(slot in DefaultRecordBatch.__slots__ for slot in _BATCH_SLOTS):
        log.info("kafka-python %s: its own reader decodes the fetched records",
                 getattr(__import__("kafka"), "__version__", "?"))
        return False
    fetcher.PartitionRecords = _partition_records_class(base)
    return True
