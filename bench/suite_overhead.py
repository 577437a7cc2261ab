"""Suite ``overhead``: what coordinating through ``__marshal`` costs an exclusive consumer.

The data: N records of 100 bytes over 12 partitions (N = 1,000,000; ``--quick`` 5,000),
produced once. Every reader reads all of it from the beginning, ``ctx.repeat`` times,
interleaved (plain 1, ALO 1, AMO 1, plain 3, ALO 3, AMO 3, then the Spark readers):

* **Python consumers** — separate OS processes (``python -m bench.suite_overhead --worker``),
  started and connected before the clock starts (Python start-up and imports outside the
  measured time), then told *go* together:

  - ``plain`` (the anchor): kafka-python ``KafkaConsumer`` with manual assignment
    (``group_id=None``, no commits), the 12 partitions dealt 12 / 4+4+4 to 1 / 3 processes;
  - ``alo``: a ``Marshaler`` (HI 1 s) consumer in mode ``alo``, ``offset_reset="earliest"``,
    ``commit(record)`` after every record — what ``marshal consume --mode alo`` does;
  - ``amo``: the same in mode ``amo`` (each fetched batch, at most ``amo_batch_size`` = 100
    records, confirmed in ``__marshal`` before it is handed out).

  A marshal group is fresh each run, so joining and claiming (and, with 3 members, the
  hand-overs as the others join) are inside the measured time. The clock runs from *go* to
  the wall time the last record of the last partition was handed out; each process reports,
  every 0.2 s, per partition the next offset and the time it handed out the record before it,
  so the end is exact, not the polling tick. Records delivered more than once (hand-overs
  in ALO) are counted as duplicates.
* **Spark** — Structured Streaming in ``local[2]`` (the session started once, before the
  runs), ``trigger(availableNow=True)``, the ``noop`` sink, so only the source is measured;
  from ``start()`` to the query's end: ``format("marshal")`` (a fresh group, ALO and AMO)
  against Spark's own Kafka source ``format("kafka")`` (``spark-sql-kafka-0-10``,
  ``startingOffsets`` earliest, fetched from Maven Central by Spark's Ivy on first use into
  ``~/.cache/marshal_py/ivy`` — only Maven Central, see ``ivysettings.xml``).

The ratio is ours / the anchor of the same shape (processes, or Spark). Expect to lose: a
plain consumer does nothing but fetch, while ours also heartbeats, replays ``__marshal`` and
(AMO) waits for a write to be acknowledged per batch; with 2 cores, 3 processes plus the
broker are CPU-bound. A full run (N = 1M, 3 repetitions) takes about 15-20 minutes on 2
cores (``BENCH_OVERHEAD_RECORDS`` overrides N).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import BenchContext, BenchError, wait_for
from bench.report import Measured, Plot, SuiteReport, Table, ratio
from bench.worker_process import WorkerProcess
from bench.worker_process import worker_pool as started_workers

PARTITIONS = 12
HI_S = 1.0
PROGRESS_S = 0.2
PROCESS_COUNTS = (1, 3)
READERS = ("plain", "alo", "amo")
SPARK_READERS = ("kafka", "marshal-alo", "marshal-amo")
#: Spark's Kafka source. pyspark 4.3 runs the 4.2 connector (the newest on Maven Central
#: when this was written); BENCH_SPARK_KAFKA_VERSION picks another.
SPARK_KAFKA_VERSION = os.environ.get("BENCH_SPARK_KAFKA_VERSION", "4.2.0")
IVY_SETTINGS = Path(__file__).resolve().parent / "ivysettings.xml"
IVY_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "marshal_py" / "ivy"

LABELS = {
    "plain": "kafka-python, manual assignment",
    "alo": "marshal ALO (commit every record)",
    "amo": "marshal AMO (batch 100)",
    "kafka": "Spark format(\"kafka\")",
    "marshal-alo": "Spark format(\"marshal\") ALO",
    "marshal-amo": "Spark format(\"marshal\") AMO",
}


def records_for(quick: bool) -> int:
    if quick:
        return 5_000
    return int(os.environ.get("BENCH_OVERHEAD_RECORDS", "1000000"))


# -- the worker: one reader in its own process --------------------------------------------------


def _say(**message: Any) -> None:
    print(json.dumps(message), flush=True)


class _Reader:
    """Per-partition progress of one reader: the next offset and when the record before it
    was handed out (wall time)."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}
        self.last_at: dict[int, float] = {}
        self.count = 0
        self.lock = threading.Lock()

    def see(self, partition: int, offset: int) -> None:
        with self.lock:
            self.next[partition] = offset + 1
            self.last_at[partition] = time.time()
            self.count += 1

    def report(self, key: str) -> None:
        with self.lock:
            _say(**{key: True, "count": self.count,
                    "next": {str(p): n for p, n in self.next.items()},
                    "last_at": {str(p): t for p, t in self.last_at.items()}})


def worker_main() -> None:
    """Orders on stdin: a ``prepare`` JSON line, then ``go``, then ``stop``."""
    order = json.loads(sys.stdin.readline())
    stop = threading.Event()
    reader = _Reader()
    try:
        poll = _prepare(order)
    except Exception as exc:  # reported to the parent, which raises
        _say(error=f"{type(exc).__name__}: {exc}")
        return
    _say(ready=True)
    if sys.stdin.readline().strip() != "go":
        return

    def wait_for_stop() -> None:
        for line in sys.stdin:
            if line.strip() in ("stop", "exit"):
                break
        stop.set()

    threading.Thread(target=wait_for_stop, daemon=True).start()

    def progress() -> None:
        while not stop.wait(PROGRESS_S):
            reader.report("progress")

    threading.Thread(target=progress, daemon=True).start()
    error = None
    try:
        poll(reader, stop)
    except Exception as exc:  # reported to the parent, which raises
        error = f"{type(exc).__name__}: {exc}"
    stop.set()
    if error:
        _say(error=error)
    reader.report("done")


def _prepare(order: dict[str, Any]) -> Any:
    """Connect as ``order`` says; return ``poll(reader, stop)`` that reads until stopped."""
    kind, bootstrap, topic = order["kind"], order["bootstrap"], order["topic"]
    if kind == "plain":
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                                 enable_auto_commit=False, auto_offset_reset="earliest")
        tps = [TopicPartition(topic, p) for p in order["partitions"]]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        consumer.beginning_offsets(tps)  # connected before go

        def poll_plain(reader: _Reader, stop: threading.Event) -> None:
            try:
                while not stop.is_set():
                    for batch in consumer.poll(timeout_ms=200, max_records=500).values():
                        for record in batch:
                            reader.see(record.partition, record.offset)
            finally:
                consumer.close()

        return poll_plain

    from marshal_py import Marshaler

    marshaler = Marshaler(bootstrap, group_id=order["group"], client_id=order["client_id"],
                          heartbeat_interval=HI_S)

    def poll_marshal(reader: _Reader, stop: threading.Event) -> None:
        try:
            consumer = marshaler.consumer([topic], kind, offset_reset="earliest")
            while not stop.is_set():
                for record in consumer.poll(timeout_s=0.2, max_records=500):
                    reader.see(record.partition, record.offset)
                    if kind == "alo":
                        consumer.commit(record)
            consumer.close()
        finally:
            marshaler.close()

    return poll_marshal


# -- the parent ---------------------------------------------------------------------------------


class Worker(WorkerProcess):
    """A reader process; progress reports are kept, not queued."""

    def __init__(self, name: str) -> None:
        self.latest: dict[str, Any] = {}
        super().__init__(name, "bench.suite_overhead")

    def on_message(self, message: dict[str, Any]) -> bool:
        if message.get("progress"):
            self.latest = message
            return True
        return False


def _workers(count: int) -> contextlib.AbstractContextManager[list[Worker]]:
    return started_workers(lambda k: Worker(f"reader-{k}"), count)


@dataclass
class Run:
    seconds: float
    delivered: int
    duplicates: int


def run_python(ctx: BenchContext, kind: str, processes: int, topic: str, ends: dict[int, int],
               records: int) -> Run:
    """One run of ``processes`` readers of ``kind``: go to the last record handed out."""
    tag = ctx.tag()
    with _workers(processes) as workers:
        for k, worker in enumerate(workers):
            worker.send(json.dumps({
                "kind": kind, "bootstrap": ctx.bootstrap, "topic": topic,
                "partitions": [p for p in range(PARTITIONS) if p % processes == k],
                "group": f"bench.overhead.{kind}.{tag}", "client_id": f"reader-{k}"}))
        for worker in workers:
            worker.receive("ready", 60)
        go = time.time()
        for worker in workers:
            worker.send("go")
        timeout_s = 60 + records / 2_000

        def finished() -> bool:
            for worker in workers:
                worker.check_alive()
                if not worker.messages.empty():
                    message = worker.messages.get()
                    raise BenchError(f"{kind} reader {worker.name} stopped early: {message}")
            return all(any(w.latest.get("next", {}).get(str(p)) == end for w in workers)
                       for p, end in ends.items())

        wait_for(f"{processes} {kind} reader(s) to read {records:,} records", finished,
                 timeout_s, 0.05,
                 detail=lambda: f"{sum(w.latest.get('count', 0) for w in workers):,} read")
        for worker in workers:
            worker.send("stop")
        finals = [worker.receive("done", 60) for worker in workers]
    done_at = 0.0
    for p, end in ends.items():
        done_at = max(done_at, max(f["last_at"][str(p)] for f in finals
                                   if f["next"].get(str(p)) == end))
    delivered = sum(f["count"] for f in finals)
    if delivered < records:
        raise BenchError(f"{kind} x {processes}: every partition reached its end but only "
                         f"{delivered:,} of {records:,} records were handed out")
    return Run(done_at - go, delivered, delivered - records)


def _spark_session() -> Any:
    from marshal_py.spark import register
    from marshal_py.spark.session import local_session

    IVY_CACHE.mkdir(parents=True, exist_ok=True)
    spark = local_session(
        "marshal-bench-overhead", master="local[2]",
        **{"spark.jars.packages":
           f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_KAFKA_VERSION}",
           "spark.jars.ivy": str(IVY_CACHE), "spark.jars.ivySettings": str(IVY_SETTINGS)})
    register(spark)
    return spark


def run_spark(ctx: BenchContext, spark: Any, kind: str, topic: str, records: int) -> Run:
    """One Structured Streaming query over ``topic``: start() to its end."""
    name = f"bench.overhead.spark.{kind}.{uuid.uuid4().hex[:8]}"
    reader = spark.readStream
    if kind == "kafka":
        reader = (reader.format("kafka").option("kafka.bootstrap.servers", ctx.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
    else:
        reader = (reader.format("marshal").option("bootstrap.servers", ctx.bootstrap)
                  .option("group", name).option("topics", topic)
                  .option("mode", kind.removeprefix("marshal-"))
                  .option("offset.reset", "earliest").option("heartbeat.interval", str(HI_S)))
    started = time.perf_counter()
    query = (reader.load().writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", f"/tmp/marshal-bench-{name}").start())
    finished = query.awaitTermination(timeout=60 + records / 1_000)
    seconds = time.perf_counter() - started
    if not finished:
        query.stop()
        raise BenchError(f"the Spark {kind} query did not read {records:,} records in "
                         f"{60 + records / 1_000:.0f} s")
    if query.exception() is not None:
        raise BenchError(f"the Spark {kind} query failed: {query.exception()}")
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows < records:
        raise BenchError(f"the Spark {kind} query read {rows:,} of {records:,} records")
    return Run(seconds, rows, rows - records)


def run(ctx: BenchContext) -> SuiteReport:
    records = records_for(ctx.quick)
    topic = ctx.create_topic(f"bench-overhead-{ctx.tag()}", PARTITIONS)
    ctx.produce(topic, records, PARTITIONS)
    ends = {p: records // PARTITIONS + (1 if p < records % PARTITIONS else 0)
            for p in range(PARTITIONS)}
    ends = {p: e for p, e in ends.items() if e}
    python: dict[tuple[str, int], list[Run]] = {(k, n): [] for n in PROCESS_COUNTS
                                                 for k in READERS}
    spark_runs: dict[str, list[Run]] = {k: [] for k in SPARK_READERS}
    ctx.say("starting Spark local[2] (the Kafka connector is fetched on first use)")
    began = time.perf_counter()
    spark = _spark_session()
    spark_start_s = time.perf_counter() - began
    try:
        for i in range(ctx.repeat):
            for n in PROCESS_COUNTS:
                for kind in READERS:
                    ctx.say(f"repetition {i + 1}/{ctx.repeat}: {kind} x {n}")
                    python[(kind, n)].append(run_python(ctx, kind, n, topic, ends, records))
            for kind in SPARK_READERS:
                ctx.say(f"repetition {i + 1}/{ctx.repeat}: Spark {kind}")
                spark_runs[kind].append(run_spark(ctx, spark, kind, topic, records))
    finally:
        spark.stop()
    return _report(ctx, records, python, spark_runs, spark_start_s)


def _rates(runs: list[Run], records: int) -> Measured:
    return Measured([records / r.seconds for r in runs], "records/s")


def _report(ctx: BenchContext, records: int, python: dict[tuple[str, int], list[Run]],
            spark_runs: dict[str, list[Run]], spark_start_s: float) -> SuiteReport:
    report = SuiteReport("overhead", ctx.command)
    rows = []
    for n in PROCESS_COUNTS:
        base = _rates(python[("plain", n)], records)
        for kind in READERS:
            rates = _rates(python[(kind, n)], records)
            dups = [r.duplicates for r in python[(kind, n)]]
            rows.append([f"{n}", LABELS[kind], rates.cell(), "anchor" if kind == "plain"
                         else ratio(rates.median, base.median), f"{max(dups):,}"])
    report.tables.append(Table(
        f"Exclusive consumers, {records:,} records of 100 B over {PARTITIONS} partitions "
        "(records/s, median (range) of "
        f"{ctx.repeat})",
        ["processes", "reader", "records/s", "ours / plain", "duplicates (max)"], rows,
        ["Go to the last record handed out; marshal joining and claiming included, Python "
         "start-up not. Separate processes; 2 cores also run the broker."]))
    base = _rates(spark_runs["kafka"], records)
    spark_rows = []
    for kind in SPARK_READERS:
        rates = _rates(spark_runs[kind], records)
        spark_rows.append([LABELS[kind], rates.cell(),
                           "anchor" if kind == "kafka" else ratio(rates.median, base.median)])
    report.tables.append(Table(
        f"Spark source, the same {records:,} records, local[2], availableNow, noop sink",
        ["reader", "records/s", "ours / format(\"kafka\")"], spark_rows,
        [f"start() to the query's end (one micro-batch plan per trigger); the session "
         f"start-up ({spark_start_s:.0f} s, connector fetch included) is outside. Spark's "
         f"Kafka source is spark-sql-kafka-0-10_2.13:{SPARK_KAFKA_VERSION}."]))
    report.plots.append(Plot(
        "Exclusive consumers: records/s (median)", "bar", "processes", "records/s",
        [str(n) for n in PROCESS_COUNTS],
        {LABELS[k]: [_rates(python[(k, n)], records).median for n in PROCESS_COUNTS]
         for k in READERS}))
    report.plots.append(Plot(
        "Spark sources: records/s (median)", "bar", "source", "records/s",
        [LABELS[k] for k in SPARK_READERS],
        {"records/s": [_rates(spark_runs[k], records).median for k in SPARK_READERS]}))
    report.raw = {"records": records, "spark_start_s": spark_start_s,
                  "python": {f"{k}x{n}": [vars(r) for r in runs]
                             for (k, n), runs in python.items()},
                  "spark": {k: [vars(r) for r in runs] for k, runs in spark_runs.items()}}
    return report


if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    worker_main()
