"""How a member balances without walking every partition or every member, on MemoryLog with a
virtual clock: it hands its surplus out again as soon as its last release was taken, and the
shares it computes from the rationalizer's indexes are those of the full computation."""

from __future__ import annotations

import random

from marshal_py.client.engine import MemberEngine
from tests.simulation.test_engine_behaviour import HI, World, held


def test_a_member_above_its_share_releases_again_once_its_last_release_was_taken() -> None:
    w = World(partitions=12)
    a = w.member("a")
    w.run([a], 500)
    assert len(held(a)) == 12
    b = w.member("b")
    w.run([a, b], 300)  # a releases 6 for b, which takes them
    assert sorted(len(held(e)) for e in (a, b)) == [6, 6]
    c = w.member("c")
    # Well within one HI of a's first release, a (and b) hand c its share: a's pause ended
    # when b took what a had released.
    w.run([a, b, c], 500)
    assert sorted(len(held(e)) for e in (a, b, c)) == [4, 4, 4]


def test_shares_from_the_indexes_equal_the_full_computation() -> None:
    rng = random.Random(7)
    w = World(partitions=23)
    engines: list[MemberEngine] = []
    stopped: set[int] = set()
    checked = 0
    for step in range(400):
        if step % 25 == 0 and len(engines) < 9:
            engines.append(w.member(f"m{len(engines)}"))
        if step % 90 == 89 and len(stopped) < 3:
            stopped.add(rng.randrange(len(engines)))  # a member that crashed: goes stale
        w.run([e for i, e in enumerate(engines) if i not in stopped], 100)
        now = w.clock()
        for i, engine in enumerate(engines):
            if i in stopped:
                continue
            engine.channel.catch_up()
            held_now = engine._held_by_client("orders", now)
            shares = engine._equal_shares("orders", 23, now, held_now)
            if shares is None:
                continue
            targets = engine._fair_targets("orders", 23, now)
            me = engine.me.client_id
            deficit = sum(max(0, t - held_now.get(c, 0)) for c, t in targets.items() if c != me)
            assert shares == (targets[me], deficit), (step, me)
            checked += 1
    assert checked > 1000
    live = [e for i, e in enumerate(engines) if i not in stopped]
    w.run(live, 10 * HI)
    counts = sorted(len(held(e)) for e in live)
    assert sum(counts) == 23 and counts[-1] - counts[0] <= 1
