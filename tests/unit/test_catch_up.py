"""catch_up never skips a record because the broker is away (found by the chaos campaign):
only positions the reader has read past without records (transaction markers) are skipped."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from marshal_py.errors import BrokerUnavailableError
from marshal_py.log import MemoryLog
from marshal_py.protocol import ClaimingPartition, encode
from marshal_py.replay import catch_up
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
