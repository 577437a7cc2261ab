"""What a Spark task does: read exactly one planned offset range with kafka-python.

Runs in executor processes. It holds no state between calls and needs nothing from the
driver but the task and the connection settings; records come out as Arrow record batches in
the source's schema (much cheaper than Python tuples).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from marshal_py.errors import BrokerUnavailableError, MarshalError
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.spark.planning import ReadTask

log = logging.getLogger(__name__)

#: Records per Arrow batch a task yields.
ARROW_BATCH_RECORDS = 10_000


class DataLossError(MarshalError):
    """Planned records were deleted (retention) before the task read them."""


def read_task(task: ReadTask, kafka: KafkaLogConfig, schema: pa.Schema, *,
              fail_on_data_loss: bool = True, timeout_s: float = 60.0
              ) -> Iterator[pa.RecordBatch]:
    """Yield the records ``[task.start, task.end)`` of one partition as Arrow batches.

    Offsets Kafka never returns (compaction, transaction markers) are simply absent. Records
    deleted by retention before the task ran: :class:`DataLossError`, or a warning and the
    rest of the range when ``fail_on_data_loss`` is false. No progress for ``timeout_s``:
    :class:`BrokerUnavailableError` naming the range.
    """
    tp = TopicPartition(task.topic, task.partition)
    consumer = KafkaConsumer(group_id=None, enable_auto_commit=False,
                             auto_offset_reset="earliest", fetch_max_wait_ms=100,
                             max_partition_fetch_bytes=4 * 1024 * 1024,
                             **kafka.client_config(KafkaConsumer))
    try:
        consumer.assign([tp])
        start = task.start
        try:
            beginning = int(consumer.beginning_offsets([tp])[tp])
        except KafkaError as exc:
            raise BrokerUnavailableError(
                f"cannot read {task.topic}/{task.partition} from {kafka.bootstrap_servers}: "
                f"{exc}") from exc
        if beginning > start:
            lost = f"{task.topic}/{task.partition} offsets {start}..{min(beginning, task.end) - 1}"
            if fail_on_data_loss:
                raise DataLossError(
                    f"{lost} were deleted by retention before this batch read them; set the "
                    "option failOnDataLoss=false to skip such records")
            log.warning("%s were deleted by retention before they were read; skipped", lost)
            start = beginning
        if start >= task.end:
            return
        consumer.seek(tp, start)
        yield from _batches(consumer, tp, task, schema, timeout_s)
    finally:
        consumer.close()


def _batches(consumer: KafkaConsumer, tp: TopicPartition, task: ReadTask, schema: pa.Schema,
             timeout_s: float) -> Iterator[pa.RecordBatch]:
    columns = _Columns(task)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            polled = consumer.poll(timeout_ms=500, max_records=ARROW_BATCH_RECORDS)
            position = consumer.position(tp)
        except KafkaError as exc:
            raise BrokerUnavailableError(
                f"reading {task.topic}/{task.partition} failed: {exc}") from exc
        records = polled.get(tp, [])
        if records:
            deadline = time.monotonic() + timeout_s
        for record in records:
            if record.offset >= task.end:
                break
            if record.offset >= task.start:
                columns.add(record)
        if len(columns) >= ARROW_BATCH_RECORDS:
            yield columns.batch(schema)
            columns = _Columns(task)
        if position is not None and position >= task.end:
            break
        if time.monotonic() > deadline:
            raise BrokerUnavailableError(
                f"no records of {task.topic}/{task.partition} for {timeout_s:g} s at offset "
                f"{position} (the batch planned {task.start}..{task.end - 1}); is the broker "
                "reachable? (option fetch.timeout)")
    if len(columns):
        yield columns.batch(schema)


class _Columns:
    """Arrow columns being filled for one batch."""

    def __init__(self, task: ReadTask) -> None:
        self.task = task
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.headers: list[list[dict[str, Any]]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, record: Any) -> None:
        self.keys.append(record.key)
        self.values.append(record.value)
        self.offsets.append(record.offset)
        self.timestamps.append(record.timestamp * 1000)
        self.headers.append([{"key": k, "value": v} for k, v in record.headers or ()])

    def batch(self, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.offsets)
        types = {f.name: f.type for f in schema}
        arrays = {
            "key": pa.array(self.keys, type=types["key"]),
            "value": pa.array(self.values, type=types["value"]),
            "topic": pa.array([self.task.topic] * n, type=types["topic"]),
            "partition": pa.array([self.task.partition] * n, type=types["partition"]),
            "offset": pa.array(self.offsets, type=types["offset"]),
            "timestamp": pa.array(self.timestamps, type=types["timestamp"]),
            "headers": pa.array(self.headers, type=types["headers"]),
            "delivery_count": pa.array([self.task.delivery_count] * n,
                                       type=types["delivery_count"]),
        }
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)
