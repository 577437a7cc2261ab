"""Auditing the coordination log: the observer, the pure part (no I/O, no clocks).

One rationalizer decides everything. The :class:`AuditObserver` reads each record's verdict
and the rationalizer's state right after the record applied, and turns them into
*observation rows* (:class:`RecordRow`, :class:`StintRow`, :class:`ShareRangeRow`,
:class:`ShareStateRow`) that it hands to a sink. Both audit engines use this same observer:
the local engine runs one rationalizer over the whole log and aggregates the rows here
(:class:`LocalAggregator`); the Spark engine runs a fresh rationalizer per routing bucket
(:func:`route`) and aggregates each bucket's rows the same way, in its Python worker. Both
produce the tables of :data:`TABLES`, with the columns and types given there.

The audit's other pure modules: the tables and row types (``tables.py``), routing records to buckets
(``routing.py``), the invariants and their details (``checks.py``), the share history
(``share_history.py``) and the aggregator (``aggregate.py``). Their public names are also
importable from here, where they lived first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from marshal_py.audit.aggregate import (
    LocalAggregator,
    merge_coordination,
    merge_summaries,
)
from marshal_py.audit.checks import (
    accepted_twice_detail,
    amo_reconfirmed,
    amo_reconfirmed_detail,
    amo_regressed,
    amo_regressed_detail,
    lease_end_ms,
    overlap_detail,
)
from marshal_py.audit.fields import MessageFields, message_fields
from marshal_py.audit.routing import (
    GARBAGE,
    MEMBER,
    MISPLACED,
    PARTITION,
    RESET,
    SIGNED,
    WHOLE_TOPIC,
    WHOLE_TOPIC_KINDS,
    Route,
    bucket_partition,
    needs_whole_topic,
    route,
)
from marshal_py.audit.share_history import (
    RangeMap,
    final_share_state,
)
from marshal_py.audit.tables import (
    AMO_RANGES,
    AMO_RECONFIRMED,
    AMO_REGRESSED,
    COORDINATION,
    EXPIRED,
    OPEN,
    OVERLAPPING_OWNERS,
    OWNERSHIP,
    PARTITIONS,
    RECLAIMED,
    RELEASED,
    ROW_KINDS,
    SHARE_ACCEPTED_TWICE,
    SHARE_HISTORY,
    SUMMARY,
    TABLES,
    TAKEN_OVER,
    VIOLATIONS,
    WIDE_COLUMNS,
    AuditTables,
    ColumnSpec,
    ObservationSink,
    RecordRow,
    ShareRangeRow,
    ShareStateRow,
    StintRow,
    aligned,
    as_dicts,
    sorted_rows,
    summary_lines,
    wide_row,
)
from marshal_py.protocol.messages import ShareMessage
from marshal_py.protocol.ranges import parse_ranges
from marshal_py.world.rationalizer import Outcome, Rationalizer, Verdict
from marshal_py.world.state import PartitionKey

__all__ = [
    "AMO_RANGES",
    "AMO_RECONFIRMED",
    "AMO_REGRESSED",
    "AuditObserver",
    "AuditTables",
    "COORDINATION",
    "ColumnSpec",
    "EXPIRED",
    "GARBAGE",
    "LocalAggregator",
    "MEMBER",
    "MISPLACED",
    "OPEN",
    "OVERLAPPING_OWNERS",
    "OWNERSHIP",
    "ObservationSink",
    "PARTITION",
    "PARTITIONS",
    "RECLAIMED",
    "RELEASED",
    "RESET",
    "ROW_KINDS",
    "RangeMap",
    "RecordRow",
    "Route",
    "SHARE_ACCEPTED_TWICE",
    "SHARE_HISTORY",
    "SIGNED",
    "SUMMARY",
    "ShareRangeRow",
    "ShareStateRow",
    "StintRow",
    "TABLES",
    "TAKEN_OVER",
    "VIOLATIONS",
    "WHOLE_TOPIC",
    "WHOLE_TOPIC_KINDS",
    "WIDE_COLUMNS",
    "accepted_twice_detail",
    "aligned",
    "amo_reconfirmed",
    "amo_reconfirmed_detail",
    "amo_regressed",
    "amo_regressed_detail",
    "as_dicts",
    "audit_records",
    "bucket_partition",
    "final_share_state",
    "lease_end_ms",
    "merge_coordination",
    "merge_summaries",
    "needs_whole_topic",
    "overlap_detail",
    "route",
    "sorted_rows",
    "summary_lines",
    "topic_filter",
    "wide_row",
]

# -- the observer -----------------------------------------------------------------------------


@dataclass(slots=True)
class _Stint:
    client_id: str
    instance_id: str
    start_ms: int
    last_sign_ms: int
    amo_floor: int | None
    coordination_partition: int
    position: int
    #: The interval the stint's claim is judged by (its owner's announced one, else the
    #: configured one).
    hi_ms: int
    first_committed: int | None = None
    last_committed: int | None = None
    first_confirmed: int | None = None
    last_confirmed: int | None = None
    batches: int = 0


_LIVENESS = frozenset({Verdict.CLAIM_RENEWED, Verdict.HEARTBEAT})
_SHARE_ACTIONS = {Verdict.RECORDS_ACQUIRED, Verdict.RECORDS_ACKNOWLEDGED}


def _applied_ranges(detail: str) -> tuple[tuple[int, int], ...]:
    """The offsets a share record applied to, from the rationalizer's verdict detail
    (``"100-109,112"`` optionally followed by `` (N offsets did not apply)``)."""
    return parse_ranges(detail.split(" ", 1)[0])


class AuditObserver:
    """Turns each outcome of ``rationalizer`` into observation rows for ``sink``.

    Register it with ``rationalizer.observe(observer)`` before applying the first record, and
    call :meth:`finish` after the last one (it closes the open stints and reports the
    share-partitions' final state). ``keep(group, topic)`` filters the rows of decoded
    records; garbage is always kept.
    """

    def __init__(self, rationalizer: Rationalizer, sink: ObservationSink,
                 keep: Callable[[str, str], bool] | None = None) -> None:
        self.rationalizer = rationalizer
        self.sink = sink
        self.keep = keep
        self._stints: dict[PartitionKey, _Stint] = {}
        self._amo: dict[PartitionKey, int | None] = {}
        self._epochs: dict[PartitionKey, int] = {}
        self._share_keys: set[PartitionKey] = set()

    def __call__(self, outcome: Outcome) -> None:
        self.observe(outcome)

    def observe(self, outcome: Outcome) -> None:
        """Emit the rows of one outcome (called by the rationalizer after each record)."""
        record, verdict = outcome.record, outcome.verdict
        message = message_fields(outcome)
        if message is None:
            self.sink.record(RecordRow(record.partition, record.position, record.timestamp_ms,
                                       None, None, None, verdict.value, None, None, None, None,
                                       None, None, None, None, None))
            return
        group, topic = message.group_id, message.topic
        if self.keep is not None and not self.keep(group, topic):
            return
        if outcome.expired:
            self._expire(group, topic, record.timestamp_ms)
        partition = message.partition
        if (partition is None or verdict is Verdict.MISPLACED
                or verdict is Verdict.UNKNOWN_TYPE):
            self.sink.record(RecordRow(
                record.partition, record.position, record.timestamp_ms, group, topic,
                partition, verdict.value, message.client_id, message.instance_id, None, None,
                None, None, None, None, None))
            return
        key = PartitionKey(group, topic, partition)
        if issubclass(message.type, ShareMessage):
            self._share(outcome, message, key)
            return
        self._exclusive(outcome, message, key)

    def _expire(self, group: str, topic: str, ts: int) -> None:
        """The pair's state expired: its stints end, its share-partitions start a new life."""
        for key in sorted(k for k in self._stints if k.group == group and k.topic == topic):
            self._close(key, self._stints[key], EXPIRED, ts)
        for key in [k for k in self._amo if k.group == group and k.topic == topic]:
            del self._amo[key]
        for key in sorted(k for k in self._share_keys if k.group == group and k.topic == topic):
            self._share_keys.discard(key)
            self._epochs[key] = self._epochs.get(key, 0) + 1

    def _exclusive(self, outcome: Outcome, message: MessageFields, key: PartitionKey) -> None:
        record, verdict = outcome.record, outcome.verdict
        ts = record.timestamp_ms
        claim = self.rationalizer.claim(key.group, key.topic, key.partition)
        hi = claim.heartbeat_interval_ms  # the owner's after this record
        amo_before = self._amo.get(key)
        amo_after = claim.amo_claimed_offset
        self._amo[key] = amo_after
        stint = self._stints.get(key)
        offset = message.number
        gap: int | None = None
        floor: int | None = None
        ended: str | None = None
        if verdict is Verdict.CLAIM_WON or verdict is Verdict.CLAIM_RECLAIMED:
            if stint is not None:
                ended = TAKEN_OVER if verdict is Verdict.CLAIM_WON else RECLAIMED
                self._close(key, stint, ended, ts)
            owner = claim.owner
            assert owner is not None and claim.claimed_at_ms is not None
            self._stints[key] = _Stint(owner.client_id, owner.instance_id, claim.claimed_at_ms,
                                       ts, amo_after, record.partition, record.position, hi)
        elif stint is not None and verdict in _LIVENESS:
            assert claim.last_heartbeat_ms is not None
            gap = claim.last_heartbeat_ms - stint.last_sign_ms
            stint.last_sign_ms = claim.last_heartbeat_ms
            stint.hi_ms = hi
            if verdict is Verdict.HEARTBEAT:
                if stint.first_committed is None:
                    stint.first_committed = claim.committed_offset
                stint.last_committed = claim.committed_offset
        elif stint is not None and verdict is Verdict.RELEASED:
            stint.last_committed = claim.committed_offset
            ended = RELEASED
            hi = stint.hi_ms  # the releaser's
            self._close(key, stint, RELEASED, ts)
        elif stint is not None and verdict is Verdict.MESSAGES_CLAIMED:
            floor = stint.amo_floor
            stint.batches += 1
            if stint.first_confirmed is None:
                stint.first_confirmed = amo_after
            stint.last_confirmed = amo_after
        self.sink.record(RecordRow(
            record.partition, record.position, ts, key.group, key.topic, key.partition,
            verdict.value, message.client_id, message.instance_id, offset, gap, hi,
            amo_before, amo_after, floor, ended))

    def _close(self, key: PartitionKey, stint: _Stint, reason: str,
               end_ms: int | None) -> None:
        del self._stints[key]
        self.sink.stint(StintRow(
            key.group, key.topic, key.partition, stint.client_id, stint.instance_id,
            stint.start_ms, end_ms, stint.last_sign_ms, reason, stint.first_committed,
            stint.last_committed, stint.hi_ms, stint.amo_floor, stint.first_confirmed,
            stint.last_confirmed, stint.batches, stint.coordination_partition, stint.position))

    def _share(self, outcome: Outcome, message: MessageFields, key: PartitionKey) -> None:
        record, verdict = outcome.record, outcome.verdict
        if verdict is Verdict.SHARE_INITIALIZED:
            self._share_keys.add(key)
        elif verdict is Verdict.SHARE_RESET:
            self._epochs[key] = self._epochs.get(key, 0) + 1
        elif verdict in _SHARE_ACTIONS:
            action = message.kind if message.kind is not None else "grant"
            epoch = self._epochs.get(key, 0)
            for first, last in _applied_ranges(outcome.detail):
                self.sink.share_range(ShareRangeRow(
                    key.group, key.topic, key.partition, record.partition, record.position,
                    record.timestamp_ms, action, first, last, epoch, message.client_id,
                    message.instance_id))
        self.sink.record(RecordRow(
            record.partition, record.position, record.timestamp_ms, key.group, key.topic,
            key.partition, verdict.value, message.client_id, message.instance_id, None, None,
            None, None, None, None, None))

    def finish(self) -> None:
        """Report the stints still open and every share-partition's final state."""
        for key in sorted(self._stints):
            stint = self._stints[key]
            self._close(key, stint, OPEN, None)
        for key in sorted(self._share_keys):
            share = self.rationalizer.share_partition(key.group, key.topic, key.partition)
            assert share is not None
            runs: list[list[object]] = []
            for rec in share.in_flight():
                if runs and runs[-1][2] == rec.state.value and runs[-1][1] == rec.offset - 1:
                    runs[-1][1] = rec.offset
                else:
                    runs.append([rec.offset, rec.offset, rec.state.value])
            if not runs:
                self.sink.share_state(ShareStateRow(key.group, key.topic, key.partition,
                                                    share.spso, share.speo, None, None, None))
            for first, last, state in runs:
                assert isinstance(first, int) and isinstance(last, int)
                assert isinstance(state, str)
                self.sink.share_state(ShareStateRow(key.group, key.topic, key.partition,
                                                    share.spso, share.speo, first, last, state))


def audit_records(records: Iterable[object], rationalizer: Rationalizer,
                  keep: Callable[[str, str], bool] | None = None) -> AuditTables:
    """Audit records (``CoordinationRecord``s in log order per coordination partition) with
    one rationalizer: the local engine's whole computation, without I/O."""
    aggregator = LocalAggregator()
    observer = AuditObserver(rationalizer, aggregator, keep)
    rationalizer.observe(observer)
    for record in records:
        rationalizer.apply(record)  # type: ignore[arg-type]
    observer.finish()
    return aggregator.tables()


def topic_filter(group: str | None, topic: str | None) -> Callable[[str, str], bool] | None:
    """The ``keep`` predicate of --group / --topic (None when neither is given)."""
    if group is None and topic is None:
        return None

    def keep(g: str, t: str) -> bool:
        return (group is None or g == group) and (topic is None or t == topic)
    return keep
