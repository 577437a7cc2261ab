"""The hand-out passes offsets that hold no record (transaction markers, aborted or
compacted-away records) only after the records fetched before them: the committed offset a
heartbeat carries never passes a record the application has not had."""

from __future__ import annotations

from typing import NamedTuple

from marshal_py.client.handout import HandOut
from marshal_py.client.lease import PartitionLease

TP = ("t", 0)


class Rec(NamedTuple):
    topic: str
    partition: int
    offset: int


def handout_at(start: int) -> tuple[HandOut, PartitionLease]:
    handout = HandOut("alo", window_records=100, window_ms=100)
    lease = PartitionLease("t", 0, epoch=1, start=start, deadline=float("inf"))
    handout.follow({TP: lease}, 1)
    return handout, lease


def test_a_gap_after_buffered_records_waits_for_them() -> None:
    handout, lease = handout_at(0)
    handout.add(TP, [Rec("t", 0, o) for o in range(3)], 3)
    handout.add(TP, [], 5)  # a marker at 3 and 4, found by a later poll
    assert lease.cursor.committed == 0  # records 0..2 are not even handed out yet
    out = handout.take(2, 0.0)
    for record in out:
        lease.cursor.commit(record.offset)
    assert lease.cursor.committed == 2
    out = handout.take(10, 0.0)
    assert [r.offset for r in out] == [2]
    assert lease.cursor.committed == 2  # 2 is out, not committed
    lease.cursor.commit(2)
    assert handout.take(10, 0.0) == []  # the gap batch is reached
    assert lease.cursor.committed == 5


def test_a_gap_with_nothing_buffered_moves_the_committed_offset_at_once() -> None:
    handout, lease = handout_at(10)
    handout.add(TP, [Rec("t", 0, 10)], 11)
    for record in handout.take(10, 0.0):
        lease.cursor.commit(record.offset)
    assert lease.cursor.committed == 11
    handout.add(TP, [], 13)
    assert lease.cursor.committed == 13
    handout.add(TP, [], 12)  # a fetcher that goes back is not believed
    assert lease.cursor.committed == 13


def test_a_gap_while_a_handed_out_record_is_uncommitted_waits_for_its_commit() -> None:
    handout, lease = handout_at(0)
    handout.add(TP, [Rec("t", 0, 0)], 1)
    (record,) = handout.take(10, 0.0)
    handout.add(TP, [], 4)
    assert lease.cursor.committed == 0
    lease.cursor.commit(record.offset)
    assert lease.cursor.committed == 4
