"""Reading past the records below a fetch position without decoding them (kafka-python).

A fetch answers with whole record batches: a fetch at offset *p* inside a batch of *n*
records returns the batch from its first record. kafka-python decodes every record of it --
key, value, headers, a ``ConsumerRecord`` each -- and only then drops those below *p*. A
share member reads its acquired runs between other members' (it seeks forward past them),
so most fetches start inside a batch: with a producer's 512 KiB batches (about 4,000
records of 100 bytes) and runs of 125 records, eight members decoded 9.4 records for every
one they handed out, 84% of their fetching thread's time (cProfile, 2026-11-28,
``MARSHAL_BENCH_SHARE_PROFILE``).

:func:`install` makes a kafka-python consumer's batches start their iteration at the
fetch position: the records below it are walked by their length and offset delta only
(three varints each; in C when ``marshal_py.client._fastpath`` was built), the rest are
decoded by kafka-python as before. Everything else --
CRC checks (of the whole batch, before), control batches, aborted transactions, the
position's bookkeeping -- stays kafka-python's. This reaches into kafka-python 3.x's
``Fetcher.PartitionRecords`` and ``DefaultRecordBatch`` (its ``_buffer``, ``_pos`` and
``_next_record_index``); :func:`install` checks that they are there and otherwise leaves
the consumer as it is (then the records are only decoded in vain, as before).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kafka import KafkaConsumer
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBatch

from marshal_py.client.fastpath import compiled_module

log = logging.getLogger(__name__)

__all__ = ["install", "skip_below", "skip_records", "skip_records_py"]

_BATCH_SLOTS = ("_buffer", "_pos", "_next_record_index", "_num_records")


def _varint(buf: Any, pos: int, end: int) -> tuple[int, int]:
    """Kafka's zigzag varint at ``pos`` (before ``end``): (value, position after)."""
    shift = result = 0
    while True:
        if pos >= end:
            raise ValueError("a varint runs past its record")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError("a varint longer than 64 bits")


def skip_records_py(buf: Any, pos: int, index: int, count: int, base: int, start: int
                    ) -> tuple[int, int]:
    """Where the first record of ``buf`` (records ``index`` to ``count`` from byte ``pos``)
    at or after offset ``start`` begins: (its byte position, its index). ValueError when a
    record runs past the buffer. (The C build: ``_fastpath.skip_records``.)"""
    size = len(buf)
    while index < count:
        length, at = _varint(buf, pos, size)
        after = at + length
        if length < 0 or after > size:
            raise ValueError("a record runs past its batch")
        _, at = _varint(buf, at + 1, after)  # attributes (one byte), then timestamp delta
        delta, _ = _varint(buf, at, after)
        if base + delta >= start:
            break
        pos = after
        index += 1
    return pos, index


_compiled = compiled_module()
#: :func:`skip_records_py`, in C when the extension was built.
skip_records: Callable[[Any, int, int, int, int, int], tuple[int, int]] = \
    _compiled.skip_records if _compiled is not None else skip_records_py


def skip_below(batch: DefaultRecordBatch, start: int) -> int:
    """Move an iterated (decompressed) batch past its records below offset ``start``,
    reading only each record's length and offset delta; how many were passed.

    Raises ``CorruptRecordError`` for a record that runs past the batch."""
    index: int = batch._next_record_index
    try:
        pos, reached = skip_records(batch._buffer, batch._pos, index, batch._num_records,
                                    batch.base_offset, start)
    except ValueError as exc:
        raise CorruptRecordError(f"record batch at offset {batch.base_offset}: {exc}") \
            from exc
    batch._pos, batch._next_record_index = pos, reached
    return reached - index


class _BatchFrom:
    """A batch whose iteration starts at offset ``start`` (kafka-python's batch otherwise:
    every other attribute is the batch's own)."""

    __slots__ = ("_batch", "_start")

    def __init__(self, batch: DefaultRecordBatch, start: int) -> None:
        self._batch = batch
        self._start = start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)

    def __iter__(self) -> DefaultRecordBatch:
        batch = iter(self._batch)  # decompresses a compressed batch
        skip_below(batch, self._start)
        return batch


class _RecordsFrom:
    """A fetched partition's ``MemoryRecords`` whose v2 data batches that begin below
    ``start`` skip the records below it undecoded."""

    __slots__ = ("_records", "_start")

    def __init__(self, records: Any, start: int) -> None:
        self._records = records
        self._start = start

    def __getattr__(self, name: str) -> Any:
        return getattr(self._records, name)

    def next_batch(self) -> Any:
        batch = self._records.next_batch()
        if type(batch) is DefaultRecordBatch and batch.base_offset < self._start \
                and not batch.is_control_batch:
            return _BatchFrom(batch, self._start)
        return batch


def _partition_records_class(base: type) -> type:
    """A subclass of kafka-python's ``Fetcher.PartitionRecords`` reading from the fetch
    position."""

    class PartitionRecordsFromPosition(base):  # type: ignore[misc]
        def __init__(self, fetch_offset: int, tp: Any, records: Any, *args: Any,
                     **kwargs: Any) -> None:
            super().__init__(fetch_offset, tp, _RecordsFrom(records, fetch_offset),
                             *args, **kwargs)

    return PartitionRecordsFromPosition


def install(consumer: KafkaConsumer) -> bool:
    """Make ``consumer`` read past the records below each fetch position undecoded.
    False (and the consumer unchanged) when this kafka-python lacks the pieces."""
    fetcher = getattr(consumer, "_fetcher", None)
    base = getattr(type(fetcher), "PartitionRecords", None)
    if fetcher is None or base is None or not hasattr(base, "_unpack_records") \
            or not all(slot in DefaultRecordBatch.__slots__ for slot in _BATCH_SLOTS):
        log.info("kafka-python %s: records below a fetch position are decoded, then dropped",
                 getattr(__import__("kafka"), "__version__", "?"))
        return False
    fetcher.PartitionRecords = _partition_records_class(base)
    return True
