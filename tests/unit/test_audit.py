"""The audit's pure rules: observation, aggregation, and each invariant on a hand-made log."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from marshal_py.audit.observer import (
    AMO_RECONFIRMED,
    AMO_REGRESSED,
    OVERLAPPING_OWNERS,
    SHARE_ACCEPTED_TWICE,
    TABLES,
    WHOLE_TOPIC,
    AuditTables,
    LocalAggregator,
    RangeMap,
    RecordRow,
    Route,
    StintRow,
    audit_records,
    bucket_partition,
    route,
    topic_filter,
)
from marshal_py.audit.share_history import grant_change
from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    InitializingSharePartition,
    MemberHeartbeat,
    Message,
    ReleasingPartition,
    ResettingSharePartition,
    coordination_partition,
    encode,
)
from marshal_py.protocol.auth import GroupKey, sign
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig

HI = 10_000
CP = 4
T0 = 1_700_000_000_000
G, TOPIC = "team.job", "events"
HOME = coordination_partition(TOPIC, CP)


class Log:
    """A hand-made log on the topic's coordination partition."""

    def __init__(self) -> None:
        self.records: list[CoordinationRecord] = []

    def put(self, at_ms: int, message: Message | bytes | None, cp: int = HOME) -> None:
        value = message if isinstance(message, bytes | None) else encode(message)
        position = sum(1 for r in self.records if r.partition == cp)
        self.records.append(CoordinationRecord(cp, position, T0 + at_ms, value))

    def audit(self, group: str | None = None, topic: str | None = None) -> AuditTables:
        tables = audit_records(self.records, Rationalizer(RationalizerConfig(CP, HI)),
                               topic_filter(group, topic))
        tables.share_history = list(tables.share_history)
        return tables


def claim(instance: str, client: str, p: int = 0) -> ClaimingPartition:
    return ClaimingPartition(0, instance, client, G, TOPIC, p)


def hb(instance: str, client: str, offset: int, p: int = 0) -> Heartbeat:
    return Heartbeat(0, instance, client, G, TOPIC, p, offset)


def release(instance: str, client: str, offset: int, p: int = 0) -> ReleasingPartition:
    return ReleasingPartition(0, instance, client, G, TOPIC, p, offset)


def confirm(instance: str, client: str, last: int, p: int = 0) -> ClaimingMessages:
    return ClaimingMessages(0, instance, client, G, TOPIC, p, last)


def invariants(tables: AuditTables) -> list[str]:
    return [str(v[0]) for v in tables.violations]


def named(table: str, rows: Sequence[tuple[object, ...]]) -> list[dict[str, object]]:
    names = [n for n, _ in TABLES[table]]
    return [dict(zip(names, row, strict=True)) for row in rows]


# -- ownership and partitions -----------------------------------------------------------------


def clean_exclusive_log() -> Log:
    log = Log()
    log.put(0, claim("aaaa0001", "w1"))
    log.put(1, claim("bbbb0002", "w2"))                      # loses the race
    log.put(5_000, hb("aaaa0001", "w1", 10))
    log.put(12_000, hb("aaaa0001", "w1", 20))                # gap 7 s
    log.put(26_000, hb("aaaa0001", "w1", 30))                # gap 14 s > HI
    log.put(27_000, release("aaaa0001", "w1", 35))
    log.put(28_000, claim("bbbb0002", "w2"))                 # wins the released partition
    log.put(29_000, hb("bbbb0002", "w2", 36))
    log.put(29_500, hb("aaaa0001", "w1", 99))                # not the owner
    log.put(60_000, claim("cccc0003", "w3"))                 # takeover: w2 stale > 2 HI
    log.put(72_500, claim("dddd0004", "w3"))                 # w3 restarted (after its lease)
    log.put(73_000, hb("dddd0004", "w3", 50))
    return log


def test_ownership_stints_and_their_end_reasons() -> None:
    tables = clean_exclusive_log().audit()
    stints = named("ownership", tables.ownership)
    assert [(s["client_id"], s["instance_id"], s["end_reason"]) for s in stints] == [
        ("w1", "aaaa0001", "released"), ("w2", "bbbb0002", "taken_over"),
        ("w3", "cccc0003", "reclaimed"), ("w3", "dddd0004", "open")]
    first, second, third, last = stints
    assert (first["start_ms"], first["end_ms"], first["last_heartbeat_ms"]) == (
        T0, T0 + 27_000, T0 + 26_000)
    assert (first["first_committed"], first["last_committed"]) == (10, 35)
    assert (second["start_ms"], second["end_ms"], second["last_committed"]) == (
        T0 + 28_000, T0 + 60_000, 36)
    assert third["first_committed"] is None and third["end_ms"] == T0 + 72_500
    assert last["end_ms"] is None and last["last_committed"] == 50
    assert invariants(tables) == []


def test_partition_counters() -> None:
    (row,) = named("partitions", clean_exclusive_log().audit().partitions)
    assert row == {
        "group": G, "topic": TOPIC, "partition": 0, "claims_won": 3, "claims_lost": 1,
        "takeovers": 1, "reclaims": 1, "releases": 1, "heartbeats": 5,
        "max_heartbeat_gap_ms": 14_000, "gaps_over_hi": 1,
        "amo_first_confirmed": None, "amo_last_confirmed": None}


def test_summary_and_coordination_counts() -> None:
    log = clean_exclusive_log()
    log.put(82_000, b"\x00garbage")
    log.put(82_001, b"Heartbeat/9/0/a/b/c/events/0/1")
    log.put(82_002, b"ClaimingEverything/1/0/a/b/c/d/0")
    log.put(82_003, None)
    log.put(82_004, claim("eeee0005", "w5"), cp=(HOME + 1) % CP)  # misplaced
    log.put(82_005, MemberHeartbeat(0, "dddd0004", "w3", G, TOPIC, 1))
    tables = log.audit()
    assert named("summary", tables.summary) == [{
        "group": G, "topic": TOPIC, "partitions": 1, "records": 14, "owners": 4,
        "takeovers": 1, "violations": 0}]
    coordination = {row[0]: row for row in tables.coordination}
    assert coordination[HOME] == (HOME, 17, 1, 1, 1, 1, 0, 0, 0)
    assert coordination[(HOME + 1) % CP] == ((HOME + 1) % CP, 1, 0, 0, 0, 0, 1, 0, 0)


def test_filters_keep_only_the_group_and_topic_but_all_garbage() -> None:
    log = clean_exclusive_log()
    log.put(90_000, ClaimingPartition(0, "ffff0006", "w6", "other", TOPIC, 0))
    log.put(90_001, b"\x00garbage")
    tables = log.audit(group="other")
    assert [row[:2] for row in tables.summary] == [("other", TOPIC)]
    assert [row[3] for row in tables.ownership] == ["w6"]
    assert sum(int(str(row[2])) for row in tables.coordination) == 1


# -- AMO --------------------------------------------------------------------------------------


def test_amo_ranges_and_a_release_lowering_the_confirmed_offset_is_clean() -> None:
    log = Log()
    log.put(0, claim("aaaa0001", "w1"))
    log.put(10, confirm("aaaa0001", "w1", 99))
    log.put(20, hb("aaaa0001", "w1", 0))
    log.put(30, confirm("aaaa0001", "w1", 199))
    log.put(40, release("aaaa0001", "w1", 150))             # handed out up to 149
    log.put(50, claim("bbbb0002", "w2"))
    log.put(60, confirm("bbbb0002", "w2", 249))             # from 150: allowed after release
    tables = log.audit()
    assert named("amo_ranges", tables.amo_ranges) == [
        {"group": G, "topic": TOPIC, "partition": 0, "client_id": "w1",
         "instance_id": "aaaa0001", "first_confirmed": 99, "last_confirmed": 199,
         "batches": 2},
        {"group": G, "topic": TOPIC, "partition": 0, "client_id": "w2",
         "instance_id": "bbbb0002", "first_confirmed": 249, "last_confirmed": 249,
         "batches": 1}]
    (row,) = named("partitions", tables.partitions)
    assert (row["amo_first_confirmed"], row["amo_last_confirmed"]) == (99, 249)
    assert invariants(tables) == []


def test_amo_reconfirmed_below_the_floor_after_a_takeover_is_a_violation() -> None:
    log = Log()
    log.put(0, claim("aaaa0001", "w1"))
    log.put(10, confirm("aaaa0001", "w1", 199))
    log.put(20, hb("aaaa0001", "w1", 100))                   # then it crashes
    log.put(20 + 2 * HI + 1, claim("bbbb0002", "w2"))         # takeover
    log.put(20 + 2 * HI + 2, confirm("bbbb0002", "w2", 150))  # 100..150 were w1's
    tables = log.audit()
    assert invariants(tables) == [AMO_RECONFIRMED]
    assert tables.violations[0][4] == ("w2/bbbb0002 confirmed up to 150, at or below 199 "
                                       "confirmed before its stint began")
    assert tables.violations[0][5] == T0 + 20 + 2 * HI + 2


def test_amo_confirmations_above_the_floor_are_clean() -> None:
    log = Log()
    log.put(0, claim("aaaa0001", "w1"))
    log.put(10, confirm("aaaa0001", "w1", 199))
    log.put(20 + 2 * HI + 1, claim("bbbb0002", "w2"))
    log.put(20 + 2 * HI + 2, confirm("bbbb0002", "w2", 299))
    log.put(20 + 2 * HI + 3, confirm("bbbb0002", "w2", 250))  # its own re-send: no change
    assert invariants(log.audit()) == []


def test_amo_regression_is_detected_on_observation_rows() -> None:
    # A rationalizer never lowers the confirmed offset except by rule 6, so this invariant is
    # checked on hand-made observation rows.
    def row(verdict: str, before: int | None, after: int | None,
            offset: int | None = None) -> RecordRow:
        return RecordRow(HOME, 0, T0, G, TOPIC, 0, verdict, "w1", "aaaa0001", offset, None,
                         HI, before, after, None, None)

    aggregator = LocalAggregator()
    aggregator.record(row("heartbeat", 100, 90, 5))
    aggregator.record(row("claim_won", 100, None))
    aggregator.record(row("released", 100, 49, 50))   # rule 6: offset - 1, clean
    aggregator.record(row("released", 100, 40, 50))   # not offset - 1
    aggregator.record(row("messages_claimed", 100, 120, 120))
    tables = aggregator.tables()
    assert invariants(tables) == [AMO_REGRESSED] * 3
    assert tables.violations[0][4] == "AMO-confirmed offset fell from 100 to 90 on heartbeat"
    assert tables.violations[1][4] == "AMO-confirmed offset fell from 100 to None on claim_won"


# -- two owners at once -----------------------------------------------------------------------


def test_a_reclaim_while_the_old_instance_holds_its_lease_is_overlapping_owners() -> None:
    log = Log()
    log.put(0, claim("aaaa0001", "w1"))
    log.put(4_000, hb("aaaa0001", "w1", 10))                 # lease until 4 s + HI
    log.put(9_000, claim("bbbb0002", "w1"))                  # a second process of w1
    tables = log.audit()
    assert invariants(tables) == [OVERLAPPING_OWNERS]
    assert tables.violations[0][4] == ("w1/bbbb0002 began while w1/aaaa0001 could hand out "
                                       f"records until {T0 + 4_000 + HI}")


def test_a_restart_reclaiming_after_the_lease_is_clean() -> None:
    log = Log()
    log.put(0, claim("aaaa0001", "w1"))
    log.put(4_000, hb("aaaa0001", "w1", 10))
    log.put(4_000 + HI + 2_500, claim("bbbb0002", "w1"))
    assert invariants(log.audit()) == []


def test_overlap_is_checked_on_stint_rows() -> None:
    def stint(client: str, start: int, end: int | None, reason: str,
              last_hb: int) -> StintRow:
        return StintRow(G, TOPIC, 0, client, "i", start, end, last_hb, reason, None, None,
                        HI, None, None, None, 0, HOME, start)

    aggregator = LocalAggregator()
    aggregator.stint(stint("a", 0, 100, "released", 50))
    aggregator.stint(stint("b", 90, 200, "taken_over", 150))       # began before a released
    aggregator.stint(stint("c", 200 + 2 * HI, None, "open", 0))    # clean
    assert invariants(aggregator.tables()) == [OVERLAPPING_OWNERS]


# -- share ------------------------------------------------------------------------------------


def share_log(reset: bool) -> Log:
    log = Log()
    init = InitializingSharePartition(0, "aaaa0001", "w1", G, TOPIC, 0, 0, 3, 100)
    log.put(0, init)
    log.put(10, AcquiringRecords(0, "aaaa0001", "w1", G, TOPIC, 0, "0-9", 30_000))
    log.put(20, AcknowledgingRecords(0, "aaaa0001", "w1", G, TOPIC, 0, "0-4", "accept"))
    log.put(30, AcknowledgingRecords(0, "aaaa0001", "w1", G, TOPIC, 0, "5-6", "release"))
    log.put(40, AcknowledgingRecords(0, "aaaa0001", "w1", G, TOPIC, 0, "7", "reject"))
    log.put(50, AcquiringRecords(0, "bbbb0002", "w2", G, TOPIC, 0, "5-6,10-11", 30_000))
    log.put(60, AcknowledgingRecords(0, "bbbb0002", "w2", G, TOPIC, 0, "5,10", "accept"))
    if reset:
        later = 60 + 2 * HI + 1                                # nobody is live any more
        log.put(later, ResettingSharePartition(0, "admin000", "admin", G, TOPIC, 0, 3))
        log.put(later + 1, AcquiringRecords(0, "cccc0003", "w3", G, TOPIC, 0, "3-4", 30_000))
        log.put(later + 2, AcknowledgingRecords(0, "cccc0003", "w3", G, TOPIC, 0, "3-4",
                                                "accept"))
    return log


def test_share_history_per_offset() -> None:
    rows = {r["offset"]: r for r in named("share_history", share_log(False).audit()
                                          .share_history)}  # type: ignore[arg-type]
    assert sorted(int(str(o)) for o in rows) == list(range(12))

    def brief(offset: int) -> tuple[object, ...]:
        r = rows[offset]
        return (r["acquisitions"], r["accepts"], r["releases"], r["rejects"],
                r["last_delivery_count"], r["final_state"])

    assert brief(0) == (1, 1, 0, 0, 1, "acknowledged")
    assert brief(5) == (2, 1, 1, 0, 2, "acknowledged")
    assert brief(6) == (2, 0, 1, 0, 2, "acquired")
    assert brief(7) == (1, 0, 0, 1, 1, "archived")
    assert brief(8) == (1, 0, 0, 0, 1, "acquired")
    assert brief(10) == (1, 1, 0, 0, 1, "acknowledged")
    assert brief(11) == (1, 0, 0, 0, 1, "acquired")


def test_share_without_a_reset_accepts_nothing_twice() -> None:
    assert invariants(share_log(False).audit()) == []


def test_a_reset_moving_the_spso_back_makes_records_accepted_twice() -> None:
    tables = share_log(True).audit()
    assert invariants(tables) == [SHARE_ACCEPTED_TWICE] * 2
    assert [v[4] for v in tables.violations] == ["offset 3 accepted again by w3/cccc0003",
                                                 "offset 4 accepted again by w3/cccc0003"]
    rows = {r["offset"]: r for r in named("share_history", tables.share_history)}  # type: ignore[arg-type]
    assert (rows[3]["acquisitions"], rows[3]["last_delivery_count"]) == (2, 1)
    assert rows[3]["final_state"] == "acknowledged"
    assert rows[8]["final_state"] == "available"  # discarded by the reset, never acquired


# -- routing and ranges -----------------------------------------------------------------------


def test_routes() -> None:
    assert route(None, HOME, CP) == Route("garbage", None, None, None)
    assert route(b"\x00", HOME, CP).kind == "garbage"
    assert route(encode(claim("a", "w", 3)), HOME, CP) == Route("partition", G, TOPIC, 3)
    assert route(encode(claim("a", "w", 3)), (HOME + 1) % CP, CP).kind == "misplaced"
    member = encode(MemberHeartbeat(0, "a", "w", G, TOPIC, 1))
    assert route(member, HOME, CP) == Route("member", G, TOPIC, None)
    reset = encode(ResettingSharePartition(0, "a", "w", G, TOPIC, 2, 0))
    assert route(reset, HOME, CP) == Route("reset", G, TOPIC, 2)
    signed = sign(encode(claim("a", "w", 3)), GroupKey("k1", b"s" * 32), 1)
    assert route(signed, HOME, CP) == Route("signed", G, TOPIC, 3)  # its pair goes whole
    assert bucket_partition(Route("partition", G, TOPIC, 3), False) == 3
    assert bucket_partition(Route("partition", G, TOPIC, 3), True) == WHOLE_TOPIC
    assert bucket_partition(Route("member", G, TOPIC, None), False) == WHOLE_TOPIC
    assert bucket_partition(Route("garbage", None, None, None), True) is None


@pytest.mark.parametrize("updates", [
    [(0, 9), (10, 19), (5, 14)],
    [(100, 100), (0, 200), (50, 60), (60, 70)],
    [(5, 5), (3, 3), (4, 4), (0, 10)],
])
def test_range_map_matches_a_per_offset_count(updates: list[tuple[int, int]]) -> None:
    ranges = RangeMap()
    expected: dict[int, int] = {}
    for position, (first, last) in enumerate(updates):
        ranges.update(first, last, grant_change(position, 0))
        for offset in range(first, last + 1):
            expected[offset] = expected.get(offset, 0) + 1
    got = {o: s.acquisitions for first, last, s in ranges.runs()
           for o in range(first, last + 1)}
    assert got == expected


def test_the_background_generator_yields_what_generate_does() -> None:
    from marshal_py.audit.generate import generate, generate_in_background

    inline = list(generate(3_000, seed=5, faults=0.01))
    assert list(generate_in_background(3_000, chunk=700, seed=5, faults=0.01)) == inline


def test_a_failing_background_generator_raises_in_the_reader() -> None:
    from marshal_py.audit.generate import generate_in_background

    with pytest.raises(RuntimeError, match="generating records failed: TypeError"):
        list(generate_in_background(10, no_such_option=1))
