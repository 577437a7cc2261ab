"""The region picker of share members and the run views it reads (pure)."""

from __future__ import annotations

from marshal_py.client.share_regions import RegionPicker, preferred_rank, region_size
from marshal_py.world.share import RecordState, SharePartition
from marshal_py.world.state import Owner

A, B = Owner("i-a", "a"), Owner("i-b", "b")


def test_region_size_gives_each_live_member_two_regions_of_the_window() -> None:
    assert region_size(2_000, 8) == 125
    assert region_size(2_000, 1) == 1_000
    assert region_size(3, 8) == 1
    assert region_size(2_000, 0) == 1_000


def test_runs_between_shows_runs_and_the_never_delivered_tail_as_available() -> None:
    share = SharePartition(100, 5, 2_000)
    share.acquire(A, [(100, 109)], 1_000, now_ms=0)
    runs = share.runs_between(90, 129, now_ms=10)
    assert [(a, b, v.state) for a, b, v in runs] == [
        (100, 109, RecordState.ACQUIRED), (110, 129, RecordState.AVAILABLE)]
    assert runs[0][2].holder == A and runs[0][2].delivery_count == 1
    # After the lock elapsed: Available again, with its delivery count.
    late = share.runs_between(100, 109, now_ms=2_000)
    assert [(a, b, v.state, v.delivery_count) for a, b, v in late] == [
        (100, 109, RecordState.AVAILABLE, 1)]
    assert share.runs_between(50, 99) == []


def test_a_member_asks_for_its_own_regions_first_lowest_first() -> None:
    share = SharePartition(0, 5, 40)
    runs = share.runs_between(0, 39)
    picker = RegionPicker()
    # 2 members, regions of 10: member 1 prefers 10-19 and 30-39.
    assert picker.pick(runs, 15, 1, 2, 10, set(), 0, 400) == [*range(10, 20), *range(30, 35)]
    assert picker.pick(runs, 5, 0, 2, 10, {0, 1}, 0, 400) == [2, 3, 4, 5, 6]


def test_another_members_region_is_taken_only_once_it_stayed_available() -> None:
    share = SharePartition(0, 5, 40)
    share.acquire(B, [(10, 19), (30, 39)], 60_000, now_ms=0)  # member 1's own regions
    picker = RegionPicker()
    runs = share.runs_between(0, 39, now_ms=0)
    assert picker.pick(runs, 10, 1, 2, 10, set(), 1_000, 400) == []  # first seen now
    assert picker.pick(runs, 10, 1, 2, 10, set(), 1_399, 400) == []
    assert picker.pick(runs, 10, 1, 2, 10, set(), 1_400, 400) == list(range(10))
    # A region acquired meanwhile is forgotten: seen Available again, the wait starts over.
    share.acquire(A, [(0, 9), (20, 29)], 60_000, now_ms=1_500)
    assert picker.pick(share.runs_between(0, 39, 1_500), 10, 1, 2, 10, set(), 1_500,
                       400) == []
    share.acknowledge(A, [(20, 29)], "release", now_ms=1_600)
    runs = share.runs_between(0, 39, now_ms=1_600)
    assert picker.pick(runs, 10, 1, 2, 10, set(), 1_600, 400) == []
    assert picker.pick(runs, 10, 1, 2, 10, set(), 2_000, 400) == list(range(20, 30))


def test_acquired_and_done_records_are_never_asked_for() -> None:
    share = SharePartition(0, 5, 20)
    share.acquire(A, [(0, 4)], 60_000, now_ms=0)
    share.acknowledge(A, [(0, 1)], "accept", now_ms=1)
    runs = share.runs_between(share.spso, 19, now_ms=2)
    assert RegionPicker().pick(runs, 20, 0, 1, 10, set(), 2, 400) == list(range(5, 20))


def test_members_sharing_a_partition_take_its_regions_in_turn_from_a_rank_per_partition(
) -> None:
    # Every member shares: partition 0 starts at rank 0, partition 1 at rank 1.
    assert [preferred_rank(k, 0, 3, 3) for k in range(6)] == [0, 1, 2, 0, 1, 2]
    assert [preferred_rank(k, 1, 3, 3) for k in range(6)] == [1, 2, 0, 1, 2, 0]
    # One member per partition: a different one for each partition.
    assert [preferred_rank(k, 0, 1, 3) for k in range(4)] == [0, 0, 0, 0]
    assert [preferred_rank(0, p, 1, 3) for p in range(4)] == [0, 1, 2, 0]
    # Sharing is never more than the live members.
    assert preferred_rank(5, 0, 8, 2) == 1


def test_a_member_that_reads_a_partition_alone_prefers_all_of_its_regions() -> None:
    share = SharePartition(0, 5, 40)
    runs = share.runs_between(0, 39)
    # Two members, one per partition, regions of 20: partition 1 is rank 1's.
    alone = RegionPicker(partition=1)
    assert alone.pick(runs, 40, 1, 2, 20, set(), 0, 400, sharing=1) == list(range(40))
    other = RegionPicker(partition=1)
    assert other.pick(runs, 40, 0, 2, 20, set(), 0, 400, sharing=1) == []
    # ... until those regions have stayed Available for the steal delay.
    assert other.pick(runs, 5, 0, 2, 20, set(), 400, 400, sharing=1) == [0, 1, 2, 3, 4]
