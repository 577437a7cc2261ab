"""What a Spark task does: read exactly its planned offset ranges, as Arrow record batches.

Runs in executor processes. It holds no state between calls and needs nothing from the
driver but the task and the connection settings. Records are fetched by librdkafka
(confluent-kafka) when it is installed, else by kafka-python (option ``fetcher``), and come
out as Arrow record batches in the source's schema, their columns taken in bulk from what
each fetch returned (:mod:`marshal_py.spark.arrow`): with librdkafka no Python code runs per
record on the way from the broker's bytes to Arrow.

A task also notes, as ranges, the offsets of its ranges that its consumer passed without a
record (transaction markers, aborted records under read_committed, compaction, retention):
:func:`read_task` hands them to ``on_gaps`` once the task has read everything (share mode
writes them as ``gap`` acknowledgements: :mod:`marshal_py.spark.gaps`).
"""

from __future__ import annotations

import bisect
import gc
import importlib.util
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import compress
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from xxhash import xxh3_64_intdigest

from marshal_py.client.batch_base import PlannedRange
from marshal_py.client.fetchers import DataFetcher, KafkaPythonFetcher
from marshal_py.errors import BrokerUnavailableError, ConfigurationError, MarshalError
from marshal_py.log.kafka_config import KafkaLogConfig
from marshal_py.protocol.messages import KEY_SLOT_BITS, KEY_SLOTS
from marshal_py.protocol.ranges import OffsetRange
from marshal_py.spark.arrow import (
    ARROW_BATCH_RECORDS,
    KAFKA_PYTHON_SHAPE,
    ColumnBuffer,
    RecordShape,
    confluent_shape,
)
from marshal_py.spark.planning import TP, ReadTask

log = logging.getLogger(__name__)

SparkFetcher = Literal["auto", "confluent", "kafka-python"]

#: Records a task takes from librdkafka per call (their fields are then taken in bulk).
CONSUME_RECORDS = 5_000


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
        self._filters: dict[int, KeyFilter] = {}

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

    def keys_of(self, r: PlannedRange) -> KeyFilter:
        """The key filter of a key-shared range of this span (made once)."""
        found = self._filters.get(id(r))
        if found is None:
            found = self._filters[id(r)] = KeyFilter(r)
        return found

    def overlapping(self, first: int, end: int) -> list[PlannedRange]:
        """The ranges holding some offset in [first, end), in order."""
        i = max(0, bisect.bisect_right(self._starts, first) - 1)
        j = bisect.bisect_left(self._starts, end)
        return [r for r in self.ranges[i:j] if r.end > first]

    def describe(self) -> str:
        return f"{self.topic}/{self.partition} offsets {self.start}..{self.end - 1}"


class KeyFilter:
    """Key-shared mode: which records of a range its task keeps: those whose key falls in
    the range's key slots (and, for a slot in ``slot_starts``, from that offset on). The
    keys' slots are computed for a whole fetch at once (xxh3 in C, then numpy)."""

    def __init__(self, r: PlannedRange) -> None:
        assert r.slots is not None
        self.allowed = np.zeros(KEY_SLOTS, dtype=bool)
        for first, last in r.slots:
            self.allowed[first:last + 1] = True
        self.starts: np.ndarray | None = None
        if r.slot_starts:
            self.starts = np.zeros(KEY_SLOTS, dtype=np.int64)
            for slot, offset in r.slot_starts:
                self.starts[slot] = offset

    def keep(self, records: Sequence[Any], offsets: list[int], shape: RecordShape
             ) -> tuple[Sequence[Any], list[int]]:
        """The records (and their offsets) this range delivers."""
        keys = list(map(shape.key, records))
        if None in keys:  # records without a key hash like the empty key (PROTOCOL.md 9)
            keys = [b"" if k is None else k for k in keys]
        hashes = np.fromiter(map(xxh3_64_intdigest, keys), dtype=np.uint64, count=len(keys))
        slots = (hashes >> np.uint64(64 - KEY_SLOT_BITS)).astype(np.intp)
        wanted = self.allowed[slots]
        if self.starts is not None:
            wanted &= np.asarray(offsets, dtype=np.int64) >= self.starts[slots]
        if wanted.all():
            return records, offsets
        mask = wanted.tolist()
        return list(compress(records, mask)), list(compress(offsets, mask))


def read_task(task: ReadTask, kafka: KafkaLogConfig, schema: pa.Schema, *,
              fetcher: SparkFetcher = "auto", fail_on_data_loss: bool = True,
              timeout_s: float = 60.0, on_gaps: Callable[[Gaps], object] | None = None
              ) -> Iterator[pa.RecordBatch]:
    """Yield the records of a task's ranges as Arrow batches (one consumer for all of them).

    ``fetcher``: ``confluent`` (librdkafka), ``kafka-python``, or ``auto``: librdkafka when
    confluent-kafka is installed here and the ``kafka.*`` settings have librdkafka
    equivalents, else kafka-python. Offsets Kafka never returns (compaction, transaction
    markers, aborted records under read_committed) are absent from the batches; once
    everything is read, ``on_gaps`` gets them as ranges per partition (only partitions that
    have some; not called when none has). Records deleted by retention before the task ran:
    :class:`DataLossError`, or a warning, the rest of the range, and the deleted offsets
    among the gaps when ``fail_on_data_loss`` is false. No progress for ``timeout_s``:
    :class:`BrokerUnavailableError` naming the ranges still unread.
    """
    by_tp: dict[TP, list[PlannedRange]] = {}
    for r in task.ranges:
        by_tp.setdefault((r.topic, r.partition), []).append(r)
    spans = {tp: _Span(ranges) for tp, ranges in by_tp.items()}
    if not spans:
        return
    reader, shape = open_task_fetcher(fetcher, kafka, spans)
    try:
        positions = _starts(reader, spans, fail_on_data_loss)
        yield from _batches(reader, shape, spans, positions, schema, timeout_s)
    finally:
        reader.close()
    gaps = {(s.topic, s.partition): s.gaps for s in spans.values() if s.gaps}
    if gaps and on_gaps is not None:
        on_gaps(gaps)


def confluent_problem(kafka: KafkaLogConfig) -> str | None:
    """Why librdkafka cannot read with these settings here (None: it can): confluent-kafka
    missing or too old, or a ``kafka.*`` setting without a librdkafka equivalent."""
    if importlib.util.find_spec("confluent_kafka") is None:
        return "confluent-kafka is not installed (pip install 'marshal_py[librdkafka]')"
    from marshal_py.client.confluent_fetcher import confluent_module, librdkafka_config

    try:
        confluent_module()
    except ConfigurationError as exc:
        return str(exc)
    for key, value in kafka.kafka_config.items():
        try:
            librdkafka_config(KafkaLogConfig(bootstrap_servers=kafka.bootstrap_servers,
                                             kafka_config={key: value}))
        except (ConfigurationError, AttributeError, TypeError, ValueError):
            return f"the setting kafka.{key} has no librdkafka equivalent"
    return None


def open_task_fetcher(kind: SparkFetcher, kafka: KafkaLogConfig, spans: Mapping[TP, _Span]
                      ) -> tuple[DataFetcher, RecordShape]:
    """A connected fetcher of ``kind`` for a task reading ``spans``, and the shape of its
    records."""
    if kind == "auto":
        why = confluent_problem(kafka)
        if why is not None:
            log.debug("reading with kafka-python: %s", why)
        kind = "kafka-python" if why else "confluent"
    if kind == "kafka-python":
        return KafkaPythonFetcher(kafka), KAFKA_PYTHON_SHAPE
    from marshal_py.client.confluent_fetcher import ConfluentFetcher, confluent_module

    # librdkafka fetches ahead until a partition has queued.min.messages: never much more
    # than the task reads (what it fetches past a range's end is thrown away).
    ahead = max(1_000, min(100_000, max(s.end - s.start for s in spans.values())))
    fetcher = ConfluentFetcher(kafka, messages=True, overrides={"queued.min.messages": ahead})
    return fetcher, confluent_shape(confluent_module().Message)


def _starts(reader: DataFetcher, spans: Mapping[TP, _Span], fail_on_data_loss: bool
            ) -> dict[TP, int]:
    """Where each partition's reading starts: its first planned offset, or the first one
    retention left (DataLossError unless ``fail_on_data_loss`` is false)."""
    beginnings = reader.beginning_offsets(spans)
    positions = {}
    for tp, span in spans.items():
        start = span.start
        beginning = beginnings[tp]
        if beginning > start:
            lost = f"{span.topic}/{span.partition} offsets {start}..{min(beginning, span.end) - 1}"
            if fail_on_data_loss:
                raise DataLossError(
                    f"{lost} were deleted by retention before this batch read them; set "
                    "the option failOnDataLoss=false to skip such records")
            log.warning("%s were deleted by retention before they were read; skipped", lost)
            start = beginning
        positions[tp] = start
    return positions


def _batches(reader: DataFetcher, shape: RecordShape, spans: dict[TP, _Span],
             positions: dict[TP, int], schema: pa.Schema, timeout_s: float
             ) -> Iterator[pa.RecordBatch]:
    columns = ColumnBuffer(shape)
    open_ = {tp for tp, span in spans.items() if positions[tp] < span.end}
    for tp in spans.keys() - open_:
        spans[tp].passed(spans[tp].end)  # retention deleted all of it
    if not open_:
        return
    reader.assign(open_, {tp: positions[tp] for tp in open_})
    deadline = time.monotonic() + timeout_s
    # The records of a fetch live only until their columns are taken: the collector would
    # only walk them (and promote them, bringing full collections) while they live.
    collecting = gc.isenabled()
    gc.disable()
    try:
        while open_:
            polled = reader.poll(0.5, CONSUME_RECORDS)
            if polled:
                deadline = time.monotonic() + timeout_s
            for batch in polled:
                tp = (batch.topic, batch.partition)
                if tp in open_:
                    span = spans[tp]
                    if batch.records:
                        _keep(span, batch.records, shape, columns)
                    span.passed(batch.next_position)
                    if span.accounted >= span.end:
                        open_.discard(tp)
                        if open_:
                            reader.assign(open_)
            if len(columns) >= ARROW_BATCH_RECORDS:
                yield columns.batch(schema)
            if open_ and time.monotonic() > deadline:
                unread = ", ".join(spans[tp].describe() for tp in sorted(open_))
                raise BrokerUnavailableError(
                    f"no records for {timeout_s:g} s while reading {unread}; is the broker "
                    "reachable? (option fetch.timeout)")
    finally:
        if collecting:
            gc.enable()
    if len(columns):
        yield columns.batch(schema)


def _keep(span: _Span, records: Sequence[Any], shape: RecordShape, columns: ColumnBuffer
          ) -> None:
    """Take the records of one fetch of ``span``'s partition that fall inside its ranges
    (with each range's delivery count); note the offsets they skip as gaps."""
    offsets: list[int] = list(map(shape.offset, records))
    low = bisect.bisect_left(offsets, span.accounted)  # a repeat of what was read: drop
    high = bisect.bisect_left(offsets, span.end)  # past the last range: fetched ahead
    if low or high < len(offsets):
        records, offsets = records[low:high], offsets[low:high]
    if not offsets:
        return
    if offsets[0] != span.accounted or offsets[-1] - offsets[0] + 1 != len(offsets):
        for offset in offsets:  # holes (compaction, aborted records): rare, offset by offset
            if offset > span.accounted:
                span.passed(offset)
            span.accounted = offset + 1
    else:
        span.accounted = offsets[-1] + 1
    first, last = offsets[0], offsets[-1]
    for r in span.overlapping(first, last + 1):
        i = bisect.bisect_left(offsets, r.start) if r.start > first else 0
        j = bisect.bisect_left(offsets, r.end) if r.end <= last else len(offsets)
        if i < j:
            whole = i == 0 and j == len(offsets)
            kept, at = (records, offsets) if whole else (records[i:j], offsets[i:j])
            if r.slots is not None:
                kept, at = span.keys_of(r).keep(kept, at, shape)
            columns.add(span.topic, span.partition, kept, at, r.delivery_count)
