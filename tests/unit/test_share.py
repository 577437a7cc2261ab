"""Share-partition state: KIP-932's worked example step by step, and each transition."""

from __future__ import annotations

from marshal_py.world import Verdict
from marshal_py.world.share import RecordState
from tests.support import T0, Scenario

AV, AQ, ACK, ARC = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                    RecordState.ARCHIVED)
S = 1_000  # one second in ms


Records = dict[int, tuple[RecordState, int]]


def state(s: Scenario, now: int | None = None) -> tuple[int, int, Records]:
    share = s.replay().share_partition("g", "t", 0)
    assert share is not None
    records = {r.offset: (r.state, r.delivery_count)
               for r in share.in_flight(None if now is None else T0 + now)}
    return share.spso, share.speo, records


def many(first: int, last: int, st: RecordState, count: int) -> dict[int, tuple[RecordState, int]]:
    return {o: (st, count) for o in range(first, last + 1)}


def test_the_kip_932_worked_example_step_by_step() -> None:
    s = Scenario()
    s.share_init("a", 0, start=100)
    assert state(s) == (100, 100, {})
    # In the batched case with successful processing, one state change per batch.
    s.acquire("a", 1 * S, "100-109")
    assert state(s) == (100, 110, many(100, 109, AQ, 1))
    s.ack("a", 2 * S, "100-109")
    assert state(s) == (110, 110, {})
    # A messier sequence of release and acknowledge.
    s.acquire("a", 3 * S, "110-119")  # locks until 33 s
    assert state(s) == (110, 120, many(110, 119, AQ, 1))
    s.ack("a", 4 * S, "110", "release")
    assert state(s) == (110, 120, {110: (AV, 1), **many(111, 119, AQ, 1)})
    s.ack("a", 5 * S, "119")
    assert state(s) == (110, 120, {110: (AV, 1), **many(111, 118, AQ, 1), 119: (ACK, 1)})
    s.acquire("a", 6 * S, "110,120")
    assert state(s) == (110, 121, {110: (AQ, 2), **many(111, 118, AQ, 1), 119: (ACK, 1),
                                   120: (AQ, 1)})
    # The lock of 111 and 112 elapses (the holder renewed only 113-118 and, via the fetch,
    # 110 and 120 are younger).
    s.renew("a", 20 * S, "113-118")
    s.renew("a", 20 * S + 1, "110,120")
    assert state(s, now=33 * S) == (110, 121, {110: (AQ, 2), 111: (AV, 1), 112: (AV, 1),
                                               **many(113, 118, AQ, 1), 119: (ACK, 1),
                                               120: (AQ, 1)})
    s.ack("a", 34 * S, "113-118")
    assert state(s) == (110, 121, {110: (AQ, 2), 111: (AV, 1), 112: (AV, 1),
                                   **many(113, 119, ACK, 1), 120: (AQ, 1)})
    s.acquire("a", 35 * S, "111-112")
    assert state(s) == (110, 121, {**many(110, 112, AQ, 2), **many(113, 119, ACK, 1),
                                   120: (AQ, 1)})
    s.ack("a", 36 * S, "110")
    assert state(s) == (111, 121, {**many(111, 112, AQ, 2), **many(113, 119, ACK, 1),
                                   120: (AQ, 1)})
    s.ack("a", 37 * S, "111-112")
    assert state(s) == (120, 121, {120: (AQ, 1)})


def test_the_earliest_acquisition_wins_and_later_overlaps_are_void() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0)
    s.acquire("a", 1, "0-9")
    s.acquire("b", 2, "5-14")
    r = s.replay()
    share = r.share_partition("g", "t", 0)
    assert share is not None
    holders = {rec.offset: rec.holder.client_id for rec in share.in_flight() if rec.holder}
    assert holders == {**dict.fromkeys(range(0, 10), "a"), **dict.fromkeys(range(10, 15), "b")}
    assert r.share_ignored_offsets == 5


def test_acks_from_a_non_holder_or_after_the_lock_are_ignored_and_counted() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0)
    s.acquire("a", 1, "0-4", lock_ms=1_000)
    s.ack("b", 2, "0-4")  # not the holder
    s.ack("a", 1 + 1_000, "0-4")  # exactly when the lock elapses: too late
    r = s.replay()
    assert r.counters[Verdict.SHARE_IGNORED] == 2
    assert r.share_ignored_offsets == 10
    share = r.share_partition("g", "t", 0)
    assert share is not None
    assert [x.state for x in share.in_flight()] == [AV] * 5


def test_release_at_the_delivery_limit_archives_and_reject_archives_at_once() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0, delivery_limit=2)
    s.acquire("a", 1, "0-1")
    s.ack("a", 2, "0", "release")
    s.ack("a", 3, "1", "reject")
    assert state(s) == (0, 2, {0: (AV, 1), 1: (ARC, 1)})  # the SPSO waits for 0
    s.acquire("a", 4, "0")
    s.ack("a", 5, "0", "release")  # second delivery, limit 2: archived
    spso, speo, records = state(s)
    assert (spso, speo, records) == (2, 2, {})
    share = s.replay().share_partition("g", "t", 0)
    assert share is not None and share.exhausted == [0]


def test_lock_expiry_at_the_limit_archives() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0, delivery_limit=2)
    s.acquire("a", 0, "0", lock_ms=1_000)
    s.acquire("b", 1_000, "0", lock_ms=1_000)  # a's lock elapsed: b gets it, count 2
    assert state(s) == (0, 1, {0: (AQ, 2)})
    s.acquire("c", 2_000, "5", lock_ms=1_000)  # any later record applies b's expiry
    spso, _, records = state(s)
    assert spso == 1 and records[5] == (AQ, 1)


def test_the_inflight_limit_voids_acquisitions_beyond_it() -> None:
    s = Scenario()
    s.share_init("a", 0, start=10, inflight_limit=5)
    s.acquire("a", 1, "10-20")
    assert state(s) == (10, 15, many(10, 14, AQ, 1))


def test_renewal_extends_only_the_holders_live_locks() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0)
    s.acquire("a", 0, "0-1", lock_ms=1_000)
    s.renew("a", 900, "0", lock_ms=1_000)
    s.renew("b", 950, "1", lock_ms=1_000)
    assert state(s, now=1_500) == (0, 2, {0: (AQ, 1), 1: (AV, 1)})


def test_initialization_happens_once_and_share_messages_need_it() -> None:
    s = Scenario()
    s.acquire("a", 0, "0-1")
    s.share_init("a", 1, start=50)
    s.share_init("b", 2, start=0)
    r = s.replay()
    share = r.share_partition("g", "t", 0)
    assert share is not None and share.spso == 50
    assert r.counters[Verdict.SHARE_IGNORED] == 2
    assert r.counters[Verdict.SHARE_INITIALIZED] == 1


def test_share_activity_is_a_sign_of_life() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0)
    s.acquire("b", 1, "0")
    assert [m.client_id for m in s.replay().members("g", "t", T0 + 1)] == ["b"]


def test_reset_applies_only_to_an_empty_share_group() -> None:
    from marshal_py.protocol import ResettingSharePartition

    s = Scenario()
    s.share_init("a", 0, start=10)
    s.acquire("a", 1, "10-14")
    s.write(ResettingSharePartition(0, "i-admin", "admin", "g", "t", 0, 0), at=2)
    r = s.replay()
    assert r.counters[Verdict.SHARE_IGNORED] == 1  # a is live (its acquisition)
    s.write(ResettingSharePartition(0, "i-admin", "admin", "g", "t", 0, 3), at=2 + 2 * 10_000 + 1)
    assert state(s) == (3, 3, {})


def test_a_gap_is_archived_without_counting_a_delivery_and_the_spso_passes_it() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0)
    s.acquire("a", 1, "0-5")
    s.ack("b", 2, "5", "gap")  # only the holder may say so
    s.ack("a", 3, "2-3,5", "gap")  # a marker inside the window and one at its end
    assert state(s) == (0, 6, {0: (AQ, 1), 1: (AQ, 1), 2: (ARC, 0), 3: (ARC, 0), 4: (AQ, 1),
                               5: (ARC, 0)})
    s.ack("a", 4, "0-1,4")
    assert state(s) == (6, 6, {})
    share = s.replay().share_partition("g", "t", 0)
    assert share is not None and share.exhausted == []  # nothing to dead-letter


def test_a_gap_redelivered_after_a_lapsed_lock_keeps_only_real_attempts() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0, delivery_limit=2)
    s.acquire("a", 0, "0", lock_ms=1_000)
    s.acquire("b", 1_000, "0", lock_ms=1_000)  # a crashed before saying; b gets it, count 2
    s.ack("b", 1_001, "0", "gap")
    assert state(s) == (1, 1, {})
    share = s.replay().share_partition("g", "t", 0)
    assert share is not None and share.exhausted == []


# -- dead letters decided by the log ---------------------------------------------------------

DL = RecordState.DEAD_LETTER


def duty_view(s: Scenario, offset: int, now: int | None = None) -> tuple[bool, int | None, int]:
    share = s.replay().share_partition("g", "t", 0)
    assert share is not None
    (record,) = [r for r in share.in_flight(None if now is None else T0 + now)
                 if r.offset == offset]
    return record.duty, record.owed_since_ms, record.duties


def test_a_release_at_the_limit_owes_a_dead_letter_that_holds_the_spso() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0, delivery_limit=2, dead_letter_topic="dlq")
    s.acquire("a", 1, "0-1")
    s.ack("a", 2, "0", "release")
    s.acquire("a", 3, "0")
    s.ack("a", 4, "0", "release")  # second attempt, limit 2: owed a dead letter
    s.ack("a", 5, "1")
    assert state(s) == (0, 2, {0: (DL, 2), 1: (ACK, 1)})  # the SPSO waits for the letter
    assert duty_view(s, 0) == (False, T0 + 4, 0)
    # Whoever acquires it takes the duty: no new delivery, the count stays.
    s.acquire("b", 6, "0")
    assert state(s) == (0, 2, {0: (AQ, 2), 1: (ACK, 1)})
    assert duty_view(s, 0) == (True, T0 + 4, 1)
    # A duty is not a delivery: accept and reject do not apply to it.
    s.ack("b", 7, "0", "accept")
    s.ack("b", 8, "0", "reject")
    assert state(s) == (0, 2, {0: (AQ, 2), 1: (ACK, 1)})
    s.ack("b", 9, "0", "dead-lettered")
    assert state(s) == (2, 2, {})


def test_a_crashed_duty_holder_passes_the_duty_on() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0, delivery_limit=2, dead_letter_topic="dlq")
    s.acquire("a", 1, "0", lock_ms=1_000)
    s.acquire("a", 2 * S, "0", lock_ms=1_000)
    # The holder crashes at its last attempt: the lock elapses, the record is owed.
    assert state(s, now=4 * S) == (0, 1, {0: (DL, 2)})
    s.acquire("b", 5 * S, "0", lock_ms=1_000)
    assert duty_view(s, 0) == (True, T0 + 3 * S, 1)  # owed since the lock elapsed
    # b crashes holding the duty: it is owed again, and c's duty is the second.
    assert state(s, now=7 * S) == (0, 1, {0: (DL, 2)})
    s.acquire("c", 8 * S, "0", lock_ms=1_000)
    assert duty_view(s, 0) == (True, T0 + 3 * S, 2)
    s.ack("c", 8 * S + 1, "0", "release")  # could not write it now: owed again
    assert state(s) == (0, 1, {0: (DL, 2)})
    s.acquire("a", 9 * S, "0")
    s.ack("a", 9 * S + 1, "0", "gap")  # the record is gone (compaction): nothing to write
    assert state(s) == (1, 1, {})


def test_dead_lettered_applies_only_to_a_duty() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0, dead_letter_topic="dlq")
    s.acquire("a", 1, "0")
    s.ack("a", 2, "0", "dead-lettered")
    r = s.replay()
    assert r.counters[Verdict.SHARE_IGNORED] == 1
    assert state(s) == (0, 1, {0: (AQ, 1)})


def test_without_a_dead_letter_topic_the_limit_archives_as_before() -> None:
    s = Scenario()
    s.share_init("a", 0, start=0, delivery_limit=2)
    s.acquire("a", 1, "0")
    s.ack("a", 2, "0", "release")
    s.acquire("a", 3, "0")
    s.ack("a", 4, "0", "release")
    assert state(s) == (1, 1, {})


def test_dead_letter_state_survives_a_checkpoint() -> None:
    from marshal_py.world.checkpoint import PairState, decode_state, encode_state

    s = Scenario()
    s.share_init("a", 0, start=0, delivery_limit=2, dead_letter_topic="dlq")
    s.acquire("a", 1, "0-2", lock_ms=1_000)
    s.acquire("a", 2 * S, "0-1", lock_ms=1_000)
    s.acquire("b", 4 * S, "0", lock_ms=5_000)  # 0: a duty; 1: owed
    share = s.replay().share_partition("g", "t", 0)
    assert share is not None
    text = encode_state(PairState(shares={0: share}))
    back = decode_state(text).shares[0]
    assert back.dead_letter_topic == "dlq"
    assert back.stored_records() == share.stored_records()
    assert back.in_flight(T0 + 20 * S) == share.in_flight(T0 + 20 * S)
    # A share-partition without dead letters writes what older versions wrote.
    plain = Scenario()
    plain.share_init("a", 0, start=0)
    plain.acquire("a", 1, "0-2")
    plain_share = plain.replay().share_partition("g", "t", 0)
    assert plain_share is not None
    expiry = T0 + 1 + 30_000
    assert f'"shares":[[0,0,3,5,2000,[[0,1,1,0,{expiry}],[1,1,1,0,{expiry}],[2,1,1,0,{expiry}]]]]' \
        in encode_state(PairState(shares={0: plain_share}))
