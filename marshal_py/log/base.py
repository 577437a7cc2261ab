"""The coordination log contract that KafkaLog and MemoryLog both fulfil."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from marshal_py.protocol.index import IndexRecord
from marshal_py.protocol.records import CoordinationRecord

#: What a reader that gets no records says besides a restarting broker: a transaction left
#: open stops every read_committed reader at its first record (:mod:`marshal_py.log.hanging`).
HANGING_HINT = ("a transaction left open (a broker restart can leave one) holds the partition: "
                "`marshal find-hanging --resolve` finds and completes it")

#: Which records a filtered read returns: ``keep(value)`` is True for those it wants
#: (:class:`~marshal_py.log.record_filter.RecordFilter`); None keeps every record.
Keep = Callable[[bytes | None], bool]


@dataclass(frozen=True, slots=True)
class Fetched:
    """What one :meth:`CoordinationLog.fetch_matching` read.

    ``records``: those kept, in log order per partition. ``reached``: for each partition
    the read got any record of (kept or not), the position after the last one read -- the
    reader has seen everything below it, and what is not in ``records`` there was not
    wanted."""

    records: list[CoordinationRecord] = field(default_factory=list)
    reached: dict[int, int] = field(default_factory=dict)


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
        """The first position whose timestamp is >= ``timestamp_ms`` (the end if none: as it
        was when the lookup began, never past a record appended while it asked)."""
        ...

    def fetch(self, starts: Mapping[int, int], timeout_s: float) -> list[CoordinationRecord]:
        """Records at or after ``starts[partition]`` for each partition asked, in log order per
        partition. Waits up to ``timeout_s`` for at least one; returns [] if none arrived."""
        ...

    def fetch_matching(self, starts: Mapping[int, int], timeout_s: float,
                       keep: Keep | None) -> Fetched:
        """:meth:`fetch`, keeping only the records ``keep`` wants (all when None), and saying
        how far the read got on each partition: a reader skips what it does not want without
        decoding it, and still knows where to continue."""
        ...

    @property
    def max_value_bytes(self) -> int:
        """The largest record value :meth:`append` can write (the topic's
        ``max.message.bytes`` and the producer's request limit, less the batch overhead)."""
        ...

    def read_index(self) -> list[IndexRecord]:
        """Every record of the coordination index (PROTOCOL.md section 3), as (offset, key,
        value), read to the index's end as of the call: what was appended to it before the
        call began is there."""
        ...

    def append_index(self, key: bytes, value: bytes) -> None:
        """Write one record to the coordination index durably."""
        ...

    @property
    def index_topic_id(self) -> str:
        """The coordination topic's id as index records name it (Kafka's base64 form; empty
        when the broker has none): records naming another id are about an earlier topic of
        the same name."""
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
