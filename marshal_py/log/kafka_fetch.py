"""The coordination reader's fetches, decoded by :mod:`~marshal_py.log.record_batches`.

kafka-python keeps doing everything a consumer must (leaders, fetch sessions, positions,
out-of-range resets, aborted transactions' lists, retries); only the step that turns one
partition's fetched bytes into records is ours, for the coordination topic's partitions:
its consumer's fetcher builds :class:`RecordRun`s (three flat lists per fetch) instead of one
``ConsumerRecord`` per record. Other topics read by the same consumer (the index) keep
kafka-python's records.

This reaches into kafka-python's fetcher (``Fetcher.PartitionRecords``, its generator
``_unpack_records`` and the raw bytes of ``MemoryRecords``), which marshal_py pins to 3.x:
:func:`install` checks that the pieces are there and otherwise leaves the consumer as it is
(then :meth:`KafkaLog.fetch <marshal_py.log.kafka.KafkaLog.fetch>` reads kafka-python's
records, only slower). Tested against kafka-python's own reader in
``tests/unit/test_record_batches.py`` and on the real broker.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from kafka import KafkaConsumer

from marshal_py.log.base import Fetched, Keep
from marshal_py.log.record_batches import AbortedTransactions, decode_records
from marshal_py.protocol.records import CoordinationRecord

log = logging.getLogger(__name__)

_READ_COMMITTED = 1  # kafka-python's IsolationLevel.READ_COMMITTED


class RecordRun:
    """The records of one partition from one fetch: parallel lists, log order.

    ``offset`` is the last one's (kafka-python's fetcher drops items whose ``offset`` is
    below the position asked for; a run never holds records below it)."""

    __slots__ = ("offset", "offsets", "timestamps", "values")

    def __init__(self, offsets: list[int], timestamps: list[int],
                 values: list[bytes | None]) -> None:
        self.offsets = offsets
        self.timestamps = timestamps
        self.values = values
        self.offset = offsets[-1]

    def __len__(self) -> int:
        return len(self.offsets)


def _partition_records_class(base: type, topics: frozenset[str]) -> type:
    """A subclass of kafka-python's ``Fetcher.PartitionRecords`` decoding ``topics``."""

    class CoordinationPartitionRecords(base):  # type: ignore[misc]
        def _unpack_records(self, tp: Any, records: Any, key_deserializer: Any,
                            value_deserializer: Any) -> Iterator[Any]:
            data = getattr(records, "_buffer", None)
            if tp.topic not in topics or data is None:
                yield from super()._unpack_records(tp, records, key_deserializer,
                                                   value_deserializer)
                return
            aborted = None
            if getattr(self.isolation_level, "value", self.isolation_level) == _READ_COMMITTED:
                aborted = AbortedTransactions.of(self.aborted_transactions)
            decoded = decode_records(data, self.fetch_offset, check_crcs=self.check_crcs,
                                     aborted=aborted)
            if decoded.legacy:  # message format 0 or 1: kafka-python's own reader
                yield from super()._unpack_records(tp, records, key_deserializer,
                                                   value_deserializer)
                return
            if decoded.next_offset is not None:
                self.next_fetch_offset: int = max(self.next_fetch_offset, decoded.next_offset)
            self.records_read += len(decoded.offsets)
            self.bytes_read += decoded.size
            if decoded.offsets:
                yield RecordRun(decoded.offsets, decoded.timestamps, decoded.values)
            self.drain()

    return CoordinationPartitionRecords


def install(consumer: KafkaConsumer, topics: Iterable[str]) -> bool:
    """Make ``consumer`` return :class:`RecordRun`s for the partitions of ``topics``.
    False (and the consumer unchanged) when this kafka-python lacks the pieces."""
    fetcher = getattr(consumer, "_fetcher", None)
    base = getattr(type(fetcher), "PartitionRecords", None)
    if fetcher is None or base is None or not hasattr(base, "_unpack_records"):
        log.info("kafka-python %s: coordination records are read with its own record "
                 "objects (slower)", getattr(__import__("kafka"), "__version__", "?"))
        return False
    fetcher.PartitionRecords = _partition_records_class(base, frozenset(topics))
    return True


def collect(polled: Mapping[Any, list[Any]], starts: Mapping[Any, int],
            keep: Keep | None) -> Fetched:
    """A consumer's ``poll()`` answer as :class:`~marshal_py.log.base.Fetched`: the records
    at or after ``starts[tp]`` that ``keep`` wants, by partition, and how far each got.
    Takes :class:`RecordRun`s and kafka-python's records alike."""
    records: list[CoordinationRecord] = []
    reached: dict[int, int] = {}
    for tp, items in sorted(polled.items(), key=lambda item: item[0].partition):
        start = starts.get(tp, 0)
        partition = tp.partition
        last = -1
        for item in items:
            if isinstance(item, RecordRun):
                for offset, timestamp, value in zip(item.offsets, item.timestamps,
                                                    item.values, strict=True):
                    if offset >= start and (keep is None or keep(value)):
                        records.append(CoordinationRecord(partition, offset, timestamp, value))
                last = max(last, item.offset)
            else:
                if item.offset >= start and (keep is None or keep(item.value)):
                    records.append(CoordinationRecord(partition, int(item.offset),
                                                      int(item.timestamp), item.value))
                last = max(last, int(item.offset))
        if last >= start:
            reached[partition] = last + 1
    return Fetched(records, reached)
