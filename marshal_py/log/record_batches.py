"""Reading Kafka record batches (message format v2) straight into coordination records.

kafka-python turns every record it fetches into a ``ConsumerRecord`` (headers, sizes,
checksums, deserializers), in pure Python, one object and a dozen calls per record: reading
``__marshal`` that way costs more than applying it. A coordination reader needs three things
of a record: its offset, its broker timestamp and its value. :func:`decode_records` walks the
bytes of one fetched partition and collects exactly those, in three flat lists, skipping
what a consumer of the same isolation level would skip:

* control batches (transaction markers);
* with ``read_committed``, the batches of aborted transactions (the broker lists them in the
  fetch response; the same bookkeeping as every Kafka consumer: a producer id is aborted from
  the first offset of its aborted transaction until its abort marker);
* records below the offset asked for (a batch is returned whole).

Every batch's CRC-32C is checked (``check_crcs``). Compressed batches are decompressed and
read with kafka-python's own record iteration (a coordination producer does not compress;
this path only has to be right). A batch in an older message format (magic 0 or 1) makes the
whole fetch fall back to kafka-python's reader (:attr:`DecodedRecords.legacy`).
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.util import calc_crc32c

_HEADER = struct.Struct(">qiibIhiqqqhii")
_HEADER_SIZE = _HEADER.size  # 61
_LOG_OVERHEAD = 12  # base offset and batch length: the bytes a batch length does not count
_MAGIC_AT = 16
_CRC_FROM = 21  # the CRC covers the batch from its attributes on
_CONTROL_KEY = struct.Struct(">hh")
_ABORT = 0
_CODEC_MASK = 0x07
_LOG_APPEND_TIME = 0x08
_TRANSACTIONAL = 0x10
_CONTROL = 0x20


@dataclass
class AbortedTransactions:
    """The aborted transactions a fetch response lists for one partition (with
    ``read_committed``), consumed in offset order as batches are read."""

    pending: deque[tuple[int, int]] = field(default_factory=deque)  # (first offset, producer)
    aborted: set[int] = field(default_factory=set)

    @classmethod
    def of(cls, listed: Iterable[Any] | None) -> AbortedTransactions:
        """From the response's entries (each with ``first_offset`` and ``producer_id``)."""
        pairs = sorted((int(t.first_offset), int(t.producer_id)) for t in listed or ())
        return cls(deque(pairs))

    def reach(self, last_offset: int) -> None:
        """Producers whose aborted transaction began at or before ``last_offset``."""
        pending = self.pending
        while pending and pending[0][0] <= last_offset:
            self.aborted.add(pending.popleft()[1])


@dataclass
class DecodedRecords:
    """What :func:`decode_records` read from one partition's fetched bytes."""

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    #: The offset after the last whole batch read (None: no whole batch in the bytes).
    next_offset: int | None = None
    #: Bytes of the whole batches read.
    size: int = 0
    #: A batch of message format 0 or 1 was found: nothing was decoded, read it the old way.
    legacy: bool = False


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's varint and varlong) at ``pos``: (value, position after)."""
    shift = 0
    result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise CorruptRecordError("a varint longer than 64 bits")


def _read_records(buf: bytes, pos: int, end: int, count: int, base_offset: int,
                  timestamp: int | None, base_timestamp: int, start: int,
                  out: DecodedRecords) -> None:
    """Append the ``count`` records of an uncompressed batch body ``buf[pos:end]``.

    ``timestamp``: every record's (LogAppendTime: the batch's), or None to take each
    record's delta from ``base_timestamp`` (CreateTime). The varints that are one byte in
    practice (attributes, small deltas, the -1 of a null key, zero headers) are read inline.
    """
    offsets, timestamps, values = out.offsets, out.timestamps, out.values
    varint = _varint
    for _ in range(count):
        b = buf[pos]
        if b < 0x80:
            length = (b >> 1) ^ -(b & 1)
            pos += 1
        else:
            length, pos = varint(buf, pos)
        record_end = pos + length
        if length < 0 or record_end > end:
            raise CorruptRecordError("a record runs past its batch")
        p = pos + 1  # attributes: one byte, unused
        b = buf[p]
        if b < 0x80:
            delta = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            delta, p = varint(buf, p)
        b = buf[p]
        if b < 0x80:
            offset_delta = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            offset_delta, p = varint(buf, p)
        b = buf[p]
        if b < 0x80:
            key_length = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            key_length, p = varint(buf, p)
        if key_length > 0:
            p += key_length
        b = buf[p]
        if b < 0x80:
            value_length = (b >> 1) ^ -(b & 1)
            p += 1
        else:
            value_length, p = varint(buf, p)
        if p + max(value_length, 0) > record_end:
            raise CorruptRecordError("a record value runs past its record")
        offset = base_offset + offset_delta
        pos = record_end  # headers: not read (a coordination record has none to heed)
        if offset < start:
            continue
        offsets.append(offset)
        timestamps.append(base_timestamp + delta if timestamp is None else timestamp)
        values.append(buf[p:p + value_length] if value_length >= 0 else None)
    if pos != end:
        raise CorruptRecordError(f"{end - pos} bytes left after the records of a batch")


def _is_abort_marker(buf: bytes, pos: int, end: int) -> bool:
    """True when the first record of a control batch body is an abort marker."""
    _, pos = _varint(buf, pos)  # length
    pos += 1  # attributes
    _, pos = _varint(buf, pos)  # timestamp delta
    _, pos = _varint(buf, pos)  # offset delta
    key_length, pos = _varint(buf, pos)
    if key_length < _CONTROL_KEY.size or pos + key_length > end:
        return False
    kind: int = _CONTROL_KEY.unpack_from(buf, pos)[1]
    return kind == _ABORT


def all_format_2(data: bytes | memoryview) -> bool:
    """Whether every batch in one partition's fetched bytes is of message format 2 (an
    incomplete last batch is judged by its magic byte when that much of it came)."""
    pos, size = 0, len(data)
    while pos + _MAGIC_AT < size:
        if data[pos + _MAGIC_AT] < 2:
            return False
        pos += _LOG_OVERHEAD + struct.unpack_from(">i", data, pos + 8)[0]
    return True


def decode_records(data: bytes | memoryview, start: int, *, check_crcs: bool = True,
                   aborted: AbortedTransactions | None = None) -> DecodedRecords:
    """The records of one partition's fetched bytes ``data`` at or after offset ``start``.

    ``aborted``: read committed only, skipping aborted transactions (None: read
    uncommitted). Raises kafka-python's ``CorruptRecordError`` for a batch whose CRC or
    structure is wrong, as kafka-python's own reader does. An incomplete last batch (a fetch
    ends mid-batch) is left for the next fetch.
    """
    buf = bytes(data)
    out = DecodedRecords()
    pos = 0
    size = len(buf)
    while pos + _HEADER_SIZE <= size:
        batch_end = pos + _LOG_OVERHEAD + struct.unpack_from(">i", buf, pos + 8)[0]
        if batch_end > size:
            break
        if buf[pos + _MAGIC_AT] < 2:
            return DecodedRecords(legacy=True)
        (base_offset, _, _, _, crc, attributes, last_delta, base_timestamp, max_timestamp,
         producer_id, _, _, count) = _HEADER.unpack_from(buf, pos)
        if check_crcs and calc_crc32c(memoryview(buf)[pos + _CRC_FROM:batch_end]) != crc:
            raise CorruptRecordError(
                f"record batch at offset {base_offset} failed its CRC check")
        body = pos + _HEADER_SIZE
        skip = False
        if aborted is not None and producer_id >= 0:
            aborted.reach(base_offset + last_delta)
            if attributes & _CONTROL:
                if _guarded(_is_abort_marker, buf, body, batch_end):
                    aborted.aborted.discard(producer_id)
            elif attributes & _TRANSACTIONAL and producer_id in aborted.aborted:
                skip = True
        if not skip and not attributes & _CONTROL and base_offset + last_delta >= start:
            timestamp = max_timestamp if attributes & _LOG_APPEND_TIME else None
            if attributes & _CODEC_MASK:
                _read_compressed(buf[pos:batch_end], start, out)
            else:
                _guarded(_read_records, buf, body, batch_end, count, base_offset, timestamp,
                         base_timestamp, start, out)
        out.next_offset = base_offset + last_delta + 1
        out.size += batch_end - pos
        pos = batch_end
    return out


def _guarded(read: Any, *args: Any) -> Any:
    """``read(*args)``, a record cut short (an index past the bytes) reported as corrupt."""
    try:
        return read(*args)
    except IndexError as exc:
        raise CorruptRecordError(f"a record batch ends inside a record: {exc}") from exc


def _read_compressed(batch: bytes, start: int, out: DecodedRecords) -> None:
    """A compressed batch, through kafka-python's record iteration (it knows the codecs)."""
    for record in DefaultRecordBatch(batch):
        if record.offset >= start:
            out.offsets.append(record.offset)
            out.timestamps.append(record.timestamp)
            out.values.append(record.value)
