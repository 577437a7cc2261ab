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
from itertools import repeat
from operator import attrgetter, is_not, itemgetter
from typing import Any

import numpy as np
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
                    else _binary(self.keys, types["key"])),
            "value": _binary(self.values, types["value"]),
            "topic": self._constant_text(types["topic"]),
            "partition": self._constant(1, types["partition"]),
            "offset": _fixed(np.array(self.offsets, dtype=np.int64), types["offset"]),
            "timestamp": _timestamps(self.timestamps, types["timestamp"]),
            "headers": _headers(self.headers, n, types["headers"]),
            "delivery_count": self._constant(2, types["delivery_count"]),
        }
        self.clear()
        return pa.RecordBatch.from_arrays([arrays[f.name] for f in schema], schema=schema)

    def _counts(self) -> np.ndarray:
        return np.fromiter((piece[3] for piece in self.slices), dtype=np.int64,
                           count=len(self.slices))

    def _constant(self, field: int, kind: pa.DataType) -> pa.Array:
        """A number column that is one value per kept slice (partition, delivery count)."""
        values = np.fromiter((piece[field] for piece in self.slices), dtype=np.int64,
                             count=len(self.slices))
        return _fixed(np.repeat(values, self._counts()).astype(f"int{kind.bit_width}"), kind)

    def _constant_text(self, kind: pa.DataType) -> pa.Array:
        """The topic column: one topic per kept slice."""
        counts = self._counts()
        names = [str(piece[0]).encode() for piece in self.slices]
        lengths = np.repeat(np.fromiter(map(len, names), dtype=np.int64, count=len(names)),
                            counts)
        data = b"".join(name * int(count) for name, count in zip(names, counts, strict=True))
        return _from_lengths(kind, lengths, data, None, 0)


# pyarrow converts Python objects (pa.array, pa.scalar) only after asking whether they are
# pandas objects, which imports pandas: a second or more on the first batch of every new
# Python worker (Spark starts them on first use and stops them after a minute idle). The
# columns are therefore made from buffers, which never asks.

def _fixed(values: np.ndarray, kind: pa.DataType) -> pa.Array:
    """A fixed-width column (ints, timestamps) of ``values`` (already of its width)."""
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


_PER_MS = {"s": None, "ms": 1, "us": 1_000, "ns": 1_000_000}


def _timestamps(ms: list[int], kind: pa.DataType) -> pa.Array:
    """Milliseconds since the epoch as a column of the schema's timestamp type."""
    values = np.array(ms, dtype=np.int64)
    factor = _PER_MS[kind.unit]
    values = values // 1_000 if factor is None else values * factor
    return _fixed(values, kind)


def _binary(values: list[Any], kind: pa.DataType) -> pa.Array:
    """A binary (or string: the same layout) column; None is null."""
    n = len(values)
    nulls = values.count(None)
    valid = None
    if nulls:
        mask = np.fromiter(map(is_not, values, repeat(None)), dtype=bool, count=n)
        valid = pa.py_buffer(np.packbits(mask, bitorder="little"))
        values = [b"" if v is None else v for v in values]
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=n)
    return _from_lengths(kind, lengths, b"".join(values), valid, nulls)


def _from_lengths(kind: pa.DataType, lengths: np.ndarray, data: bytes, valid: Any,
                  nulls: int) -> pa.Array:
    width = np.int64 if kind in (pa.large_binary(), pa.large_string()) else np.int32
    ends = np.zeros(len(lengths) + 1, dtype=width)
    np.cumsum(lengths, out=ends[1:])
    return pa.Array.from_buffers(kind, len(lengths),
                                 [valid, pa.py_buffer(ends), pa.py_buffer(data)],
                                 null_count=nulls)


def _headers(headers: list[Any], n: int, kind: pa.DataType) -> pa.Array:
    """The headers column: a list of {key, value} per record; every record without headers
    (the common case) costs nothing."""
    entry = kind.value_type
    if headers.count(None) + headers.count([]) == n:
        counts = np.zeros(n, dtype=np.int64)
        pairs: list[Any] = []
    else:
        counts = np.fromiter((len(h) if h else 0 for h in headers), dtype=np.int64, count=n)
        pairs = [pair for h in headers if h for pair in h]
    keys = _binary([k.encode() if isinstance(k, str) else k for k, _ in pairs],
                   entry.field("key").type)
    values = _binary([v for _, v in pairs], entry.field("value").type)
    items = pa.StructArray.from_arrays([keys, values], fields=list(entry))
    ends = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(counts, out=ends[1:])
    return pa.ListArray.from_arrays(_fixed(ends, pa.int32()), items, type=kind)
