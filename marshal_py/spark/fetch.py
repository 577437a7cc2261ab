"""What a Spark task does: read exactly one planned offset range with kafka-python.

Runs in executor processes. It holds no state between calls and needs nothing from the
driver but the task and the connection settings; records come out as Arrow record batches in
the source's schema (much cheaper than Python tuples).

A task also notes, as ranges, the offsets of its ranges that its consumer passed without a
record (transaction markers, aborted records under read_committed, compaction, retention):
:func:`read_task` hands them to ``on_gaps`` once the task has read everything (share mode
writes them as ``gap`` acknowledgements: :mod:`marshal_py.spark.gaps`).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from marshal_py.client.batch_member import PlannedRange
from marshal_py.errors import BrokerUnavailableError, MarshalError
from marshal_py.log.kafka import KafkaLogConfig, quick_metadata
from marshal_py.protocol.ranges import OffsetRange
from marshal_py.spark.planning import TP, ReadTask

log = logging.getLogger(__name__)

#: Records per Arrow batch a task yields.
ARROW_BATCH_RECORDS = 10_000


class DataLossError(MarshalError):
    """Planned records were deleted (retention) before the task read them."""


#: Offsets of a task's ranges that hold no record, per partition: ascending, disjoint
#: ranges (first, last), inclusive.
Gaps = Mapping[TP, list[OffsetRange]]


class _Span:
    """The ranges of one partition in a task: read from the first start to the last end,
    handing out only offsets inside a range, each with its range's delivery count, and
    noting the offsets inside a range that were passed without a record."""

    def __init__(self, ranges: list[PlannedRange]) -> None:
        self.ranges = sorted(ranges, key=lambda r: r.start)
        self.topic = self.ranges[0].topic
        self.partition = self.ranges[0].partition
        self.start = self.ranges[0].start
        self.end = max(r.end for r in self.ranges)
        self._starts = [r.start for r in self.ranges]
        #: offsets of the ranges passed without a record, as inclusive ranges, ascending
        self.gaps: list[OffsetRange] = []
        #: every offset below this was handed out or noted as a gap (or is outside the ranges)
        self.accounted = self.start

    def passed(self, end: int) -> None:
        """The consumer is past ``end - 1``: offsets from :attr:`accounted` up to ``end``
        that came without a record are gaps (those inside a range)."""
        first, end = self.accounted, min(end, self.end)
        if end <= first:
            return
        self.accounted = end
        i = max(0, bisect.bisect_right(self._starts, first) - 1)
        for r in self.ranges[i:]:
            if r.start >= end:
                break
            a, b = max(first, r.start), min(end, r.end)
            if a >= b:
                continue
            if self.gaps and self.gaps[-1][1] == a - 1:
                self.gaps[-1] = (self.gaps[-1][0], b - 1)
            else:
                self.gaps.append((a, b - 1))

    def delivery_count(self, offset: int) -> int | None:
        """The delivery count of ``offset``, or None when no range holds it."""
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and offset < self.ranges[i].end:
            return self.ranges[i].delivery_count
        return None

    def describe(self) -> str:
        return f"{self.topic}/{self.partition} offsets {self.start}..{self.end - 1}"


def read_task(task: ReadTask, kafka: KafkaLogConfig, schema: pa.Schema, *,
              fail_on_data_loss: bool = True, timeout_s: float = 60.0,
              on_gaps: Callable[[Gaps], object] | None = None) -> Iterator[pa.RecordBatch]:
    """Yield the records of a task's ranges as Arrow batches (one consumer for all of them).

    Offsets Kafka never returns (compaction, transaction markers, aborted records under
    read_committed) are absent from the batches; once everything is read, ``on_gaps`` gets
    them as ranges per partition (only partitions that have some; not called when none
    has). Records deleted by retention before the task ran: :class:`DataLossError`, or a
    warning, the rest of the range, and the deleted offsets among the gaps when
    ``fail_on_data_loss`` is false. No progress for ``timeout_s``:
    :class:`BrokerUnavailableError` naming the ranges still unread.
    """
    by_tp: dict[TopicPartition, list[PlannedRange]] = {}
    for r in task.ranges:
        by_tp.setdefault(TopicPartition(r.topic, r.partition), []).append(r)
    spans = {tp: _Span(ranges) for tp, ranges in by_tp.items()}
    if not spans:
        return
    consumer = quick_metadata(KafkaConsumer(
        group_id=None, enable_auto_commit=False, auto_offset_reset="earliest",
        fetch_max_wait_ms=100, max_partition_fetch_bytes=4 * 1024 * 1024,
        **kafka.client_config(KafkaConsumer)))
    try:
        consumer.assign(list(spans))
        try:
            beginnings = consumer.beginning_offsets(list(spans))
        except KafkaError as exc:
            raise BrokerUnavailableError(
                f"cannot read {', '.join(s.describe() for s in spans.values())} from "
                f"{kafka.bootstrap_servers}: {exc}") from exc
        positions = {}
        for tp, span in spans.items():
            start = span.start
            beginning = int(beginnings[tp])
            if beginning > start:
                lost = (f"{span.topic}/{span.partition} offsets "
                        f"{start}..{min(beginning, span.end) - 1}")
                if fail_on_data_loss:
                    raise DataLossError(
                        f"{lost} were deleted by retention before this batch read them; set "
                        "the option failOnDataLoss=false to skip such records")
                log.warning("%s were deleted by retention before they were read; skipped",
                            lost)
                start = beginning
            positions[tp] = start
            if start < span.end:
                consumer.seek(tp, start)
        yield from _batches(consumer, spans, positions, schema, timeout_s)
    finally:
        consumer.close()
    gaps = {(s.topic, s.partition): s.gaps for s in spans.values() if s.gaps}
    if gaps and on_gaps is not None:
        on_gaps(gaps)


def _batches(consumer: KafkaConsumer, spans: dict[TopicPartition, _Span],
             positions: dict[TopicPartition, int], schema: pa.Schema, timeout_s: float
             ) -> Iterator[pa.RecordBatch]:
    columns = _Columns()
    open_ = {tp for tp, span in spans.items() if positions[tp] < span.end}
    done = [tp for tp in spans if tp not in open_]
    for tp in done:
        spans[tp].passed(spans[tp].end)  # retention deleted all of it
    if done:
        consumer.pause(*done)
    deadline = time.monotonic() + timeout_s
    while open_:
        try:
            polled = consumer.poll(timeout_ms=500, max_records=ARROW_BATCH_RECORDS)
        except KafkaError as exc:
            raise BrokerUnavailableError(f"reading records failed: {exc}") from exc
        if polled:
            deadline = time.monotonic() + timeout_s
        for tp, records in polled.items():
            span = spans.get(tp)
            if span is None or tp not in open_:
                continue
            for record in records:
                offset = record.offset
                if offset >= span.end:
                    break
                if offset > span.accounted:
                    span.passed(offset)
                if offset == span.accounted:
                    span.accounted = offset + 1
                count = span.delivery_count(offset)
                if count is not None:
                    columns.add(record, count)
        for tp in list(open_):
            try:
                position = consumer.position(tp)
            except KafkaError as exc:
                raise BrokerUnavailableError(f"reading records failed: {exc}") from exc
            if position is None:
                continue
            # Past every record returned: what it passed without one holds none.
            spans[tp].passed(position)
            if position >= spans[tp].end:
                open_.discard(tp)
                consumer.pause(tp)
        if len(columns) >= ARROW_BATCH_RECORDS:
            yield columns.batch(schema)
            columns = _Columns()
        if open_ and time.monotonic() > deadline:
            unread = ", ".join(spans[tp].describe() for tp in sorted(open_))
            raise BrokerUnavailableError(
                f"no records for {timeout_s:g} s while reading {unread}; is the broker "
                "reachable? (option fetch.timeout)")
    if len(columns):
        yield columns.batch(schema)


class _Columns:
    """Arrow columns being filled for one batch."""

    def __init__(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.topics: list[str] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.headers: list[list[dict[str, Any]]] = []
        self.counts: list[int] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, record: Any, delivery_count: int) -> None:
        self.keys.append(record.key)
        self.values.append(record.value)
        self.topics.append(record.topic)
        self.partitions.append(record.partition)
        self.offsets.append(record.offset)
        self.timestamps.append(record.timestamp * 1000)
        self.headers.append([{"key": k, "value": v} for k, v in record.headers or ()])
        self.counts.append(delivery_count)

    def batch(self, schema: pa.Schema) -> pa.RecordBatch:
        types = {f.name: f.type for f in schema}
        arrays = {
            "key": pa.array(self.keys, type=types["key"]),
            "value": pa.array(self.values, type=types["value"]),
            "topic": pa.array(self.topics, type=types["topic"]),
            "partition": pa.array(self.partitions, type=types["partition"]),
            "offset": pa.array(self.offsets, type=types["offset"]),
            "timestamp": pa.array(self.timestamps, type=types["timestamp"]),
            "headers": pa.array(self.headers, type=types["headers"]),
            "delivery_count": pa.array(self.counts, type=types["delivery_count"]),
        }
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)
