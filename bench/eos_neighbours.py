"""What exactly-once transactions cost the other groups of their coordination partition.

Part of suite ``eos`` (see :mod:`bench.suite_eos`): on a coordination topic of one partition,
another group's claim latency and failover, quiet and while an exactly-once member commits
transactions there; in full runs also a new member's claim while a dangling transaction (an
exactly-once member killed inside its commit) holds the partition's last stable offset back.
"""

from __future__ import annotations

import statistics
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from bench.cli_process import CliProcess
from bench.harness import BenchContext, BenchError, wait_for
from bench.report import Measured, Table
from marshal_py import Marshaler
from marshal_py.log import KafkaLog, KafkaLogConfig

HI_S = 1.0
#: Joins measured per condition and repetition.
JOINS = 5
#: The exactly-once member's input: about this many records per second, in small batches.
LOAD_RATE = 1_000


class Member(CliProcess):
    """A ``marshal consume`` process; ``joined`` once it says so."""

    def __init__(self, name: str, args: list[str]) -> None:
        self.joined = threading.Event()
        super().__init__(name, args)

    def on_stderr(self, line: str) -> None:
        if line.startswith("marshal consume: member "):
            self.joined.set()


@dataclass
class NeighbourReport:
    """The neighbour measurements of every repetition (milliseconds)."""

    claim_ms: dict[str, list[float]] = field(default_factory=lambda: {"quiet": [], "eos": []})
    held_ms: dict[str, list[float]] = field(default_factory=lambda: {"quiet": [], "eos": []})
    failover_ms: dict[str, list[float]] = field(
        default_factory=lambda: {"quiet": [], "eos": []})
    dangling_claim_ms: list[float] = field(default_factory=list)
    transactions_per_s: list[float] = field(default_factory=list)

    @property
    def raw(self) -> dict[str, Any]:
        return {"claim_ms": self.claim_ms, "held_ms": self.held_ms,
                "failover_ms": self.failover_ms,
                "dangling_claim_ms": self.dangling_claim_ms,
                "transactions_per_s": self.transactions_per_s}

    def table(self) -> Table:
        rows = []
        for label, key in (("quiet", "quiet"), ("exactly-once member committing", "eos")):
            rows.append([label, Measured(self.claim_ms[key]).cell(),
                         Measured(self.held_ms[key]).cell(),
                         Measured(self.failover_ms[key]).cell()])
        if self.dangling_claim_ms:
            rows.append(["a dangling commit (member killed inside it)", "—",
                         Measured(self.dangling_claim_ms).cell(), "—"])
        load = Measured(self.transactions_per_s).cell() if self.transactions_per_s else "—"
        return Table(
            "Another group on the same coordination partition (HI 1 s; ms, median of the "
            "repetitions)",
            ["coordination partition", "claim latency", "join to 4 held", "failover"], rows,
            [f"The exactly-once member committed {load} transactions/s. Claim latency: "
             "proposal to won, per partition; join to 4 held: from opening a consumer of a "
             "fresh group until it holds all 4 partitions (both the median of 5 joins); "
             "failover: SIGKILL of the holder to the survivor handing out a record produced "
             "right after it (the claim goes stale after 2 HI)."])


def coordination_topic(bootstrap: str) -> str:
    """A fresh coordination topic of one partition."""
    name = f"__marshal_bench_eos_{uuid.uuid4().hex[:8]}"
    KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, topic=name, partitions=1)).close()
    return name


def join_ms(ctx: BenchContext, ctopic: str, topic: str) -> tuple[float, float]:
    """A fresh group's member joins and claims ``topic`` (4 partitions): (the median claim
    latency of its partitions, proposal to won; from opening the consumer until it holds
    all 4), in milliseconds."""
    with Marshaler(ctx.bootstrap, f"bench.nb.{ctx.tag()}", "joiner", HI_S,
                   coordination_topic=ctopic) as m:
        began = time.monotonic()
        consumer = m.consumer([topic], "alo")
        wait_for("the joiner to claim 4 partitions", lambda: len(consumer.assignment()) == 4,
                 120, interval_s=0.005)
        held = (time.monotonic() - began) * 1000
        return float(statistics.median(consumer.stats.claim_latencies_ms)), held


def failover_ms(ctx: BenchContext, ctopic: str) -> float:
    """SIGKILL of a member holding a 1-partition topic, until its group's other member hands
    out a record produced right after the kill."""
    tag = ctx.tag()
    topic, group = ctx.create_topic(f"bench-nb-fail-{tag}", 1), f"bench.nbf.{tag}"
    victim = Member("victim", [
        "consume", "--bootstrap-servers", ctx.bootstrap, "--coordination-topic", ctopic,
        "--group", group, "--topic", topic, "--client-id", "a", "--heartbeat-interval",
        str(HI_S), "--print"])
    producer = KafkaProducer(bootstrap_servers=ctx.bootstrap)
    try:
        wait_for("the victim to join", victim.joined.is_set, 60)
        with Marshaler(ctx.bootstrap, group, "b", HI_S, coordination_topic=ctopic) as m:
            survivor = m.consumer([topic], "alo", offset_reset="latest")

            def victim_holds() -> bool:
                owners = [c.owner for c in m.claims(topic)
                          if c.owner is not None and c.is_held(m.clock.now_ms())]
                return bool(owners) and owners[0].client_id == "a"

            wait_for("the victim to hold the partition", victim_holds, 60)
            victim.kill9()
            killed = time.monotonic()
            marker = f"marker-{tag}".encode()
            producer.send(topic, value=marker, partition=0).get(timeout=30)
            deadline = killed + 120
            while True:
                if time.monotonic() > deadline:
                    raise BenchError("the survivor did not take the partition over")
                if any(r.value == marker for r in survivor.poll(timeout_s=0.05)):
                    return (time.monotonic() - killed) * 1000
    finally:
        victim.kill9()
        victim.stop()
        producer.close(timeout=5)


@contextmanager
def eos_load(ctx: BenchContext, ctopic: str, report: NeighbourReport) -> Iterator[None]:
    """An exactly-once member copying a topic fed at :data:`LOAD_RATE` records/s."""
    tag = ctx.tag()
    source = ctx.create_topic(f"bench-nb-in-{tag}", 2)
    output = ctx.create_topic(f"bench-nb-out-{tag}", 2)
    member = Member("eos-member", [
        "consume", "--bootstrap-servers", ctx.bootstrap, "--coordination-topic", ctopic,
        "--group", f"bench.nb.eos.{tag}", "--topic", source, "--mode", "eos",
        "--output-topic", output, "--heartbeat-interval", str(HI_S)])
    stop = threading.Event()
    producer = KafkaProducer(bootstrap_servers=ctx.bootstrap, linger_ms=2)

    def feed() -> None:
        while not stop.wait(0.01):
            for i in range(LOAD_RATE // 100):
                producer.send(source, value=b"x" * 100, partition=i % 2)

    feeder = threading.Thread(target=feed, daemon=True, name="eos-load")
    try:
        wait_for("the exactly-once member to join", member.joined.is_set, 60)
        feeder.start()
        began = time.monotonic()
        before = committed_transactions(ctx.bootstrap, ctopic)
        yield
        after = committed_transactions(ctx.bootstrap, ctopic)
        report.transactions_per_s.append((after - before) / (time.monotonic() - began))
    finally:
        stop.set()
        if feeder.is_alive():
            feeder.join(timeout=5)
        producer.close(timeout=5)
        member.stop()


def committed_transactions(bootstrap: str, ctopic: str) -> int:
    """How many CommittingTransaction records the coordination topic holds (committed)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             isolation_level="read_committed")
    try:
        tp = TopicPartition(ctopic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        found = 0
        deadline = time.monotonic() + 60
        while consumer.position(tp) < end and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                found += sum(1 for r in records
                             if r.value is not None and b"CommittingTransaction" in r.value)
        return found
    finally:
        consumer.close()


def dangling_claim_ms(ctx: BenchContext, ctopic: str, topic: str) -> float:
    """A new member's claim while a transaction that wrote to the coordination partition
    stays open (its producer is gone) until the broker aborts it."""
    producer = KafkaProducer(bootstrap_servers=ctx.bootstrap,
                             transactional_id=f"bench-dangling-{ctx.tag()}",
                             transaction_timeout_ms=10_000)
    producer.init_transactions()
    producer.begin_transaction()
    producer.send(ctopic, value=b"dangling", partition=0).get(timeout=30)
    try:
        return join_ms(ctx, ctopic, topic)[1]
    finally:
        producer.close(timeout=0)


def measure_neighbours(ctx: BenchContext) -> NeighbourReport:
    report = NeighbourReport()
    ctopic = coordination_topic(ctx.bootstrap)
    topic = ctx.create_topic(f"bench-nb-{ctx.tag()}", 4)
    for i in range(ctx.repeat):
        ctx.say(f"neighbours: repetition {i + 1}/{ctx.repeat}")
        for condition in ("quiet", "eos"):
            with eos_load(ctx, ctopic, report) if condition == "eos" else _nothing():
                joins = [join_ms(ctx, ctopic, topic) for _ in range(JOINS)]
                report.claim_ms[condition].append(statistics.median(j[0] for j in joins))
                report.held_ms[condition].append(statistics.median(j[1] for j in joins))
                report.failover_ms[condition].append(failover_ms(ctx, ctopic))
        if not ctx.quick:
            report.dangling_claim_ms.append(dangling_claim_ms(ctx, ctopic, topic))
    return report


@contextmanager
def _nothing() -> Iterator[None]:
    yield
