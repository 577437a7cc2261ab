"""The exclusive micro-batch member (the Spark source's driver side) on MemoryLog with a
virtual clock: what it plans when the broker is slow."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator

import pytest

from marshal_py.client.batch_member import ExclusiveBatchMember, PlannedRange
from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world import Rationalizer, RationalizerConfig
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000


class SlowLog(MemoryLog):
    """A MemoryLog whose next append takes ``stall_ms`` of (virtual) time."""

    def __init__(self, clock: VirtualClock) -> None:
        super().__init__(partitions=2, clock=clock)
        self.virtual_clock = clock
        self.stall_ms = 0

    def append(self, partition: int, value: bytes) -> CoordinationRecord:
        written = super().append(partition, value)
        if self.stall_ms:
            self.virtual_clock.advance(self.stall_ms)
            self.stall_ms = 0
        return written


class Host:
    def __init__(self) -> None:
        self.lock = threading.RLock()

    def member_closed(self, member: object) -> None:
        pass


def step(member: ExclusiveBatchMember, clock: VirtualClock, times: int) -> None:
    """Run ``times`` engine steps, 100 virtual ms apart (as the background thread would)."""
    for _ in range(times):
        clock.advance(100)
        with member._lock:
            member.engine.tick()


@pytest.fixture
def amo() -> Iterator[tuple[ExclusiveBatchMember, SlowLog, VirtualClock]]:
    clock = VirtualClock()
    log = SlowLog(clock)
    topic = MemoryTopic("orders", 1)
    for _ in range(100):
        topic.produce(0, b"x")
    config = EngineConfig(group_id="g", client_id="spark-query", instance_id="0000000a",
                          topics=("orders",), mode="amo", heartbeat_interval_ms=HI,
                          offset_reset="earliest")
    engine = MemberEngine(config, log, Rationalizer(RationalizerConfig(2, HI)), topic,
                          SimClock(clock), random.Random(1))
    engine.start()
    # The background thread steps once at start (at the same virtual time as the test's
    # first step), then sleeps for the hour: the test steps the engine.
    member = ExclusiveBatchMember(Host(), engine, topic, tick_interval_s=3600)  # type: ignore[arg-type]
    try:
        step(member, clock, 5)
        assert engine.assignments(), "the member claims the partition"
        yield member, log, clock
    finally:
        member.close()


def test_amo_range_confirmed_after_the_lease_lapsed_is_planned_again_not_lost(
        amo: tuple[ExclusiveBatchMember, SlowLog, VirtualClock]) -> None:
    member, log, clock = amo
    # The confirmation of the first range takes longer than the lease has left: the range is
    # confirmed in the log, but the member may no longer hand it out.
    log.stall_ms = 2 * HI
    assert member.plan(40) == []
    # The next heartbeat restores the lease: the same records are planned, none skipped.
    step(member, clock, 3)
    assert member.plan(40) == [PlannedRange("orders", 0, 0, 40)]
    assert member.plan(40) == [PlannedRange("orders", 0, 40, 80)]
