"""Types shared by the member engines: modes, and the clock and topic views they are given."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

Mode = Literal["alo", "amo"]
#: What an exclusive engine runs: a :data:`Mode`, or ``"eos"`` (exactly-once
#: consume-transform-produce: it works as for ``"alo"`` and takes partitions up through a
#: :class:`~marshal_py.client.fencing.Fencing`).
EngineMode = Literal["alo", "amo", "eos"]
OffsetReset = Literal["latest", "earliest"]
Balance = Literal["fair", "greedy"]


class PartitionSource(Protocol):
    """What the engine needs to know about the consumed topics."""

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` now, or None when the topic does not exist."""
        ...

    def offset_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(beginning, end) offsets of a partition."""
        ...

    def offset_bounds_of(self, partitions: list[tuple[str, int]]
                         ) -> dict[tuple[str, int], tuple[int, int]]:
        """(beginning, end) offsets of several partitions, asked together (one round trip
        per broker for each bound, not two per partition)."""
        ...

    def offset_bounds_ahead(self, partitions: list[tuple[str, int]]
                            ) -> Callable[[], dict[tuple[str, int], tuple[int, int]]]:
        """Ask :meth:`offset_bounds_of` now, answer later: the returned function waits for
        the answer (or raises what the asking raised). A claim asks while its records
        travel, so winning costs no round trip more."""
        ...

    def end_offsets_of(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """End offsets (last stable offsets under read_committed) of several partitions,
        asked together."""
        ...

    def group_committed_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        """The offset ``group_id`` committed to Kafka itself for a partition (what the
        original implementation falls back to; compatibility mode), None when none."""
        ...

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is >= ``timestamp_ms``, or None if none is."""
        ...

    def topic_id(self, topic: str) -> str | None:
        """The id of ``topic`` as last described (None: unknown, gone, or a broker without
        topic ids)."""
        ...

    def refresh(self, topics: tuple[str, ...]) -> None:
        """Describe ``topics`` now (partition counts and ids) instead of when the cached
        answer expires."""
        ...


class EngineClock(Protocol):
    """Milliseconds on (an estimate of) the broker's clock."""

    def now_ms(self) -> int:
        """The current time."""
        ...

    def observe(self, broker_ms: int, sent_ms: int, acked_ms: int) -> None:
        """A record appended between ``sent_ms`` and ``acked_ms`` got ``broker_ms``."""
        ...

    def monotonic_ms(self) -> float:
        """A clock that never jumps, for measuring durations."""
        ...
