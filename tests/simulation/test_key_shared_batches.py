"""Key-shared micro-batch members (the Spark source's) beside record-by-record members.

The world of :mod:`tests.simulation.test_key_shared` (MemoryLog, virtual clock, joins,
graceful closes, kill -9 crashes, restarts with the same client id), where some members plan
micro-batches as :class:`~marshal_py.client.key_shared_batch_member.KeySharedBatchMember`
does: ``hand_out_range`` per partition of their fetch plan, every record of the range's slots
(from each slot's start) delivered at once, the batch processed for a few steps and then
committed whole with ``commit_range``. The same checks hold at every step and delivery: no
slot deliverable by two members, no key in processing at two members, per-key offsets
increasing (but for re-deliveries of what crashed members had), and in the end everything
processed, the slots balanced and committed to the end.
"""

from __future__ import annotations

import pytest

from marshal_py.protocol import key_slot
from tests.simulation.test_key_shared import TP, Member, World

BATCH_MEMBERS = {"m0", "m2"}


class BatchWorld(World):
    """Members named in :data:`BATCH_MEMBERS` plan micro-batches."""

    def __init__(self, seed: int, partitions: int, members: int) -> None:
        super().__init__(seed, partitions, members)
        #: batch member -> batches in processing: (tp, start, [(offset, key)])
        self.batches: dict[str, list[tuple[TP, int, list[tuple[int, bytes]]]]] = {}

    def start(self, member: Member) -> None:
        super().start(member)
        self.batches[member.client_id] = []

    def crash(self, member: Member) -> None:
        super().crash(member)
        self.batches[member.client_id] = []

    def close(self, member: Member) -> None:
        if member.client_id in BATCH_MEMBERS and self.batches[member.client_id]:
            self.abandon(member)  # a query stopping mid-batch drops the batch
        super().close(member)

    def abandon(self, member: Member) -> None:
        """The batches in processing are dropped, not committed (a query whose sink failed,
        then stopped): their records must come again, re-delivered as a crashed member's
        are."""
        assert member.engine is not None
        self.crashed.add(member.engine.me.instance_id)
        self.batches[member.client_id] = []
        member.processing = []
        self.faults["abandoned"] = self.faults.get("abandoned", 0) + 1

    def finish_processing(self, member: Member, share: float = 1.0) -> None:
        if member.client_id not in BATCH_MEMBERS:
            super().finish_processing(member, share)
            return
        engine = member.engine
        assert engine is not None
        still = []
        for tp, start, records in self.batches[member.client_id]:
            if self.rng.random() < share:
                if engine.commit_range(tp[0], tp[1], start):
                    self.processed.update((tp, offset) for offset, _ in records)
                done = {offset for offset, _ in records}
                member.processing = [p for p in member.processing
                                     if not (p[0] == tp and p[1] in done)]
            else:
                still.append((tp, start, records))
        self.batches[member.client_id] = still

    def step_member(self, member: Member, faults: bool) -> None:
        if member.client_id not in BATCH_MEMBERS or member.engine is None:
            super().step_member(member, faults)
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
        self.finish_processing(member, share=0.4)
        if self.batches[member.client_id]:
            return  # one micro-batch at a time, as Spark runs them
        for tp, (_, scan) in engine.fetch_plan().items():
            records = self.topic.records[tp[1]]
            end = min(len(records), scan + self.rng.randint(1, 40))
            handed = engine.hand_out_range(tp[0], tp[1], end)
            if handed is None:
                continue
            start, slots, starts = handed
            batch = []
            for offset in range(start, end):
                key = records[offset]
                slot = key_slot(key)
                if slot in slots and offset >= starts.get(slot, start):
                    self.on_delivery(member, engine.me, tp, offset, key)
                    batch.append((offset, key))
            self.batches[member.client_id].append((tp, start, batch))


@pytest.mark.parametrize(("seed", "partitions"), [(0, 1), (1, 1), (2, 2), (3, 2)])
def test_batch_members_keep_per_key_order_and_exclusive_slots_through_faults(
        seed: int, partitions: int) -> None:
    world = BatchWorld(seed, partitions, members=4)
    for _ in range(1_200):
        world.step(faults=True, produce=True)
    for _ in range(800):
        world.step(faults=False, produce=False)
        if world.settled():
            break
    missing = {(("orders", p), o) for p, records in enumerate(world.topic.records)
               for o in range(len(records))} - world.processed
    assert not missing, f"{len(missing)} records never processed, e.g. {sorted(missing)[:5]}"
    assert world.settled()
    assert world.faults["crash"] >= 1 and world.faults["restart"] >= 1, world.faults
    assert world.faults.get("abandoned", 0) >= 1, world.faults


def test_a_slot_moves_from_a_batch_member_only_after_its_batch_is_committed() -> None:
    world = BatchWorld(21, 1, members=2)
    batcher, other = world.members  # m0 plans batches, m1 takes records one by one
    world.start(batcher)
    world.produce(300)
    for _ in range(20):
        world.step_member(batcher, faults=False)
        world.clock.advance(100)
    assert batcher.engine is not None
    world.start(other)
    for _ in range(400):
        world.step(faults=False, produce=False)
        if world.settled():
            break
    assert world.settled()
    assert world.redeliveries == 0
    assert world.deliveries == 300


def test_a_batch_member_closed_with_a_batch_not_complete_gives_its_records_back() -> None:
    world = BatchWorld(5, 1, members=2)
    batcher, other = world.members
    world.start(batcher)
    world.produce(200)
    while not world.batches[batcher.client_id]:
        world.step_member(batcher, faults=False)
        world.clock.advance(100)
    (_, start, records), *_ = world.batches[batcher.client_id]
    assert records, "the batch delivered records"
    world.abandon(batcher)
    assert batcher.engine is not None
    batcher.engine.close()
    batcher.engine = None
    world.start(other)
    for _ in range(400):
        world.step(faults=False, produce=False)
        if world.settled():
            break
    # The other member (or the batcher, restarted) processed the abandoned batch's records.
    assert world.settled()
    assert {o for o, _ in records} <= {o for (_, o) in world.processed}
    assert start <= min(o for o, _ in records)
