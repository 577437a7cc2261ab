"""The benchmarks tell an at-most-once record lost to a takeover from one lost otherwise."""

from __future__ import annotations

from bench.harness import AmoTakeovers


def test_a_taken_over_partition_whose_confirmed_windows_reach_the_end_is_covered() -> None:
    assert AmoTakeovers(takeovers=1, last_confirmed=416).covers(417)
    assert AmoTakeovers(takeovers=2, last_confirmed=500).covers(417)


def test_no_takeover_covers_nothing_however_far_the_windows_reach() -> None:
    assert not AmoTakeovers(takeovers=0, last_confirmed=10_000).covers(417)


def test_confirmed_windows_short_of_the_end_do_not_cover_it() -> None:
    assert not AmoTakeovers(takeovers=1, last_confirmed=415).covers(417)
    assert not AmoTakeovers(takeovers=1, last_confirmed=None).covers(417)
