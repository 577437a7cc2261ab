"""Properties of the sticky assignment of key slots (``sticky_assignment``).

For random current ownerships (runs of slots owned by some of a pool of clients, some slots
unowned, some owned by restarted processes) and random live member sets:

1. **balanced**: every slot has a target among the members, and quotas differ by at most one;
2. **deterministic**: the result does not depend on the order the members are given in;
3. **minimal movement**: the slots whose target is not their current owner's client are
   exactly the ones that must move: a member keeps min(what it owns, its quota) slots, so
   ``moved = KEY_SLOTS - sum(min(owned, quota))``; in particular a member never loses a slot
   while it is at or below its quota;
4. **stable**: applying the target and computing again moves nothing.
"""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.protocol import KEY_SLOTS
from marshal_py.world import Owner, sticky_assignment

CLIENTS = [f"c{i}" for i in range(8)]


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Owner | None], list[Owner]]:
    """(current live owners of every slot, live members)."""
    pool = [Owner(f"{i:04x}0001", c) for i, c in enumerate(CLIENTS)]
    cuts = sorted(draw(st.sets(st.integers(1, KEY_SLOTS - 1), max_size=12)))
    bounds = [0, *cuts, KEY_SLOTS]
    owners: list[Owner | None] = []
    for first, end in pairwise(bounds):
        who = draw(st.one_of(st.none(), st.sampled_from(pool)))
        owners.extend([who] * (end - first))
    clients = draw(st.lists(st.sampled_from(CLIENTS), min_size=1, max_size=8, unique=True))
    restarted = draw(st.sets(st.sampled_from(clients)))
    members = [Owner(f"{CLIENTS.index(c):04x}{'0002' if c in restarted else '0001'}", c)
               for c in clients]
    return owners, members


def quotas(members: list[Owner]) -> dict[str, int]:
    ordered = sorted(m.client_id for m in members)
    base, extra = divmod(KEY_SLOTS, len(ordered))
    return {c: base + (1 if i < extra else 0) for i, c in enumerate(ordered)}


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_balanced(world: tuple[list[Owner | None], list[Owner]]) -> None:
    owners, members = world
    target = sticky_assignment(owners, members)
    assert all(t in members for t in target)
    held = [sum(1 for t in target if t == m) for m in members]
    assert sum(held) == KEY_SLOTS
    assert max(held) - min(held) <= 1


@settings(max_examples=200, deadline=None)
@given(worlds(), st.randoms(use_true_random=False))
def test_deterministic(world: tuple[list[Owner | None], list[Owner]], rnd: object) -> None:
    owners, members = world
    shuffled = list(members)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert sticky_assignment(owners, shuffled) == sticky_assignment(owners, members)
    assert sticky_assignment(list(owners), list(members)) == sticky_assignment(owners, members)


@settings(max_examples=300, deadline=None)
@given(worlds())
def test_moves_the_minimum(world: tuple[list[Owner | None], list[Owner]]) -> None:
    owners, members = world
    target = sticky_assignment(owners, members)
    quota = quotas(members)
    owned = {c: sum(1 for o in owners if o is not None and o.client_id == c) for c in quota}
    moved = sum(1 for o, t in zip(owners, target, strict=True)
                if o is None or t is None or o.client_id != t.client_id)
    assert moved == KEY_SLOTS - sum(min(owned[c], quota[c]) for c in quota)
    for member in members:  # at or below quota: keeps every slot it owns
        if owned[member.client_id] <= quota[member.client_id]:
            assert all(t == member for o, t in zip(owners, target, strict=True)
                       if o is not None and o.client_id == member.client_id)


@settings(max_examples=200, deadline=None)
@given(worlds())
def test_stable_once_applied(world: tuple[list[Owner | None], list[Owner]]) -> None:
    owners, members = world
    target = sticky_assignment(owners, members)
    assert sticky_assignment(target, members) == target
