"""The simulation of :mod:`tests.simulation.harness` with the threaded Consumer's delivery
path: a :class:`~marshal_py.client.handout.HandOut` over the engine's published leases, commits
through the commit cursors, at-most-once windows asked by the hand-out and confirmed by the
engine's next step (so a window is always confirmed one step after it was asked, while the
previous one is handed out)."""

from __future__ import annotations

from typing import NamedTuple

from marshal_py.client.engine import MemberEngine
from marshal_py.client.handout import HandOut
from marshal_py.client.lease import PartitionLease
from marshal_py.replay import catch_up
from tests.simulation.harness import TP, Delivery, SimConsumer, Simulation


class SimRecord(NamedTuple):
    topic: str
    partition: int
    offset: int


class HandOutSimulation(Simulation):
    """``window_records``: at-most-once windows hold at most this many records."""

    def __init__(self, seed: int, mode: str, *, window_records: int = 4, gaps: bool = False,
                 **options: int) -> None:
        super().__init__(seed, mode, **options)  # type: ignore[arg-type]
        self.window_records = window_records
        #: A quarter of the offsets hold no record (transaction markers, aborted or compacted
        #: records): fetches pass them, sometimes in a batch of their own.
        self.gaps = gaps
        #: Batches without records the fetcher reports at the next step: (tp, end, high).
        self.later: dict[str, list[tuple[TP, int, int]]] = {}
        self.seed = seed
        self.engine_options = {"amo_window_records": window_records, "amo_window_ms": 300}
        self.handouts: dict[str, HandOut] = {}
        self.positions: dict[str, dict[TP, int]] = {}
        self.pending: dict[str, list[tuple[PartitionLease, SimRecord]]] = {}
        #: Records a crash (or a pause) may lose: confirmed in the log, not handed out.
        self.may_lose: set[tuple[int, int]] = set()
        self.largest_loss = 0

    def new_engine(self, consumer: SimConsumer) -> MemberEngine:
        engine = super().new_engine(consumer)
        self.handouts[consumer.client_id] = HandOut(
            self.mode, window_records=self.window_records, window_ms=300)
        self.positions[consumer.client_id] = {}
        self.pending[consumer.client_id] = []
        self.later[consumer.client_id] = []
        return engine

    def crash(self, consumer: SimConsumer) -> None:
        """Note what a successor will skip: the confirmed windows not handed out."""
        engine = consumer.engine
        assert engine is not None
        if self.mode != "amo":
            return
        catch_up(self.log, self.auditor, range(self.log.partition_count()))
        for (topic, partition), lease in engine.leases.items():
            claim = self.auditor.claim("sim", topic, partition)
            if claim.owner != engine.me or claim.amo_claimed_offset is None:
                continue
            lost = range(lease.cursor.committed, claim.amo_claimed_offset + 1)
            # At most the rest of the window being handed out and the next one.
            assert len(lost) <= 2 * self.window_records, (lease, claim)
            self.largest_loss = max(self.largest_loss, len(lost))
            self.may_lose.update((partition, o) for o in lost)

    def consume(self, consumer: SimConsumer, engine: MemberEngine) -> None:
        name = consumer.client_id
        handout = self.handouts[name]
        for lease, record in self.pending[name]:  # "work" done: commit
            if not lease.revoked:
                lease.cursor.commit(record.offset)
                self.committed_at[(engine.me.instance_id, (record.topic, record.partition),
                                   record.offset)] = self.clock()
        self.pending[name] = []
        handout.follow(engine.leases, engine.lease_version)
        if handout.lapses:
            handout.renew_lapsed(float(self.clock()))
        for key, end, high in self.later[name]:
            handout.add(key, [], end, high)
        self.later[name] = []
        positions = self.positions[name]
        plan = handout.take_plan()
        if plan is not None:
            reading, seeks = plan
            for key in [k for k in positions if k not in reading]:
                del positions[key]
            for key, offset in seeks:
                if key in reading:
                    positions[key] = offset
        for (topic, partition), position in list(positions.items()):
            offsets = self.topic.fetch(partition, position, self.rng.randint(1, 5))
            if not offsets:
                continue
            present = [o for o in offsets if not self.is_gap(partition, o)]
            high = len(self.topic.records[partition])
            end = offsets[-1] + 1
            records = [SimRecord(topic, partition, o) for o in present]
            if present and present[-1] + 1 < end and self.rng.random() < 0.5:
                # The trailing gap comes in a batch of its own, as a later poll finds it.
                handout.add((topic, partition), records, present[-1] + 1, high)
                self.later[name].append(((topic, partition), end, high))
            else:
                handout.add((topic, partition), records, end, high)
            positions[(topic, partition)] = end
        self.deliver(consumer, self.rng.randint(0, 12))

    def is_gap(self, partition: int, offset: int) -> bool:
        """Does ``offset`` hold no record? (fixed per offset; none without ``gaps``)"""
        return self.gaps and hash((self.seed, partition, offset)) % 4 == 0

    def present(self) -> set[tuple[int, int]]:
        """(partition, offset) of every record there is."""
        return {(p, o) for p, records in enumerate(self.topic.records)
                for o in range(len(records)) if not self.is_gap(p, o)}

    def deliver(self, consumer: SimConsumer, count: int) -> None:
        engine = consumer.engine
        assert engine is not None
        handout = self.handouts[consumer.client_id]
        for record in handout.take(count, float(self.clock())):
            tp = (record.topic, record.partition)
            self.on_delivery(engine.me, tp)
            self.deliveries.append(Delivery(consumer.client_id, engine.me.instance_id, tp,
                                            record.offset, self.clock()))
            self.pending[consumer.client_id].append((handout.feeds[tp].lease, record))
