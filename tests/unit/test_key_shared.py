"""Key-shared partitions: each rule of KeySharedPartition, the rationalizer applying the three
messages, and the sticky assignment (quotas, stickiness on joins and leaves)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import (
    KEY_SLOTS,
    ClaimingKeyRanges,
    KeyRangesHeartbeat,
    ReleasingKeyRanges,
    encode,
    ranges_of,
)
from marshal_py.world import Owner, Rationalizer, RationalizerConfig, Verdict, sticky_assignment
from marshal_py.world.key_shared import KeySharedPartition

HI = 1_000
T0 = 1_700_000_000_000
A = Owner("aaaa0001", "a")
A2 = Owner("aaaa0002", "a")  # a restarted process of client a
B = Owner("bbbb0001", "b")
C = Owner("cccc0001", "c")


def test_a_claim_takes_free_slots_and_voids_held_ones() -> None:
    p = KeySharedPartition()
    first = p.claim(A, [(0, 511)], T0, HI)
    assert first.applied == ((0, 511),) and first.ignored == 0
    second = p.claim(B, [(500, 600)], T0 + 10, HI)
    assert second.applied == ((512, 600),) and second.ignored == 12
    assert p.slots_of(A) == ((0, 511),)
    assert p.slots_of(B) == ((512, 600),)
    assert p.owner(1000) is None


def test_a_claim_takes_slots_of_a_stale_owner_only_after_two_intervals() -> None:
    p = KeySharedPartition()
    p.claim(A, [(0, 9)], T0, HI)
    assert p.claim(B, [(0, 9)], T0 + 2 * HI, HI).ignored == 10  # exactly 2 HI: still held
    assert p.owner(0) == A
    assert p.claim(B, [(0, 9)], T0 + 2 * HI + 1, HI).applied == ((0, 9),)
    assert p.owner(0) == B
    assert A not in p.last_seen  # an owner without slots is forgotten


def test_a_heartbeat_keeps_slots_alive() -> None:
    p = KeySharedPartition()
    p.claim(A, [(0, 9)], T0, HI)
    p.heartbeat(A, 5, T0 + 1_500)
    assert p.claim(B, [(0, 9)], T0 + 2 * HI + 1, HI).ignored == 10
    assert p.live_owners(T0 + 1_500 + 2 * HI, HI)[0] == A
    assert p.live_owners(T0 + 1_500 + 2 * HI + 1, HI)[0] is None


def test_a_restarted_process_of_the_same_client_takes_slots_at_once() -> None:
    p = KeySharedPartition()
    p.claim(A, [(0, 9)], T0, HI)
    assert p.claim(A2, [(0, 9)], T0 + 1, HI).applied == ((0, 9),)
    assert p.owner(3) == A2


def test_heartbeats_raise_the_committed_offset_of_owned_slots_only() -> None:
    p = KeySharedPartition()
    p.claim(A, [(0, 9)], T0, HI)
    p.claim(B, [(10, 19)], T0, HI)
    assert p.heartbeat(A, 100, T0 + 1).applied == ((0, 9),)
    assert p.committed(0) == 100 and p.committed(10) is None
    p.heartbeat(A, 50, T0 + 2)  # never moves back
    assert p.committed(9) == 100
    assert p.heartbeat(C, 500, T0 + 3).applied == ()  # owns nothing: ignored
    assert p.committed(10) is None
    assert C not in p.last_seen


def test_a_release_frees_the_senders_slots_with_their_offset() -> None:
    p = KeySharedPartition()
    p.claim(A, [(0, 9)], T0, HI)
    p.heartbeat(A, 40, T0 + 1)
    result = p.release(A, [(5, 14)], 70)
    assert result.applied == ((5, 9),) and result.ignored == 5
    assert [p.owner(s) for s in (4, 5)] == [A, None]
    assert (p.committed(4), p.committed(5), p.committed(10)) == (40, 70, None)
    p.claim(B, [(5, 5)], T0 + 2, HI)
    p.release(B, [(5, 5)], 10)  # a lower release offset never moves the commit back
    assert p.committed(5) == 70


def test_runs_and_lowest_committed() -> None:
    p = KeySharedPartition()
    assert p.lowest_committed() is None
    p.claim(A, [(0, 511)], T0, HI)
    p.claim(B, [(512, 1023)], T0, HI)
    p.heartbeat(A, 10, T0)
    assert p.lowest_committed() is None  # B's slots never committed
    p.heartbeat(B, 20, T0)
    assert p.lowest_committed() == 10
    runs = p.runs()
    assert [(r.first, r.last, r.owner, r.committed) for r in runs] == [
        (0, 511, A, 10), (512, 1023, B, 20)]


def test_the_rationalizer_applies_the_three_messages() -> None:
    clock = VirtualClock(T0)
    log = MemoryLog(partitions=1, clock=clock)
    r = Rationalizer(RationalizerConfig(1, HI))
    base = (0, "aaaa0001", "a", "g", "t", 0)
    other = (0, "bbbb0001", "b", "g", "t", 0)
    verdicts = []
    for message in (ClaimingKeyRanges(*base, "0-511"), ClaimingKeyRanges(*other, "500-1023"),
                    KeyRangesHeartbeat(*base, 42), ReleasingKeyRanges(*base, "0-99", 42),
                    KeyRangesHeartbeat(0, "cccc0001", "c", "g", "t", 0, 1)):
        clock.advance(10)
        verdicts.append(r.apply(log.append(0, encode(message))).verdict)
    assert verdicts == [Verdict.KEY_RANGES_CLAIMED, Verdict.KEY_RANGES_CLAIMED,
                        Verdict.KEY_RANGES_HEARTBEAT, Verdict.KEY_RANGES_RELEASED,
                        Verdict.KEY_RANGES_IGNORED]
    state = r.key_shared_partition("g", "t", 0)
    assert state is not None
    assert state.slots_of(A) == ((100, 511),)
    assert state.slots_of(B) == ((512, 1023),)
    assert state.committed(0) == 42 and state.committed(511) == 42
    assert state.committed(512) is None
    assert r.members("g", "t", clock()) == [A, B]  # claims and heartbeats are signs of life


# -- the sticky assignment ------------------------------------------------------------------


def counts(target: list[Owner | None]) -> dict[Owner | None, int]:
    out: dict[Owner | None, int] = {}
    for owner in target:
        out[owner] = out.get(owner, 0) + 1
    return out


def moved(before: list[Owner | None], after: list[Owner | None]) -> int:
    return sum(1 for x, y in zip(before, after, strict=True) if x != y)


def test_quotas_differ_by_at_most_one_and_the_first_members_get_the_extra() -> None:
    target = sticky_assignment([None] * KEY_SLOTS, [C, A, B])
    assert counts(target) == {A: 342, B: 341, C: 341}
    # With nothing owned, each member gets one run, in client-id order.
    assert target[0] == A and target[342] == B and target[683] == C
    assert sticky_assignment([None] * KEY_SLOTS, []) == [None] * KEY_SLOTS


def test_a_join_moves_about_one_share_and_only_from_members_above_quota() -> None:
    one = sticky_assignment([None] * KEY_SLOTS, [A])
    assert counts(one) == {A: KEY_SLOTS}
    two = sticky_assignment(one, [A, B])
    assert moved(one, two) == 512
    assert two[:512] == [A] * 512  # A keeps its lowest slots
    three = sticky_assignment(two, [A, B, C])
    assert counts(three) == {A: 342, B: 341, C: 341}
    assert moved(two, three) == 341  # about KEY_SLOTS / 3
    assert all(y == C for x, y in zip(two, three, strict=True) if x != y)
    four = sticky_assignment(three, [A, B, C, Owner("dddd0001", "d")])
    assert moved(three, four) == 256


def test_a_leave_moves_only_the_leavers_slots() -> None:
    three = sticky_assignment(sticky_assignment([None] * KEY_SLOTS, [A, B]), [A, B, C])
    without_b = [None if o == B else o for o in three]  # B left: its slots are free
    two = sticky_assignment(without_b, [A, C])
    assert counts(two) == {A: 512, C: 512}
    assert all(x == B for x, y in zip(three, two, strict=True) if x != y)
    assert moved(three, two) == 341


def test_a_restarted_process_inherits_its_clients_slots() -> None:
    three = sticky_assignment([None] * KEY_SLOTS, [A, B, C])
    again = sticky_assignment(three, [A2, B, C])  # a's new process stands for client a
    assert [A2 if o == A else o for o in three] == again


def test_the_assignment_is_deterministic_whatever_the_member_order() -> None:
    owners = sticky_assignment([None] * KEY_SLOTS, [A, B])
    assert sticky_assignment(owners, [C, B, A]) == sticky_assignment(owners, [A, C, B])


_OWNERS = [A, A2, B, C]
_slot_range = st.tuples(st.integers(0, KEY_SLOTS - 1), st.integers(0, 40)).map(
    lambda r: (r[0], min(KEY_SLOTS - 1, r[0] + r[1])))
_operation = st.one_of(
    st.tuples(st.just("claim"), st.sampled_from(_OWNERS), st.lists(_slot_range, max_size=3)),
    st.tuples(st.just("release"), st.sampled_from(_OWNERS), st.lists(_slot_range, max_size=3)),
    st.tuples(st.just("heartbeat"), st.sampled_from(_OWNERS), st.integers(0, 10_000)),
    st.tuples(st.just("reset"), st.sampled_from(_OWNERS), st.integers(0, 10_000)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(_operation, st.integers(0, 3 * HI)), max_size=40))
def test_the_owner_index_always_matches_a_scan_of_the_slots(
        steps: list[tuple[tuple[str, Owner, object], int]]) -> None:
    p = KeySharedPartition()
    now = T0
    for (kind, sender, argument), advance in steps:
        now += advance
        if kind == "claim":
            p.claim(sender, argument, now, HI)  # type: ignore[arg-type]
        elif kind == "release":
            p.release(sender, argument, 5)  # type: ignore[arg-type]
        elif kind == "heartbeat":
            p.heartbeat(sender, argument, now)  # type: ignore[arg-type]
        else:
            p.reset(argument)  # type: ignore[arg-type]
        owners = p.owners()
        for owner in _OWNERS:
            scanned = ranges_of(s for s, o in enumerate(owners) if o == owner)
            assert p.slots_of(owner) == scanned
        assert set(p.last_seen) <= {o for o in owners if o is not None}
        live = p.live_owners(now, HI)
        assert live == [o if o is not None and now - p.last_seen.get(o, -10 * HI) <= 2 * HI
                        else None for o in owners]
