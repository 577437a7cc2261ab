"""Aggregating observation rows into the audit tables in memory (:class:`LocalAggregator`),
checking the invariants as rows arrive, and merging the partial summaries of aggregators that
saw disjoint parts of the log (the Spark engine's buckets). Pure: no I/O."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from marshal_py.audit.checks import (
    accepted_twice_detail,
    amo_reconfirmed,
    amo_reconfirmed_detail,
    amo_regressed,
    amo_regressed_detail,
    lease_end_ms,
    overlap_detail,
)
from marshal_py.audit.share_history import (
    RangeMap,
    ShareStats,
    ack_change,
    grant_change,
    share_runs,
)
from marshal_py.audit.tables import (
    AMO_RECONFIRMED,
    AMO_REGRESSED,
    OVERLAPPING_OWNERS,
    SHARE_ACCEPTED_TWICE,
    TAKEN_OVER,
    AuditTables,
    RecordRow,
    ShareRangeRow,
    ShareStateRow,
    StintRow,
)
from marshal_py.world.rationalizer import Verdict
from marshal_py.world.state import PartitionKey


@dataclass
class _PartitionStats:
    claims_won: int = 0
    claims_lost: int = 0
    takeovers: int = 0
    reclaims: int = 0
    releases: int = 0
    heartbeats: int = 0
    max_gap: int | None = None
    gaps_over_hi: int = 0
    amo_first: int | None = None
    amo_last: int | None = None
    seen_messages_claimed: bool = False


@dataclass
class _TopicStats:
    records: int = 0
    partitions: set[int] = field(default_factory=set)
    owners: set[tuple[str, str]] = field(default_factory=set)
    takeovers: int = 0
    violations: int = 0


_COORDINATION_COUNTED = {
    Verdict.MALFORMED.value: 1, Verdict.UNKNOWN_TYPE.value: 2,
    Verdict.UNKNOWN_VERSION.value: 3, Verdict.TOMBSTONE.value: 4,
    Verdict.MISPLACED.value: 5, Verdict.DUPLICATE.value: 6, Verdict.REJECTED.value: 7,
}


class LocalAggregator:
    """An :class:`ObservationSink` that aggregates rows into the audit tables in memory.

    Rows must arrive in log order per coordination partition (one rationalizer over the
    whole log). Share offsets are kept as ranges (:class:`RangeMap`).
    """

    def __init__(self) -> None:
        self._partitions: dict[PartitionKey, _PartitionStats] = {}
        self._topics: dict[tuple[str, str], _TopicStats] = {}
        self._coordination: dict[int, list[int]] = {}
        self._stints: list[StintRow] = []
        self._last_stint: dict[PartitionKey, StintRow] = {}
        self._violations: list[tuple[object, ...]] = []
        self._shares: dict[PartitionKey, RangeMap] = {}
        self._share_states: dict[PartitionKey, list[ShareStateRow]] = {}
        #: Records observed so far.
        self.records = 0

    # -- the sink ----------------------------------------------------------------------------

    def record(self, row: RecordRow) -> None:
        """Count one record."""
        self.records += 1
        counts = self._coordination.get(row.coordination_partition)
        if counts is None:
            counts = self._coordination[row.coordination_partition] = [0] * 8
        counts[0] += 1
        column = _COORDINATION_COUNTED.get(row.verdict)
        if column is not None:
            counts[column] += 1
        if row.group is None or row.topic is None:
            return
        topic = self._topic(row.group, row.topic)
        topic.records += 1
        if row.partition is None or row.verdict == Verdict.MISPLACED.value:
            return
        topic.partitions.add(row.partition)
        if row.hi_ms is None:  # a share record
            return
        key = PartitionKey(row.group, row.topic, row.partition)
        stats = self._partitions.get(key)
        if stats is None:
            stats = self._partitions[key] = _PartitionStats()
        verdict = row.verdict
        if verdict == "claim_won":
            stats.claims_won += 1
            if row.ended == TAKEN_OVER:
                stats.takeovers += 1
                topic.takeovers += 1
        elif verdict == "claim_lost":
            stats.claims_lost += 1
        elif verdict == "claim_reclaimed":
            stats.reclaims += 1
        elif verdict == "released":
            stats.releases += 1
        elif verdict == "heartbeat":
            stats.heartbeats += 1
        elif verdict == "messages_claimed" and not stats.seen_messages_claimed:
            stats.seen_messages_claimed = True
            stats.amo_first = row.amo_after
        if row.gap_ms is not None:
            if stats.max_gap is None or row.gap_ms > stats.max_gap:
                stats.max_gap = row.gap_ms
            if row.gap_ms > row.hi_ms:
                stats.gaps_over_hi += 1
        stats.amo_last = row.amo_after
        if amo_regressed(row):
            self._violate(AMO_REGRESSED, key, amo_regressed_detail(
                row.amo_before, row.amo_after, row.verdict), row.timestamp_ms)
        if amo_reconfirmed(row):
            assert row.offset is not None and row.amo_floor is not None
            assert row.client_id is not None and row.instance_id is not None
            self._violate(AMO_RECONFIRMED, key, amo_reconfirmed_detail(
                row.client_id, row.instance_id, row.offset, row.amo_floor), row.timestamp_ms)

    def stint(self, row: StintRow) -> None:
        """Keep one ownership stint; check it against the previous one of its partition."""
        key = PartitionKey(row.group, row.topic, row.partition)
        self._stints.append(row)
        self._topic(row.group, row.topic).owners.add((row.client_id, row.instance_id))
        previous = self._last_stint.get(key)
        # Stints of a partition end in the order they began (one is open at a time).
        if previous is not None:
            self._check_overlap(key, previous, row)
        self._last_stint[key] = row

    def _check_overlap(self, key: PartitionKey, prev: StintRow, row: StintRow) -> None:
        until = lease_end_ms(prev)
        if until is None or row.start_ms < until:
            self._violate(OVERLAPPING_OWNERS, key, overlap_detail(
                prev.client_id, prev.instance_id, until if until is not None else -1,
                row.client_id, row.instance_id), row.start_ms)

    def share_range(self, row: ShareRangeRow) -> None:
        """Add a share action to its offsets (detecting offsets accepted twice)."""
        key = PartitionKey(row.group, row.topic, row.partition)
        ranges = self._shares.get(key)
        if ranges is None:
            ranges = self._shares[key] = RangeMap()
        if row.action == "grant":
            ranges.update(row.first, row.last, grant_change(row.position, row.epoch))
            return
        before = ranges.update(row.first, row.last, ack_change(row.action, row.position))
        if row.action == "accept":
            for first, last, stats in before:
                if stats.accepts == 1:
                    for offset in range(first, last + 1):
                        self._violate(SHARE_ACCEPTED_TWICE, key, accepted_twice_detail(
                            offset, row.client_id, row.instance_id), row.timestamp_ms)

    def share_state(self, row: ShareStateRow) -> None:
        """Keep a share-partition's final state."""
        key = PartitionKey(row.group, row.topic, row.partition)
        self._share_states.setdefault(key, []).append(row)

    # -- results -----------------------------------------------------------------------------

    def _topic(self, group: str, topic: str) -> _TopicStats:
        stats = self._topics.get((group, topic))
        if stats is None:
            stats = self._topics[(group, topic)] = _TopicStats()
        return stats

    def _violate(self, invariant: str, key: PartitionKey, detail: str, at_ms: int) -> None:
        self._violations.append((invariant, key.group, key.topic, key.partition, detail, at_ms))
        self._topic(key.group, key.topic).violations += 1

    def tables(self) -> AuditTables:
        """The audit tables (call after the observer's :meth:`AuditObserver.finish`)."""
        ownership = [(s.group, s.topic, s.partition, s.client_id, s.instance_id, s.start_ms,
                      s.end_ms, s.last_heartbeat_ms, s.end_reason, s.first_committed,
                      s.last_committed) for s in self._stints]
        amo = [(s.group, s.topic, s.partition, s.client_id, s.instance_id, s.first_confirmed,
                s.last_confirmed, s.batches) for s in self._stints if s.batches > 0]
        partitions = [(k.group, k.topic, k.partition, p.claims_won, p.claims_lost,
                       p.takeovers, p.reclaims, p.releases, p.heartbeats, p.max_gap,
                       p.gaps_over_hi, p.amo_first, p.amo_last)
                      for k, p in sorted(self._partitions.items())]
        summary = [(g, t, len(s.partitions), s.records, len(s.owners), s.takeovers,
                    s.violations) for (g, t), s in sorted(self._topics.items())]
        coordination = [(cp, *counts) for cp, counts in sorted(self._coordination.items())]
        return AuditTables(ownership, partitions, amo, self._share_rows(), self._violations,
                           summary, coordination)

    def _share_rows(self) -> Iterator[tuple[object, ...]]:
        for key, first, last, stats, state in self.share_runs():
            for offset in range(first, last + 1):
                yield (key.group, key.topic, key.partition, offset, stats.acquisitions,
                       stats.accepts, stats.releases, stats.rejects, stats.grants_in_epoch,
                       state)

    def share_runs(self) -> Iterator[tuple[PartitionKey, int, int, ShareStats, str]]:
        """Share history as runs of offsets with the same row but the offset: (key, first,
        last, stats, final state); each offset of a run gives one ``share_history`` row."""
        return share_runs(self._shares, self._share_states)

    def topic_partials(self) -> list[tuple[str, str, int, list[int], list[list[str]], int, int]]:
        """What this aggregator knows of each (group, topic) for the summary, in a form that
        adds up across aggregators of disjoint records (:func:`merge_summaries`): (group,
        topic, records, partitions, owners, takeovers, violations)."""
        return [(g, t, s.records, sorted(s.partitions), sorted(map(list, s.owners)),
                 s.takeovers, s.violations) for (g, t), s in sorted(self._topics.items())]

    def coordination_partials(self) -> list[list[int]]:
        """The ``coordination`` rows of the records seen here (they add up column-wise)."""
        return [[cp, *counts] for cp, counts in sorted(self._coordination.items())]


def merge_summaries(partials: Iterable[tuple[str, str, int, list[int], list[list[str]], int,
                                             int]]) -> list[tuple[object, ...]]:
    """The ``summary`` rows from the :meth:`LocalAggregator.topic_partials` of aggregators
    that saw disjoint parts of the log."""
    topics: dict[tuple[str, str], _TopicStats] = {}
    for group, topic, records, partitions, owners, takeovers, violations in partials:
        stats = topics.get((group, topic))
        if stats is None:
            stats = topics[(group, topic)] = _TopicStats()
        stats.records += records
        stats.partitions.update(partitions)
        stats.owners.update((client, instance) for client, instance in owners)
        stats.takeovers += takeovers
        stats.violations += violations
    return [(g, t, len(s.partitions), s.records, len(s.owners), s.takeovers, s.violations)
            for (g, t), s in sorted(topics.items())]


def merge_coordination(partials: Iterable[list[int]]) -> list[tuple[object, ...]]:
    """The ``coordination`` rows from :meth:`LocalAggregator.coordination_partials`."""
    counts: dict[int, list[int]] = {}
    for cp, *values in partials:
        total = counts.setdefault(cp, [0] * len(values))
        for i, value in enumerate(values):
            total[i] += value
    return [(cp, *values) for cp, values in sorted(counts.items())]
