"""The coordinator's wake-up time (MemberEngine.next_due_ms) takes the next member deadline
from the rationalizer's deadline heap instead of scanning every member: on MemoryLog with a
virtual clock, with members joining and crashing (going stale, then pruned), the indexed
answer equals the scan it replaced after every step (members announcing different intervals:
tests/property/test_member_deadline_index.py)."""

from __future__ import annotations

import random

from marshal_py.client.engine import MemberEngine
from tests.simulation.test_engine_behaviour import World


def _scanned(engine: MemberEngine, topic: str, now: int) -> int | None:
    """The members' part of next_due_ms as it was: every member's last sign of life + 2 x
    its interval + 1, the earliest after ``now``."""
    group = engine.config.group_id
    due = [seen + 2 * engine.rationalizer.member_interval(group, topic, member) + 1
           for member, seen in engine.rationalizer.member_last_seen(group, topic).items()]
    later = [t for t in due if t > now]
    return min(later) if later else None


def test_the_indexed_member_deadline_equals_the_scan_after_every_step() -> None:
    rng = random.Random(11)
    w = World(partitions=17)
    engines: list[MemberEngine] = []
    stopped: set[int] = set()
    compared = 0
    for step in range(240):
        if step % 20 == 0 and len(engines) < 8:
            engines.append(w.member(f"m{len(engines)}"))
        if step % 70 == 69 and len(stopped) < 3:
            stopped.add(rng.randrange(len(engines)))  # crashed: goes stale, then pruned
        w.run([e for i, e in enumerate(engines) if i not in stopped], rng.randint(20, 400))
        for engine in engines:
            group = engine.config.group_id
            for now in (w.clock(), w.clock() + rng.randint(0, 5_000)):
                new = engine.rationalizer.next_member_deadline(group, "orders", now)
                assert (None if new is None else new + 1) == _scanned(engine, "orders", now)
                compared += 1
    assert compared > 1_000
