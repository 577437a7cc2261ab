"""A deterministic simulation of consumer processes on MemoryLog with a virtual clock."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.client.engine_types import Mode
from marshal_py.client.holdings import DEFAULT_AMO_WINDOW_MS, DEFAULT_AMO_WINDOW_RECORDS
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.replay import catch_up
from marshal_py.world import Owner, Rationalizer, RationalizerConfig

TP = tuple[str, int]


class SimClock:
    """The engine's clock on a virtual clock (broker time and local time are the same)."""

    def __init__(self, clock: VirtualClock) -> None:
        self.clock = clock

    def now_ms(self) -> int:
        return self.clock()

    def observe(self, broker_ms: int, sent_ms: int, acked_ms: int) -> None:
        pass

    def monotonic_ms(self) -> float:
        return float(self.clock())


class MemoryTopic:
    """A data topic in memory; also the engine's PartitionSource."""

    def __init__(self, name: str, partitions: int) -> None:
        self.name = name
        self.records: list[list[bytes]] = [[] for _ in range(partitions)]
        #: Offsets groups committed to Kafka itself, by (group, partition).
        self.kafka_committed: dict[tuple[str, int], int] = {}
        #: The topic's id; None while it is deleted.
        self.id: str | None = "topic-1"

    def delete(self) -> None:
        """Delete the topic (its records go too)."""
        self.id = None
        self.records = [[] for _ in self.records]

    def create(self, topic_id: str) -> None:
        """Create it again, empty, under ``topic_id``."""
        self.id = topic_id

    def produce(self, partition: int, value: bytes) -> int:
        self.records[partition].append(value)
        return len(self.records[partition]) - 1

    def add_partitions(self, count: int) -> None:
        self.records.extend([] for _ in range(count))

    def partition_count(self, topic: str) -> int | None:
        return len(self.records) if topic == self.name and self.id is not None else None

    def topic_id(self, topic: str) -> str | None:
        return self.id if topic == self.name else None

    def refresh(self, topics: tuple[str, ...]) -> None:
        """Always up to date."""

    def offset_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        return 0, len(self.records[partition])

    def offset_bounds_of(self, partitions: list[tuple[str, int]]
                         ) -> dict[tuple[str, int], tuple[int, int]]:
        return {(t, p): self.offset_bounds(t, p) for t, p in partitions}

    def offset_bounds_ahead(self, partitions: list[tuple[str, int]]
                            ) -> Callable[[], dict[tuple[str, int], tuple[int, int]]]:
        bounds = self.offset_bounds_of(partitions)
        return lambda: bounds

    def end_offsets_of(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        return {(t, p): self.offset_bounds(t, p)[1] for t, p in partitions}

    def group_committed_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        return self.kafka_committed.get((group_id, partition))

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        # Records in memory carry no time: by-time starts at the end.
        return None

    def fetch(self, partition: int, position: int, limit: int) -> list[int]:
        return list(range(position, min(position + limit, len(self.records[partition]))))


@dataclass
class SimConsumer:
    client_id: str
    engine: MemberEngine | None = None
    paused_until: int = 0
    uncommitted: list[tuple[TP, int, int]] = field(default_factory=list)
    #: Fetched and accepted batches not yet handed to the application: (tp, epoch, offsets).
    buffer: list[tuple[TP, int, list[int]]] = field(default_factory=list)
    was_paused: bool = False


@dataclass
class Delivery:
    consumer: str
    instance: str
    tp: TP
    offset: int
    at_ms: int


class Simulation:
    """N consumers of one topic with crashes, pauses, restarts and graceful closes."""

    def __init__(self, seed: int, mode: Mode, consumers: int = 3, partitions: int = 6,
                 hi_ms: int = 1_000, coordination_partitions: int = 2) -> None:
        self.rng = random.Random(seed)
        self.mode = mode
        self.hi = hi_ms
        self.clock = VirtualClock()
        self.log = MemoryLog(partitions=coordination_partitions, clock=self.clock)
        self.topic = MemoryTopic("orders", partitions)
        self.consumers = [SimConsumer(f"worker-{i}") for i in range(consumers)]
        self.deliveries: list[Delivery] = []
        #: (instance, tp, offset) -> when the application's commit of it was accepted
        self.committed_at: dict[tuple[str, TP, int], int] = {}
        self.produced = 0
        self.auditor = Rationalizer(RationalizerConfig(coordination_partitions, hi_ms))
        self.faults = {"crash": 0, "pause": 0, "close": 0, "restart": 0}
        self.engine_options: dict[str, int] = {}

    def new_engine(self, consumer: SimConsumer) -> MemberEngine:
        config = EngineConfig(group_id="sim", client_id=consumer.client_id,
                              instance_id=f"{self.rng.getrandbits(32):08x}", topics=("orders",),
                              mode=self.mode, heartbeat_interval_ms=self.hi,
                              offset_reset="earliest",
                              amo_window_records=self.engine_options.get(
                                  "amo_window_records", DEFAULT_AMO_WINDOW_RECORDS),
                              amo_window_ms=self.engine_options.get(
                                  "amo_window_ms", DEFAULT_AMO_WINDOW_MS))
        engine = MemberEngine(config, self.log, Rationalizer(RationalizerConfig(
            self.log.partition_count(), self.hi)), self.topic, SimClock(self.clock),
            random.Random(self.rng.getrandbits(32)))
        engine.start()
        return engine

    def step(self, *, faults: bool, produce: bool) -> None:
        self.clock.advance(self.rng.randint(50, 250))
        if produce:
            for _ in range(self.rng.randint(0, 3)):
                self.topic.produce(self.rng.randrange(len(self.topic.records)), b"x")
                self.produced += 1
        for consumer in self.rng.sample(self.consumers, len(self.consumers)):
            self.step_consumer(consumer, faults)

    def step_consumer(self, consumer: SimConsumer, faults: bool) -> None:
        now = self.clock()
        if consumer.engine is None:
            if not faults or self.rng.random() < 0.05:
                consumer.engine = self.new_engine(consumer)
                self.faults["restart"] += 1
            return
        if now < consumer.paused_until:
            consumer.was_paused = True
            return
        if consumer.was_paused:
            # Resumed (SIGCONT): the application thread may run before the coordination
            # thread notices anything, and hands out what it had buffered.
            consumer.was_paused = False
            self.deliver(consumer, self.rng.randint(1, 10))
        if faults:
            roll = self.rng.random()
            if roll < 0.004:
                self.crash(consumer)
                consumer.engine = None  # kill -9: nothing more is written
                consumer.uncommitted.clear()
                consumer.buffer.clear()
                self.faults["crash"] += 1
                return
            if roll < 0.008:
                self.crash(consumer)  # a long pause may cost what a crash costs
                consumer.paused_until = now + self.rng.randint(self.hi // 2, 4 * self.hi)
                self.faults["pause"] += 1
                return
            if roll < 0.010:
                consumer.engine.close()
                consumer.engine = None
                consumer.buffer.clear()
                consumer.uncommitted.clear()
                self.faults["close"] += 1
                return
        engine = consumer.engine
        engine.tick()
        self.consume(consumer, engine)

    def crash(self, consumer: SimConsumer) -> None:
        """Called right before ``consumer`` is killed."""

    def consume(self, consumer: SimConsumer, engine: MemberEngine) -> None:
        """The application side of one step: commit, fetch, hand out."""
        # Process what was delivered last step (commit after "work").
        for tp, epoch, offset in consumer.uncommitted:
            if engine.commit(tp[0], tp[1], offset, epoch):
                self.committed_at[(engine.me.instance_id, tp, offset)] = self.clock()
        consumer.uncommitted.clear()
        buffered = {tp for tp, _, _ in consumer.buffer}
        for (topic, partition), (epoch, position) in engine.assignments().items():
            if (topic, partition) in buffered:
                continue
            offsets = self.topic.fetch(partition, position, self.rng.randint(1, 5))
            if offsets and engine.accept(topic, partition, epoch, offsets, offsets[-1] + 1):
                consumer.buffer.append(((topic, partition), epoch, offsets))
        self.deliver(consumer, self.rng.randint(0, 12))

    def deliver(self, consumer: SimConsumer, count: int) -> None:
        """Hand up to ``count`` buffered records to the application, as the Consumer does."""
        engine = consumer.engine
        assert engine is not None
        while count > 0 and consumer.buffer:
            (topic, partition), epoch, offsets = consumer.buffer[0]
            if not engine.deliver(topic, partition, epoch, offsets[0]):
                consumer.buffer.pop(0)  # lost or lease lapsed: not delivered now
                engine.rewind(topic, partition, epoch, offsets[0])  # fetched again if ours
                continue
            offset = offsets.pop(0)
            if not offsets:
                consumer.buffer.pop(0)
            self.on_delivery(engine.me, (topic, partition))
            self.deliveries.append(Delivery(consumer.client_id, engine.me.instance_id,
                                            (topic, partition), offset, self.clock()))
            consumer.uncommitted.append(((topic, partition), epoch, offset))
            count -= 1

    def on_delivery(self, member: Owner, tp: TP) -> None:
        """Checked at every delivery: the deliverer owns the partition in the caught-up log."""
        catch_up(self.log, self.auditor, range(self.log.partition_count()))
        owner = self.auditor.claim("sim", tp[0], tp[1]).owner
        assert owner == member, f"{member} delivered {tp} owned by {owner}"

    def delivering(self) -> dict[TP, list[Owner]]:
        """Who may deliver each partition right now (a valid lease)."""
        found: dict[TP, list[Owner]] = {}
        for consumer in self.consumers:
            engine = consumer.engine
            if engine is None or self.clock() < consumer.paused_until:
                continue
            for (topic, partition), (epoch, _) in engine.assignments().items():
                if engine.holds(topic, partition, epoch):
                    found.setdefault((topic, partition), []).append(engine.me)
        return found
