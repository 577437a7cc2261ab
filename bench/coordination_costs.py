"""The costs of coordinating, for the ``coordination`` suite (:mod:`bench.suite_coordination`):
a synchronous offset commit (the claim latency's anchor), the coordination records written
per 1,000 records consumed, ours against Kafka's offset commits, and a consumer's peak memory
(RSS), ours against a plain consumer's."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from kafka import KafkaConsumer, TopicPartition
from kafka.structs import OffsetAndMetadata

from bench.cli_process import ROOT, CliProcess
from bench.harness import BenchError, wait_for
from marshal_py import Marshaler
from marshal_py.client.engine_types import Mode
from marshal_py.devbroker.jvm import die_with_parent
from marshal_py.protocol import decode_signed

OFFSETS_TOPIC = "__consumer_offsets"


def plain_consumer(bootstrap: str, **options: Any) -> KafkaConsumer:
    return KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         **options)


def end_total(bootstrap: str, topic: str) -> int:
    """Sum of the end offsets of every partition of ``topic``."""
    consumer = plain_consumer(bootstrap)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        tps = [TopicPartition(topic, p) for p in partitions]
        return sum(consumer.end_offsets(tps).values()) if tps else 0
    finally:
        consumer.close()


# -- 1. claim latency ---------------------------------------------------------------------------


def commit_latencies(bootstrap: str, topic: str, commits: int) -> list[float]:
    """Milliseconds of ``commits`` synchronous offset commits of one partition (monotonic)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap,
                             group_id=f"bench.commit.{uuid.uuid4().hex[:8]}",
                             enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    try:
        consumer.assign([tp])
        consumer.commit({tp: OffsetAndMetadata(0, "", -1)})  # warm-up: finds the coordinator
        latencies = []
        for i in range(commits):
            started = time.monotonic()
            consumer.commit({tp: OffsetAndMetadata(i + 1, "", -1)})
            latencies.append((time.monotonic() - started) * 1000)
        return latencies
    finally:
        consumer.close()


# -- 4. coordination records per 1,000 ----------------------------------------------------------


@dataclass
class Count:
    who: str
    consumed: int
    records: int  # coordination records written while consuming
    seconds: float
    by_type: dict[str, int]

    @property
    def per_1000(self) -> float:
        return self.records * 1000 / self.consumed


def coordination_types(bootstrap: str, topic: str) -> dict[str, int]:
    """Message types of every record now in ``topic`` (a run's own coordination topic)."""
    consumer = plain_consumer(bootstrap, auto_offset_reset="earliest")
    kinds: Counter[str] = Counter()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic)
                                                        or ())]
        ends = consumer.end_offsets(tps)
        consumer.assign(tps)
        consumer.seek_to_beginning()
        left = sum(ends.values())
        deadline = time.monotonic() + 60
        while left > 0 and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                for record in batch:
                    if record.offset >= ends[TopicPartition(topic, record.partition)]:
                        continue
                    left -= 1
                    try:
                        kinds[type(decode_signed(record.value)[0]).__name__] += 1
                    except Exception:
                        kinds["undecoded"] += 1
    finally:
        consumer.close()
    return dict(kinds)


def ours_count(bootstrap: str, topic: str, mode: str, count: int) -> Count:
    tag = uuid.uuid4().hex[:8]
    coordination_topic = f"__marshal_bench_coord_{tag}"
    started = time.perf_counter()
    with Marshaler(bootstrap, f"bench.coord.{mode}.{tag}", f"coord-{mode}",
                   coordination_topic=coordination_topic) as m:
        consumer: Any = m.consumer([topic], cast(Mode, mode), offset_reset="earliest")
        seen = 0
        deadline = started + 120 + count / 200
        while seen < count:
            for record in consumer.poll(timeout_s=0.5):
                seen += 1
                if mode == "alo":
                    consumer.commit(record)
                if seen == count:
                    break
            if time.perf_counter() > deadline:
                raise BenchError(f"marshal {mode} read {seen:,}/{count:,} records")
        seconds = time.perf_counter() - started
        written = end_total(bootstrap, coordination_topic)
        kinds = coordination_types(bootstrap, coordination_topic)
    return Count(mode, count, written, seconds, kinds)


def ensure_offsets_topic(bootstrap: str, topic: str) -> None:
    """Kafka creates ``__consumer_offsets`` on a group's first use: make it exist."""
    commit_latencies(bootstrap, topic, 1)


def anchor_count(bootstrap: str, topic: str, count: int, every: int) -> Count:
    """A plain kafka-python group member committing every ``every`` records."""
    before = end_total(bootstrap, OFFSETS_TOPIC)
    started = time.perf_counter()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap,
                             group_id=f"bench.anchor.{uuid.uuid4().hex[:8]}",
                             enable_auto_commit=False, auto_offset_reset="earliest")
    seen = 0
    try:
        deadline = started + 120 + count / 200
        while seen < count:
            for batch in consumer.poll(timeout_ms=500).values():
                for record in batch:
                    if seen == count:
                        break
                    seen += 1
                    if every == 1:
                        tp = TopicPartition(record.topic, record.partition)
                        consumer.commit({tp: OffsetAndMetadata(record.offset + 1, "", -1)})
                    elif seen % every == 0:
                        consumer.commit()
            if time.perf_counter() > deadline:
                raise BenchError(f"the kafka-python group read {seen:,}/{count:,} records")
        seconds = time.perf_counter() - started
        written = end_total(bootstrap, OFFSETS_TOPIC) - before
    finally:
        consumer.close(autocommit=False)
    return Count(f"kafka-python every {every}", count, written, seconds,
                 {"__consumer_offsets records": written})


# -- 5. peak RSS --------------------------------------------------------------------------------


def vm_hwm_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise BenchError(f"no VmHWM in /proc/{pid}/status")


class Printer(CliProcess):
    """``marshal consume --print``: counts the records it printed."""

    def __init__(self, name: str, args: list[str]) -> None:
        self.printed = 0
        super().__init__(name, args)

    def on_stdout(self, raw: bytes, at: float) -> None:
        self.printed += 1


def ours_rss(bootstrap: str, topic: str, count: int) -> int:
    tag = uuid.uuid4().hex[:8]
    proc = Printer("rss-ours", [
        "consume", "--bootstrap-servers", bootstrap, "--group", f"bench.rss.{tag}",
        "--topic", topic, "--mode", "alo", "--client-id", f"rss-{tag}",
        "--offset-reset", "earliest", "--print"])
    try:
        def done() -> bool:
            if not proc.alive():
                raise BenchError(f"marshal consume exited: {proc.stderr_tail()}")
            return proc.printed >= count

        wait_for(f"marshal consume to print {count:,} records", done, 60 + count / 500,
                 detail=lambda: f"printed {proc.printed:,}; {proc.stderr_tail()}")
        return vm_hwm_kib(proc.proc.pid)
    finally:
        proc.stop()


ANCHOR_SCRIPT = """
import sys
from kafka import KafkaConsumer, TopicPartition
bootstrap, topic, partitions, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         auto_offset_reset="earliest")
consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
consumer.seek_to_beginning()
seen = 0
while seen < count:
    for batch in consumer.poll(timeout_ms=500).values():
        seen += len(batch)
print("read", seen, flush=True)
sys.stdin.readline()
consumer.close()
"""


def anchor_rss(bootstrap: str, topic: str, partitions: int, count: int) -> int:
    proc = subprocess.Popen(
        [sys.executable, "-c", ANCHOR_SCRIPT, bootstrap, topic, str(partitions), str(count)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, preexec_fn=die_with_parent(os.getpid()))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout or ()), daemon=True)
    reader.start()
    try:
        def done() -> bool:
            if proc.poll() is not None:
                raise BenchError(f"the kafka-python RSS anchor exited with {proc.returncode}")
            return any(line.startswith("read") for line in lines)

        wait_for(f"the kafka-python process to read {count:,} records", done,
                 60 + count / 500)
        return vm_hwm_kib(proc.pid)
    finally:
        with contextlib.suppress(OSError):
            assert proc.stdin is not None
            proc.stdin.write("\n")
            proc.stdin.close()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
