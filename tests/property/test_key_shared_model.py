"""KeySharedPartition against the per-slot model it replaced (the frozen copy before issue 22,
``tests/golden/frozen``): for random claims, releases, heartbeats (offsets rising and falling,
long enough runs of falling ones to fill an owner's stack of heartbeats) and resets, every
result and every view (owners, committed offsets, runs, slots of each owner, the lowest
committed offset, last signs of life) is the same after every step.

The current class reads a run's committed offset lazily from its owner's heartbeats; the
model writes every slot on every heartbeat, so it is the rule itself.
"""

from __future__ import annotations

from dataclasses import astuple

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.protocol import KEY_SLOTS
from marshal_py.world import Owner
from marshal_py.world.key_shared import KeySharedPartition
from tests.golden.frozen.world import key_shared as old
from tests.golden.frozen.world.state import Owner as OldOwner

HI = 1_000
T0 = 1_700_000_000_000
NAMES = [("aaaa0001", "a"), ("aaaa0002", "a"), ("bbbb0001", "b"), ("cccc0001", "c")]



def _disjoint(bounds: list[int]) -> list[tuple[int, int]]:
    """Ascending, disjoint, non-adjacent ranges (as the codec admits them) from bounds."""
    ends = sorted(set(bounds))
    return [(a, b - 1) for a, b in zip(ends[::2], ends[1::2], strict=False)
            if b - 1 >= a]


_slots = st.lists(st.integers(0, KEY_SLOTS), min_size=2, max_size=6).map(_disjoint).filter(
    bool)
_step = st.one_of(
    st.tuples(st.just("claim"), st.integers(0, 3), _slots),
    st.tuples(st.just("release"), st.integers(0, 3), _slots),
    st.tuples(st.just("heartbeat"), st.integers(0, 3), st.integers(0, 1_000)),
    # n heartbeats of one owner with falling offsets (fills its stack past its bound)
    st.tuples(st.just("falling"), st.integers(0, 3), st.integers(1, 150)),
    st.tuples(st.just("reset"), st.integers(0, 3), st.integers(0, 1_000)),
)


def _same_views(new: KeySharedPartition, model: old.KeySharedPartition) -> None:
    names = {OldOwner(*n): Owner(*n) for n in NAMES}

    def convert(o: OldOwner | None) -> Owner | None:
        return None if o is None else names[o]

    assert new.owners() == [convert(o) for o in model.owners()]
    assert new.committed_offsets() == model.committed_offsets()
    assert [astuple(r) for r in new.runs()] == [
        (r.first, r.last, convert(r.owner), r.committed) for r in model.runs()]
    assert new.lowest_committed() == model.lowest_committed()
    assert {o: t for o, t in new.last_seen.items()} == {
        names[o]: t for o, t in model.last_seen.items()}
    for n in NAMES:
        assert new.slots_of(Owner(*n)) == model.slots_of(OldOwner(*n))
    for slot in (0, KEY_SLOTS // 2, KEY_SLOTS - 1):
        assert new.committed(slot) == model.committed(slot)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_step, st.integers(0, 3 * HI)), max_size=30))
def test_every_step_agrees_with_the_per_slot_model(
        steps: list[tuple[tuple[str, int, object], int]]) -> None:
    new, model = KeySharedPartition(), old.KeySharedPartition()
    now = T0
    for (kind, who, argument), advance in steps:
        now += advance
        sender, old_sender = Owner(*NAMES[who]), OldOwner(*NAMES[who])
        if kind == "claim":
            got = new.claim(sender, argument, now, HI)  # type: ignore[arg-type]
            want = model.claim(old_sender, argument, now, HI)  # type: ignore[arg-type]
            assert (got.applied, got.ignored) == (want.applied, want.ignored)
        elif kind == "release":
            got = new.release(sender, argument, 500)  # type: ignore[arg-type]
            want = model.release(old_sender, argument, 500)  # type: ignore[arg-type]
            assert (got.applied, got.ignored) == (want.applied, want.ignored)
        elif kind == "heartbeat":
            got = new.heartbeat(sender, argument, now)  # type: ignore[arg-type]
            want = model.heartbeat(old_sender, argument, now)  # type: ignore[arg-type]
            assert (got.applied, got.ignored) == (want.applied, want.ignored)
        elif kind == "falling":
            for k in range(argument):  # type: ignore[call-overload]
                assert new.beat(sender, 2_000 - k, now) == bool(
                    model.heartbeat(old_sender, 2_000 - k, now).applied)
        else:
            new.reset(argument)  # type: ignore[arg-type]
            model.reset(argument)  # type: ignore[arg-type]
        _same_views(new, model)
