"""The group offset lifecycle (KIP-211) and offset resets, on hand-written logs."""

from __future__ import annotations

from marshal_py.protocol import Checkpoint, ResettingOffsets, coordination_partition, decode
from marshal_py.world import GroupState, Rationalizer, RationalizerConfig, Verdict
from tests.support import HI, T0, Scenario

RETENTION = 100 * HI


def replay(s: Scenario) -> Rationalizer:
    r = Rationalizer(RationalizerConfig(s.partitions, HI, offsets_retention_ms=RETENTION))
    r.apply_all(s.records)
    return r


def reset(s: Scenario, at: int, offset: int, partition: int = 0) -> None:
    s.write(ResettingOffsets(0, "i-admin", "admin", "g", "t", partition, offset), at)


def test_a_group_is_stable_while_a_member_is_live_and_empty_from_when_it_went_stale() -> None:
    s = Scenario()
    s.member("a", 0)
    s.claim("a", 10)
    s.heartbeat("a", 5 * HI, 40)
    r = replay(s)
    stable = r.group_state("g", "t", T0 + 6 * HI)
    assert stable is not None and stable.state is GroupState.STABLE
    assert [m.client_id for m in stable.members] == ["a"] and stable.since_ms is not None
    # The last sign of life was at 5 HI: live until 7 HI, Empty from then on.
    empty = r.group_state("g", "t", T0 + 8 * HI)
    assert empty is not None and empty.state is GroupState.EMPTY
    assert empty.since_ms == T0 + 7 * HI
    assert empty.expires_at_ms == empty.since_ms + RETENTION
    assert empty.members == ()


def test_a_group_is_empty_the_moment_its_last_member_leaves() -> None:
    s = Scenario()
    s.member("a", 0)
    s.member("b", 10)
    s.member("a", HI // 2, active=False)
    r = replay(s)
    state = r.group_state("g", "t", T0 + HI)
    assert state is not None and state.state is GroupState.STABLE  # b is still live
    s.member("b", HI, active=False)
    state = replay(s).group_state("g", "t", T0 + HI + 1)
    assert state is not None and state.state is GroupState.EMPTY
    assert state.since_ms == s.records[-1].timestamp_ms


def test_offsets_never_expire_while_the_group_is_stable() -> None:
    s = Scenario()
    s.claim("a", 0, partition=1)
    s.release("a", HI, 77, partition=1)  # partition 1's last word, long ago
    for t in range(0, 3 * RETENTION, HI):  # b stays live all along
        s.member("b", t)
    r = replay(s)
    assert r.claim("g", "t", 1).committed_offset == 77
    assert r.expired_groups == 0


def test_all_offsets_expire_together_once_empty_for_longer_than_the_retention() -> None:
    s = Scenario()
    s.claim("a", 0, partition=0)
    s.heartbeat("a", 10, 5, partition=0)
    s.claim("b", 20, partition=1)
    s.release("b", 30, 9, partition=1)
    s.share_init("a", 40, 100, partition=2)
    last = 20  # b's claim: the last sign of life (releases and share inits are not)
    empty_since = last + 2 * HI
    # Just inside the retention: a new member finds every offset.
    s.member("c", empty_since + RETENTION)
    r = replay(s)
    assert r.claim("g", "t", 0).committed_offset == 5
    assert r.claim("g", "t", 1).committed_offset == 9
    assert r.share_partition("g", "t", 2) is not None
    assert r.expired_groups == 0
    # One millisecond later they are all gone, before c's record applies.
    s.records.pop()
    s.member("c", empty_since + RETENTION + 1)
    r = replay(s)
    assert r.expired_groups == 1
    assert r.claim("g", "t", 0).committed_offset is None
    assert r.claim("g", "t", 1).committed_offset is None
    assert r.share_partition("g", "t", 2) is None
    state = r.group_state("g", "t", T0 + empty_since + RETENTION + 2)
    assert state is not None and state.state is GroupState.STABLE  # c is live now


def test_a_dead_group_reports_dead_before_any_new_record_arrives() -> None:
    s = Scenario()
    s.claim("a", 0)
    r = replay(s)
    state = r.group_state("g", "t", T0 + 2 * HI + RETENTION + 1)
    assert state is not None and state.state is GroupState.DEAD
    assert r.expired_groups == 0  # expiry is applied by the next record, never by a query


def test_other_groups_keep_their_offsets_when_one_expires() -> None:
    s = Scenario()
    s.claim("a", 0)
    s.heartbeat("a", 10, 3)
    for t in range(0, RETENTION + 10 * HI, HI):
        s.member("x", t, group="other")
    s.claim("x", RETENTION + 10 * HI, group="other")
    s.heartbeat("x", RETENTION + 10 * HI + 1, 8, group="other")
    s.member("a", RETENTION + 10 * HI + 2)
    r = replay(s)
    assert r.claim("g", "t", 0).committed_offset is None
    assert r.claim("other", "t", 0).committed_offset == 8


def test_reset_applies_only_to_an_empty_group_and_restarts_its_retention_clock() -> None:
    s = Scenario()
    s.claim("a", 0)
    s.heartbeat("a", 10, 50)
    s.claim_messages("a", 20, 60)
    reset(s, 30, 5)  # a is live: ignored
    r = replay(s)
    assert r.counters[Verdict.RESET_IGNORED] == 1
    assert r.claim("g", "t", 0).committed_offset == 50
    reset(s, 10 * HI, 5)  # a went stale at 2 HI + 20
    r = replay(s)
    claim = r.claim("g", "t", 0)
    assert r.counters[Verdict.OFFSETS_RESET] == 1
    assert claim.committed_offset == 5 and claim.amo_claimed_offset == 4
    assert claim.owner is None
    state = r.group_state("g", "t", T0 + 10 * HI + 1)
    assert state is not None and state.state is GroupState.EMPTY
    assert state.since_ms == s.records[-1].timestamp_ms


def test_a_group_turns_stable_again_and_keeps_its_offsets() -> None:
    s = Scenario()
    s.claim("a", 0)
    s.release("a", 10, 12)
    s.member("b", RETENTION // 2)
    s.claim("b", RETENTION // 2 + 1)
    r = replay(s)
    state = r.group_state("g", "t", T0 + RETENTION // 2 + 2)
    assert state is not None and state.state is GroupState.STABLE
    assert state.since_ms == s.records[2].timestamp_ms
    assert r.claim("g", "t", 0).committed_offset == 12


def test_members_by_join_rank_by_first_sign_of_life_and_keep_that_order_as_others_come_and_go(
        ) -> None:
    s = Scenario()
    s.member("z", 0)  # joins first, though its ids sort last
    s.member("m", 10)
    s.member("a", 20)
    s.member("z", HI)  # signs of life do not move a member
    s.member("m", HI + 10)
    s.member("a", HI + 20)
    r = replay(s)
    now = T0 + HI + 30
    assert [m.client_id for m in r.members("g", "t", now)] == ["a", "m", "z"]
    assert [m.client_id for m in r.members_by_join("g", "t", now)] == ["z", "m", "a"]
    assert r.members_by_join("g", "t", now) is r.members_by_join("g", "t", now)
    s.member("m", HI + 40, active=False)  # one that joined before "a" leaves
    s.member("b", HI + 50)  # a newcomer is last
    r = replay(s)
    assert [m.client_id for m in r.members_by_join("g", "t", T0 + HI + 60)] == ["z", "a", "b"]
    # The order survives a checkpoint: a reader that starts from one ranks alike.
    p = coordination_partition("t", s.partitions)
    written = s.write(Checkpoint(0, "i-z", "z", "g", "t", len(s.records), r.snapshot("g", "t")),
                      HI + 70)
    assert written.value is not None and written.partition == p
    checkpoint = decode(written.value)
    assert isinstance(checkpoint, Checkpoint)
    restored = Rationalizer(RationalizerConfig(s.partitions, HI, offsets_retention_ms=RETENTION))
    restored.restore(p, checkpoint)
    assert [m.client_id for m in restored.members_by_join("g", "t", T0 + HI + 80)] == \
        ["z", "a", "b"]
    assert r.members_by_join("g", "other", T0) == ()
