"""Commit tracking."""

from __future__ import annotations

from marshal_py.client.offsets import CommitTracker


def test_committed_starts_at_the_start_position() -> None:
    assert CommitTracker(40).committed == 40


def test_out_of_order_commits_advance_only_over_the_contiguous_run() -> None:
    t = CommitTracker(5)
    t.delivered([5, 6, 7, 8], next_position=9)
    assert t.committed == 5
    assert t.mark(7) == 5
    assert t.mark(5) == 6
    assert t.mark(6) == 8
    assert t.mark(8) == 9
    assert t.position == 9


def test_gaps_kafka_never_delivers_do_not_hold_the_commit_back() -> None:
    t = CommitTracker(10)
    t.delivered([10, 11, 13], next_position=14)  # 12 is a transaction marker
    t.mark(10)
    t.mark(11)
    assert t.committed == 13
    t.mark(13)
    assert t.committed == 14


def test_commits_of_unknown_or_old_offsets_change_nothing() -> None:
    t = CommitTracker(10)
    t.delivered([10, 11], next_position=12)
    assert t.mark(3) == 10
    t.mark(10)
    assert t.mark(10) == 11


def test_mark_all() -> None:
    t = CommitTracker(0)
    t.delivered([0, 1, 2], next_position=3)
    assert t.mark_all() == 3


def test_mark_through_counts_everything_up_to_a_handed_out_record_as_done() -> None:
    t = CommitTracker(0)
    t.delivered([0, 1, 2, 3], next_position=4)
    assert t.mark_through(2) == 3
    assert t.mark_through(1) == 3


def test_rewind_forgets_undelivered_offsets_and_fetches_them_again() -> None:
    t = CommitTracker(10)
    t.delivered([10, 11, 12, 13], next_position=14)
    t.mark(10)
    t.rewind(12)
    assert t.position == 12
    assert t.committed == 11
    t.mark(11)
    assert t.committed == 12
    t.delivered([12, 13], next_position=14)
    t.mark(12)
    t.mark(13)
    assert t.committed == 14
