"""Suite ``overhead``: what coordinating through ``__marshal`` costs an exclusive consumer.

The data: N records of 100 bytes over 12 partitions (N = 1,000,000; ``--quick`` 5,000),
produced once. Every reader reads all of it from the beginning, ``ctx.repeat`` times,
interleaved (per repetition: the 11 Python readers with 1 process, the 11 with 3 processes,
then the Spark readers; ``--quick``, a smoke run: the Python readers with 2 processes once,
the Spark readers on a local session only and without their warm-ups, which only steady the
figures):

* **Python consumers** — separate OS processes (``python -m bench.overhead_worker --worker``),
  started and connected before the clock starts (Python start-up and imports outside the
  measured time), then told *go* together; the 12 partitions dealt 12 / 4+4+4 to 1 / 3
  processes for the plain consumers, claimed by a fresh marshal group (HI 1 s,
  ``offset_reset="earliest"``) for ours. Every reader does the same per-record work (it
  notes the partition and offset it was handed) and ours add only what the row names. Each
  of ours is compared with the plain consumer that reads the same way through the same
  client library:

  - ``kp-iter`` (anchor of ``alo-iter`` and ``amo-iter``): kafka-python ``KafkaConsumer``
    with manual assignment (``group_id=None``, no commits), ``for record in consumer``;
  - ``alo-iter``: ours, ALO, ``for record in consumer`` and ``commit(record)`` after each;
  - ``kp-poll`` (anchor of ``alo-poll``, ``alo-batch`` and ``amo-poll``): the same
    ``KafkaConsumer``, ``poll(timeout_ms=200, max_records=500)``;
  - ``alo-poll``: ours, ALO, ``poll(timeout_s=0.2, max_records=500)`` and
    ``commit(record)`` for every record;
  - ``alo-batch``: ours, ALO, the same ``poll`` and ``commit_batch(records)`` per poll;
  - ``amo-poll``: ours, AMO, the same ``poll``;
  - ``amo-iter``: ours, AMO, ``for record in consumer``;
  - ``ck`` (anchor of the ``ck-*`` readers): a confluent-kafka ``Consumer``, ``assign`` at
    ``OFFSET_BEGINNING`` (a throwaway ``group.id``, no commits), ``consume(500, 0)`` and,
    when nothing is there, ``consume(1, 0.2)`` (what our fetcher does), skipping error
    messages;
  - ``ck-alo-poll``, ``ck-alo-batch``, ``ck-amo-poll``: ours with ``fetcher="confluent"``
    (librdkafka fetches), read as ``alo-poll``, ``alo-batch``, ``amo-poll``.

  AMO runs at its defaults (windows of at most ``amo_batch_size`` = 10,000 records or
  ``amo_window`` = 0.1 s, confirmed in ``__marshal`` ahead of hand-out). A member starved past
  2 HI on a loaded machine loses its claims, and the records of the windows it had confirmed
  are never handed out: at-most-once allows it, so the run counts them as *lost to
  takeovers* (column of the table) when the audit of ``__marshal`` shows their partition
  taken over (``bench.harness.amo_takeovers``), and fails on a record missing without one.
  The ``ck`` anchor gets the librdkafka settings our confluent fetcher sets
  (``fetch.queue.backoff.ms`` 10, ``fetch.wait.max.ms`` 100, ``isolation.level``
  read_uncommitted; see
  ``marshal_py.client.confluent_fetcher.ConfluentFetcher``), so the ratio is our layer, not
  librdkafka tuning; it assigns its partitions after *go* (librdkafka prefetches from ``assign`` on,
  which before the clock would read ahead outside it), as our fetcher does. (A plain
  ``consume(500, 0.2)`` returns fewer than 500 messages only when the 0.2 s run out, so it
  would hand out a process's last records 0.2 s late.)

  A marshal group is fresh each run, so joining and claiming (and, with 3 members, the
  hand-overs as the others join) are inside the measured time. The clock runs from *go* to
  the wall time the last record of the last partition was handed out; each process reports,
  every 0.2 s, per partition the next offset and the time it handed out the record before it,
  so the end is exact, not the polling tick. Records delivered more than once (hand-overs
  in ALO) are counted as duplicates.
* **Spark** — Structured Streaming queries, ``format("marshal")`` in each mode and
  ``read_stream`` against Spark's own ``format("kafka")`` over the same records, and the same
  readers in batches of 1,000 records (the fixed cost per micro-batch; see
  :mod:`bench.spark_rows`: the readers, their anchors, the warm-up and the order), on
  ``local[2]`` and (``kafka``, ``marshal-alo``, ``stream-alo``) on a standalone cluster of 2
  workers on 127.0.0.1 (``BENCH_SPARK_MASTERS=local`` leaves the cluster out). Spark's
  Kafka connector (``spark-sql-kafka-0-10``) is fetched from Maven Central by Spark's Ivy on
  first use into ``~/.cache/marshal_py/ivy`` — only Maven Central, see ``ivysettings.xml``.

``BENCH_OVERHEAD_ONLY=spark`` (or ``python``) runs only the Spark (or the Python) readers;
``BENCH_OVERHEAD_READERS=ck-alo-poll,ck-alo-batch`` only those Python readers and their
anchors (results in ``overhead-readers.md``).

One table per process count (readers, records/s, ours / its anchor, duplicates), one for
Spark. The ratio is ours / the anchor of the same run and shape. Expect to lose: a plain
consumer does nothing but fetch, while ours also heartbeats, replays ``__marshal`` and (AMO)
confirms windows; with 2 cores, 3 processes plus the broker are CPU-bound. Joining a fresh
group (HI 1 s) takes about a second and is inside the clock, so at small N, and against
``ck`` (which reads 200,000 records in about 0.2 s), the ratio measures mostly that. A full
run's Python part (N = 1M, 3 repetitions: 66 runs) takes about 13 minutes on 2 cores, scaled
from 3.5-minute runs at N = 200,000 (each Python run also has about 0.7 s of process start-up
and shut-down outside the clock); its Spark part (42 measured queries, the cluster's start and
the warm-ups) 13-20 minutes on a shared 2-core machine; ``BENCH_OVERHEAD_RECORDS`` overrides N.
Needs confluent-kafka (``pip install 'marshal_py[librdkafka]'``); without it the suite stops
before producing, with one line saying so.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from typing import Any

from bench import spark_rows
from bench.harness import BenchContext, BenchError, amo_takeovers, wait_for
from bench.overhead_readers import (
    AMO_STALL_S,
    CONFLUENT_MISSING,
    HI_S,
    KINDS,
    PARTITIONS,
    QUICK_MASTERS,
    Run,
    confluent_missing,
    process_counts,
    readers_wanted,
    records_for,
)
from bench.overhead_report import report
from bench.report import SuiteReport
from bench.worker_process import WorkerProcess
from bench.worker_process import worker_pool as started_workers

# -- the parent ---------------------------------------------------------------------------------


class Worker(WorkerProcess):
    """A reader process; progress reports are kept, not queued."""

    def __init__(self, name: str) -> None:
        self.latest: dict[str, Any] = {}
        super().__init__(name, "bench.overhead_worker")

    def on_message(self, message: dict[str, Any]) -> bool:
        if message.get("progress"):
            self.latest = message
            return True
        return False


def _workers(count: int) -> contextlib.AbstractContextManager[list[Worker]]:
    return started_workers(lambda k: Worker(f"reader-{k}"), count)


def run_python(ctx: BenchContext, kind: str, processes: int, topic: str, ends: dict[int, int],
               records: int) -> Run:
    """One run of ``processes`` readers of ``kind``: go to the last record handed out.

    Every record must be handed out, except, for at-most-once readers, records whose
    partition the coordination log shows taken over after they were confirmed: a member
    starved past 2 HI (a loaded machine) loses them, as at-most-once allows; they are counted
    in :attr:`Run.lost`, and a record missing without a takeover is an error.
    """
    tag = ctx.tag()
    group = f"bench.overhead.{kind}.{tag}"
    amo = KINDS[kind].mode == "amo"
    began = time.perf_counter()
    covered: set[int] = set()
    with _workers(processes) as workers:
        for k, worker in enumerate(workers):
            worker.send(json.dumps({
                "kind": kind, "bootstrap": ctx.bootstrap, "topic": topic,
                "partitions": [p for p in range(PARTITIONS) if p % processes == k],
                "group": group, "client_id": f"reader-{k}"}))
        for worker in workers:
            worker.receive("ready", 60)
        go = time.time()
        for worker in workers:
            worker.send("go")
        timeout_s = 60 + records / 2_000
        last_change = [time.monotonic(), -1]

        def at_end(p: int, end: int) -> bool:
            return any(w.latest.get("next", {}).get(str(p)) == end for w in workers)

        def finished() -> bool:
            for worker in workers:
                worker.check_alive()
                if not worker.messages.empty():
                    message = worker.messages.get()
                    raise BenchError(f"{kind} reader {worker.name} stopped early: "
                                     f"{message.get('error', message)}")
            short = [p for p, end in ends.items() if not at_end(p, end) and p not in covered]
            if not short:
                return True
            count = sum(w.latest.get("count", 0) for w in workers)
            if count != last_change[1]:
                last_change[:] = [time.monotonic(), count]
            elif amo and time.monotonic() - last_change[0] >= AMO_STALL_S:
                # Nothing handed out for a while: were the missing tails lost to takeovers?
                log = amo_takeovers(ctx.bootstrap, group, topic, int(HI_S * 1000))
                covered.update(p for p in short if p in log and log[p].covers(ends[p]))
                last_change[0] = time.monotonic()
            return False

        wait_for(f"{processes} {kind} reader(s) to read {records:,} records", finished,
                 timeout_s, 0.05,
                 detail=lambda: f"{sum(w.latest.get('count', 0) for w in workers):,} read")
        for worker in workers:
            worker.send("stop")
        finals = [worker.receive("done", 60) for worker in workers]
    done_at = 0.0
    for p, end in ends.items():
        reached = [f["last_at"][str(p)] for f in finals if f["next"].get(str(p)) == end]
        if not reached and p not in covered:
            raise BenchError(f"{kind} x {processes}: partition {p} was reported read to its "
                             "end, but no reader's final report says so")
        done_at = max([done_at, *reached,
                       *(f["last_at"][str(p)] for f in finals if str(p) in f["last_at"])])
    delivered = sum(f["count"] for f in finals)
    lost = 0
    if delivered < records:
        if not amo:
            raise BenchError(f"{kind} x {processes}: every partition reached its end but only "
                             f"{delivered:,} of {records:,} records were handed out")
        lost = _lost_to_takeovers(ctx, kind, processes, group, topic, ends, finals)
    firsts = [f["first_at"] for f in finals if f.get("first_at") is not None]
    first_s = min(firsts) - go if firsts else 0.0
    return Run(done_at - go, delivered, max(0, delivered + lost - records),
               time.perf_counter() - began, first_s, lost=lost)


def _lost_to_takeovers(ctx: BenchContext, kind: str, processes: int, group: str, topic: str,
                       ends: dict[int, int], finals: list[dict[str, Any]]) -> int:
    """The records an at-most-once run did not hand out, all on partitions the coordination
    log shows taken over (else :class:`BenchError`)."""
    log = amo_takeovers(ctx.bootstrap, group, topic, int(HI_S * 1000))
    lost = 0
    for p, end in ends.items():
        handed = sum(f.get("counts", {}).get(str(p), 0) for f in finals)
        if handed >= end:
            continue
        taken = log.get(p)
        if taken is None or taken.takeovers == 0:
            raise BenchError(f"{kind} x {processes}: {end - handed:,} records of partition "
                             f"{p} were never handed out, and the log shows no takeover of it")
        lost += end - handed
    ctx.say(f"  {lost:,} records lost to takeovers (at most once, a member starved past 2 HI)")
    return lost


def run_spark(ctx: BenchContext, masters: list[str], topics: dict[str, str], warm: str,
              records: int) -> dict[str, dict[str, list[Run]]]:
    """Every Spark reader of each master ``ctx.repeat`` times (see :mod:`bench.spark_rows`)."""
    runs: dict[str, dict[str, list[Run]]] = {}
    for master in masters:
        ctx.say(f"starting Spark on {spark_rows.master_label(master)} (the Kafka connector is "
                "fetched on first use)")
        began = time.perf_counter()
        readers = spark_rows.readers_on(master)
        with spark_rows.spark_session(ctx, master) as spark:
            runs[master] = {r.name: [] for r in readers}
            ctx.say(f"  started in {time.perf_counter() - began:.0f} s"
                    + ("" if ctx.quick else "; warming up (untimed)"))
            if not ctx.quick:  # a smoke run quotes nothing: no warm-ups (4 queries)
                spark_rows.warm_up(spark, ctx, topics["plain"], records)
            for i in range(ctx.repeat):
                if not ctx.quick:
                    spark_rows.warm_up(spark, ctx, warm)
                for reader in spark_rows.order(readers, i):
                    ctx.say(f"repetition {i + 1}/{ctx.repeat}: Spark {master} {reader.name}")
                    began = time.perf_counter()
                    wanted = spark_rows.records_of(reader, records, ctx.quick)
                    done = spark_rows.run_query(spark, ctx, reader, topics[reader.data], wanted)
                    result = Run(done.seconds, done.rows, done.rows - wanted,
                                 time.perf_counter() - began, batches=done.batches,
                                 batch_ms=done.batch_ms)
                    runs[master][reader.name].append(result)
                    ctx.say(f"  {done.rows / done.seconds:,.0f} records/s ({done.seconds:.2f} s, "
                            f"{done.batches} batches)")
    return runs


def run(ctx: BenchContext) -> SuiteReport:
    if confluent_missing():
        raise BenchError(f"the overhead suite's ck readers need {CONFLUENT_MISSING}")
    only = os.environ.get("BENCH_OVERHEAD_ONLY", "").strip().lower()
    if only not in ("", "spark", "python"):
        raise BenchError(f"BENCH_OVERHEAD_ONLY={only!r}: use spark or python (or leave it "
                         "unset for both)")
    masters = spark_rows.masters_wanted(QUICK_MASTERS if ctx.quick else None) \
        if only != "python" else []
    records = records_for(ctx.quick)
    topic = ctx.create_topic(f"bench-overhead-{ctx.tag()}", PARTITIONS)
    ctx.produce(topic, records, PARTITIONS)
    topics = {"plain": topic}
    warm = ""
    if masters:
        topics["keyed"] = ctx.create_topic(f"bench-overhead-keyed-{ctx.tag()}", PARTITIONS)
        ctx.produce(topics["keyed"], records, PARTITIONS, key=spark_rows.keyed)
        topics["small"] = ctx.create_topic(f"bench-overhead-small-{ctx.tag()}", PARTITIONS)
        ctx.produce(topics["small"], spark_rows.small_records(records, ctx.quick), PARTITIONS)
        if not ctx.quick:
            warm = ctx.create_topic(f"bench-overhead-warm-{ctx.tag()}", PARTITIONS)
            ctx.produce(warm, spark_rows.WARM_UP_RECORDS, PARTITIONS, key=spark_rows.keyed)
    ends = {p: records // PARTITIONS + (1 if p < records % PARTITIONS else 0)
            for p in range(PARTITIONS)}
    ends = {p: e for p, e in ends.items() if e}
    python: dict[tuple[str, int], list[Run]] = {}
    readers = readers_wanted()
    for i in range(ctx.repeat if only != "spark" else 0):
        for n in process_counts(ctx.quick):
            for kind in readers:
                ctx.say(f"repetition {i + 1}/{ctx.repeat}: {kind.name} x {n}")
                result = run_python(ctx, kind.name, n, topic, ends, records)
                python.setdefault((kind.name, n), []).append(result)
                ctx.say(f"  {records / result.seconds:,.0f} records/s "
                        f"({result.seconds:.2f} s, run {result.wall_s:.1f} s, "
                        f"{result.duplicates:,} duplicates, {result.lost:,} lost to "
                        "takeovers)")
    spark_runs = run_spark(ctx, masters, topics, warm, records)
    return report(ctx, records, python, spark_runs, readers)
