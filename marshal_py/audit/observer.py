"""Auditing the coordination log: the pure part (no I/O, no clocks).

One rationalizer decides everything. The :class:`AuditObserver` reads each record's verdict
and the rationalizer's state right after the record applied, and turns them into
*observation rows* (:class:`RecordRow`, :class:`StintRow`, :class:`ShareRangeRow`,
:class:`ShareStateRow`) that it hands to a sink. Both audit engines use this same observer:
the local engine runs one rationalizer over the whole log and aggregates the rows here
(:class:`LocalAggregator`); the Spark engine runs a fresh rationalizer per routing bucket
(:func:`route`) and aggregates each bucket's rows the same way, in its Python worker. Both
produce the tables of :data:`TABLES`, with the columns and types given there.

**Why the Spark engine may split the log.** A verdict depends only on the records of its own
(group, topic, partition) before it, with one exception: ``ResettingSharePartition`` asks
whether the (group, topic) has live members, and every claim, heartbeat, share message and
``MemberHeartbeat`` of any partition of that (group, topic) is a sign of life. So a bucket is
one (group, topic, partition), except that member heartbeats of a (group, topic) form their own
bucket and a (group, topic) whose log holds a reset is one bucket as a whole (so is one
with a signed record: the replay guard keeps one sequence per sender and pair). Positions must
grow strictly within a coordination partition (true for a Kafka topic) so that no record is a
duplicate in one replay and not in another. ``tests/property/test_audit_decomposition.py``
checks this for random traffic.

Invariants checked (the ``violations`` table):

* ``overlapping_owners`` — ownership stints of one partition must not overlap. A stint ended
  by a release ends at the release; one ended by a takeover or a same-client reclaim may still
  hand out records until its last sign of life + HI (its lease), so the next stint must not
  begin before that. (A takeover needs the owner stale for more than 2 HI, so only a reclaim
  while the old instance was alive can violate it: two live processes of one client id.)
* ``amo_regressed`` — the AMO-confirmed offset never decreases, except by the owner's release
  with offset ``o``, which lowers it to exactly ``o - 1`` (rule 6). Guaranteed by the
  rationalizer; checked end to end.
* ``amo_reconfirmed`` — let C0 be the AMO-confirmed offset when an ownership stint began (the
  earlier owners' confirmations, lowered only by a release). Every ``ClaimingMessages`` the
  stint's owner gets applied proposes a last offset above C0; a proposal at or below C0
  confirms offsets an earlier owner was allowed to process: at-most-once is broken.
* ``share_accepted_twice`` — no share record is accepted twice. The rationalizer never accepts
  an Acknowledged record again within a share-partition's life; only a
  ``ResettingSharePartition`` that moves the SPSO back can make it happen, and the audit
  reports that too.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

from marshal_py.audit.fields import MessageFields, message_fields
from marshal_py.protocol.codec import DecodeError, decode_signed
from marshal_py.protocol.messages import (
    PartitionMessage,
    ResettingOffsets,
    ResettingSharePartition,
    ShareMessage,
)
from marshal_py.protocol.placement import coordination_partition as home_partition
from marshal_py.protocol.ranges import parse_ranges
from marshal_py.world.lifecycle import DEFAULT_OFFSETS_RETENTION_MS
from marshal_py.world.rationalizer import Outcome, Rationalizer, Verdict
from marshal_py.world.state import PartitionKey

# -- table schemas ----------------------------------------------------------------------------

#: Column types, as names both engines map to Arrow / Spark types: ``str``, ``int32``, ``int64``.
ColumnSpec = tuple[tuple[str, str], ...]

OWNERSHIP: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"),
    ("client_id", "str"), ("instance_id", "str"),
    ("start_ms", "int64"), ("end_ms", "int64"), ("last_heartbeat_ms", "int64"),
    ("end_reason", "str"), ("first_committed", "int64"), ("last_committed", "int64"),
)
PARTITIONS: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"),
    ("claims_won", "int64"), ("claims_lost", "int64"), ("takeovers", "int64"),
    ("reclaims", "int64"), ("releases", "int64"), ("heartbeats", "int64"),
    ("max_heartbeat_gap_ms", "int64"), ("gaps_over_hi", "int64"),
    ("amo_first_confirmed", "int64"), ("amo_last_confirmed", "int64"),
)
AMO_RANGES: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"),
    ("client_id", "str"), ("instance_id", "str"),
    ("first_confirmed", "int64"), ("last_confirmed", "int64"), ("batches", "int64"),
)
SHARE_HISTORY: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"), ("offset", "int64"),
    ("acquisitions", "int64"), ("accepts", "int64"), ("releases", "int64"),
    ("rejects", "int64"), ("last_delivery_count", "int64"), ("final_state", "str"),
)
VIOLATIONS: ColumnSpec = (
    ("invariant", "str"), ("group", "str"), ("topic", "str"), ("partition", "int32"),
    ("detail", "str"), ("at_ms", "int64"),
)
SUMMARY: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partitions", "int64"), ("records", "int64"),
    ("owners", "int64"), ("takeovers", "int64"), ("violations", "int64"),
)
COORDINATION: ColumnSpec = (
    ("coordination_partition", "int32"), ("records", "int64"), ("malformed", "int64"),
    ("unknown_type", "int64"), ("unknown_version", "int64"), ("tombstones", "int64"),
    ("misplaced", "int64"), ("duplicates", "int64"), ("rejected", "int64"),
)

#: Every table the audit writes (to ``OUTPUT/<name>/``), in this order.
TABLES: dict[str, ColumnSpec] = {
    "ownership": OWNERSHIP,
    "partitions": PARTITIONS,
    "amo_ranges": AMO_RANGES,
    "share_history": SHARE_HISTORY,
    "violations": VIOLATIONS,
    "summary": SUMMARY,
    "coordination": COORDINATION,
}

#: End reasons of an ownership stint.
RELEASED, TAKEN_OVER, RECLAIMED, OPEN = "released", "taken_over", "reclaimed", "open"
#: A stint ended because its group's offsets expired (KIP-211: Empty past the retention).
EXPIRED = "expired"

#: Invariant names of the ``violations`` table.
OVERLAPPING_OWNERS = "overlapping_owners"
AMO_REGRESSED = "amo_regressed"
AMO_RECONFIRMED = "amo_reconfirmed"
SHARE_ACCEPTED_TWICE = "share_accepted_twice"

# -- observation rows -------------------------------------------------------------------------


class RecordRow(NamedTuple):
    """One per coordination record: its verdict and what it did to its partition."""

    coordination_partition: int
    position: int
    timestamp_ms: int
    group: str | None
    topic: str | None
    partition: int | None
    verdict: str
    client_id: str | None
    instance_id: str | None
    #: The message's offset: heartbeat / release offset, ClaimingMessages' proposed last.
    offset: int | None
    #: Liveness records of an owner (renewal, heartbeat): ms since its previous one.
    gap_ms: int | None
    hi_ms: int | None
    #: The partition's AMO-confirmed offset before and after (exclusive messages only).
    amo_before: int | None
    amo_after: int | None
    #: ClaimingMessages: the AMO-confirmed offset its owner's stint began with (C0).
    amo_floor: int | None
    #: How this record ended the previous stint (taken_over / reclaimed / released), if so.
    ended: str | None


class StintRow(NamedTuple):
    """One ownership stint, emitted when it ends (or at the end of the log, open)."""

    group: str
    topic: str
    partition: int
    client_id: str
    instance_id: str
    start_ms: int
    end_ms: int | None
    last_heartbeat_ms: int
    end_reason: str
    first_committed: int | None
    last_committed: int | None
    hi_ms: int
    amo_floor: int | None
    first_confirmed: int | None
    last_confirmed: int | None
    batches: int
    coordination_partition: int
    position: int


class ShareRangeRow(NamedTuple):
    """Offsets one share record applied to: granted (``grant``), ``accept``, ``release``,
    ``reject``. ``epoch`` counts the share-partition's resets before it."""

    group: str
    topic: str
    partition: int
    coordination_partition: int
    position: int
    timestamp_ms: int
    action: str
    first: int
    last: int
    epoch: int
    client_id: str
    instance_id: str


class ShareStateRow(NamedTuple):
    """A share-partition at the end of its records: SPSO, SPEO and one run of in-flight
    records in one state (``first``/``last``/``state`` null when nothing is in flight)."""

    group: str
    topic: str
    partition: int
    spso: int
    speo: int
    first: int | None
    last: int | None
    state: str | None


class ObservationSink(Protocol):
    """Where an :class:`AuditObserver` sends its rows."""

    def record(self, row: RecordRow) -> None: ...

    def stint(self, row: StintRow) -> None: ...

    def share_range(self, row: ShareRangeRow) -> None: ...

    def share_state(self, row: ShareStateRow) -> None: ...


#: Columns of the single "wide" row the Spark engine carries all four kinds in, with a
#: leading ``kind`` column (``record``, ``stint``, ``share_range``, ``share_state``).
ROW_KINDS: dict[str, type[tuple[object, ...]]] = {
    "record": RecordRow,
    "stint": StintRow,
    "share_range": ShareRangeRow,
    "share_state": ShareStateRow,
}
_WIDE_TYPES = {
    "coordination_partition": "int32", "partition": "int32", "group": "str", "topic": "str",
    "verdict": "str", "client_id": "str", "instance_id": "str", "ended": "str",
    "end_reason": "str", "action": "str", "state": "str",
}
WIDE_COLUMNS: ColumnSpec = (("kind", "str"), *(
    (name, _WIDE_TYPES.get(name, "int64"))
    for name in dict.fromkeys(
        f for row_type in ROW_KINDS.values() for f in row_type._fields  # type: ignore[attr-defined]
    )
))

# -- routing (for engines that split the log) -------------------------------------------------

GARBAGE, MISPLACED, MEMBER = "garbage", "misplaced", "member"
PARTITION, RESET = "partition", "reset"
#: A signed record (PROTOCOL.md, authenticated groups): the replay guard keeps one sequence
#: per sender and pair, so a (group, topic) with a signed record is audited as a whole, as for
#: a reset.
SIGNED = "signed"
#: Route kinds that make their (group, topic) one bucket.
WHOLE_TOPIC_KINDS = frozenset({RESET, SIGNED})
#: Bucket partition of a (group, topic)'s member heartbeats, or of the whole (group, topic).
WHOLE_TOPIC = -1


def needs_whole_topic(has_reset: bool, first_ms: int, last_ms: int,
                      offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS) -> bool:
    """Must every record of a (group, topic) be audited by one rationalizer?

    Resets and offset expiry depend on whether the (group, topic) has a live member, which
    every partition's records decide. A reset (share or offsets) can be decided only with the
    whole topic; expiry can happen only when the pair's records span more than the offset
    retention. Otherwise each partition (plus the member heartbeats) can be audited alone.
    """
    return has_reset or last_ms - first_ms > offsets_retention_ms


class Route(NamedTuple):
    """What a record is about, as far as splitting the log goes."""

    kind: str
    group: str | None
    topic: str | None
    partition: int | None


def route(value: bytes | None, coordination_partition: int, partition_count: int) -> Route:
    """Classify one record for bucketing (decodes it with the protocol's codec)."""
    if value is None:
        return Route(GARBAGE, None, None, None)
    try:
        message, signature = decode_signed(value)
    except DecodeError:
        return Route(GARBAGE, None, None, None)
    partition = message.partition if isinstance(message, PartitionMessage) else None
    if home_partition(message.topic, partition_count) != coordination_partition:
        return Route(MISPLACED, message.group_id, message.topic, partition)
    if signature is not None:
        return Route(SIGNED, message.group_id, message.topic, partition)
    if partition is None:
        return Route(MEMBER, message.group_id, message.topic, None)
    if isinstance(message, ResettingSharePartition | ResettingOffsets):
        return Route(RESET, message.group_id, message.topic, partition)
    return Route(PARTITION, message.group_id, message.topic, partition)


def bucket_partition(route_: Route, topic_has_reset: bool) -> int | None:
    """The bucket's partition number: the record's partition, :data:`WHOLE_TOPIC` for member
    heartbeats and checkpoints and for every record of a (group, topic) that
    :func:`needs_whole_topic`, None for garbage."""
    if route_.kind == GARBAGE:
        return None
    if route_.kind == MISPLACED:
        return route_.partition
    if route_.kind == MEMBER or topic_has_reset:
        return WHOLE_TOPIC
    return route_.partition


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


# -- violation details (both engines write exactly these strings) -----------------------------


def overlap_detail(prev_client: str, prev_instance: str, until_ms: int, client: str,
                   instance: str) -> str:
    """Detail of an ``overlapping_owners`` violation."""
    return (f"{client}/{instance} began while {prev_client}/{prev_instance} "
            f"could hand out records until {until_ms}")


def amo_regressed_detail(before: int | None, after: int | None, verdict: str) -> str:
    """Detail of an ``amo_regressed`` violation."""
    return f"AMO-confirmed offset fell from {before} to {after} on {verdict}"


def amo_reconfirmed_detail(client: str, instance: str, proposed: int, floor: int) -> str:
    """Detail of an ``amo_reconfirmed`` violation."""
    return (f"{client}/{instance} confirmed up to {proposed}, at or below {floor} "
            "confirmed before its stint began")


def accepted_twice_detail(offset: int, client: str, instance: str) -> str:
    """Detail of a ``share_accepted_twice`` violation."""
    return f"offset {offset} accepted again by {client}/{instance}"


def lease_end_ms(row: StintRow) -> int | None:
    """Until when a stint's owner could hand out records: its release, or its last sign of
    life + HI when it was taken over or reclaimed; None while open."""
    if row.end_reason == RELEASED:
        return row.end_ms
    if row.end_reason == OPEN:
        return None
    return row.last_heartbeat_ms + row.hi_ms


def amo_regressed(row: RecordRow) -> bool:
    """True when ``row`` lowered the AMO-confirmed offset other than by rule 6."""
    if row.amo_before is None:
        return False
    if row.amo_after is not None and row.amo_after >= row.amo_before:
        return False
    return not (row.verdict == Verdict.RELEASED.value and row.offset is not None
                and row.amo_after == row.offset - 1)


def amo_reconfirmed(row: RecordRow) -> bool:
    """True when an applied ClaimingMessages proposed at or below its stint's C0."""
    return (row.verdict == Verdict.MESSAGES_CLAIMED.value and row.amo_floor is not None
            and row.offset is not None and row.offset <= row.amo_floor)


# -- local aggregation ------------------------------------------------------------------------


class _ShareStats(NamedTuple):
    acquisitions: int
    accepts: int
    releases: int
    rejects: int
    last_grant_epoch: int
    grants_in_epoch: int
    last_grant_position: int
    last_accept_position: int


_EMPTY_STATS = _ShareStats(0, 0, 0, 0, -1, 0, -1, -1)


class RangeMap:
    """Per-offset values stored as runs of equal values: memory grows with the number of
    distinct updates, not with the number of offsets they cover."""

    def __init__(self) -> None:
        self._starts: list[int] = []  # run i covers [starts[i], starts[i+1])
        self._values: list[_ShareStats | None] = []

    def _split(self, at: int) -> int:
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and self._starts[i] == at:
            return i
        value = self._values[i] if i >= 0 else None
        self._starts.insert(i + 1, at)
        self._values.insert(i + 1, value)
        return i + 1

    def update(self, first: int, last: int,
               change: Callable[[_ShareStats], _ShareStats]) -> list[tuple[int, int, _ShareStats]]:
        """Apply ``change`` to every offset of [first, last]; return the runs as they were."""
        lo = self._split(first)
        hi = self._split(last + 1)
        before: list[tuple[int, int, _ShareStats]] = []
        for i in range(lo, hi):
            old = self._values[i] or _EMPTY_STATS
            before.append((self._starts[i], self._starts[i + 1] - 1, old))
            self._values[i] = change(old)
        return before

    def runs(self) -> Iterator[tuple[int, int, _ShareStats]]:
        """The runs holding values, ascending: (first, last, value)."""
        for i, value in enumerate(self._values):
            if value is not None and i + 1 < len(self._starts):
                yield self._starts[i], self._starts[i + 1] - 1, value

    def __len__(self) -> int:
        return len(self._starts)


def _grant(position: int, epoch: int) -> Callable[[_ShareStats], _ShareStats]:
    def change(s: _ShareStats) -> _ShareStats:
        grants = s.grants_in_epoch + 1 if s.last_grant_epoch == epoch else 1
        return s._replace(acquisitions=s.acquisitions + 1, last_grant_epoch=epoch,
                          grants_in_epoch=grants, last_grant_position=position)
    return change


def _ack(action: str, position: int) -> Callable[[_ShareStats], _ShareStats]:
    def change(s: _ShareStats) -> _ShareStats:
        if action == "accept":
            return s._replace(accepts=s.accepts + 1, last_accept_position=position)
        if action == "release":
            return s._replace(releases=s.releases + 1)
        if action == "reject":
            return s._replace(rejects=s.rejects + 1)
        return s  # gap, dead-lettered: no delivery to count (as the Spark engine)
    return change


def final_share_state(offset: int, stats_last_grant: int, stats_last_accept: int,
                      spso: int, speo: int, in_flight_state: str | None) -> str:
    """An offset's state at the end of its share-partition's records.

    From the SPEO on it is ``available`` (a reset moved the SPSO back over it); in the
    in-flight window it is the rationalizer's state; below the SPSO it is ``acknowledged``
    when its last delivery was accepted, else ``archived`` (rejected, at the delivery limit,
    or skipped by a reset).
    """
    if offset >= speo:
        return "available"
    if offset >= spso:
        return in_flight_state or "available"
    return "acknowledged" if stats_last_accept > stats_last_grant else "archived"


@dataclass
class AuditTables:
    """The audit's result: rows of every table of :data:`TABLES`, as tuples in column order.

    ``share_history`` may be a generator (it is expanded from ranges as it is written).
    """

    ownership: Sequence[tuple[object, ...]]
    partitions: Sequence[tuple[object, ...]]
    amo_ranges: Sequence[tuple[object, ...]]
    share_history: Iterable[tuple[object, ...]]
    violations: Sequence[tuple[object, ...]]
    summary: Sequence[tuple[object, ...]]
    coordination: Sequence[tuple[object, ...]]

    def table(self, name: str) -> Iterable[tuple[object, ...]]:
        """Rows of the table called ``name``."""
        rows: Iterable[tuple[object, ...]] = getattr(self, name)
        return rows


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
            ranges.update(row.first, row.last, _grant(row.position, row.epoch))
            return
        before = ranges.update(row.first, row.last, _ack(row.action, row.position))
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

    def share_runs(self) -> Iterator[tuple[PartitionKey, int, int, _ShareStats, str]]:
        """Share history as runs of offsets with the same row but the offset: (key, first,
        last, stats, final state); each offset of a run gives one ``share_history`` row."""
        for key in sorted(self._shares):
            states = self._share_states.get(key, [])
            spso = states[0].spso if states else 0
            speo = states[0].speo if states else 0
            windows = [(s.first, s.last, s.state) for s in states
                       if s.first is not None and s.last is not None and s.state is not None]
            w = 0
            for first, last, stats in self._shares[key].runs():
                if stats.acquisitions == 0:
                    continue
                offset = first
                while offset <= last:
                    # The longest stretch from offset on whose final state is the same.
                    state: str | None = None
                    end = last
                    if offset >= speo:
                        pass
                    elif offset >= spso:
                        end = min(end, speo - 1)
                        while w < len(windows) and windows[w][1] < offset:
                            w += 1
                        if w < len(windows) and windows[w][0] <= offset:
                            state = windows[w][2]
                            end = min(end, windows[w][1])
                        elif w < len(windows):
                            end = min(end, windows[w][0] - 1)
                    else:
                        end = min(end, spso - 1)
                    yield key, offset, end, stats, final_share_state(
                        offset, stats.last_grant_position, stats.last_accept_position, spso,
                        speo, state)
                    offset = end + 1

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


def sorted_rows(rows: Iterable[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """Rows in a canonical order (every column, None first), to compare two engines."""
    return sorted(rows, key=lambda row: tuple((v is not None, v) for v in row))


def summary_lines(summary: Iterable[tuple[object, ...]]) -> list[str]:
    """The summary as an aligned text table."""
    return aligned([name for name, _ in SUMMARY], summary)


def aligned(columns: list[str], rows: Iterable[Iterable[object]]) -> list[str]:
    """Rows as left-aligned columns, '-' for None."""
    cells = [["-" if v is None else str(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
              for r in cells]
    return lines


def as_dicts(spec: ColumnSpec, rows: Iterable[tuple[object, ...]]) -> list[dict[str, object]]:
    """Rows as JSON-ready mappings keyed by column name."""
    names = [name for name, _ in spec]
    return [dict(zip(names, row, strict=True)) for row in rows]


def wide_row(kind: str, row: tuple[object, ...]) -> dict[str, object]:
    """One observation row as a mapping over :data:`WIDE_COLUMNS` (absent columns omitted)."""
    fields: tuple[str, ...] = ROW_KINDS[kind]._fields  # type: ignore[attr-defined]
    out: dict[str, object] = {"kind": kind}
    out.update(zip(fields, row, strict=True))
    return out

