"""GroupLife.next_deadline (the earliest time a tracked member is last live, at or after now,
answered from the lazily re-armed deadline heap) equals a scan of every tracked member, for
random signs of life (broker clocks sometimes going back), announced intervals, leaves,
settles and queries at random times. The coordinator wakes at that time + 1 ms
(MemberEngine.next_due_ms), which used to scan."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.world.lifecycle import GroupLife
from marshal_py.world.state import Owner

HI = 1_000
MEMBERS = [Owner(f"{i:04x}0001", f"c{i % 4}") for i in range(6)]

_step = st.one_of(
    st.tuples(st.just("seen"), st.integers(0, 5), st.integers(-300, 1_500)),
    st.tuples(st.just("announced"), st.integers(0, 5), st.sampled_from([0, 500, 1_000, 3_000])),
    st.tuples(st.just("left"), st.integers(0, 5), st.integers(0, 500)),
    st.tuples(st.just("settle"), st.integers(0, 5), st.integers(0, 3_000)),
    st.tuples(st.just("query"), st.integers(0, 5), st.integers(-3_000, 7_000)),
)


def _scan(life: GroupLife, now: int, hi: int) -> int | None:
    later = [seen + 2 * life.interval_of(m, hi) for m, seen in life.members.items()
             if seen + 2 * life.interval_of(m, hi) >= now]
    return min(later) if later else None


@settings(max_examples=400, deadline=None)
@given(st.lists(_step, max_size=60))
def test_the_indexed_next_deadline_equals_a_scan_of_the_members(
        steps: list[tuple[str, int, int]]) -> None:
    life = GroupLife(HI, 100 * HI)
    now = 1_700_000_000_000
    for kind, who, argument in steps:
        member = MEMBERS[who]
        if kind == "seen":
            now += argument
            if now > life.due:
                life.settle(now)
            life.seen(member, now)
        elif kind == "announced":
            if member in life.members:
                life.announced(member, argument)
        elif kind == "left":
            now += argument
            life.left(member, now)
        elif kind == "settle":
            now += argument
            if now > life.due:
                life.settle(now)
        for at in (now, now + argument if kind == "query" else now + HI):
            assert life.next_deadline(at, HI) == _scan(life, at, HI)
            assert life.next_deadline(at, 2 * HI) == _scan(life, at, 2 * HI)
