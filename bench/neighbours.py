"""Neighbours: what other groups' coordination records cost a member (issue 22, part 5).

Two measurements for ``python -m bench coordination`` (``bench/suite_coordination.py``):

* **A new group among neighbours** (:func:`first_record`): a one-partition coordination
  topic holds N records of other groups (``bench.replay.traffic`` of 10 groups, each with its
  history recorded in the index, as writers do); a member of a brand-new group joins and
  reads a data topic from its beginning. Measured: from ``Marshaler(...)`` to the first
  record handed out. Anchor: the same on a quiet coordination topic (no neighbours). Also
  shown: the same N neighbours on a coordination topic that is not *declared* (created
  before this version, or by hand): a member there replays the window, reading past the
  neighbours' records without decoding them.
* **Steady state with neighbours** (:func:`steady_rate`): an ALO member (``commit`` after
  every record) reads M records of a 12-partition topic while a separate process writes
  ``rate`` coordination records per second of other groups to the member's coordination
  partition. Anchor: the same member while the same process writes as many records to
  another coordination topic (the same CPU load on the machine, none on the member's
  partition). Measured: records/s from the first record to the last.

``python -m bench.neighbours --write BOOTSTRAP TOPIC RATE`` is the writing process (until
its standard input closes).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from bench.cli_process import ROOT
from bench.harness import BenchContext, BenchError
from bench.replay import traffic
from bench.report import Measured, Table, ratio
from marshal_py import Marshaler
from marshal_py.devbroker.jvm import die_with_parent
from marshal_py.log.history import record_history
from marshal_py.log.kafka import KafkaLog, KafkaLogConfig

NEIGHBOUR_GROUPS = tuple(f"neighbour.g{i:02d}" for i in range(10))
HI_S = 1.0
PARTITIONS = 12


def coordination_topic(bootstrap: str, *, declared: bool = True) -> str:
    """A fresh one-partition coordination topic. ``declared=False``: made as by hand (or by
    an older version), then opened, so its index has a layout but no Declared record."""
    name = f"__marshal_bench_nb_{uuid.uuid4().hex[:8]}"
    if not declared:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.create_topics([NewTopic(name, 1, 1, topic_configs={
                "message.timestamp.type": "LogAppendTime", "retention.ms": str(8 * 86_400_000)})])
        finally:
            admin.close()
    KafkaLog(KafkaLogConfig(bootstrap, name, partitions=1)).close()
    return name


def fill(bootstrap: str, topic: str, data_topic: str, count: int,
         ctx: BenchContext) -> None:
    """``count`` records of the neighbour groups about ``data_topic`` (so on the partition
    a member of ``data_topic`` uses), each group's history recorded first."""
    with KafkaLog(KafkaLogConfig(bootstrap, topic, create_topic=False)) as log:
        for group in NEIGHBOUR_GROUPS:
            record_history(log, group, data_topic)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20,
                             batch_size=256 * 1024)
    started = time.monotonic()
    try:
        for i, value in enumerate(traffic(count, data_topic, groups=NEIGHBOUR_GROUPS), 1):
            producer.send(topic, value, partition=0)
            if i % 250_000 == 0:
                ctx.say(f"neighbours: {i:,}/{count:,} records")
        producer.flush(timeout=300)
    finally:
        producer.close()
    ctx.say(f"neighbours: {count:,} records in {time.monotonic() - started:.1f} s")


def first_record(bootstrap: str, topic: str, data_topic: str) -> float:
    """Seconds from opening a Marshaler of a brand-new group to its first record."""
    started = time.perf_counter()
    with Marshaler(bootstrap, f"bench.new.{uuid.uuid4().hex[:8]}", "newcomer", HI_S,
                   coordination_topic=topic) as m:
        consumer = m.consumer([data_topic], "alo", offset_reset="earliest")
        deadline = started + 120
        while time.perf_counter() < deadline:
            if consumer.poll(timeout_s=0.2, max_records=1):
                seconds = time.perf_counter() - started
                consumer.close()
                return seconds
    raise BenchError(f"a new group got no record of {data_topic} within 120 s")


@dataclass
class Steady:
    rate: float  # records/s, first record to last
    neighbour_rate: float  # coordination records/s the writing process reached


def steady_rate(bootstrap: str, topic: str, data_topic: str, records: int,
                neighbour_topic: str, neighbour_rate: int) -> Steady:
    """An ALO member of a fresh group reads ``records`` records of ``data_topic`` while the
    writing process writes ``neighbour_rate`` records/s to ``neighbour_topic``."""
    writer = subprocess.Popen(
        [sys.executable, "-m", "bench.neighbours", "--write", bootstrap, neighbour_topic,
         data_topic, str(neighbour_rate)],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), os.environ.get("PYTHONPATH", "")])},
        preexec_fn=die_with_parent(os.getpid()))
    try:
        assert writer.stdout is not None
        if writer.stdout.readline().strip() != "writing":
            raise BenchError("the neighbour writer did not start")
        with Marshaler(bootstrap, f"bench.steady.{uuid.uuid4().hex[:8]}", "steady", HI_S,
                       coordination_topic=topic) as m:
            consumer = m.consumer([data_topic], "alo", offset_reset="earliest")
            first: float | None = None
            deadline = time.perf_counter() + 120 + records / 500
            for seen, record in enumerate(consumer, 1):
                if first is None:
                    first = time.perf_counter()
                consumer.commit(record)
                if seen >= records:
                    break
                if time.perf_counter() > deadline:
                    raise BenchError(f"the steady member read {seen:,}/{records:,} records")
            ended = time.perf_counter()
            consumer.close()
    finally:
        assert writer.stdin is not None
        writer.stdin.close()
        written = writer.stdout.readline().split() if writer.stdout else []
        writer.wait(timeout=30)
    assert first is not None
    achieved = float(written[1]) / float(written[2]) if len(written) == 3 else 0.0
    return Steady(records / (ended - first), achieved)


def _producer(bootstrap: str, topic: str) -> tuple[Callable[[bytes], None],
                                                  Callable[[], None], Callable[[], None]]:
    """(send, serve, flush) of librdkafka's producer when confluent-kafka is installed
    (kafka-python's tops out near 15,000 records/s on a busy core), else kafka-python's;
    both batch over 5 ms."""
    if importlib.util.find_spec("confluent_kafka") is not None:
        from confluent_kafka import Producer

        fast = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": 1,
                         "queue.buffering.max.messages": 1_000_000})

        def send(value: bytes) -> None:
            while True:
                try:
                    fast.produce(topic, value, partition=0)
                    return
                except BufferError:
                    fast.poll(0.01)

        def serve() -> None:
            fast.poll(0)

        def flush_fast() -> None:
            fast.flush(30)

        return send, serve, flush_fast
    slow = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=5,
                         batch_size=256 * 1024)

    def flush() -> None:
        slow.flush(timeout=30)
        slow.close()

    return lambda value: slow.send(topic, value, partition=0) and None, lambda: None, flush


def write_forever(bootstrap: str, topic: str, data_topic: str, rate: int) -> None:
    """The writing process: ``rate`` records/s of the neighbour groups until stdin closes,
    then print how many and in how many seconds."""
    send, serve, flush = _producer(bootstrap, topic)
    stop = threading.Event()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    values = traffic(10**12, data_topic, groups=NEIGHBOUR_GROUPS)
    print("writing", flush=True)
    started = time.monotonic()
    written = 0
    while not stop.is_set():
        due = int((time.monotonic() - started) * rate)
        while written < due:
            send(next(values))
            written += 1
        serve()
        stop.wait(0.005)
    seconds = time.monotonic() - started
    flush()
    print("written", written, f"{seconds:.3f}", flush=True)


def run(ctx: BenchContext, neighbour_records: int, steady_records: int,
        neighbour_rate: int) -> tuple[list[Table], dict[str, Any]]:
    """Both measurements, ``ctx.repeat`` times each, interleaved with their anchors."""
    data_topic = ctx.create_topic(f"bench-nb-data-{ctx.tag()}", PARTITIONS)
    ctx.produce(data_topic, steady_records, PARTITIONS)
    quiet = coordination_topic(ctx.bootstrap)
    crowded = coordination_topic(ctx.bootstrap)
    undeclared = coordination_topic(ctx.bootstrap, declared=False)
    for topic in (crowded, undeclared):
        fill(ctx.bootstrap, topic, data_topic, neighbour_records, ctx)
    firsts: dict[str, list[float]] = {"quiet": [], "crowded": [], "undeclared": []}

    def first_records(i: int) -> None:
        for name, topic in (("quiet", quiet), ("crowded", crowded),
                            ("undeclared", undeclared)):
            firsts[name].append(first_record(ctx.bootstrap, topic, data_topic))

    ctx.repeated("a new group among neighbours", first_records)
    steady: dict[str, list[Steady]] = {"quiet": [], "neighbours": []}

    def steady_runs(i: int) -> None:
        steady["quiet"].append(steady_rate(ctx.bootstrap, crowded, data_topic, steady_records,
                                           quiet, neighbour_rate))
        steady["neighbours"].append(steady_rate(ctx.bootstrap, crowded, data_topic,
                                                steady_records, crowded, neighbour_rate))

    ctx.repeated("steady state with neighbours", steady_runs)
    m = {k: Measured(v, "s") for k, v in firsts.items()}
    first_table = Table(
        f"A new group among neighbours: from `Marshaler(...)` to its first record, "
        f"{neighbour_records:,} records of 10 other groups on its coordination partition "
        f"(median of {ctx.repeat})",
        ["coordination partition", "first record (s)", "vs quiet"],
        [["ours: declared topic (this version's), neighbours' history in the index",
          m["crowded"].cell(2), ratio(m["crowded"].median, m["quiet"].median)],
         ["ours: topic not declared (made before this version): the window is read, "
          "neighbours' records read past undecoded", m["undeclared"].cell(2),
          ratio(m["undeclared"].median, m["quiet"].median)],
         ["anchor: the same join on a quiet coordination partition", m["quiet"].cell(2),
          "1.00x"]],
        ["A fresh group (HI 1 s, ALO, `offset_reset='earliest'`) of a 12-partition topic; "
         "the clock includes opening the coordination log and the index, the replay, "
         "joining and claiming, and the first fetch of the data."])
    rates = {k: Measured([r.rate for r in v], "records/s") for k, v in steady.items()}
    reached = Measured([r.neighbour_rate for r in steady["neighbours"]], "records/s")
    steady_table = Table(
        f"Steady state with neighbours: one ALO member (`commit` after every record) reading "
        f"{steady_records:,} records while {neighbour_rate:,} coordination records/s of "
        f"other groups are written (median of {ctx.repeat})",
        ["neighbours write to", "records/s", "vs quiet"],
        [["ours: the member's own coordination partition", rates["neighbours"].cell(),
          ratio(rates["neighbours"].median, rates["quiet"].median)],
         ["anchor: another coordination topic (the same load on the machine)",
          rates["quiet"].cell(), "1.00x"]],
        [f"The writer is a separate process (librdkafka's producer, batched; "
         f"{reached.cell()} reached); records/s from the first record to the last; a "
         "fresh group each run."])
    raw = {"first_record_s": firsts,
           "steady": {k: [asdict(r) for r in v] for k, v in steady.items()},
           "neighbour_records": neighbour_records, "neighbour_rate": neighbour_rate}
    return [first_table, steady_table], raw


if __name__ == "__main__":
    if sys.argv[1:2] == ["--write"]:
        write_forever(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        print(__doc__)
