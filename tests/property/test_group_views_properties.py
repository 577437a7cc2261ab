"""The indexed membership views of a (group, topic) pair agree with a plain scan.

:class:`GroupLife` answers the questions members ask on every step (who is live, where a
client id ranks among the live ones, who joined first among those that announced an
interval) from indexes kept as records arrive. Under random signs of life, announcements,
departures, replacements, clocks that step back and queries at any time, each answer must
equal the one a scan of every tracked member gives (the rules as written before the
indexes).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.world.lifecycle import GroupLife
from marshal_py.world.state import Owner

HI = 1_000
RETENTION = 50 * HI
OWNERS = [Owner(f"i{i}", c) for i, c in enumerate("aabbcde")]


def scan_live(life: GroupLife, now: int, hi: int) -> list[Owner]:
    newest: dict[str, tuple[int, Owner]] = {}
    for member, ts in life.members.items():
        if now - ts <= 2 * life.intervals.get(member, hi) and (
                member.client_id not in newest or (ts, member) > newest[member.client_id]):
            newest[member.client_id] = (ts, member)
    return sorted(member for _, member in newest.values())


def scan_rank(life: GroupLife, client_id: str, now: int, hi: int) -> tuple[int, int, bool]:
    clients = {m.client_id for m in scan_live(life, now, hi)}
    present = client_id in clients
    ordered = sorted(clients | {client_id})
    return len(ordered), ordered.index(client_id), present


def scan_first(life: GroupLife, now: int, hi: int, excluding: str | None) -> Owner | None:
    live = [m for m in scan_live(life, now, hi)
            if m in life.intervals and m.client_id != excluding]
    if not live:
        return None
    return min(live, key=lambda m: (life.joined.get(m, life.members[m]), m))


step = st.tuples(
    st.sampled_from(["seen", "beat", "announce", "silence", "left", "replaced", "reindex"]),
    st.integers(0, len(OWNERS) - 1),
    st.integers(-HI, 3 * HI),  # time step (negative: the broker clock stepped back)
    st.sampled_from([HI // 2, HI, 2 * HI]),  # an announced interval
)
query = st.tuples(st.integers(-HI, 5 * HI), st.sampled_from([None, "a", "b", "z"]))


def check(life: GroupLife, now: int, excluding: str | None) -> None:
    assert list(life.live_tuple(now, HI)) == scan_live(life, now, HI)
    assert life.live(now, HI) == scan_live(life, now, HI)
    for client in ("a", "c", "e", "z", "0"):
        assert tuple(life.rank(client, now, HI)) == scan_rank(life, client, now, HI)
    assert life.first_announced(now, HI, excluding) == scan_first(life, now, HI, excluding)
    # Another interval than the pair's own: every view falls back to the scan.
    assert life.live(now, 3 * HI) == scan_live(life, now, 3 * HI)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(step, st.lists(query, max_size=3)), max_size=60))
def test_indexed_views_equal_a_scan_after_every_change(
        steps: list[tuple[tuple[str, int, int, int], list[tuple[int, str | None]]]]) -> None:
    life = GroupLife(HI, RETENTION)
    ts = 10 * HI
    for (op, who, dt, interval), queries in steps:
        ts += dt
        member = OWNERS[who]
        if ts > life.due and life.settle(ts):  # as the rationalizer does before a record
            life = GroupLife(HI, RETENTION)
        if op == "seen":
            life.seen(member, ts)
            life.announced(member, interval)
        elif op == "beat":  # the rationalizer's fast path for a heartbeat of a member
            seen = life.members.get(member)
            if seen is not None and ts >= seen:
                life.members[member] = ts
                if life.shared:
                    life.forget_live_view()
            else:
                life.seen(member, ts)
        elif op == "announce":
            if member in life.members:
                life.announced(member, interval)
        elif op == "silence":
            if member in life.members:
                life.announced(member, 0)
        elif op == "left":
            life.left(member, ts)
        elif op == "replaced":
            life.replaced(member)
        else:  # read back from a checkpoint: the indexes are rebuilt from the fields
            life.configure(HI, RETENTION)
        check(life, ts, None)
        for offset, excluding in queries:
            check(life, ts + offset, excluding)


def test_the_live_tuple_is_the_same_object_while_the_members_stay_the_same() -> None:
    life = GroupLife(HI, RETENTION)
    for i, member in enumerate(OWNERS[::2]):
        life.seen(member, i)
    first = life.live_tuple(10, HI)
    for member in OWNERS[::2]:  # signs of life long after the first deadlines
        life.members[member] = 3 * HI
    assert life.live_tuple(4 * HI, HI) is first  # the lapsed entries are re-armed, not rebuilt
    life.seen(OWNERS[1], 4 * HI)
    assert life.live_tuple(4 * HI, HI) is not first
