"""Moments of ``marshal state --at/--at-position`` and ``marshal tail --from/--to``: parsing
the arguments, where a moment is in the log, moments that cannot be shown, the ceiling of
checkpoints."""

from __future__ import annotations

import subprocess
import sys

import pytest

from marshal_py.admin.moments import (
    MomentError,
    moment_at_position,
    moment_at_time,
    parse_position,
    parse_time,
    state_moment,
)
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import Checkpoint, Heartbeat, coordination_partition, encode
from marshal_py.replay.checkpoints import newest_checkpoints
from marshal_py.world import Rationalizer, RationalizerConfig

T0 = 1_700_000_000_000  # 2023-11-14T22:13:20Z


@pytest.mark.parametrize(("text", "ms"), [
    ("2023-11-14T22:13:20Z", T0),
    ("2023-11-14T22:13:20.250Z", T0 + 250),
    ("2023-11-14T22:13:20", T0),  # no zone: UTC, as marshal prints times
    ("2023-11-14 23:13:20+01:00", T0),
    ("2023-11-14T22:13:20.000+00:00", T0),
    ("2023-11-14", T0 - (22 * 3600 + 13 * 60 + 20) * 1000),
])
def test_iso_times_parse_to_milliseconds(text: str, ms: int) -> None:
    assert parse_time(text) == ms


@pytest.mark.parametrize("text", ["yesterday", "2023-13-01T00:00:00Z", "1700000000000", ""])
def test_a_bad_iso_time_says_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="is not an ISO-8601 time"):
        parse_time(text)


def test_partition_offset_parses() -> None:
    assert parse_position("3:1500") == (3, 1500)
    assert parse_position(" 0:0 ") == (0, 0)


@pytest.mark.parametrize("text", ["3", "3:", ":5", "a:5", "3:-1", "-1:5", "3:5:7", "3.0:5"])
def test_a_bad_partition_offset_says_what_is_expected(text: str) -> None:
    with pytest.raises(ValueError, match="is not PARTITION:OFFSET"):
        parse_position(text)


def log_with_records(count: int) -> tuple[MemoryLog, VirtualClock]:
    clock = VirtualClock(T0)
    log = MemoryLog(partitions=2, clock=clock)
    for i in range(count):
        clock.advance(1000)
        log.append(0, encode(Heartbeat(0, "i", "c", "g", "t", 0, i)))
    return log, clock


def test_a_time_is_the_position_after_the_records_stamped_at_or_before_it() -> None:
    log, clock = log_with_records(10)  # stamped T0+1000 .. T0+10000
    assert moment_at_time(log, (0,), T0 + 3000, clock()).until == {0: 3}
    assert moment_at_time(log, (0,), T0 + 3999, clock()).until == {0: 3}
    assert moment_at_time(log, (0,), T0, clock()).until == {0: 0}  # nothing deleted: empty
    assert moment_at_time(log, (0, 1), clock(), clock()).until == {0: 10, 1: 0}


def test_a_time_in_the_future_or_before_the_retained_log_is_refused() -> None:
    log, clock = log_with_records(10)
    with pytest.raises(MomentError, match="is in the future"):
        moment_at_time(log, (0,), clock() + 1, clock())
    log.delete_before(0, 4)  # the oldest retained record is stamped T0+5000
    with pytest.raises(MomentError, match=r"before the retained coordination log.*position 4"):
        moment_at_time(log, (0,), T0 + 4999, clock())
    assert moment_at_time(log, (0,), T0 + 5000, clock()).until == {0: 5}


def test_a_position_is_judged_at_its_last_records_time_and_checked() -> None:
    log, _ = log_with_records(10)
    moment = moment_at_position(log, 0, 4, None)
    assert moment.until == {0: 4} and moment.at_ms == T0 + 4000
    assert moment_at_position(log, 0, 4, T0 + 4500).at_ms == T0 + 4500
    with pytest.raises(MomentError, match=r"has partitions 0\.\.1, not 2"):
        moment_at_position(log, 2, 0, None)
    with pytest.raises(MomentError, match=r"past the end.*next position is 10"):
        moment_at_position(log, 0, 11, None)
    with pytest.raises(MomentError, match="no record below 0:0 tells its time"):
        moment_at_position(log, 0, 0, None)
    log.delete_before(0, 4)
    with pytest.raises(MomentError, match="before the retained coordination log"):
        moment_at_position(log, 0, 4, None)
    assert moment_at_position(log, 0, 5, None).at_ms == T0 + 5000


def test_a_topics_moment_reads_its_partition_only_and_must_be_named_by_it() -> None:
    log, clock = log_with_records(10)
    home = coordination_partition("t", 2)
    other = 1 - home
    moment = state_moment(log, "t", T0 + 2000, None, now_ms=clock())
    assert moment is not None and set(moment.until) == {home}
    with pytest.raises(MomentError, match=f"coordinated on partition {home}"):
        state_moment(log, "t", None, (other, 0), now_ms=clock())
    assert state_moment(log, None, None, None, now_ms=clock()) is None
    with pytest.raises(MomentError, match="is in the future") as caught:
        state_moment(log, None, clock() + 5, (0, 3), now_ms=clock())
    assert caught.value.option == "--at"


def test_newest_checkpoints_below_a_ceiling() -> None:
    clock = VirtualClock(T0)
    log = MemoryLog(partitions=1, clock=clock)
    state = Rationalizer(RationalizerConfig(1, 1000)).snapshot("g", "t")
    for i in range(3):
        log.append(0, encode(Heartbeat(0, "i", "c", "g", "t", 0, i)))
        log.append(0, encode(Checkpoint(0, "i", "c", "g", "t", log.end_position(0), state)))
    # Checkpoint records at 1, 3 and 5.
    assert newest_checkpoints(log, 0, "g", ["t"], 0)["t"].record_position == 5
    assert newest_checkpoints(log, 0, "g", ["t"], 0, ceiling=5)["t"].record_position == 3
    assert newest_checkpoints(log, 0, "g", ["t"], 0, ceiling=2)["t"].record_position == 1
    assert newest_checkpoints(log, 0, "g", ["t"], 0, ceiling=1) == {}


def test_newest_checkpoints_above_the_end_ask_nothing_more() -> None:
    class StartCounting(MemoryLog):
        starts = 0

        def start_position(self, partition: int) -> int:
            self.starts += 1
            return super().start_position(partition)

    log = StartCounting(partitions=1, clock=VirtualClock(T0))
    state = Rationalizer(RationalizerConfig(1, 1000)).snapshot("g", "t")
    log.append(0, encode(Checkpoint(0, "i", "c", "g", "t", 0, state)))
    # A new group's floor is the end read before the index: nothing to scan, one request.
    assert newest_checkpoints(log, 0, "g", ["t"], 1) == {} and log.starts == 0
    assert newest_checkpoints(log, 0, "g", ["t"], 0)["t"].record_position == 0
    assert log.starts == 1


def marshal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "marshal_py.cli", *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize(("args", "says"), [
    (["state", "--at", "last tuesday"], "--at"),
    (["state", "--at-position", "0-15"], "--at-position"),
    (["tail", "--from", "2023-02-30T00:00:00Z"], "--from"),
    (["tail", "--to", "noon"], "--to"),
    (["tail", "--to", "2023-11-14T00:00:00Z", "--follow"], "--to and --follow"),
    (["tail", "--from", "2023-11-15T00:00:00Z", "--to", "2023-11-14T00:00:00Z"],
     "is after --to"),
])
def test_bad_moments_on_the_command_line_are_one_line_and_exit_2(args: list[str],
                                                                 says: str) -> None:
    # Refused before any broker is asked (there is none at this address).
    result = marshal(*args, "--bootstrap-servers", "127.0.0.1:9", "--timeout", "1")
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert says in result.stderr and "Traceback" not in result.stderr


def test_every_view_of_a_share_group_at_a_moment_is_the_one_seen_then() -> None:
    """`marshal state --at T` with --shares and --records (and the claims view): replayed
    from the checkpoint before the moment, or from the window, as a follower saw it at T."""
    from marshal_py.admin.world_view import (
        WorldView,
        load_world,
        record_rows,
        share_rows,
        state_rows,
    )
    from tests.support import Scenario

    scenario = Scenario(partitions=1)
    scenario.share_init("a", 0, 0)
    scenario.member("a", 0, interval_ms=1000)
    scenario.acquire("a", 1000, "0-9")
    scenario.ack("a", 2000, "0-4")
    scenario.claim("b", 2100, topic="u")
    clock = VirtualClock(T0)
    log = MemoryLog(partitions=1, clock=clock)
    follower = Rationalizer(RationalizerConfig(1, 1000))

    def put(value: bytes | None, at: int) -> None:
        clock.advance(T0 + at - clock())
        follower.apply(log.append(0, value or b""))

    for record in scenario.records:
        put(record.value, record.timestamp_ms - T0)
    put(encode(Checkpoint(0, "i-a", "a", "g", "t", log.end_position(0),
                          follower.snapshot("g", "t"))), 2500)
    later = Scenario(partitions=1)
    later.acquire("a", 3000, "10-19", lock_ms=1000)
    later.ack("a", 4000, "5-9", "release")
    later.heartbeat("b", 4200, 7, topic="u")
    for record in later.records:
        put(record.value, record.timestamp_ms - T0)
    seen: dict[int, tuple[list[object], ...]] = {}
    replay = Rationalizer(RationalizerConfig(1, 1000))
    for at in (1500, 2600, 3200, 3700, 4100, 4300):
        replay.apply_all(r for r in log._records[0]
                         if replay.next_position(0) <= r.position
                         and r.timestamp_ms <= T0 + at)
        view = WorldView(replay, T0 + at, (0,), 0)
        seen[at] = (share_rows(view, "g", "t"), record_rows(view, "g", "t"),
                    [r.as_dict() for r in state_rows(view)])
    for at, (shares, records, claims) in seen.items():
        moment = state_moment(log, "t", T0 + at, None, now_ms=clock() + 1000)
        assert moment is not None
        of_group = load_world(log, heartbeat_interval_ms=1000, topic="t", group="g",
                              now_ms=moment.at_ms, until=moment.until)
        assert share_rows(of_group, "g", "t") == shares, at
        assert record_rows(of_group, "g", "t") == records, at
        whole = load_world(log, heartbeat_interval_ms=1000, now_ms=moment.at_ms,
                           until=moment.until)
        assert [r.as_dict() for r in state_rows(whole)] == claims, at
        assert share_rows(whole, "g", "t") == shares, at
        if at > 2500:  # the group's view started at the checkpoint, the whole one before
            assert of_group.applied < whole.applied, at
    assert seen[3200][0] != seen[4300][0] and seen[1500][1] != seen[3700][1]
