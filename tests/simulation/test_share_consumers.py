"""Share-group members on MemoryLog with a virtual clock: crashes, lock timeouts, poison.

Three members consume one partition. Each step a live member acknowledges what it processed
(mostly accept; sometimes release or reject), acquires more, or crashes (its locks then
elapse) and later restarts. A poison record is always released. Checked after every step:
no record is held under a live lock by two members. At the end: every record is accepted
exactly once or archived (rejected, or the poison one at the delivery limit), the SPSO passed
them all, and each member saw the delivery count the log gave it.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from marshal_py.client.share_engine import ShareConfig, ShareEngine
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import AcknowledgingRecords, parse_ranges
from marshal_py.protocol.ranges import offsets_in
from marshal_py.replay import catch_up
from marshal_py.world import Outcome, Rationalizer, RationalizerConfig, Verdict
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000
LOCK = 3_000
RECORDS = 300
POISON = 17


def new_member(name: str, log: MemoryLog, topic: MemoryTopic, clock: VirtualClock,
               rng: random.Random) -> ShareEngine:
    config = ShareConfig(group_id="jobs", client_id=name,
                         instance_id=f"{rng.getrandbits(32):08x}", topics=("jobs",),
                         heartbeat_interval_ms=HI, lock_ms=LOCK, delivery_limit=3,
                         offset_reset="earliest", batch_size=rng.randint(3, 12))
    engine = ShareEngine(config, log, Rationalizer(RationalizerConfig(2, HI)), topic,
                         SimClock(clock), random.Random(rng.random()))
    engine.start()
    return engine


@pytest.mark.parametrize("seed", range(6))
def test_every_record_is_accepted_once_or_archived(seed: int) -> None:
    rng = random.Random(seed)
    clock = VirtualClock()
    log = MemoryLog(partitions=2, clock=clock)
    topic = MemoryTopic("jobs", 1)
    for i in range(RECORDS):
        topic.produce(0, f"job-{i}".encode())
    members: dict[str, ShareEngine | None] = {n: None for n in ("a", "b", "c")}
    accepted: Counter[int] = Counter()
    seen_counts: dict[int, list[int]] = {}
    auditor = Rationalizer(RationalizerConfig(2, HI))
    accepted_in_log: Counter[int] = Counter()

    def audit(outcome: Outcome) -> None:
        message = outcome.message
        if (outcome.verdict is Verdict.RECORDS_ACKNOWLEDGED
                and isinstance(message, AcknowledgingRecords) and message.kind == "accept"):
            applied = outcome.detail.split(" ")[0]
            accepted_in_log.update(offsets_in(parse_ranges(applied)))

    auditor.observe(audit)
    crashes = 0
    for _step in range(3_000):
        clock.advance(rng.randint(20, 200))
        for name in rng.sample(sorted(members), len(members)):
            engine = members[name]
            if engine is None:
                if rng.random() < 0.1:
                    members[name] = new_member(name, log, topic, clock, rng)
                continue
            if rng.random() < 0.03:
                members[name] = None  # kill -9: its locks elapse by themselves
                crashes += 1
                continue
            engine.tick()
            held = sorted(engine.held.get(("jobs", 0), {}).items())
            if not held:
                for offset, count in engine.acquire("jobs", 0):
                    seen_counts.setdefault(offset, []).append(count)
                continue
            for offset, _count in held[: rng.randint(1, len(held))]:
                if not engine.holds("jobs", 0, offset):
                    continue
                roll = rng.random()
                kind = ("release" if offset == POISON or roll < 0.05
                        else "reject" if roll < 0.07 else "accept")
                if kind == "accept":
                    accepted[offset] += 1
                engine.ack("jobs", 0, offset, kind)
            engine.flush()
        # Never two live holders of one record.
        catch_up(log, auditor, [0, 1])
        holders: Counter[int] = Counter()
        for engine in members.values():
            if engine is not None:
                for offset in engine.held.get(("jobs", 0), {}):
                    if engine.holds("jobs", 0, offset):
                        holders[offset] += 1
        assert max(holders.values(), default=0) <= 1
        share = auditor.share_partition("jobs", "jobs", 0)
        if share is not None and share.spso >= RECORDS:
            break
    share = auditor.share_partition("jobs", "jobs", 0)
    assert share is not None
    assert share.spso == RECORDS, f"stuck at SPSO {share.spso}"
    assert max(accepted.values()) == 1  # accepted at most once by a holder...
    assert POISON not in accepted
    assert share.exhausted.count(POISON) == 1  # archived at the delivery limit
    # ...and the log accepted exactly those, each once.
    assert accepted_in_log == accepted
    assert len(accepted) + len(set(share.exhausted)) <= RECORDS
    assert any(len(counts) > 1 for counts in seen_counts.values())  # redeliveries happened
    for offset, counts in seen_counts.items():
        assert counts == sorted(counts) and len(set(counts)) == len(counts), (offset, counts)
        assert max(counts) <= 3
    assert seen_counts[POISON] == [1, 2, 3]
    assert crashes >= 1


def test_a_copy_fetched_under_an_elapsed_lock_is_stale_after_reacquiring() -> None:
    """Found by the chaos campaign: a member whose locks elapsed while the broker was away
    acquired the same records again; copies fetched under the first acquisition must not be
    handed out (the second acquisition's copies are)."""
    clock = VirtualClock()
    log = MemoryLog(partitions=2, clock=clock)
    topic = MemoryTopic("jobs", 1)
    for i in range(5):
        topic.produce(0, f"job-{i}".encode())
    engine = new_member("a", log, topic, clock, random.Random(7))
    first = dict(engine.acquire("jobs", 0, 5))
    assert first == {o: 1 for o in range(5)}
    assert engine.holds("jobs", 0, 2, 1)
    clock.advance(LOCK + 1)  # no renewal: the locks elapse
    engine.tick()
    assert not engine.holds("jobs", 0, 2)
    again = dict(engine.acquire("jobs", 0, 5))
    assert again == {o: 2 for o in range(5)}
    assert engine.holds("jobs", 0, 2, 2) and engine.holds("jobs", 0, 2)
    assert not engine.holds("jobs", 0, 2, 1)
