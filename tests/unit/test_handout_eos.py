"""The exactly-once side of the hand-out: batches of one partition, records given back after an
aborted transaction, and seeks that survive a second change before the fetching shell takes
the plan (found by the eos chaos campaign: a lapsed partition resumed in the same step lost
another partition's give-back seek, and the fetcher skipped the aborted batch's records)."""

from __future__ import annotations

from typing import NamedTuple

from marshal_py.client.handout import HandOut
from marshal_py.client.lease import PartitionLease


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int


def records(partition: int, offsets: range) -> list[Rec]:
    return [Rec("t", partition, o) for o in offsets]


def test_a_batch_is_one_partitions_records_up_to_the_limit() -> None:
    handout = HandOut("eos", window_records=100, window_ms=100)
    leases = {("t", p): PartitionLease("t", p, 1, 0, float("inf")) for p in (0, 1)}
    handout.follow(leases, 1)
    handout.add(("t", 0), records(0, range(0, 5)), 5)
    handout.add(("t", 0), records(0, range(5, 8)), 9)  # a marker at 8
    handout.add(("t", 1), records(1, range(0, 2)), 2)
    taken = handout.take_partition(6, 0.0)
    assert taken is not None
    lease, batch, next_position = taken
    assert {r.partition for r in batch} == {lease.partition}
    if lease.partition == 0:
        assert [r.offset for r in batch] == list(range(6)) and next_position == 6
        rest = handout.take_partition(6, 0.0)
        assert rest is not None and [r.offset for r in rest[1]] == [0, 1]
        last = handout.take_partition(6, 0.0)
        assert last is not None and [r.offset for r in last[1]] == [6, 7] and last[2] == 9


def test_given_back_records_are_sought_again_even_when_another_change_follows() -> None:
    handout = HandOut("eos", window_records=100, window_ms=100)
    a = PartitionLease("t", 0, 1, 0, float("inf"))
    b = PartitionLease("t", 1, 1, 0, 10.0)  # lapses at 10
    handout.follow({("t", 0): a, ("t", 1): b}, 1)
    handout.take_plan()
    handout.add(("t", 0), records(0, range(0, 4)), 4)
    handout.add(("t", 1), records(1, range(0, 4)), 4)
    taken = handout.take_partition(10, 20.0)
    assert taken is not None and taken[0] is a
    assert handout.take_partition(10, 20.0) is None  # b lapses here (its buffer dropped)
    handout.give_back(a, 0)  # a's transaction aborted: fetch 0.. again
    b.deadline = 100.0  # b's lease renewed before the shell takes the plan
    handout.renew_lapsed(30.0)
    plan = handout.take_plan()
    assert plan is not None
    reading, seeks = plan
    assert reading == {("t", 0), ("t", 1)}
    assert dict(seeks) == {("t", 0): 0, ("t", 1): 0}
    assert a.cursor.committed == 0 and a.cursor.position == 0
