"""The coordination log contract that KafkaLog and MemoryLog both fulfil."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from marshal_py.world.records import CoordinationRecord


@runtime_checkable
class CoordinationLog(Protocol):
    """An append-only, partitioned log that stamps each record with the log's own clock.

    Positions are per partition and grow by at least one per record; ``timestamp_ms`` is the
    log's append time (the broker's clock for Kafka), never the writer's.
    """

    @property
    def topic(self) -> str:
        """Name of the coordination topic."""
        ...

    def partition_count(self) -> int:
        """The placement count: how many partitions records are placed on, fixed when the
        coordination topic was created (its layout, PROTOCOL.md section 3). Positions are
        asked and records appended only on partitions below it."""
        ...

    @property
    def metadata_partition_count(self) -> int:
        """How many partitions the topic has now: at least :meth:`partition_count`, more if
        partitions were added (those stay unused)."""
        ...

    def append(self, partition: int, value: bytes) -> CoordinationRecord:
        """Write one record durably and return it as stored (position and log timestamp)."""
        ...

    def append_all(self, items: Sequence[tuple[int, bytes]]) -> list[CoordinationRecord]:
        """Write several records (partition, value), all sent before any is awaited, and
        return them as stored, in the order given. Raises if any was not written."""
        ...

    def start_position(self, partition: int) -> int:
        """The oldest position still retained."""
        ...

    def end_position(self, partition: int) -> int:
        """The position the next appended record will get."""
        ...

    def position_for_time(self, partition: int, timestamp_ms: int) -> int:
        """The first position whose timestamp is >= ``timestamp_ms`` (the end if none)."""
        ...

    def fetch(self, starts: Mapping[int, int], timeout_s: float) -> list[CoordinationRecord]:
        """Records at or after ``starts[partition]`` for each partition asked, in log order per
        partition. Waits up to ``timeout_s`` for at least one; returns [] if none arrived."""
        ...

    def read_position(self, partition: int) -> int | None:
        """The position the reader of ``partition`` has read past, counting positions that
        hold no record (transaction markers); None when it cannot say. Positions below it
        that :meth:`fetch` did not return hold no record."""
        ...

    def verify_identity(self) -> None:
        """Raise :class:`~marshal_py.errors.CoordinationLogLostError` when the topic is no
        longer the one this log opened (deleted, or deleted and recreated under the same
        name). May check only from time to time and stays silent while it cannot tell."""
        ...

    def close(self) -> None:
        """Release connections. Safe to call twice."""
        ...
