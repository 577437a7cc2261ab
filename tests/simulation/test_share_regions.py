"""Eight share members over regions of the in-flight window, on MemoryLog with a virtual clock.

Every member acquires, from a view of the log that may be a step old, what its regions offer
and accepts it a little later. Checked after every step: no record is held under a live lock
by two members. At the end: every record was delivered once (delivery count 1) and accepted
once, the SPSO passed them all, and the members hardly raced (records asked for and not
granted are a small share). Then a member that stops asking: the others take its regions
once they have stayed Available for two ticks, and the SPSO still reaches the end.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from marshal_py.client.share_engine import ShareConfig, ShareEngine
from marshal_py.client.share_regions import region_size
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.replay import catch_up
from marshal_py.world import Rationalizer, RationalizerConfig
from marshal_py.world.share import RecordState
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000
LOCK = 30_000
INFLIGHT = 400
RECORDS = 4_000
MEMBERS = 8


def new_member(name: str, log: MemoryLog, topic: MemoryTopic, clock: VirtualClock,
               rng: random.Random) -> ShareEngine:
    config = ShareConfig(group_id="jobs", client_id=name,
                         instance_id=f"{rng.getrandbits(32):08x}", topics=("jobs",),
                         heartbeat_interval_ms=HI, lock_ms=LOCK, inflight_limit=INFLIGHT,
                         offset_reset="earliest", batch_size=region_size(INFLIGHT, MEMBERS))
    engine = ShareEngine(config, log, Rationalizer(RationalizerConfig(2, HI)), topic,
                         SimClock(clock), random.Random(rng.random()))
    engine.start()
    return engine


def setup(seed: int) -> tuple[random.Random, VirtualClock, MemoryLog, MemoryTopic,
                              list[ShareEngine], Rationalizer]:
    rng = random.Random(seed)
    clock = VirtualClock()
    log = MemoryLog(partitions=2, clock=clock)
    topic = MemoryTopic("jobs", 1)
    for i in range(RECORDS):
        topic.produce(0, f"job-{i}".encode())
    members = [new_member(f"m{i}", log, topic, clock, rng) for i in range(MEMBERS)]
    for member in members:
        member.tick()  # everyone sees everyone before the first acquisition
    return rng, clock, log, topic, members, Rationalizer(RationalizerConfig(2, HI))


def no_two_holders(members: list[ShareEngine]) -> None:
    holders: Counter[int] = Counter()
    for engine in members:
        for offset in engine.held.get(("jobs", 0), {}):
            if engine.holds("jobs", 0, offset):
                holders[offset] += 1
    assert max(holders.values(), default=0) <= 1


@pytest.mark.parametrize("seed", range(4))
def test_eight_members_over_regions_deliver_each_record_once_and_rarely_race(
        seed: int) -> None:
    rng, clock, log, _topic, members, auditor = setup(seed)
    counts: Counter[int] = Counter()
    accepted: Counter[int] = Counter()
    for _step in range(2_000):
        clock.advance(rng.randint(5, 50))
        for engine in rng.sample(members, len(members)):
            if rng.random() < 0.5:
                engine.tick()  # else it acquires from a view one step old
            held = sorted(engine.held.get(("jobs", 0), {}).items())
            for offset, _count in held[: rng.randint(0, len(held))]:
                accepted[offset] += 1
                engine.ack("jobs", 0, offset, "accept")
            if len(engine.held.get(("jobs", 0), {})) < engine.config.batch_size:
                for offset, count in engine.acquire("jobs", 0):
                    counts[offset] += 1
                    assert count == 1, (offset, count)
            engine.flush()
        no_two_holders(members)
        catch_up(log, auditor, [0, 1])
        share = auditor.share_partition("jobs", "jobs", 0)
        if share is not None and share.spso >= RECORDS:
            break
    share = auditor.share_partition("jobs", "jobs", 0)
    assert share is not None and share.spso == RECORDS, "stuck"
    assert set(counts) == set(range(RECORDS)) and max(counts.values()) == 1
    assert set(accepted) == set(range(RECORDS)) and max(accepted.values()) == 1
    void = sum(engine.stats.records_void for engine in members)
    acquired = sum(engine.stats.records_acquired for engine in members)
    assert acquired == RECORDS
    assert void <= RECORDS // 10, f"{void} offsets asked for in vain"


def test_the_regions_of_a_member_that_stops_asking_go_to_the_others() -> None:
    rng, clock, log, _topic, members, auditor = setup(99)
    idle, busy = members[0], members[1:]
    took_from_idle = 0
    size = region_size(INFLIGHT, MEMBERS)
    for _step in range(2_000):
        clock.advance(rng.randint(20, 80))
        idle.tick()  # alive (it heartbeats) but never acquires
        for engine in busy:
            engine.tick()
            for offset in list(engine.held.get(("jobs", 0), {})):
                engine.ack("jobs", 0, offset, "accept")
            for offset, _count in engine.acquire("jobs", 0):
                took_from_idle += (offset // size) % MEMBERS == 0
            engine.flush()
        no_two_holders(members)
        catch_up(log, auditor, [0, 1])
        share = auditor.share_partition("jobs", "jobs", 0)
        if share is not None and share.spso >= RECORDS:
            break
    share = auditor.share_partition("jobs", "jobs", 0)
    assert share is not None and share.spso == RECORDS, "stuck behind the idle member"
    assert took_from_idle >= RECORDS // MEMBERS - size


def test_acks_handed_over_as_a_run_ride_with_the_next_acquisition() -> None:
    """``ack_many`` queues what ``ack`` would, ignoring offsets not held; a tick without
    flush leaves them queued, and the next acquisition writes them in its round trip (the
    log then shows them acknowledged)."""
    _, clock, _, _, members, _ = setup(7)
    engine = members[0]
    granted = [offset for offset, _ in engine.acquire("jobs", 0)]
    assert granted
    assert engine.ack_many("jobs", 0, [*granted, 10**6], "accept") == len(granted)
    assert not engine.held["jobs", 0] and not engine.lock_expiries("jobs", 0)
    written = engine.stats.coordination_records
    engine.tick(flush=False)
    assert engine.stats.acks["accept"] == 0  # still queued
    clock.advance(1)
    assert engine.acquire("jobs", 0)
    assert engine.stats.acks["accept"] == len(granted)
    assert engine.stats.coordination_records - written >= 2  # the acks and the acquisition
    share = engine.rationalizer.share_partition("jobs", "jobs", 0)
    assert share is not None
    runs = share.runs_between(min(granted), max(granted), clock.now_ms)
    assert {view.state for _, _, view in runs} == {RecordState.ACKNOWLEDGED}


PARTITIONS = 4


def setup_partitions(seed: int, members: int) -> tuple[
        random.Random, VirtualClock, MemoryLog, list[ShareEngine], Rationalizer]:
    """``members`` members of one group on a topic of PARTITIONS partitions of RECORDS / 4
    records each, everyone seeing everyone."""
    rng = random.Random(seed)
    clock = VirtualClock()
    log = MemoryLog(partitions=2, clock=clock)
    topic = MemoryTopic("jobs", PARTITIONS)
    for i in range(RECORDS):
        topic.produce(i % PARTITIONS, f"job-{i}".encode())
    engines = [new_member(f"m{i}", log, topic, clock, rng) for i in range(members)]
    for engine in engines:
        engine.tick()
    return rng, clock, log, engines, Rationalizer(RationalizerConfig(2, HI))


def spso(auditor: Rationalizer, partition: int) -> int:
    share = auditor.share_partition("jobs", "jobs", partition)
    return 0 if share is None else share.spso


@pytest.mark.parametrize("seed", range(3))
def test_with_one_member_per_partition_each_partition_is_read_by_a_member_of_its_own(
        seed: int) -> None:
    """A fast application's members (``sharing=1``): every partition's records go to one
    member, a different one for each partition, each once, and nobody asks in vain."""
    rng, clock, log, members, auditor = setup_partitions(seed, PARTITIONS)
    readers: dict[int, Counter[str]] = {p: Counter() for p in range(PARTITIONS)}
    per_partition = RECORDS // PARTITIONS
    for _step in range(2_000):
        clock.advance(rng.randint(5, 50))
        for engine in rng.sample(members, len(members)):
            engine.tick()
            for partition in range(PARTITIONS):
                held = list(engine.held.get(("jobs", partition), {}))
                engine.ack_many("jobs", partition, held, "accept")
                for offset, count in engine.acquire("jobs", partition, 200, sharing=1):
                    assert count == 1, (partition, offset, count)
                    readers[partition][engine.config.client_id] += 1
            engine.flush()
        catch_up(log, auditor, [0, 1])
        if all(spso(auditor, p) >= per_partition for p in range(PARTITIONS)):
            break
    assert [spso(auditor, p) for p in range(PARTITIONS)] == [per_partition] * PARTITIONS
    assert all(sum(readers[p].values()) == per_partition for p in range(PARTITIONS))
    alone = [next(iter(readers[p])) for p in range(PARTITIONS) if len(readers[p]) == 1]
    assert len(alone) == PARTITIONS, readers
    assert sorted(alone) == sorted(e.config.client_id for e in members)
    assert sum(engine.stats.records_void for engine in members) == 0


def test_with_one_member_per_partition_the_others_relieve_one_that_stops_asking() -> None:
    """The member that prefers partition 0 stays alive but takes nothing: once its regions
    have stayed Available for two ticks, the others read them, and the SPSO reaches the end."""
    rng, clock, log, members, auditor = setup_partitions(5, 2)
    # Live members rank in the order the rationalizer lists them (by instance id): the
    # first prefers partition 0; the test also asserts it had the rank it was given.
    idle = min(members, key=lambda engine: engine.me)
    busy = next(engine for engine in members if engine is not idle)
    assert busy.rationalizer.members("jobs", "jobs", clock.now_ms)[0] == idle.me
    taken = 0
    first_taken_ms = started_ms = clock.now_ms
    per_partition = RECORDS // PARTITIONS
    for _step in range(3_000):
        clock.advance(rng.randint(20, 80))
        idle.tick()
        busy.tick()
        held = list(busy.held.get(("jobs", 0), {}))
        busy.ack_many("jobs", 0, held, "accept")
        got = busy.acquire("jobs", 0, 200, sharing=1)
        if got and not taken:
            first_taken_ms = clock.now_ms
        taken += len(got)
        busy.flush()
        catch_up(log, auditor, [0, 1])
        if spso(auditor, 0) >= per_partition:
            break
    assert spso(auditor, 0) == per_partition, "stuck behind the idle member"
    assert taken == per_partition
    # Not its own partition: it waited for the regions to stay Available for two ticks.
    assert first_taken_ms - started_ms >= busy._steal_after_ms
