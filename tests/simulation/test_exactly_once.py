"""Exactly-once members on MemoryLog (PROTOCOL.md 7.2): the take-up order (fence, then read
the start offset), zombie fencing, commits whose outcome is unknown, and a simulation with
crashes and pauses in which every input record's output is committed exactly once."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.errors import ConfigurationError
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.world import Rationalizer, RationalizerConfig
from tests.simulation.eos_harness import EosMember, FakeTransactions
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000


class World:
    def __init__(self, partitions: int = 1, unknown_outcomes: float = 0.0,
                 seed: int = 1) -> None:
        self.clock = VirtualClock()
        self.log = MemoryLog(partitions=2, clock=self.clock)
        self.topic = MemoryTopic("orders", partitions)
        self.rng = random.Random(seed)
        self.broker = FakeTransactions(self.log, random.Random(seed), unknown_outcomes)
        self.count = 0

    def member(self, client: str) -> EosMember:
        self.count += 1
        return EosMember(client, f"i{self.count:07d}", self.log, self.topic, self.clock,
                         self.broker, hi=HI, seed=self.rng.getrandbits(32))

    def produce(self, partition: int, n: int) -> None:
        for _ in range(n):
            self.topic.produce(partition, b"x")

    def run(self, members: list[EosMember], ms: int, step: int = 100) -> None:
        for _ in range(ms // step):
            self.clock.advance(step)
            for m in members:
                m.tick()

    def outputs(self) -> Counter[str]:
        return Counter(value.decode() for _, _, value in self.broker.output
                       if value is not None)


def start_of(member: EosMember, partition: int = 0) -> int:
    return member.engine.leases[("orders", partition)].start


def test_an_eos_engine_needs_a_fencing_and_only_it() -> None:
    w = World()
    config = EngineConfig(group_id="g", client_id="a", instance_id="i1", topics=("orders",),
                          mode="eos")
    rationalizer = Rationalizer(RationalizerConfig(2, HI))
    with pytest.raises(ConfigurationError, match="fencing"):
        MemberEngine(config, w.log, rationalizer, w.topic, SimClock(w.clock),
                     random.Random(1))


def test_the_take_up_fences_before_it_reads_the_start_offset() -> None:
    """A commit the previous owner had under way completes during the new owner's fence: a
    new owner that read its start before fencing would process that input again."""
    w = World()
    w.produce(0, 10)
    a = w.member("a")
    w.run([a], 300)
    first = a.next_batch()
    assert first is not None
    a.process(first)
    assert first.commit() and first.next_offset == 5
    second = a.next_batch()
    assert second is not None and second.first_offset == 5
    a.process(second)
    w.broker.unknown_outcomes, w.broker.rng = 1.0, _Always("hold")
    assert not second.commit()  # accepted by the coordinator, not completed: a freezes
    w.broker.unknown_outcomes = 0.0
    b = w.member("b")
    w.run([b], 3 * HI)  # a's claim goes stale; b claims, fences, reads
    assert ("orders", 0) in b.engine.holdings
    assert b.fencing.events[0] == ("fence", 0)
    assert start_of(b) == 10  # a's commit of 5..9 completed during the fence and was read
    assert w.outputs() == Counter(f"0:{o}" for o in range(10))


class _Always(random.Random):
    """A generator whose choice is always ``value`` (and random() always 0)."""

    def __init__(self, value: str) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return 0.0

    def choice(self, seq):  # type: ignore[no-untyped-def,override]
        return self.value


def test_a_zombie_past_its_lease_commits_nothing() -> None:
    w = World()
    w.produce(0, 10)
    a = w.member("a")
    w.run([a], 300)
    batch = a.next_batch()
    assert batch is not None
    a.process(batch)
    b = w.member("b")
    w.run([b], 3 * HI)  # a is frozen (SIGSTOP) with its transaction open
    assert ("orders", 0) in b.engine.holdings and start_of(b) == 0
    assert not batch.commit()  # a resumes: its lease lapsed, it aborts
    assert batch.state == "aborted"
    a.tick()
    assert ("orders", 0) not in a.engine.holdings
    while (taken := b.next_batch()) is not None:
        b.process(taken)
        assert taken.commit()
    assert w.outputs() == Counter(f"0:{o}" for o in range(10))


def test_a_zombie_that_passed_the_lease_check_is_fenced() -> None:
    """Frozen between its lease check and its commit: the new owner's fence stops it."""
    w = World()
    w.produce(0, 10)
    a = w.member("a")
    w.run([a], 300)
    batch = a.next_batch()
    assert batch is not None
    a.process(batch)
    b = w.member("b")
    producer = a.fencing.producers[("orders", 0)]
    producer.before_commit = lambda: w.run([b], 3 * HI)  # the freeze, after the check
    assert not batch.commit()
    assert ("orders", 0) not in a.engine.holdings  # dropped at once
    assert w.outputs() == Counter()  # nothing of a's transaction is visible
    while (taken := b.next_batch()) is not None:
        b.process(taken)
        assert taken.commit()
    w.run([a, b], 3 * HI)  # b hands the partition to a (fair shares: a comes first)
    assert start_of(a) == 10  # a takes it up again after b's commits
    assert w.outputs() == Counter(f"0:{o}" for o in range(10))


def test_a_commit_whose_outcome_is_unknown_retakes_the_partition() -> None:
    w = World()
    w.produce(0, 6)
    a = w.member("a")
    w.run([a], 300)
    for outcome, start in (("done-unknown", 3), ("lost", 3)):
        batch = a.next_batch(max_records=3)
        assert batch is not None
        a.process(batch)
        w.broker.unknown_outcomes, w.broker.rng = 1.0, _Always(outcome)
        assert not batch.commit()
        w.broker.unknown_outcomes = 0.0
        assert ("orders", 0) not in a.engine.holdings  # handed out no more
        w.run([a], 300)  # taken up again: fence, read, start at what the log says
        assert start_of(a) == start
    while (taken := a.next_batch()) is not None:
        a.process(taken)
        assert taken.commit()
    assert w.outputs() == Counter(f"0:{o}" for o in range(6))


@pytest.mark.parametrize("seed", range(12))
def test_every_input_record_is_output_exactly_once_through_crashes_and_pauses(
        seed: int) -> None:
    rng = random.Random(seed)
    w = World(partitions=4, unknown_outcomes=0.05, seed=seed)
    members: dict[str, EosMember | None] = {f"c{i}": None for i in range(3)}
    paused: dict[str, int] = {}
    open_batches: dict[str, object] = {}
    produced = [0] * 4
    for step in range(600):
        w.clock.advance(rng.randint(50, 250))
        if step < 450:
            partition = rng.randrange(4)
            w.produce(partition, 1)
            produced[partition] += 1
        for name in rng.sample(sorted(members), len(members)):
            member = members[name]
            if member is None:
                if step >= 450 or rng.random() < 0.05:
                    members[name] = w.member(name)
                continue
            if paused.get(name, 0) > w.clock():
                continue
            roll = rng.random()
            if step < 450 and roll < 0.01:
                members[name] = None  # kill -9: an open transaction stays open
                open_batches.pop(name, None)
                continue
            if step < 450 and roll < 0.02:
                paused[name] = w.clock() + rng.randint(HI // 2, 4 * HI)  # SIGSTOP
                continue
            member.tick()
            batch = open_batches.pop(name, None)
            if batch is not None:  # processed during the last step: commit it
                batch.commit()  # type: ignore[attr-defined]
            taken = member.next_batch(rng.randint(1, 6))
            if taken is not None:
                member.process(taken)
                open_batches[name] = taken
    for _ in range(100):  # drain with every member alive
        w.clock.advance(200)
        for name, member in members.items():
            if member is None:
                continue
            member.tick()
            batch = open_batches.pop(name, None)
            if batch is not None:
                batch.commit()  # type: ignore[attr-defined]
            taken = member.next_batch(6)
            if taken is not None:
                member.process(taken)
                open_batches[name] = taken
    expected = Counter(f"{p}:{o}" for p in range(4) for o in range(produced[p]))
    assert w.outputs() == expected


def test_a_batch_of_an_earlier_take_up_does_not_disturb_the_current_one() -> None:
    """A batch opened before its partition was taken up again fails (its producer was
    fenced by the new take-up), and the partition stays held under the new claim."""
    w = World()
    w.produce(0, 10)
    a = w.member("a")
    w.run([a], 300)
    stale = a.next_batch()
    assert stale is not None
    a.process(stale)
    a.engine.retake("orders", 0, stale.lease.epoch)  # e.g. a commit of another batch timed out
    w.run([a], 300)  # taken up again: a new producer fenced the one the batch holds
    current = a.engine.holdings[("orders", 0)]
    assert current.epoch != stale.lease.epoch
    assert not stale.commit()
    assert a.engine.holdings[("orders", 0)] is current  # still held, not taken up once more
    while (taken := a.next_batch()) is not None:
        a.process(taken)
        assert taken.commit()
    assert w.outputs() == Counter(f"0:{o}" for o in range(10))


def test_a_failed_send_aborts_the_batch_and_gives_its_records_back() -> None:
    w = World()
    w.produce(0, 6)
    a = w.member("a")
    w.run([a], 300)
    batch = a.next_batch()
    assert batch is not None
    a.fencing.producers[("orders", 0)].failing_sends = True
    a.process(batch)  # the first send fails: aborted at once, the others do nothing
    assert batch.failed and batch.state == "aborted"
    assert not batch.commit()
    a.fencing.producers[("orders", 0)].failing_sends = False
    again = a.next_batch()
    assert again is not None and again.first_offset == 0  # given back
    a.process(again)
    assert again.commit()
    assert w.outputs() == Counter(f"0:{o}" for o in range(5))
