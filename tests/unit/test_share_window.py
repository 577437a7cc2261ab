"""How a share consumer sizes its acquisitions and chooses how many members share a
partition, from its application's measured pace (pure: time is an input)."""

from __future__ import annotations

import pytest

from marshal_py.client.share_window import (
    ONE_MEMBER_PACE,
    PACE_SAMPLE_RECORDS,
    RATE_SAMPLE_S,
    STARVED_WAIT_S,
    AcquisitionWindow,
)


def test_until_its_pace_is_known_every_live_member_shares_a_partition() -> None:
    window = AcquisitionWindow(now_s=0.0)
    assert window.pace is None
    assert window.sharing(8) == 8
    assert window.sharing(0) == 1
    # Until the pace is known, a pace sample's worth (at most the batch size): a member that
    # will stand by holds few records the one reading the partition waits for.
    assert not window.paced
    assert window.size(batch_size=100, inflight_limit=2_000, members=8) == PACE_SAMPLE_RECORDS
    assert window.size(batch_size=20, inflight_limit=2_000, members=8) == 20


def test_the_first_rate_sample_comes_with_the_first_pace_sample() -> None:
    """A fast application need not wait RATE_SAMPLE_S, acquiring a batch at a time, for its
    acquisitions to grow."""
    window = AcquisitionWindow(now_s=0.0)
    window.sample(now_s=0.001, delivered=PACE_SAMPLE_RECORDS - 1)
    assert window.rate is None and not window.paced
    window.sample(now_s=0.002, delivered=2 * PACE_SAMPLE_RECORDS)  # 50,000 records/s
    assert window.paced and window.rate == pytest.approx(50_000.0)
    assert window.size(batch_size=100, inflight_limit=2_000, members=8) == 1_000
    # Later samples every RATE_SAMPLE_S only (smoothed).
    window.sample(now_s=0.003, delivered=10_000)
    assert window.rate == pytest.approx(50_000.0)


def test_a_fast_application_reads_a_partition_alone_and_acquires_up_to_half_the_limit(
) -> None:
    window = AcquisitionWindow(now_s=0.0)
    window.sample(now_s=RATE_SAMPLE_S, delivered=10_000)  # 100,000 records/s, no fetching
    assert window.pace is not None and window.pace >= ONE_MEMBER_PACE
    assert window.sharing(8) == 1
    # 0.2 s of 100,000 records/s, capped at one region: half the in-flight limit.
    assert window.size(batch_size=100, inflight_limit=2_000, members=8) == 1_000


def test_a_slow_application_shares_every_partition_with_every_member() -> None:
    window = AcquisitionWindow(now_s=0.0)
    window.sample(now_s=1.0, delivered=500)  # 2 ms a record
    assert window.pace == pytest.approx(500.0)
    assert window.sharing(8) == 8
    # 0.2 s of 500 records/s; the ceiling is one member's share: 2,000 / (2 x 8).
    assert window.size(batch_size=10, inflight_limit=2_000, members=8) == 100
    assert window.size(batch_size=10, inflight_limit=800, members=8) == 50


def test_the_pace_leaves_out_the_time_spent_fetching() -> None:
    """A member that waits for records most of the time (the window held by others) hands
    out few per second of wall time, but its application is fast: the pace says so."""
    window = AcquisitionWindow(now_s=0.0)
    window.fetch_began(0.0)
    window.fetch_ended(0.9)
    window.sample(now_s=1.0, delivered=1_000)  # 1,000 in 0.1 s of the application's time
    assert window.rate == 1_000.0
    assert window.pace == pytest.approx(10_000.0)
    assert window.sharing(4) == 1


def test_a_fetch_under_way_counts_as_fetching() -> None:
    window = AcquisitionWindow(now_s=0.0)
    window.fetch_began(0.5)
    window.sample(now_s=1.0, delivered=1_000)  # half of it fetching, not yet ended
    assert window.pace == pytest.approx(2_000.0)
    window.fetch_ended(1.5)
    window.sample(now_s=2.0, delivered=2_000)  # 0.5 s fetched since the sample: 0.5 s own
    assert window.pace == pytest.approx(2_000.0)


def test_the_rate_is_sampled_in_time_and_the_pace_in_hand_outs_from_the_first() -> None:
    window = AcquisitionWindow(now_s=0.0)
    window.sample(now_s=0.3, delivered=0)  # joining: nobody's handling, no rate either
    assert window.rate is None and window.pace is None
    window.sample(now_s=0.305, delivered=10)  # too few hand-outs to judge the handler
    assert window.rate is None and window.pace is None
    window.sample(now_s=0.31, delivered=100)  # 100 in the 10 ms since the first look
    assert window.pace == pytest.approx(10_000.0)
    assert window.rate == pytest.approx(10_000.0)
    assert window.sharing(8) == 1
    window.sample(now_s=0.31 + RATE_SAMPLE_S / 2, delivered=150)
    assert window.rate == pytest.approx(10_000.0)  # the next one RATE_SAMPLE_S later
    window.sample(now_s=0.31 + RATE_SAMPLE_S, delivered=100 + 3_000)
    assert window.rate == pytest.approx(0.5 * 10_000 + 0.5 * 3_000 / RATE_SAMPLE_S)


def test_a_member_run_dry_looks_at_the_log_less_and_less_often_up_to_a_tick() -> None:
    window = AcquisitionWindow(now_s=0.0)
    assert window.starved_pause(tick_s=0.2) == STARVED_WAIT_S
    window.acquired(False)
    assert window.starved_pause(tick_s=0.2) == 2 * STARVED_WAIT_S
    for _ in range(20):
        window.acquired(False)
    assert window.starved_pause(tick_s=0.2) == 0.2
    assert window.starved_pause(tick_s=100.0) == STARVED_WAIT_S * 256
    window.acquired(True)
    assert window.starved_pause(tick_s=0.2) == STARVED_WAIT_S


def test_near_the_line_a_member_keeps_its_choice_until_the_pace_moves_well_past_it() -> None:
    window = AcquisitionWindow(now_s=0.0)
    window.sample(now_s=0.1, delivered=600)  # 6,000 records/s: one member per partition
    assert window.sharing(4) == 1
    window.sample(now_s=0.2, delivered=900)  # 3,000: the pace 4,500, under the line
    assert window.pace == pytest.approx(4_500.0) and window.sharing(4) == 1
    window.sample(now_s=0.3, delivered=1_000)  # 1,000: the pace 2,750, still over half
    assert window.sharing(4) == 1
    window.sample(now_s=0.4, delivered=1_050)  # 500: the pace 1,625, under half: share
    assert window.sharing(4) == 4
    window.sample(now_s=0.5, delivered=1_500)  # 4,500: the pace 3,062, under the line
    assert window.sharing(4) == 4
