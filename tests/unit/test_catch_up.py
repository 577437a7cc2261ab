"""catch_up never skips a record because the broker is away (found by the chaos campaign):
only positions the reader has read past without records (transaction markers) are skipped."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from marshal_py.errors import BrokerUnavailableError
from marshal_py.log import MemoryLog
from marshal_py.protocol import ClaimingPartition, encode
from marshal_py.replay import catch_up
from marshal_py.replay.reading import read_through
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig


class AwayLog(MemoryLog):
    """Fetches return nothing while ``away`` (as kafka-python's poll does while the broker
    restarts); ``markers`` positions below it hold no record and the reader reads past them."""

    away = 0
    markers = 0

    def fetch(self, starts: Mapping[int, int], timeout_s: float) -> list[CoordinationRecord]:
        if self.away > 0:
            self.away -= 1
            return []
        return [r for r in super().fetch(starts, timeout_s) if r.position >= self.markers]

    def read_position(self, partition: int) -> int | None:
        return self.markers if self.markers else None


def rationalizer() -> Rationalizer:
    return Rationalizer(RationalizerConfig(coordination_partitions=1, heartbeat_interval_ms=1000))


def test_a_broker_away_is_an_error_and_skips_nothing() -> None:
    log = AwayLog(partitions=1)
    log.append(0, encode(ClaimingPartition(0, "aaaa0001", "A", "g", "t", 0)))
    r = rationalizer()
    log.away = 5
    with pytest.raises(BrokerUnavailableError, match="the broker may be restarting"):
        catch_up(log, r, [0], fetch_timeout_s=0.01)
    assert r.next_position(0) == 0  # nothing skipped
    assert catch_up(log, r, [0], fetch_timeout_s=0.01) == 1  # back: the claim is read
    owner = r.claim("g", "t", 0).owner
    assert owner is not None and owner.client_id == "A"


def test_positions_without_records_are_skipped_once_read_past() -> None:
    log = AwayLog(partitions=1)
    for _ in range(2):  # stand-ins for two transaction markers
        log.append(0, b"marker")
    log.append(0, encode(ClaimingPartition(0, "aaaa0001", "A", "g", "t", 0)))
    log.markers = 2
    r = rationalizer()
    assert catch_up(log, r, [0], fetch_timeout_s=0.01) == 1
    assert r.next_position(0) == 3
    owner = r.claim("g", "t", 0).owner
    assert owner is not None and owner.client_id == "A"


def test_positions_without_records_before_the_end_are_passed_when_records_follow_them() -> None:
    """The end read at the call lies right after transaction markers, and records appended
    since come after it (an exactly-once commit's marker, then more records): the fetch
    returns only records past the end; the reader must stop there, not fetch forever."""
    log = AwayLog(partitions=1)
    log.append(0, encode(ClaimingPartition(0, "aaaa0001", "A", "g", "t", 0)))
    log.append(0, b"marker")  # position 1: a commit marker, the end is 2

    class Later(AwayLog):
        def fetch(self, starts: Mapping[int, int],
                  timeout_s: float) -> list[CoordinationRecord]:
            return [r for r in log.fetch(starts, timeout_s) if r.value != b"marker"]

        def end_position(self, partition: int) -> int:
            return 2

    log.append(0, encode(ClaimingPartition(0, "bbbb0002", "B", "g", "t", 1)))  # after the end
    later = Later(partitions=1)
    r = rationalizer()
    assert catch_up(later, r, [0], fetch_timeout_s=0.01) == 1
    assert r.next_position(0) == 2


class CountingLog(MemoryLog):
    """Counts fetches (the read-back's round trips)."""

    fetches = 0

    def fetch(self, starts: Mapping[int, int], timeout_s: float) -> list[CoordinationRecord]:
        self.fetches += 1
        return super().fetch(starts, timeout_s)


def _claim(client: str, partition: int = 0) -> bytes:
    return encode(ClaimingPartition(0, "aaaa0001", client, "g", "t", partition))


def test_own_records_that_directly_follow_what_was_read_are_applied_without_a_fetch() -> None:
    log = CountingLog(partitions=2)
    r = rationalizer()
    written = log.append_all([(0, _claim("A")), (0, _claim("B"))])
    assert read_through(log, r, {0: 2}, appended=written) == 2
    assert log.fetches == 0
    assert r.next_position(0) == 2
    owner = r.claim("g", "t", 0).owner  # the first claim won, as a fetch would have shown
    assert owner is not None and owner.client_id == "A"


def test_own_records_after_someone_elses_are_read_back_with_a_fetch() -> None:
    log = CountingLog(partitions=1)
    r = rationalizer()
    log.append(0, _claim("B"))  # another member's, not yet read
    written = log.append_all([(0, _claim("A"))])
    assert read_through(log, r, {0: 2}, appended=written) == 2
    assert log.fetches == 1
    owner = r.claim("g", "t", 0).owner  # B's claim came first: A's lost
    assert owner is not None and owner.client_id == "B"


def test_own_records_with_a_hole_between_them_are_read_back_with_a_fetch() -> None:
    log = CountingLog(partitions=1)
    r = rationalizer()
    first = log.append(0, _claim("A"))
    log.append(0, _claim("B"))  # lands between two of ours
    last = log.append(0, _claim("A", 1))
    assert read_through(log, r, {0: 3}, appended=[first, last]) == 3
    assert log.fetches == 1
    assert r.next_position(0) == 3


def test_own_records_the_filter_does_not_keep_are_passed_without_a_fetch() -> None:
    log = CountingLog(partitions=1)
    r = rationalizer()
    written = log.append_all([(0, _claim("A"))])
    assert read_through(log, r, {0: 1}, keep=lambda value: False, appended=written) == 0
    assert log.fetches == 0
    assert r.next_position(0) == 1
    assert r.claim("g", "t", 0).owner is None


class StartCountingLog(MemoryLog):
    """Counts the requests for the log's start (a ListOffsets on Kafka)."""

    starts_asked = 0

    def start_position(self, partition: int) -> int:
        self.starts_asked += 1
        return super().start_position(partition)


def test_the_logs_start_is_asked_only_where_there_is_something_to_read() -> None:
    log = StartCountingLog(partitions=1)
    r = rationalizer()
    message = ClaimingPartition(0, "i1", "c1", "g", "t", 0)
    for _ in range(3):
        log.append(0, encode(message))
    assert catch_up(log, r, [0]) == 3 and log.starts_asked == 1
    assert catch_up(log, r, [0]) == 0 and log.starts_asked == 1  # up to date: no request
    # Records deleted below what was read and more appended: read from where the reader is.
    log.delete_before(0, 2)
    log.append(0, encode(message))
    assert catch_up(log, r, [0]) == 1 and log.starts_asked == 2
    # A reader that lags behind the deletions starts at the log's start.
    log.delete_before(0, 4)
    log.append(0, encode(message))
    late = rationalizer()
    assert catch_up(log, late, [0]) == 1 and late.next_position(0) == 5
