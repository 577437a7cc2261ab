"""MemoryLog: an in-process coordination log for deterministic simulation tests."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence

from marshal_py.errors import RecordTooLargeError
from marshal_py.log.base import Fetched, Keep
from marshal_py.protocol.index import Declared, IndexRecord, declared_key, encode_entry
from marshal_py.protocol.records import CoordinationRecord

#: Kafka's default ``max.message.bytes`` (1 MiB and the batch overhead), less that overhead.
DEFAULT_MAX_VALUE_BYTES = 1_048_576 - 512


class VirtualClock:
    """A millisecond clock that moves only when told to."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self.now_ms = start_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> int:
        """Move forward by ``ms`` (>= 0) and return the new time."""
        if ms < 0:
            raise ValueError("a clock does not go backwards")
        self.now_ms += ms
        return self.now_ms


class MemoryLog:
    """The :class:`~marshal_py.log.base.CoordinationLog` contract held in memory.

    ``clock`` stamps appended records (a :class:`VirtualClock` in simulations); timestamps
    never go backwards within a partition, like Kafka's LogAppendTime. ``partitions`` is its
    layout, as a KafkaLog's: :meth:`add_partitions` grows the topic as an administrator
    could, and records are still placed on the first ``partitions`` (PROTOCOL.md
    section 3). It has an index (a list of records, never compacted: readers take the
    newest record of a key); ``declared`` writes a Declared record there, as a KafkaLog
    that creates its topic does (PROTOCOL.md section 6). ``max_value_bytes``: the largest
    value :meth:`append` takes, as a topic's ``max.message.bytes``.
    """

    def __init__(
        self,
        partitions: int = 4,
        clock: Callable[[], int] | None = None,
        topic: str = "__marshal",
        *,
        declared: bool = False,
        max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES,
    ) -> None:
        if partitions < 1:
            raise ValueError("partitions must be >= 1")
        self._topic = topic
        self._clock = clock or (lambda: int(time.time() * 1000))
        self._records: list[list[CoordinationRecord]] = [[] for _ in range(partitions)]
        self._start: list[int] = [0] * partitions
        self._end: list[int] = [0] * partitions
        self._changed = threading.Condition()
        self._closed = False
        self._layout = partitions
        self._max_value_bytes = max_value_bytes
        self._index: list[IndexRecord] = []
        if declared:
            self.append_index(declared_key("memory"), encode_entry(Declared(topic, "")))

    @property
    def topic(self) -> str:
        return self._topic

    def partition_count(self) -> int:
        """The placement count, fixed when the log was made (its layout)."""
        return self._layout

    @property
    def metadata_partition_count(self) -> int:
        """How many partitions the topic has now (:meth:`add_partitions` adds some)."""
        return len(self._records)

    def add_partitions(self, total: int) -> None:
        """Grow the topic to ``total`` partitions (as ``kafka-topics --alter``); the layout
        stays, so nothing is placed on the new ones."""
        with self._changed:
            if total < len(self._records):
                raise ValueError("Kafka cannot remove partitions")
            for _ in range(total - len(self._records)):
                self._records.append([])
                self._start.append(0)
                self._end.append(0)

    def _check(self, partition: int) -> None:
        if not 0 <= partition < self._layout:
            raise ValueError(f"partition {partition} is outside the layout of {self._topic} "
                             f"(0..{self._layout - 1})")

    @property
    def max_value_bytes(self) -> int:
        return self._max_value_bytes

    @property
    def index_topic_id(self) -> str:
        """A MemoryLog has no topic id."""
        return ""

    def read_index(self) -> list[IndexRecord]:
        with self._changed:
            return list(self._index)

    def append_index(self, key: bytes, value: bytes) -> None:
        with self._changed:
            self._index.append((len(self._index), key, value))

    def append(self, partition: int, value: bytes) -> CoordinationRecord:
        self._check(partition)
        if len(value) > self._max_value_bytes:
            raise RecordTooLargeError(
                f"a coordination record of {len(value):,} bytes is larger than "
                f"{self._topic} takes ({self._max_value_bytes:,})")
        with self._changed:
            records = self._records[partition]
            timestamp = self._clock()
            if records and records[-1].timestamp_ms > timestamp:
                timestamp = records[-1].timestamp_ms
            record = CoordinationRecord(partition, self._end[partition], timestamp, value)
            records.append(record)
            self._end[partition] += 1
            self._changed.notify_all()
            return record

    def append_all(self, items: Sequence[tuple[int, bytes]]) -> list[CoordinationRecord]:
        return [self.append(partition, value) for partition, value in items]

    def start_position(self, partition: int) -> int:
        self._check(partition)
        return self._start[partition]

    def end_position(self, partition: int) -> int:
        self._check(partition)
        return self._end[partition]

    def position_for_time(self, partition: int, timestamp_ms: int) -> int:
        self._check(partition)
        with self._changed:
            for record in self._records[partition]:
                if record.timestamp_ms >= timestamp_ms:
                    return record.position
            return self._end[partition]

    def _available(self, starts: Mapping[int, int]) -> list[CoordinationRecord]:
        found: list[CoordinationRecord] = []
        for partition, start in sorted(starts.items()):
            self._check(partition)
            first = max(start, self._start[partition]) - self._start[partition]
            found.extend(self._records[partition][first:])
        return found

    def verify_identity(self) -> None:
        """A MemoryLog is never deleted or recreated under its readers."""

    def read_position(self, partition: int) -> int | None:
        """Every position of a MemoryLog holds a record: there is never a gap to skip."""
        return None

    def fetch(self, starts: Mapping[int, int], timeout_s: float) -> list[CoordinationRecord]:
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = self._available(starts)
                remaining = deadline - time.monotonic()
                if found or remaining <= 0 or self._closed:
                    return found
                self._changed.wait(remaining)

    def fetch_matching(self, starts: Mapping[int, int], timeout_s: float,
                       keep: Keep | None) -> Fetched:
        """:meth:`fetch` (a subclass's too), filtered."""
        records = self.fetch(starts, timeout_s)
        reached: dict[int, int] = {}
        for record in records:
            reached[record.partition] = record.position + 1
        if keep is not None:
            records = [r for r in records if keep(r.value)]
        return Fetched(records, reached)

    def delete_before(self, partition: int, position: int) -> None:
        """Drop records below ``position`` (what Kafka's retention does to old segments)."""
        self._check(partition)
        with self._changed:
            drop = max(0, min(position, self._end[partition]) - self._start[partition])
            del self._records[partition][:drop]
            self._start[partition] += drop

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()
