"""Rationalizer rules: the original suite's scenarios, plus the faults we fixed."""

from __future__ import annotations

from marshal_py.protocol import Checkpoint, ClaimingKeyRanges
from marshal_py.world import ClaimStatus, Owner, Rationalizer, RationalizerConfig, Verdict
from tests.support import HI, T0, Scenario


def owner_of(s: Scenario, **where: object) -> str | None:
    claim = s.replay().claim(str(where.get("group", "g")), str(where.get("topic", "t")),
                             int(where.get("partition", 0)))  # type: ignore[call-overload]
    return claim.owner.client_id if claim.owner else None


def test_a_lone_claim_wins_and_is_fresh() -> None:
    s = Scenario()
    s.claim("a", at=0)
    r = s.replay()
    claim = r.claim("g", "t", 0)
    assert claim.owner == Owner("i-a", "a")
    assert claim.status(T0) is ClaimStatus.FRESH
    assert r.counters[Verdict.CLAIM_WON] == 1


def test_status_boundaries_at_hi_2hi_and_2hi_plus_1() -> None:
    s = Scenario()
    s.claim("a", at=0)
    claim = s.replay().claim("g", "t", 0)
    assert claim.status(T0 + HI - 1) is ClaimStatus.FRESH
    assert claim.status(T0 + HI) is ClaimStatus.UNKNOWN
    assert claim.status(T0 + 2 * HI) is ClaimStatus.UNKNOWN
    assert claim.is_held(T0 + 2 * HI)
    assert claim.status(T0 + 2 * HI + 1) is ClaimStatus.STALE
    assert not claim.is_held(T0 + 2 * HI + 1)


def test_a_competing_claim_at_exactly_2hi_loses_and_at_2hi_plus_1_wins() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.claim("b", at=2 * HI)
    assert owner_of(s) == "a"
    s.claim("b", at=2 * HI + 1)
    assert owner_of(s) == "b"


def test_unclaimed_partition_has_no_owner() -> None:
    s = Scenario()
    claim = s.replay().claim("g", "t", 7)
    assert claim.owner is None
    assert claim.status(T0) is ClaimStatus.UNCLAIMED


def test_earliest_claim_in_log_order_wins_a_race() -> None:
    s = Scenario()
    s.claim("a", at=5)
    s.claim("b", at=5)
    s.claim("c", at=6)
    r = s.replay()
    assert r.claim("g", "t", 0).owner == Owner("i-a", "a")
    assert r.counters[Verdict.CLAIM_LOST] == 2


def test_claims_are_scoped_per_group() -> None:
    s = Scenario()
    s.claim("a", at=0, group="g1")
    s.claim("b", at=1, group="g2")
    r = s.replay()
    assert r.claim("g1", "t", 0).owner == Owner("i-a", "a")
    assert r.claim("g2", "t", 0).owner == Owner("i-b", "b")


def test_claims_are_scoped_per_topic_and_partition() -> None:
    s = Scenario()
    s.claim("a", at=0, topic="t", partition=0)
    s.claim("b", at=1, topic="t", partition=1)
    s.claim("c", at=2, topic="u", partition=0)
    r = s.replay()
    assert [c.owner.client_id for c in r.claims() if c.owner] == ["a", "b", "c"]


def test_partitions_beyond_the_known_count_are_tracked() -> None:
    s = Scenario()
    s.claim("a", at=0, partition=5000)
    assert owner_of(s, partition=5000) == "a"


def test_heartbeats_keep_a_claim_fresh_and_commit_offsets() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.heartbeat("a", at=HI, offset=10)
    s.heartbeat("a", at=2 * HI, offset=20)
    s.claim("b", at=3 * HI)  # 1 HI after the last heartbeat: held
    r = s.replay()
    claim = r.claim("g", "t", 0)
    assert claim.owner == Owner("i-a", "a")
    assert claim.committed_offset == 20
    assert claim.last_heartbeat_ms == T0 + 2 * HI
    assert r.counters[Verdict.CLAIM_LOST] == 1


def test_reclaim_by_the_owner_is_a_renewal() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.heartbeat("a", at=1, offset=3)
    s.claim("a", at=HI)
    r = s.replay()
    claim = r.claim("g", "t", 0)
    assert claim.owner == Owner("i-a", "a")
    assert claim.claimed_at_ms == T0
    assert claim.last_heartbeat_ms == T0 + HI
    assert claim.committed_offset == 3
    assert r.counters[Verdict.CLAIM_RENEWED] == 1


def test_a_restarted_instance_of_the_same_client_reclaims_without_a_race() -> None:
    s = Scenario()
    s.claim("a", at=0, instance="old")
    s.heartbeat("a", at=1, offset=7, instance="old")
    s.claim("a", at=2, instance="new")
    s.heartbeat("a", at=3, offset=9, instance="old")  # the old process is no longer owner
    r = s.replay()
    claim = r.claim("g", "t", 0)
    assert claim.owner == Owner("new", "a")
    assert claim.committed_offset == 7
    assert r.counters[Verdict.CLAIM_RECLAIMED] == 1
    assert r.counters[Verdict.NOT_OWNER] == 1


def test_release_by_the_owner_frees_the_partition_and_sets_the_offset() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.heartbeat("a", at=1, offset=5)
    s.release("a", at=2, offset=8)
    r = s.replay()
    claim = r.claim("g", "t", 0)
    assert claim.owner is None
    assert claim.committed_offset == 8
    assert claim.last_release_ms == T0 + 2
    assert claim.released_by == Owner("i-a", "a")
    assert claim.status(T0 + 3) is ClaimStatus.UNCLAIMED
    s.claim("b", at=3)  # a released partition can be claimed at once
    assert owner_of(s) == "b"


def test_release_by_a_non_owner_is_ignored() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.heartbeat("a", at=1, offset=5)
    s.release("b", at=2, offset=100)
    r = s.replay()
    claim = r.claim("g", "t", 0)
    assert claim.owner == Owner("i-a", "a")
    assert claim.committed_offset == 5
    assert r.counters[Verdict.NOT_OWNER] == 1


def test_a_non_owner_heartbeat_never_takes_a_claim_over() -> None:
    # The original let this heartbeat make "b" the owner.
    s = Scenario()
    s.claim("a", at=0)
    s.heartbeat("b", at=3 * HI, offset=50)
    r = s.replay()
    claim = r.claim("g", "t", 0)
    assert claim.owner == Owner("i-a", "a")
    assert claim.committed_offset is None
    assert claim.status(T0 + 3 * HI) is ClaimStatus.STALE
    assert r.counters[Verdict.NOT_OWNER] == 1


def test_a_heartbeat_on_an_unclaimed_partition_is_ignored() -> None:
    s = Scenario()
    s.heartbeat("a", at=0, offset=5)
    r = s.replay()
    assert r.claim("g", "t", 0).owner is None
    assert r.counters[Verdict.NOT_OWNER] == 1


def test_a_claim_never_resets_the_committed_offset() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.heartbeat("a", at=1, offset=40)
    s.claim_messages("a", at=2, last=45)
    s.claim("b", at=3 * HI)  # takeover after a went stale
    claim = s.replay().claim("g", "t", 0)
    assert claim.owner == Owner("i-b", "b")
    assert claim.committed_offset == 40
    assert claim.amo_claimed_offset == 45


def test_claiming_messages_only_from_the_owner_and_only_grows() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.claim_messages("a", at=1, last=10)
    s.claim_messages("a", at=2, last=5)
    s.claim_messages("b", at=3, last=99)
    r = s.replay()
    assert r.claim("g", "t", 0).amo_claimed_offset == 10
    assert r.counters[Verdict.MESSAGES_CLAIMED] == 2
    assert r.counters[Verdict.NOT_OWNER] == 1


def test_the_stale_owner_is_replaced_and_its_late_heartbeats_ignored() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.heartbeat("a", at=HI, offset=1)
    s.claim("b", at=3 * HI + 1)
    s.heartbeat("a", at=3 * HI + 2, offset=2)  # a zombie wakes up
    s.heartbeat("b", at=3 * HI + 3, offset=3)
    claim = s.replay().claim("g", "t", 0)
    assert claim.owner == Owner("i-b", "b")
    assert claim.committed_offset == 3


def test_decisions_use_the_broker_timestamp_not_the_query_time() -> None:
    # Replaying later (a larger now) never changes who won a race decided in the log.
    s = Scenario()
    s.claim("a", at=0)
    s.claim("b", at=HI)
    for now in (T0, T0 + 10 * HI, T0 + 1000 * HI):
        claim = s.replay().claim("g", "t", 0)
        assert claim.owner == Owner("i-a", "a")
        assert claim.status(now) in (ClaimStatus.FRESH, ClaimStatus.UNKNOWN, ClaimStatus.STALE)


def test_garbage_and_unknown_records_are_counted_and_skipped() -> None:
    s = Scenario()
    s.claim("a", at=0)
    p = s.records[0].partition
    s.raw(b"\x00\x01garbage", at=1, partition=p)
    s.raw(b"Heartbeat/7/0/i-a/a/g/t/0/9", at=2, partition=p)
    s.raw(b"SomethingNew/2/x", at=3, partition=p)
    s.raw(None, at=4, partition=p)
    s.raw(b"Heartbeat/1/0/i-a/a/g/t/0", at=5, partition=p)
    s.heartbeat("a", at=6, offset=3)
    r = s.replay()
    assert r.claim("g", "t", 0).committed_offset == 3
    assert r.counters[Verdict.MALFORMED] == 2
    assert r.counters[Verdict.UNKNOWN_VERSION] == 1
    assert r.counters[Verdict.UNKNOWN_TYPE] == 1
    assert r.counters[Verdict.TOMBSTONE] == 1
    assert r.skipped_count() == 5


def test_records_on_the_wrong_coordination_partition_are_ignored() -> None:
    s = Scenario()
    from marshal_py.protocol import ClaimingPartition, coordination_partition

    home = coordination_partition("t", 4)
    wrong = (home + 1) % 4
    s.write(ClaimingPartition(0, "i-x", "x", "g", "t", 0), at=0, partition=wrong)
    r = s.replay()
    assert r.claim("g", "t", 0).owner is None
    assert r.counters[Verdict.MISPLACED] == 1
    assert r.ignored_count() == 1


def test_repeated_positions_are_duplicates() -> None:
    s = Scenario()
    record = s.claim("a", at=0)
    r = s.rationalizer()
    assert r.apply(record).verdict is Verdict.CLAIM_WON
    assert r.apply(record).verdict is Verdict.DUPLICATE
    assert r.next_position(record.partition) == 1


def test_skip_to_starts_a_replay_mid_log() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.claim("b", at=3 * HI)
    r = s.rationalizer()
    r.skip_to(s.records[0].partition, 1)
    r.apply_all(s.records)
    assert r.claim("g", "t", 0).owner == Owner("i-b", "b")
    assert r.counters[Verdict.DUPLICATE] == 1


def test_per_group_heartbeat_intervals() -> None:
    from marshal_py.world import Rationalizer, RationalizerConfig

    s = Scenario()
    s.claim("a", at=0, group="slow")
    s.claim("b", at=3 * HI, group="slow")
    r = Rationalizer(RationalizerConfig(4, HI, {"slow": 10 * HI}))
    r.apply_all(s.records)
    assert r.claim("slow", "t", 0).owner == Owner("i-a", "a")
    assert r.claim("slow", "t", 0).status(T0 + 15 * HI) is ClaimStatus.UNKNOWN


def test_observers_see_every_outcome() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.claim("b", at=1)
    r = s.rationalizer()
    seen: list[Verdict] = []
    r.observe(lambda o: seen.append(o.verdict))
    r.apply_all(s.records)
    assert seen == [Verdict.CLAIM_WON, Verdict.CLAIM_LOST]


def test_members_are_live_for_2hi_after_any_sign_of_life() -> None:
    s = Scenario()
    s.member("a", at=0)
    s.claim("b", at=1)
    s.heartbeat("b", at=HI, offset=1)
    s.member("c", at=2, topic="other")
    r = s.replay()
    assert r.members("g", "t", T0 + 2) == [Owner("i-a", "a"), Owner("i-b", "b")]
    assert r.members("g", "t", T0 + 2 * HI) == [Owner("i-a", "a"), Owner("i-b", "b")]
    assert r.members("g", "t", T0 + 2 * HI + 1) == [Owner("i-b", "b")]
    assert r.members("g", "other", T0 + 2) == [Owner("i-c", "c")]
    assert r.counters[Verdict.MEMBER_HEARTBEAT] == 2


def test_a_leaving_member_is_gone_at_once_and_a_restart_replaces_its_old_instance() -> None:
    s = Scenario()
    s.member("a", at=0)
    s.claim("b", at=1, instance="old")
    s.member("a", at=2, active=False)
    s.claim("b", at=3, instance="new")
    r = s.replay()
    assert r.members("g", "t", T0 + 3) == [Owner("new", "b")]
    assert r.counters[Verdict.MEMBER_LEFT] == 1


def test_lost_claims_and_non_owner_records_are_no_sign_of_life() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.claim("b", at=1)
    s.heartbeat("c", at=2, offset=1)
    r = s.replay()
    assert r.members("g", "t", T0 + 2) == [Owner("i-a", "a")]


def test_the_owners_release_frees_amo_confirmed_offsets_it_never_handed_out() -> None:
    s = Scenario()
    s.claim("a", at=0)
    s.claim_messages("a", at=1, last=99)  # confirmed 0..99, handed out 0..9
    s.release("a", at=2, offset=10)
    claim = s.replay().claim("g", "t", 0)
    assert claim.committed_offset == 10
    assert claim.amo_claimed_offset == 9  # the next owner starts at 10: nothing lost
    s2 = Scenario()
    s2.claim("a", at=0)
    s2.claim_messages("a", at=1, last=5)
    s2.release("a", at=2, offset=10)
    assert s2.replay().claim("g", "t", 0).amo_claimed_offset == 5  # never raised by a release


# -- announced heartbeat intervals (PROTOCOL.md 5.4) ----------------------------------------


def _with_config(s: Scenario, hi_ms: int) -> Rationalizer:
    """The scenario replayed by a reader configured with another heartbeat interval."""
    r = Rationalizer(RationalizerConfig(s.partitions, hi_ms))
    r.apply_all(s.records)
    return r


def test_a_claim_is_judged_by_the_interval_its_owner_announced() -> None:
    s = Scenario()
    s.member("slow", at=0, interval_ms=10 * HI)
    s.claim("slow", at=1)
    s.member("fast", at=2, interval_ms=HI)
    s.claim("fast", at=2 * HI + 2)  # stale by the configured HI, not by the owner's
    s.claim("fast", at=20 * HI + 1)  # 2 of the owner's intervals: still held
    for hi_ms in (HI, 10 * HI, HI // 10):  # every reader agrees, whatever it is configured with
        r = _with_config(s, hi_ms)
        claim = r.claim("g", "t", 0)
        assert claim.owner == Owner("i-slow", "slow") and claim.heartbeat_interval_ms == 10 * HI
        assert r.counters[Verdict.CLAIM_LOST] == 2
        assert claim.status(T0 + 1 + 10 * HI) is ClaimStatus.UNKNOWN
    s.claim("fast", at=20 * HI + 2)  # more than 2 of the owner's intervals
    r = _with_config(s, HI)
    assert r.claim("g", "t", 0).owner == Owner("i-fast", "fast")
    assert r.claim("g", "t", 0).heartbeat_interval_ms == HI  # now judged by the new owner's


def test_an_owner_that_announced_no_interval_is_judged_by_the_readers_own() -> None:
    s = Scenario()
    s.member("go-member", at=0)  # version 2: no interval (a Go member writes none either)
    s.claim("go-member", at=1)
    s.claim("b", at=2 * HI + 2)
    assert s.replay().claim("g", "t", 0).owner == Owner("i-b", "b")
    assert _with_config(s, 10 * HI).claim("g", "t", 0).owner == Owner("i-go-member",
                                                                         "go-member")


def test_members_are_live_for_two_of_their_own_intervals() -> None:
    s = Scenario()
    s.member("slow", at=0, interval_ms=10 * HI)
    s.member("fast", at=0, interval_ms=HI // 2)
    s.member("quiet", at=0)
    r = _with_config(s, HI)
    assert [m.client_id for m in r.members("g", "t", T0 + HI)] == ["fast", "quiet", "slow"]
    assert [m.client_id for m in r.members("g", "t", T0 + HI + 1)] == ["quiet", "slow"]
    assert [m.client_id for m in r.members("g", "t", T0 + 2 * HI + 1)] == ["slow"]
    assert [m.client_id for m in r.members("g", "t", T0 + 20 * HI + 1)] == []
    assert r.member_interval("g", "t", Owner("i-slow", "slow")) == 10 * HI
    assert r.member_interval("g", "t", Owner("i-quiet", "quiet")) == HI
    life = r.group_state("g", "t", T0 + 20 * HI + 1)
    assert life is not None and life.since_ms == T0 + 20 * HI  # Empty since slow went stale


def test_the_groups_interval_is_its_longest_running_members() -> None:
    s = Scenario()
    s.member("b", at=5, interval_ms=HI)
    s.member("a", at=10, interval_ms=2 * HI)
    s.member("b", at=15, interval_ms=HI)
    s.member("go", at=0)  # announced none: not part of it
    r = s.replay()
    assert r.group_interval("g", "t", T0 + 20) == (Owner("i-b", "b"), HI)
    assert r.group_interval("g", "t", T0 + 20, excluding_client="b") == (Owner("i-a", "a"),
                                                                         2 * HI)
    assert r.group_interval("g", "t", T0 + 3 * HI) == (Owner("i-a", "a"), 2 * HI)  # b stale
    assert r.group_interval("g", "u", T0) is None


def test_key_slots_are_judged_by_their_owners_announced_interval() -> None:
    s = Scenario()
    s.member("slow", at=0, interval_ms=10 * HI)
    s.write(ClaimingKeyRanges(0, "i-slow", "slow", "g", "t", 0, "0-1023"), at=1)
    s.member("fast", at=2, interval_ms=HI)
    s.write(ClaimingKeyRanges(0, "i-fast", "fast", "g", "t", 0, "0-511"), at=3 * HI)
    keys = _with_config(s, HI).key_shared_partition("g", "t", 0)
    assert keys is not None and keys.owner(0) == Owner("i-slow", "slow")
    s.write(ClaimingKeyRanges(0, "i-fast", "fast", "g", "t", 0, "0-511"), at=20 * HI + 2)
    keys = _with_config(s, HI).key_shared_partition("g", "t", 0)
    assert keys is not None and keys.owner(0) == Owner("i-fast", "fast")


def test_announced_intervals_survive_a_checkpoint() -> None:
    s = Scenario(partitions=1)
    s.member("slow", at=0, interval_ms=10 * HI)
    s.claim("slow", at=1)
    full = _with_config(s, HI)
    restored = Rationalizer(RationalizerConfig(1, HI))
    restored.restore(0, Checkpoint(0, "i-x", "x", "g", "t", full.next_position(0),
                                   full.snapshot("g", "t")))
    restored.skip_to(0, full.next_position(0))
    s.claim("fast", at=3 * HI)
    for r in (full, restored):
        r.apply(s.records[-1])
        assert r.claim("g", "t", 0).owner == Owner("i-slow", "slow")
        assert r.members("g", "t", T0 + 15 * HI) == [Owner("i-slow", "slow")]
    assert restored.snapshot("g", "t") == full.snapshot("g", "t")
