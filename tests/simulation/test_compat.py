"""Compatibility mode with the original implementation (``compat="v1"``, PROTOCOL.md 13.1),
on MemoryLog with a virtual clock, both directions:

* what a compat member writes is exactly what the original reads: parsed here with the
  original's rules (written from its parser's behaviour: slash-separated text, its four types,
  their exact field counts, integers where it expects them), record by record;
* a log written as the original writes it (hand-written here) is read right by our
  rationalizer and by a compat member, which respects a live original member's claims and
  takes a stale one over at its committed offset, or, when the original's offset is 0
  ("none" to the original), at the offset the group committed to Kafka, as the original does.
"""

from __future__ import annotations

import logging
import random

import pytest

from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.errors import ConfigurationError
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import coordination_partition
from marshal_py.protocol.original import original_can_read
from marshal_py.replay import catch_up
from marshal_py.world import Rationalizer, RationalizerConfig
from tests.simulation.harness import MemoryTopic, SimClock

HI = 60_000  # the original's interval
PARTITIONS = 2
T0_S = 1_700_000_000


def original_parse(value: bytes) -> tuple[str, list[str]]:
    """The original's reading of a record: (type, fields), or ValueError as it would fail.

    Its rules: at least 8 slash-separated parts; version, timestamp and partition are
    integers; a known type with exactly its number of parts, the offset an integer."""
    parts = value.decode("utf-8").split("/")
    if len(parts) < 8:
        raise ValueError("too short")
    for index in (1, 2, 7):
        int(parts[index])
    wanted = {"Heartbeat": 9, "ClaimingPartition": 8, "ReleasingPartition": 9,
              "ClaimingMessages": 9}.get(parts[0])
    if wanted is None or len(parts) != wanted:
        raise ValueError(f"unknown type or length: {parts[0]}")
    if wanted == 9:
        int(parts[8])
    return parts[0], parts


class World:
    def __init__(self) -> None:
        self.clock = VirtualClock(T0_S * 1000)
        self.log = MemoryLog(partitions=PARTITIONS, clock=self.clock)
        self.topic = MemoryTopic("orders", 4)
        self.home = coordination_partition("orders", PARTITIONS)

    def member(self, client: str, mode: str = "alo", **options: object) -> MemberEngine:
        config = EngineConfig(group_id="g", client_id=client, instance_id=f"i-{client}",
                              topics=("orders",), heartbeat_interval_ms=HI, mode=mode,  # type: ignore[arg-type]
                              compat="v1", offset_reset="earliest", **options)  # type: ignore[arg-type]
        engine = MemberEngine(config, self.log, Rationalizer(RationalizerConfig(PARTITIONS, HI)),
                              self.topic, SimClock(self.clock), random.Random(7))
        engine.start()
        return engine

    def original_writes(self, text: str) -> None:
        """Append a record as an original member writes it (its clock = the broker's)."""
        self.log.append(self.home, text.encode())

    def run(self, engines: list[MemberEngine], ms: int, step: int = 1_000) -> None:
        for _ in range(ms // step):
            self.clock.advance(step)
            for engine in engines:
                engine.tick()

    def now_s(self) -> int:
        return self.clock() // 1000

    def values(self) -> list[bytes]:
        records = self.log.fetch(dict.fromkeys(range(PARTITIONS), 0), 0)
        return [r.value for r in records if r.value is not None]


def test_a_compat_member_writes_only_what_the_original_reads() -> None:
    w = World()
    a = w.member("worker-a", mode="amo")
    w.topic.produce(0, b"x")
    w.run([a], 5 * HI)
    a.close()
    values = w.values()
    kinds = [original_parse(v)[0] for v in values]  # every one parses
    assert set(kinds) <= {"ClaimingPartition", "Heartbeat", "ReleasingPartition",
                          "ClaimingMessages"}
    assert "ClaimingPartition" in kinds and "Heartbeat" in kinds
    assert "ReleasingPartition" in kinds  # close releases
    assert all(v.split(b"/")[1] == b"1" for v in values)  # the original's version
    assert all(original_can_read(v) for v in values)


def test_a_log_written_by_the_original_is_read_as_the_original_means_it() -> None:
    w = World()
    now = w.now_s()
    w.original_writes(f"ClaimingPartition/1/{now}/go-1/go-worker/g/orders/0")
    w.original_writes(f"Heartbeat/1/{now}/go-1/go-worker/g/orders/0/40")
    r = Rationalizer(RationalizerConfig(PARTITIONS, HI))
    catch_up(w.log, r, [w.home])
    claim = r.claim("g", "orders", 0)
    assert claim.owner is not None and claim.owner.client_id == "go-worker"
    assert claim.committed_offset == 40  # the next offset to consume, as ours


def test_a_compat_member_leaves_a_live_original_claim_and_takes_a_stale_one_at_its_offset(
) -> None:
    w = World()
    for partition in range(4):
        w.topic.produce(partition, b"r")
    now = w.now_s()
    w.original_writes(f"ClaimingPartition/1/{now}/go-1/go-worker/g/orders/2")
    w.original_writes(f"Heartbeat/1/{now}/go-1/go-worker/g/orders/2/1")
    a = w.member("py-a", balance="greedy")
    w.run([a], HI)  # the original's claim is fresh: not taken
    assert ("orders", 2) not in a.holdings
    assert len(a.holdings) == 3
    w.run([a], 2 * HI)  # no heartbeat for more than 2 HI: stale, taken at its offset
    holding = a.holdings.get(("orders", 2))
    assert holding is not None and holding.lease.start == 1


def test_an_original_offset_of_0_means_the_groups_kafka_offset_as_for_the_original() -> None:
    w = World()
    for _ in range(10):
        w.topic.produce(3, b"r")
    now = w.now_s()
    w.original_writes(f"ClaimingPartition/1/{now}/go-1/go-worker/g/orders/3")
    w.original_writes(f"Heartbeat/1/{now}/go-1/go-worker/g/orders/3/0")
    w.topic.kafka_committed[("g", 3)] = 6  # the original commits to Kafka as well
    w.clock.advance(3 * HI)  # and then died
    a = w.member("py-a", balance="greedy")
    w.run([a], 2_000)
    holding = a.holdings.get(("orders", 3))
    assert holding is not None and holding.lease.start == 6


def test_compat_refuses_what_the_original_cannot_read() -> None:
    with pytest.raises(ConfigurationError, match="holds a '/'"):
        EngineConfig(group_id="team/g", client_id="a", instance_id="i", topics=("t",),
                     compat="v1")
    with pytest.raises(ConfigurationError, match="holds a '/'"):
        EngineConfig(group_id="g", client_id="a", instance_id="i", topics=("t/1",),
                     compat="v1")
    with pytest.raises(ConfigurationError, match="compat must be one of 'v1'"):
        EngineConfig(group_id="g", client_id="a", instance_id="i", topics=("t",),
                     compat="v2")  # type: ignore[arg-type]


def test_a_compat_member_warns_of_records_the_original_cannot_read(
        caplog: pytest.LogCaptureFixture) -> None:
    w = World()
    now = w.now_s()
    w.original_writes(f"ClaimingPartition/1/{now}/go-1/go-worker/g/orders/0")
    w.original_writes(f"MemberHeartbeat/2/{now}/i-x/x/g/orders/1/-1")  # a non-compat member
    with caplog.at_level(logging.WARNING, logger="marshal_py.client.member_base"):
        w.member("py-a")
    warnings = [r.getMessage() for r in caplog.records
                if "cannot read" in r.getMessage()]
    assert len(warnings) == 1
    assert "position 1: MemberHeartbeat" in warnings[0]
