"""Key-shared members on MemoryLog with a virtual clock: joins, leaves, crashes, restarts.

Several :class:`KeySharedEngine`\\ s share the partitions of one topic whose records carry keys
(``k{offset % 97}``). Each step, every live member ticks, its application commits what it
processed (some records stay in processing for a few steps), and it fetches from its fetch
plan and offers the records to ``deliver``. Members join, close gracefully, crash (kill -9:
nothing more is written, records in processing are lost) and restart with the same client id.

Checked after EVERY step: no slot is deliverable by two members at once, and every slot a
member may deliver is owned by it in the caught-up log (so the log has one owner for it).
Checked at every delivery: the deliverer owns the slot in the log; no other live member has a
record of the key in processing; and per key, offsets handed out strictly increase, except a
re-delivery of records that only crashed members had. At the end: every record was processed
(committed), the slots are balanced over the live members, and the log's committed offset of
every slot reached the end of its partition.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from marshal_py.client.key_shared_engine import KeySharedConfig, KeySharedEngine
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import KEY_SLOTS, key_slot
from marshal_py.replay import catch_up
from marshal_py.world import Owner, Rationalizer, RationalizerConfig
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000
GROUP = "orders.g"
TOPIC = "orders"
TP = tuple[str, int]


@dataclass
class Member:
    client_id: str
    engine: KeySharedEngine | None = None
    #: Fetch cursor of the simulated data consumer: tp -> (epoch, next offset to fetch).
    cursors: dict[TP, tuple[int, int]] = field(default_factory=dict)
    #: Handed out and being processed: (tp, offset, key).
    processing: list[tuple[TP, int, bytes]] = field(default_factory=list)


class World:
    def __init__(self, seed: int, partitions: int, members: int) -> None:
        self.rng = random.Random(seed)
        self.clock = VirtualClock()
        self.log = MemoryLog(partitions=2, clock=self.clock)
        self.topic = MemoryTopic(TOPIC, partitions)
        self.members = [Member(f"m{i}") for i in range(members)]
        self.auditor = Rationalizer(RationalizerConfig(2, HI))
        self.produced = 0
        #: key -> [(offset, instance)] in hand-out order
        self.history: dict[bytes, list[tuple[int, str]]] = defaultdict(list)
        self.crashed: set[str] = set()
        self.processed: set[tuple[TP, int]] = set()
        self.faults = {"join": 0, "crash": 0, "close": 0, "restart": 0}
        self.deliveries = 0
        self.redeliveries = 0

    # -- the world -------------------------------------------------------------------------

    def produce(self, count: int) -> None:
        for _ in range(count):
            key = self.produced % 97  # a key always goes to the same partition, as in Kafka
            self.topic.produce(key % len(self.topic.records), f"k{key}".encode())
            self.produced += 1

    def start(self, member: Member) -> None:
        config = KeySharedConfig(group_id=GROUP, client_id=member.client_id,
                                 instance_id=f"{self.rng.getrandbits(32):08x}",
                                 topics=(TOPIC,), heartbeat_interval_ms=HI,
                                 offset_reset="earliest")
        engine = KeySharedEngine(config, self.log, Rationalizer(RationalizerConfig(2, HI)),
                                 self.topic, SimClock(self.clock),
                                 random.Random(self.rng.getrandbits(32)))
        engine.start()
        member.engine = engine
        member.cursors.clear()
        member.processing.clear()

    def crash(self, member: Member) -> None:
        assert member.engine is not None
        self.crashed.add(member.engine.me.instance_id)
        member.engine = None  # kill -9: nothing more is written; processing is lost
        member.processing.clear()
        self.faults["crash"] += 1

    def close(self, member: Member) -> None:
        engine = member.engine
        assert engine is not None
        self.finish_processing(member)
        engine.close()
        member.engine = None
        self.faults["close"] += 1

    def finish_processing(self, member: Member, share: float = 1.0) -> None:
        engine = member.engine
        assert engine is not None
        still = []
        for tp, offset, key in member.processing:
            if self.rng.random() < share:
                if engine.commit(tp[0], tp[1], offset):
                    self.processed.add((tp, offset))
            else:
                still.append((tp, offset, key))
        member.processing = still

    def step(self, *, faults: bool, produce: bool) -> None:
        self.clock.advance(self.rng.randint(50, 250))
        if produce:
            self.produce(self.rng.randint(0, 6))
        for member in self.rng.sample(self.members, len(self.members)):
            self.step_member(member, faults)
        self.check_exclusive()

    def step_member(self, member: Member, faults: bool) -> None:
        if member.engine is None:
            if not faults or self.rng.random() < 0.03:
                self.faults["restart" if self.faults["join"] >= len(self.members)
                            else "join"] += 1
                self.start(member)
            return
        if faults:
            roll = self.rng.random()
            if roll < 0.003:
                self.crash(member)
                return
            if roll < 0.005:
                self.close(member)
                return
        engine = member.engine
        engine.tick()
        self.finish_processing(member, share=0.6)
        for tp, (epoch, position) in engine.fetch_plan().items():
            mine_epoch, cursor = member.cursors.get(tp, (-1, 0))
            if mine_epoch != epoch:
                cursor = position  # seek
            records = self.topic.records[tp[1]]
            for offset in range(cursor, min(cursor + self.rng.randint(1, 12), len(records))):
                key = records[offset]
                cursor = offset + 1
                if engine.deliver(tp[0], tp[1], epoch, offset, key_slot(key)):
                    self.on_delivery(member, engine.me, tp, offset, key)
                if engine.fetch_plan().get(tp, (None, 0))[0] != epoch:
                    break  # the engine moved the fetch: the rest of this batch is dropped
            member.cursors[tp] = (epoch, cursor)

    # -- the checks ------------------------------------------------------------------------

    def on_delivery(self, member: Member, me: Owner, tp: TP, offset: int, key: bytes) -> None:
        catch_up(self.log, self.auditor, [0, 1])
        state = self.auditor.key_shared_partition(GROUP, tp[0], tp[1])
        assert state is not None
        slot = key_slot(key)
        assert state.owner(slot) == me, f"{me} delivered slot {slot} owned by {state.owner(slot)}"
        for other in self.members:
            if other is member or other.engine is None:
                continue
            busy = [o for t, o, k in other.processing if k == key]
            assert not busy, (f"{me.client_id} got {key!r}@{offset} while {other.client_id} "
                              f"still processes it at {busy}")
        history = self.history[key]
        earlier = [(o, who) for o, who in history if o >= offset]
        if earlier:
            # Only a re-delivery of what crashed members had handed out.
            assert all(who in self.crashed for _, who in earlier), (
                f"{key!r}@{offset} by {me.instance_id} after {earlier} (crashed {self.crashed})")
            self.redeliveries += 1
        history.append((offset, me.instance_id))
        member.processing.append((tp, offset, key))
        self.deliveries += 1

    def check_exclusive(self) -> None:
        """No slot deliverable by two members; each deliverable slot owned in the log."""
        catch_up(self.log, self.auditor, [0, 1])
        now = self.clock()
        for partition in range(len(self.topic.records)):
            state = self.auditor.key_shared_partition(GROUP, TOPIC, partition)
            owners = state.owners() if state is not None else [None] * KEY_SLOTS
            seen: dict[int, Owner] = {}
            for member in self.members:
                engine = member.engine
                if engine is None:
                    continue
                holding = engine.holdings.get((TOPIC, partition))
                if holding is None or now >= holding.lease_until_ms:
                    continue
                for slot in holding.active:
                    assert slot not in seen, f"slot {slot} deliverable by {seen[slot]} and " \
                                              f"{engine.me}"
                    seen[slot] = engine.me
                    assert owners[slot] == engine.me, (
                        f"{engine.me} may deliver slot {slot} owned in the log by "
                        f"{owners[slot]}")

    def settled(self) -> bool:
        """Everything processed, balanced, and committed in the log."""
        live = [m.engine for m in self.members if m.engine is not None]
        if not live:
            return False
        if any(m.processing for m in self.members):
            return False
        ends = [len(r) for r in self.topic.records]
        if len(self.processed) < sum(ends):
            return False
        quota = KEY_SLOTS // len(live)
        catch_up(self.log, self.auditor, [0, 1])
        for partition, end in enumerate(ends):
            counts = [len(e.slots(TOPIC, partition)) for e in live]
            if not all(quota <= c <= quota + 1 for c in counts) or sum(counts) != KEY_SLOTS:
                return False
            state = self.auditor.key_shared_partition(GROUP, TOPIC, partition)
            if state is None or state.lowest_committed() != end:
                return False
        return True


@pytest.mark.parametrize(("seed", "partitions"), [(0, 1), (1, 1), (2, 1), (3, 1), (4, 2),
                                                  (5, 2)])
def test_per_key_order_and_exclusive_slots_through_faults(seed: int, partitions: int) -> None:
    world = World(seed, partitions, members=4)
    for _ in range(1_200):
        world.step(faults=True, produce=True)
    for _ in range(600):  # no more faults or records: everyone comes back, all settles
        world.step(faults=False, produce=False)
        if world.settled():
            break
    missing = {(("orders", p), o) for p, records in enumerate(world.topic.records)
               for o in range(len(records))} - world.processed
    assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
    assert world.settled(), "the group did not settle: " + ", ".join(
        f"{m.client_id}: {len(m.engine.slots(TOPIC, 0)) if m.engine else '-'}"
        for m in world.members)
    assert world.faults["crash"] >= 1 and world.faults["close"] >= 1, world.faults
    assert world.faults["restart"] >= 1, world.faults
    assert world.deliveries >= world.produced


def test_a_join_hands_slots_over_without_redelivery() -> None:
    """Two members, then a third: slots move only after commit; nothing handed out twice."""
    world = World(11, 1, members=3)
    first, second, third = world.members
    world.start(first)
    world.start(second)
    world.produce(500)
    for _ in range(60):
        for member in (first, second):
            world.step_member(member, faults=False)
        world.clock.advance(100)
        world.check_exclusive()
    assert first.engine is not None and second.engine is not None
    assert len(first.engine.slots(TOPIC, 0)) + len(second.engine.slots(TOPIC, 0)) == KEY_SLOTS
    world.start(third)
    world.produce(500)
    for _ in range(400):
        world.step(faults=False, produce=False)
        if world.settled():
            break
    assert world.settled()
    assert world.redeliveries == 0
    assert world.deliveries == 1_000
    sizes = sorted(len(m.engine.slots(TOPIC, 0)) for m in world.members if m.engine)
    assert sizes == [341, 341, 342]


def test_a_restarted_member_takes_its_slots_back_after_one_interval() -> None:
    world = World(12, 1, members=2)
    first, second = world.members
    world.start(first)
    world.start(second)
    world.produce(200)
    for _ in range(30):
        world.step(faults=False, produce=False)
    assert first.engine is not None
    held = first.engine.slots(TOPIC, 0)
    assert len(held) == 512
    world.crash(first)
    world.clock.advance(100)
    world.start(first)
    restarted_at = world.clock()
    engine = first.engine
    assert engine is not None and engine.reclaim_pending()
    while engine.slots(TOPIC, 0) != held:
        world.step(faults=False, produce=False)
        assert world.clock() - restarted_at <= 2 * HI, "not reclaimed within 2 HI"
    assert world.clock() - restarted_at >= HI  # waited for a live predecessor to show up
