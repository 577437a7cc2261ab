"""Why the Spark audit engine may split the log: per-domain rationalizers agree with one.

For random protocol traffic (claims, heartbeats, releases, AMO confirmations, member
heartbeats joining and leaving, share initialize / acquire / acknowledge / renew / reset,
misplaced records and garbage, timestamps that make claims go stale and locks elapse), every
record gets the same verdict from the rationalizer of its routing bucket
(:func:`marshal_py.audit.observer.route`, :func:`~marshal_py.audit.observer.bucket_partition`) as
from one rationalizer over the whole log, and the audit observer emits the same rows (as a
multiset) either way — so the tables, aggregated from those rows, are the same.

It is *not* true for buckets of single (group, topic, partition) when the log holds a reset
(``ResettingSharePartition`` or ``ResettingOffsets``): a reset applies only if the (group,
topic) has no live member, and liveness comes from every partition's claims, heartbeats, share
and key-range records and from member heartbeats. ``test_a_reset_needs_its_whole_topic``
shows the counterexample. The same holds for offset expiry (KIP-211), possible only when the
(group, topic)'s records span more than the offset retention. The engines therefore put every
record of such a (group, topic) in one bucket
(:func:`~marshal_py.audit.observer.needs_whole_topic`).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.audit.observer import (
    RESET,
    AuditObserver,
    RecordRow,
    ShareRangeRow,
    ShareStateRow,
    StintRow,
    bucket_partition,
    needs_whole_topic,
    route,
)
from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    Checkpoint,
    ClaimingKeyRanges,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    InitializingSharePartition,
    KeyRangesHeartbeat,
    MemberHeartbeat,
    Message,
    ReleasingKeyRanges,
    ReleasingPartition,
    RenewingLocks,
    ResettingOffsets,
    ResettingSharePartition,
    coordination_partition,
    encode,
)
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig, Verdict

HI = 1_000
#: A short offset retention, so that (group, topic) pairs expire within generated logs.
RETENTION = 8 * HI
CP = 3
GROUPS = ("g1", "g2")
TOPICS = ("alpha", "beta")  # on coordination partitions 2 and 1 of 3
CLIENTS = ("w1", "w2")
INSTANCES = ("i1", "i2")
KINDS = ("claim", "heartbeat", "release", "confirm", "member", "leave", "init", "acquire",
         "accept", "release_records", "reject", "renew", "reset", "reset_offsets", "key_claim",
         "key_heartbeat", "key_release", "checkpoint", "garbage", "misplaced")


class Collect:
    """An observation sink that keeps every row."""

    def __init__(self) -> None:
        self.rows: list[tuple[str, tuple[Any, ...]]] = []

    def record(self, row: RecordRow) -> None:
        self.rows.append(("record", tuple(row)))

    def stint(self, row: StintRow) -> None:
        self.rows.append(("stint", tuple(row)))

    def share_range(self, row: ShareRangeRow) -> None:
        self.rows.append(("share_range", tuple(row)))

    def share_state(self, row: ShareStateRow) -> None:
        self.rows.append(("share_state", tuple(row)))


def _ranges(first: int, size: int, gap: int) -> str:
    last = first + size
    if gap:
        return f"{first}-{last},{last + gap + 1}"
    return f"{first}-{last}" if size else str(first)


def _message(kind: str, g: str, t: str, p: int, c: str, i: str, n: int) -> Message | bytes:
    base = (0, i, c, g, t, p)
    first, size, gap = n % 6, n % 3, (n // 3) % 2
    table: dict[str, Any] = {
        "claim": lambda: ClaimingPartition(*base),
        "heartbeat": lambda: Heartbeat(*base, n),
        "release": lambda: ReleasingPartition(*base, n),
        "confirm": lambda: ClaimingMessages(*base, n),
        "member": lambda: MemberHeartbeat(0, i, c, g, t, 1, n % 3 - 1),
        "leave": lambda: MemberHeartbeat(0, i, c, g, t, 0),
        "init": lambda: InitializingSharePartition(*base, n % 5, 2 + n % 3, 4 + n % 8),
        "acquire": lambda: AcquiringRecords(*base, _ranges(first, size, gap), 1_000 + n * 37),
        "accept": lambda: AcknowledgingRecords(*base, _ranges(first, size, gap), "accept"),
        "release_records": lambda: AcknowledgingRecords(*base, _ranges(first, size, gap),
                                                        "release"),
        "reject": lambda: AcknowledgingRecords(*base, _ranges(first, size, gap), "reject"),
        "renew": lambda: RenewingLocks(*base, _ranges(first, size, gap), 1_000 + n * 11),
        "reset": lambda: ResettingSharePartition(*base, n % 6),
        "reset_offsets": lambda: ResettingOffsets(*base, n % 6),
        "key_claim": lambda: ClaimingKeyRanges(*base, f"{n * 17}-{n * 17 + 300}"),
        "key_heartbeat": lambda: KeyRangesHeartbeat(*base, n),
        "key_release": lambda: ReleasingKeyRanges(*base, f"{n * 10}-{n * 10 + 100}", n),
        "checkpoint": lambda: Checkpoint(0, i, c, g, t, n, '{"v":1}'),
        "garbage": lambda: b"\x00not/a/record" if n % 2 else b"Heartbeat/7/0/a/b/c/d/0/1",
        "misplaced": lambda: ClaimingPartition(*base),
    }
    message: Message | bytes = table[kind]()
    return message


event_strategy = st.tuples(
    st.sampled_from((0, 1, 10, 100, 400, 900, 1_500, 2_500, 3 * RETENTION)),  # ms since the
                                                                               # previous record
    st.sampled_from(KINDS),
    st.sampled_from(GROUPS),
    st.sampled_from(TOPICS),
    st.integers(0, 1),                # partition
    st.sampled_from(CLIENTS),
    st.sampled_from(INSTANCES),
    st.integers(0, 40),               # offsets, sizes, limits
    st.integers(1, 2),                # position step (gaps are allowed)
    st.booleans(),                    # a tombstone instead of garbage
    st.integers(0, 3),                # > 0: same sender and partition as the record before;
                                      # > 1: the same offsets too
)


def build_log(events: list[tuple[Any, ...]]) -> list[CoordinationRecord]:
    records: list[CoordinationRecord] = []
    now = 1_700_000_000_000
    next_position = [0] * CP
    previous: tuple[Any, ...] | None = None
    for dt, kind, g, t, p, c, i, n, step, tombstone, same in events:
        if same and previous is not None:
            g, t, p, c, i, m = previous
            n = m if same > 1 else n   # the same offsets or ranges, too
        previous = (g, t, p, c, i, n)
        now += dt
        cp = coordination_partition(t, CP)
        if kind == "misplaced":
            cp = (cp + 1 + n % (CP - 1)) % CP
        message = _message(kind, g, t, p, c, i, n)
        value = encode(message) if not isinstance(message, bytes) else (
            None if tombstone else message)
        records.append(CoordinationRecord(cp, next_position[cp], now, value))
        next_position[cp] += step
    return records


def config(retention: int = RETENTION) -> RationalizerConfig:
    return RationalizerConfig(CP, HI, offsets_retention_ms=retention)


def whole_log(records: list[CoordinationRecord], retention: int = RETENTION,
              ) -> tuple[list[Verdict], Counter[Any]]:
    rationalizer = Rationalizer(config(retention))
    sink = Collect()
    observer = AuditObserver(rationalizer, sink)
    rationalizer.observe(observer)
    verdicts = [rationalizer.apply(r).verdict for r in records]
    observer.finish()
    return verdicts, Counter(sink.rows)


def per_bucket(records: list[CoordinationRecord], *, whole_topic_for_resets: bool = True,
               retention: int = RETENTION) -> tuple[list[Verdict], Counter[Any]]:
    routes = [route(r.value, r.partition, CP) for r in records]
    with_reset = {(x.group, x.topic) for x in routes if x.kind == RESET}
    span: dict[tuple[Any, ...], tuple[int, int]] = {}
    for record, r in zip(records, routes, strict=True):
        if r.kind != "garbage":
            first, last = span.get((r.group, r.topic), (record.timestamp_ms, 0))
            span[(r.group, r.topic)] = (min(first, record.timestamp_ms),
                                        max(last, record.timestamp_ms))
    buckets: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for index, (record, r) in enumerate(zip(records, routes, strict=True)):
        first, last = span.get((r.group, r.topic), (0, 0))
        whole = whole_topic_for_resets and needs_whole_topic(
            (r.group, r.topic) in with_reset, first, last, retention)
        key = (record.partition, r.group, r.topic, bucket_partition(r, whole))
        buckets[key].append(index)
    verdicts: list[Verdict | None] = [None] * len(records)
    rows: Counter[Any] = Counter()
    for indices in buckets.values():
        rationalizer = Rationalizer(config(retention))
        sink = Collect()
        observer = AuditObserver(rationalizer, sink)
        rationalizer.observe(observer)
        for index in sorted(indices, key=lambda k: (records[k].partition,
                                                     records[k].position)):
            verdicts[index] = rationalizer.apply(records[index]).verdict
        observer.finish()
        rows.update(sink.rows)
    assert all(v is not None for v in verdicts)
    return [v for v in verdicts if v is not None], rows


@settings(max_examples=300, deadline=None)
@given(st.lists(event_strategy, min_size=20, max_size=150))
def test_per_bucket_rationalizers_agree_with_one_over_the_whole_log(
        events: list[tuple[Any, ...]]) -> None:
    records = build_log(events)
    whole_verdicts, whole_rows = whole_log(records)
    bucket_verdicts, bucket_rows = per_bucket(records)
    for record, a, b in zip(records, whole_verdicts, bucket_verdicts, strict=True):
        assert a == b, (record, a, b)
    assert whole_rows == bucket_rows


@settings(max_examples=100, deadline=None)
@given(st.lists(event_strategy.filter(lambda e: e[1] not in ("reset", "reset_offsets")),
                min_size=20, max_size=150))
def test_without_resets_or_expiry_single_partitions_are_enough(
        events: list[tuple[Any, ...]]) -> None:
    records = build_log(events)
    never = 10**12  # an offset retention no generated log reaches: nothing expires
    assert whole_log(records, never) == per_bucket(records, whole_topic_for_resets=False,
                                                   retention=never)


def test_a_reset_needs_its_whole_topic() -> None:
    """The counterexample: a member alive through partition 1 blocks a reset of partition 0."""
    t0 = 1_700_000_000_000
    cp = coordination_partition("alpha", CP)
    messages = [
        InitializingSharePartition(0, "i1", "w1", "g1", "alpha", 0, 0, 5, 10),
        ClaimingPartition(0, "i2", "w2", "g1", "alpha", 1),     # w2 is live: a sign of life
        ResettingSharePartition(0, "i9", "admin", "g1", "alpha", 0, 3),
    ]
    records = [CoordinationRecord(cp, k, t0 + k, encode(m)) for k, m in enumerate(messages)]
    whole, _ = whole_log(records)
    split, _ = per_bucket(records, whole_topic_for_resets=False)
    grouped, _ = per_bucket(records)
    assert whole[2] is Verdict.SHARE_IGNORED        # w2 is a live member of (g1, alpha)
    assert split[2] is Verdict.SHARE_RESET          # partition 0's bucket never saw w2
    assert grouped[2] is Verdict.SHARE_IGNORED


def test_duplicates_need_strictly_growing_positions() -> None:
    """A re-delivered (older) position is a duplicate for the whole log but may not be for its
    bucket: the engines read Kafka offsets, which only grow, so this never arises there."""
    t0 = 1_700_000_000_000
    cp = coordination_partition("alpha", CP)
    records = [
        CoordinationRecord(cp, 5, t0, encode(ClaimingPartition(0, "i1", "w1", "g1", "alpha", 0))),
        CoordinationRecord(cp, 3, t0 + 1,
                           encode(ClaimingPartition(0, "i1", "w1", "g1", "alpha", 1))),
    ]
    whole, _ = whole_log(records)
    split, _ = per_bucket(records)
    assert whole[1] is Verdict.DUPLICATE and split[1] is Verdict.CLAIM_WON
