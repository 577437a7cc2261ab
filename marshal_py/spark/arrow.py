"""Arrow columns of the ``marshal`` source's rows, built in bulk from what a fetch returns.

A task's fetcher hands over *runs*: records of one partition, in offset order, as the Kafka
client made them (confluent-kafka ``Message`` s or kafka-python ``ConsumerRecord`` s). Each
column of a run is taken in one C-level pass (``list(map(getter, run))``): no Python code runs
per record. Which records of a run a task keeps (those inside its planned ranges) is found
by binary search on the run's offsets, and a run's delivery count is one number per range, so
keeping records costs per range, not per record. Only headers, when a record has some, are
converted one by one (a record without headers costs nothing).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import attrgetter, itemgetter
from typing import Any

import pyarrow as pa

#: Records per Arrow batch a task yields.
ARROW_BATCH_RECORDS = 10_000

Getter = Callable[[Any], Any]


@dataclass(frozen=True)
class RecordShape:
    """How to take the fields of one Kafka client's records: each getter applies to a
    record; ``timestamp`` gives milliseconds (or a pair whose ``timestamp_item`` is), and
    ``headers`` a list of (str, bytes) pairs, or None or [] when there are none."""

    offset: Getter
    key: Getter
    value: Getter
    timestamp: Getter
    headers: Getter
    timestamp_item: int | None = None


#: kafka-python's ``ConsumerRecord``.
KAFKA_PYTHON_SHAPE = RecordShape(
    offset=attrgetter("offset"), key=attrgetter("key"), value=attrgetter("value"),
    timestamp=attrgetter("timestamp"), headers=attrgetter("headers"))


def confluent_shape(message_type: Any) -> RecordShape:
    """confluent-kafka's ``Message`` (its unbound methods: C calls); ``timestamp()`` is a
    (type, milliseconds) pair."""
    return RecordShape(offset=message_type.offset, key=message_type.key,
                       value=message_type.value, timestamp=message_type.timestamp,
                       headers=message_type.headers, timestamp_item=1)


class ColumnBuffer:
    """The rows of one Arrow batch being gathered, column by column."""

    def __init__(self, shape: RecordShape) -> None:
        self.shape = shape
        self._ms = (None if shape.timestamp_item is None
                    else itemgetter(shape.timestamp_item))
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.timestamps: list[int] = []
        self.headers: list[Any] = []
        self.offsets: list[int] = []
        #: (topic, partition, delivery count, rows): one entry per kept slice of a run
        self.slices: list[tuple[str, int, int, int]] = []
        self.rows = 0

    def __len__(self) -> int:
        return self.rows

    def add(self, topic: str, partition: int, records: Sequence[Any], offsets: list[int],
            delivery_count: int) -> None:
        """Keep ``records`` (of one partition, their ``offsets`` already taken)."""
        if not records:
            return
        shape = self.shape
        self.keys.extend(map(shape.key, records))
        self.values.extend(map(shape.value, records))
        stamps = map(shape.timestamp, records)
        self.timestamps.extend(stamps if self._ms is None else map(self._ms, stamps))
        self.headers.extend(map(shape.headers, records))
        self.offsets.extend(offsets)
        self.slices.append((topic, partition, delivery_count, len(records)))
        self.rows += len(records)

    def batch(self, schema: pa.Schema) -> pa.RecordBatch:
        """The gathered rows as one record batch of ``schema`` (the source's); then empty."""
        types = {f.name: f.type for f in schema}
        n = self.rows
        arrays = {
            "key": (pa.nulls(n, types["key"]) if self.keys.count(None) == n
                    else pa.array(self.keys, type=types["key"])),
            "value": pa.array(self.values, type=types["value"]),
            "topic": self._constant(0, types["topic"]),
            "partition": self._constant(1, types["partition"]),
            "offset": pa.array(self.offsets, type=types["offset"]),
            "timestamp": pa.array(self.timestamps, pa.timestamp("ms", tz="UTC")).cast(
                types["timestamp"]),
            "headers": _headers(self.headers, n, types["headers"]),
            "delivery_count": self._constant(2, types["delivery_count"]),
        }
        self.clear()
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)

    def _constant(self, field: int, kind: pa.DataType) -> pa.Array:
        """A column that is one value per kept slice (topic, partition, delivery count)."""
        pieces = [pa.repeat(pa.scalar(piece[field], kind), piece[3]) for piece in self.slices]
        return pieces[0] if len(pieces) == 1 else pa.concat_arrays(pieces)


def _headers(headers: list[Any], n: int, kind: pa.DataType) -> pa.Array:
    """The headers column: a list of {key, value} per record; every record without headers
    (the common case) costs nothing."""
    if headers.count(None) + headers.count([]) == n:
        return pa.ListArray.from_arrays(
            pa.array([0] * (n + 1), pa.int32()),
            pa.array([], type=kind.value_type), type=kind)
    return pa.array([[{"key": k, "value": v} for k, v in h] if h else [] for h in headers],
                    type=kind)
