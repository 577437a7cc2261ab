"""The types every data-plane fetcher shares: a partition's name (``TP``), the fetcher kinds,
one partition's records from one poll (:class:`FetchedBatch`) and the :class:`DataFetcher`
protocol. Both fetchers (``fetchers.py``, ``confluent_fetcher.py``) and the consumers import
them from here, so neither fetcher module needs the other's."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal, NamedTuple, Protocol

__all__ = ["FETCHER_KINDS", "TP", "DataFetcher", "FetchedBatch", "FetcherKind"]

TP = tuple[str, int]
FetcherKind = Literal["kafka-python", "confluent"]
FETCHER_KINDS: tuple[str, ...] = ("kafka-python", "confluent")


class FetchedBatch(NamedTuple):
    """Records of one partition from one poll, in offset order (the fetcher's record objects),
    and ``next_position``: where fetching of the partition continues after them."""

    topic: str
    partition: int
    records: list[Any]
    next_position: int


class DataFetcher(Protocol):
    """Reads assigned partitions without a consumer group. Not thread-safe."""

    kind: str

    def assign(self, partitions: Iterable[TP], starts: Mapping[TP, int] | None = None
               ) -> None:
        """Read exactly these partitions: those kept keep their position; new ones start at
        ``starts[partition]`` (the earliest offset when not given). Prefer ``starts`` to a
        :meth:`seek` right after: librdkafka cannot seek a partition it has just been
        given."""

    def prepare(self, topics: Iterable[str]) -> None:
        """Learn the metadata of ``topics`` now, so the first fetch of their partitions does
        not wait for it."""

    def assignment(self) -> set[TP]:
        """The partitions assigned."""

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """Fetch an assigned partition from ``offset`` (an int >= 0; ValueError when not
        assigned); records fetched before and not handed out yet are dropped."""

    def position(self, topic: str, partition: int) -> int | None:
        """The next offset to fetch; None when not assigned or not known yet (no seek nor
        record since it was assigned)."""

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """The partition's end as the last fetch response gave it (no request); None when
        not known."""

    def beginning_offsets(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """Each partition's first offset (its log start: what retention has not deleted),
        asked of the brokers now; BrokerUnavailableError when they do not answer."""

    def expect_records(self, count: int | None) -> None:
        """Size the fetches sent from now on for about ``count`` records per partition (None:
        the configured maximum), from the sizes of the records fetched so far. A consumer
        that takes a short run of offsets and then seeks elsewhere (a share member takes
        its region of the in-flight window) would otherwise have the broker send up to
        ``max_partition_fetch_bytes`` for each run. A hint: the broker still returns at
        least one whole record batch, and a fetcher may ignore it."""

    def poll(self, timeout_s: float, max_records: int) -> list[FetchedBatch]:
        """Up to ``max_records`` records, waiting up to ``timeout_s`` for the first. Failures
        are MarshalErrors: BrokerUnavailableError, or a ConfigurationError for refused
        credentials or ACLs. A missing topic or partition yields nothing (its position stays
        None) and is logged; a broker lost for a while is reconnected to. A batch may hold
        no records: the fetch passed offsets without one (transaction markers, aborted
        records under read_committed) up to its ``next_position``, after every record
        returned before for that partition."""

    def close(self) -> None:
        """Close the Kafka client. Idempotent."""
