"""Checkpoints under a retention that deletes old records (MemoryLog, virtual clock).

Consumers crash, pause, restart and close while producing traffic; live members re-write
their group's checkpoint every interval; retention keeps deleting the oldest records; the
whole group sometimes goes away for longer than the offset retention. At regular steps a new
reader starts from the newest checkpoint and must agree exactly with a reader that followed
the log from its very first record, on the group's whole state (or, once the group is Dead,
on its offsets having expired). The replay work of the new reader stays bounded by about one
checkpoint interval of records, however long the run.
"""

from __future__ import annotations

import random

import pytest

from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import coordination_partition
from marshal_py.replay import catch_up
from marshal_py.replay.checkpoints import start_from_checkpoints
from marshal_py.world import GroupState, Rationalizer, RationalizerConfig
from tests.simulation.harness import MemoryTopic, SimClock, SimConsumer, Simulation

HI = 1_000
CHECKPOINT_EVERY = 5 * HI
OFFSETS_RETENTION = 60 * HI
#: Kafka's time retention of the coordination topic: must exceed the offset retention plus
#: one checkpoint interval (PROTOCOL.md, checkpoints), or an Empty group's last checkpoint
#: could be deleted before its offsets expire.
LOG_RETENTION = OFFSETS_RETENTION + 3 * CHECKPOINT_EVERY


def config() -> RationalizerConfig:
    return RationalizerConfig(2, HI, offsets_retention_ms=OFFSETS_RETENTION)


class CheckpointingSimulation(Simulation):
    """The consumer simulation with checkpoints and a shorter offset retention."""

    def new_engine(self, consumer: SimConsumer) -> MemberEngine:
        engine_config = EngineConfig(
            group_id="sim", client_id=consumer.client_id,
            instance_id=f"{self.rng.getrandbits(32):08x}", topics=("orders",),
            mode=self.mode, heartbeat_interval_ms=self.hi, offset_reset="earliest",
            checkpoint_interval_ms=CHECKPOINT_EVERY, replay_window_ms=LOG_RETENTION)
        engine = MemberEngine(engine_config, self.log, Rationalizer(config()), self.topic,
                              SimClock(self.clock), random.Random(self.rng.getrandbits(32)))
        engine.start()
        return engine


def fresh_reader(log: MemoryLog, cp: int, now: int) -> tuple[Rationalizer, int]:
    """A new member's view: from the newest checkpoint; returns it and how many records it
    read forwards."""
    reader = Rationalizer(config())
    window_start = log.position_for_time(cp, now - LOG_RETENTION)
    start = start_from_checkpoints(log, reader, cp, "sim", ["orders"], window_start)
    end = log.end_position(cp)
    catch_up(log, reader, [cp])
    return reader, end - start


@pytest.mark.parametrize(("seed", "mode"), [(s, m) for s in range(4) for m in ("alo", "amo")])
def test_a_reader_from_the_newest_checkpoint_agrees_with_one_that_saw_everything(
        seed: int, mode: str) -> None:
    sim = CheckpointingSimulation(seed, mode, consumers=3, partitions=4)  # type: ignore[arg-type]
    full = Rationalizer(config())  # follows the log from its first record, forever
    cp = coordination_partition("orders", 2)
    compared = expired_seen = 0
    worst_replay = 0
    outage_at = {200, 700}
    for step in range(1_000):
        if step in outage_at:
            # Everyone goes away for longer than the offset retention.
            for consumer in sim.consumers:
                if consumer.engine is not None:
                    consumer.engine.close()
                consumer.engine = None
                consumer.buffer.clear()
                consumer.uncommitted.clear()
            sim.clock.advance(OFFSETS_RETENTION + 5 * HI)
        sim.step(faults=True, produce=True)
        catch_up(sim.log, full, [0, 1])
        now = sim.clock()
        sim.log.delete_before(cp, sim.log.position_for_time(cp, now - LOG_RETENTION))
        if step % 10 != 0:
            continue
        reader, replayed = fresh_reader(sim.log, cp, now)
        state = full.group_state("sim", "orders", now)
        if state is None or state.state is GroupState.DEAD:
            # Expired, or expiring with the next record: so for the new reader too.
            seen = reader.group_state("sim", "orders", now)
            assert seen is None or seen.state is GroupState.DEAD, step
            expired_seen += 1
            continue
        assert reader.snapshot("sim", "orders") == full.snapshot("sim", "orders"), step
        assert reader.members("sim", "orders", now) == full.members("sim", "orders", now)
        compared += 1
        if full.last_checkpoint_ms("sim", "orders") is not None:
            worst_replay = max(worst_replay, replayed)
    assert compared > 50
    assert expired_seen >= 1 and full.expired_groups >= 2  # both outages expired the offsets
    assert sim.log.start_position(cp) > 0  # retention really deleted records
    # Bounded replay: never much more than a checkpoint interval of traffic, whatever the
    # length of the run (the log held several thousand records).
    assert worst_replay < sim.log.end_position(cp) - sim.log.start_position(cp)
    assert worst_replay < 600, worst_replay
    print(f"seed {seed} {mode}: compared {compared}, expired {expired_seen}, worst replay "
          f"{worst_replay} of {sim.log.end_position(cp) - sim.log.start_position(cp)} "
          f"retained ({sim.log.end_position(cp)} written)")


def test_a_stable_groups_released_offset_outlives_the_log_retention() -> None:
    """A partition released long ago and never claimed since keeps its committed offset for
    a member that joins after retention deleted the release: the checkpoints carry it."""
    clock = VirtualClock()
    log = MemoryLog(partitions=2, clock=clock)
    topic = MemoryTopic("orders", 2)
    for partition in (0, 1):
        for i in range(100):
            topic.produce(partition, f"{partition}-{i}".encode())

    def member(name: str, max_claims: int | None) -> MemberEngine:
        engine = MemberEngine(
            EngineConfig(group_id="sim", client_id=name, instance_id=f"{name}-{clock()}",
                         topics=("orders",), heartbeat_interval_ms=HI, offset_reset="earliest",
                         max_claims=max_claims, checkpoint_interval_ms=CHECKPOINT_EVERY,
                         replay_window_ms=LOG_RETENTION),
            log, Rationalizer(config()), topic, SimClock(clock), random.Random(7))
        engine.start()
        return engine

    cp = coordination_partition("orders", 2)
    a = member("a", None)
    for _ in range(10):
        clock.advance(200)
        a.tick()
    assert set(a.holdings) == {("orders", 0), ("orders", 1)}
    for partition, done in ((0, 30), (1, 42)):
        holding = a.holdings[("orders", partition)]
        holding.cursor.handed(list(range(done)), done)
        for offset in range(done):
            a.commit("orders", partition, offset)
    a.flush_commits()
    b = member("b", 1)  # takes at most one partition
    for _ in range(10):
        clock.advance(200)
        a.tick()
        b.tick()
    a.close()  # releases both; b takes one of them, the other stays unclaimed
    released_at = clock()
    while clock() - released_at < 2 * LOG_RETENTION:
        clock.advance(300)
        b.tick()
        log.delete_before(cp, log.position_for_time(cp, clock() - LOG_RETENTION))
    assert log.start_position(cp) > 0
    unclaimed = [p for p in (0, 1) if ("orders", p) not in b.holdings]
    assert len(unclaimed) == 1
    expected = {0: 30, 1: 42}[unclaimed[0]]
    # The release itself is long gone from the log...
    window_only = Rationalizer(config())
    window_only.skip_to(cp, log.start_position(cp))
    catch_up(log, window_only, [cp])
    assert window_only.claim("sim", "orders", unclaimed[0]).committed_offset is None
    # ...but a member joining now starts that partition where a left off.
    c = member("c", None)
    for _ in range(20):
        clock.advance(200)
        b.tick()
        c.tick()
        log.delete_before(cp, log.position_for_time(cp, clock() - LOG_RETENTION))
        if ("orders", unclaimed[0]) in c.holdings:
            break
    holding = c.holdings[("orders", unclaimed[0])]
    assert holding.cursor.committed == expected
    assert c.channel.replay_starts[cp] > log.start_position(cp)  # started at a checkpoint
