"""Suite ``overhead``: what coordinating through ``__marshal`` costs an exclusive consumer.

The data: N records of 100 bytes over 12 partitions (N = 1,000,000; ``--quick`` 5,000),
produced once. Every reader reads all of it from the beginning, ``ctx.repeat`` times,
interleaved (per repetition: the 11 Python readers with 1 process, the 11 with 3 processes,
then the Spark readers; ``--quick``, a smoke run: the Python readers with 2 processes once,
the Spark readers on a local session only and without their warm-ups, which only steady the
figures):

* **Python consumers** — separate OS processes (``python -m bench.suite_overhead --worker``),
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
import importlib.util
import json
import os
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from bench import spark_rows
from bench.harness import BenchContext, BenchError, amo_takeovers, wait_for
from bench.report import Measured, Plot, SuiteReport, Table, ratio
from bench.worker_process import WorkerProcess
from bench.worker_process import worker_pool as started_workers

PARTITIONS = 12
HI_S = 1.0
PROGRESS_S = 0.2
PROCESS_COUNTS = (1, 3)
#: ``--quick`` (a smoke run of every reader): one shape, two processes sharing the partitions.
QUICK_PROCESS_COUNTS = (2,)
#: An at-most-once run whose readers handed nothing out for this long, with partitions short
#: of their end, asks the coordination log whether takeovers explain it (see run_python).
AMO_STALL_S = 3 * HI_S
#: ``--quick``: the Spark readers on a local session only (a standalone cluster's start is a
#: minute of a 2-core machine); ``BENCH_SPARK_MASTERS`` still chooses.
QUICK_MASTERS = "local"
#: What every poll-style reader asks for per call (kafka-python's poll, ours, consume).
POLL_TIMEOUT_S = 0.2
POLL_RECORDS = 500
#: librdkafka settings our confluent fetcher sets (marshal_py.client.confluent_fetcher)
#: that change how fast it reads; the ``ck`` anchor gets them too.
CK_TUNING: dict[str, Any] = {"fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 100,
                             "isolation.level": "read_uncommitted"}
CONFLUENT_MISSING = ("confluent-kafka, which is not installed: "
                     "pip install 'marshal_py[librdkafka]'")


@dataclass(frozen=True)
class ReaderKind:
    """One way of reading: which client fetches, ours or plain, and the reading loop."""

    name: str
    label: str
    client: Literal["kafka-python", "confluent"]
    mode: Literal["alo", "amo"] | None
    """None: a plain consumer (an anchor); else a Marshaler consumer in this mode."""
    loop: Literal["iter", "poll", "batch"]
    """``iter``: iteration; ``poll``: poll, ALO commits record by record; ``batch``: poll,
    ``commit_batch`` of what it returned."""
    anchor: str | None = None
    """The plain reader ours is compared with (None: this is an anchor)."""


READERS: tuple[ReaderKind, ...] = (
    ReaderKind("kp-iter", "kafka-python, manual assignment, for record in consumer",
               "kafka-python", None, "iter"),
    ReaderKind("alo-iter", "marshal ALO, iteration, commit(record) each",
               "kafka-python", "alo", "iter", "kp-iter"),
    ReaderKind("kp-poll", "kafka-python, manual assignment, poll(200 ms, 500)",
               "kafka-python", None, "poll"),
    ReaderKind("alo-poll", "marshal ALO, poll() + commit(record) each",
               "kafka-python", "alo", "poll", "kp-poll"),
    ReaderKind("alo-batch", "marshal ALO, poll() + commit_batch(records)",
               "kafka-python", "alo", "batch", "kp-poll"),
    ReaderKind("amo-poll", "marshal AMO, poll()", "kafka-python", "amo", "poll", "kp-poll"),
    ReaderKind("amo-iter", "marshal AMO, iteration", "kafka-python", "amo", "iter", "kp-iter"),
    ReaderKind("ck", "confluent-kafka, manual assignment, consume(500)",
               "confluent", None, "poll"),
    ReaderKind("ck-alo-poll", "marshal ALO, confluent fetcher, poll() + commit(record) each",
               "confluent", "alo", "poll", "ck"),
    ReaderKind("ck-alo-batch", "marshal ALO, confluent fetcher, poll() + commit_batch(records)",
               "confluent", "alo", "batch", "ck"),
    ReaderKind("ck-amo-poll", "marshal AMO, confluent fetcher, poll()",
               "confluent", "amo", "poll", "ck"),
)
KINDS = {kind.name: kind for kind in READERS}


def readers_wanted() -> tuple[ReaderKind, ...]:
    """The Python readers to run: ``BENCH_OVERHEAD_READERS`` (names, comma-separated; their
    anchors come along), else all. A subset writes ``overhead-readers`` results, so the full
    suite's stay as they are."""
    names = [n.strip() for n in os.environ.get("BENCH_OVERHEAD_READERS", "").split(",")
             if n.strip()]
    if not names:
        return READERS
    unknown = [n for n in names if n not in KINDS]
    if unknown:
        raise BenchError(f"BENCH_OVERHEAD_READERS: no reader {', '.join(unknown)}; the "
                         f"readers are {', '.join(KINDS)}")
    wanted = set(names) | {KINDS[n].anchor for n in names if KINDS[n].anchor}
    return tuple(k for k in READERS if k.name in wanted)
def process_counts(quick: bool) -> tuple[int, ...]:
    return QUICK_PROCESS_COUNTS if quick else PROCESS_COUNTS


def records_for(quick: bool) -> int:
    if quick:
        return 5_000
    return int(os.environ.get("BENCH_OVERHEAD_RECORDS", "1000000"))


def confluent_missing() -> bool:
    """True when confluent-kafka cannot be imported (the ``ck`` readers need it)."""
    return importlib.util.find_spec("confluent_kafka") is None


# -- the worker: one reader in its own process --------------------------------------------------


def _say(**message: Any) -> None:
    print(json.dumps(message), flush=True)


def _one_line(exc: BaseException) -> str:
    text = str(exc) if isinstance(exc, BenchError) else f"{type(exc).__name__}: {exc}"
    return " ".join(text.split())


class _Reader:
    """Per-partition progress of one reader: the next offset after the highest one handed out,
    and when a record reaching it was last handed out (wall time). A record handed out again
    below it (a lease lapsed and renewed, rewound to the committed offset) does not move
    ``next`` back, so a partition once read to its end stays there."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}
        self.last_at: dict[int, float] = {}
        #: Records handed out per partition (at most once: every offset once at most).
        self.counts: dict[int, int] = {}
        self.first_at: float | None = None
        self.count = 0
        self.lock = threading.Lock()

    def see(self, partition: int, offset: int) -> None:
        with self.lock:
            if self.first_at is None:
                self.first_at = time.time()
            if offset >= self.next.get(partition, 0):
                self.next[partition] = offset + 1
                self.last_at[partition] = time.time()
            self.counts[partition] = self.counts.get(partition, 0) + 1
            self.count += 1

    def report(self, key: str) -> None:
        with self.lock:
            _say(**{key: True, "count": self.count, "first_at": self.first_at,
                    "next": {str(p): n for p, n in self.next.items()},
                    "counts": {str(p): n for p, n in self.counts.items()},
                    "last_at": {str(p): t for p, t in self.last_at.items()}})


def worker_main() -> None:
    """Orders on stdin: a ``prepare`` JSON line, then ``go``, then ``stop``."""
    order = json.loads(sys.stdin.readline())
    stop = threading.Event()
    reader = _Reader()
    try:
        poll = _prepare(order)
    except Exception as exc:  # reported to the parent, which raises
        _say(error=_one_line(exc))
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
        error = _one_line(exc)
    stop.set()
    if error:
        _say(error=error)
    reader.report("done")


def _confluent_kafka(reader: str) -> Any:
    try:
        import confluent_kafka
    except ImportError:
        raise BenchError(f"reader {reader} needs {CONFLUENT_MISSING}") from None
    return confluent_kafka


def _prepare(order: dict[str, Any]) -> Any:
    """Connect as ``order`` says; return ``read(reader, stop)`` that reads until stopped."""
    kind = KINDS.get(order.get("kind", ""))
    if kind is None:
        raise BenchError(f"unknown reader kind {order.get('kind')!r}; the kinds are "
                         f"{', '.join(KINDS)}")
    if kind.client == "confluent":
        _confluent_kafka(kind.name)
    if kind.mode is not None:
        return _prepare_marshal(kind, order)
    if kind.client == "confluent":
        return _prepare_confluent(order)
    return _prepare_kafka_python(kind, order)


def _prepare_kafka_python(kind: ReaderKind, order: dict[str, Any]) -> Any:
    from kafka import KafkaConsumer, TopicPartition

    topic = order["topic"]
    # consumer_timeout_ms: iteration ends after 200 ms without a record (then stop is checked)
    extra = {"consumer_timeout_ms": POLL_TIMEOUT_S * 1000} if kind.loop == "iter" else {}
    consumer = KafkaConsumer(bootstrap_servers=order["bootstrap"], group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest", **extra)
    tps = [TopicPartition(topic, p) for p in order["partitions"]]
    consumer.assign(tps)
    consumer.seek_to_beginning()
    consumer.beginning_offsets(tps)  # connected before go

    def iterate(reader: _Reader, stop: threading.Event) -> None:
        see = reader.see
        try:
            while not stop.is_set():
                for record in consumer:
                    see(record.partition, record.offset)
        finally:
            consumer.close()

    def poll(reader: _Reader, stop: threading.Event) -> None:
        see, fetch = reader.see, consumer.poll
        try:
            while not stop.is_set():
                for batch in fetch(timeout_ms=POLL_TIMEOUT_S * 1000,
                                   max_records=POLL_RECORDS).values():
                    for record in batch:
                        see(record.partition, record.offset)
        finally:
            consumer.close()

    return iterate if kind.loop == "iter" else poll


def _prepare_confluent(order: dict[str, Any]) -> Any:
    ck = _confluent_kafka("ck")
    topic = order["topic"]
    consumer = ck.Consumer({"bootstrap.servers": order["bootstrap"],
                            "group.id": f"bench.overhead.ck.{uuid.uuid4().hex[:8]}",
                            "enable.auto.commit": False, **CK_TUNING})
    try:
        consumer.list_topics(topic, timeout=15)  # connected (and the topic known) before go
    except Exception:
        consumer.close()
        raise
    tps = [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in order["partitions"]]

    def consume(reader: _Reader, stop: threading.Event) -> None:
        see, fetch = reader.see, consumer.consume
        try:
            consumer.assign(tps)  # inside the clock: librdkafka fetches from here on
            while not stop.is_set():
                # What is there, else wait for one record (as our fetcher does): consume(500,
                # 0.2) would wait the whole 0.2 s for a batch that cannot fill at the end.
                msgs = fetch(POLL_RECORDS, 0) or fetch(1, POLL_TIMEOUT_S)
                for m in msgs:
                    if m.error() is None:
                        see(m.partition(), m.offset())
        finally:
            consumer.close()

    return consume


def _prepare_marshal(kind: ReaderKind, order: dict[str, Any]) -> Any:
    from marshal_py import Marshaler

    mode = kind.mode
    assert mode is not None
    marshaler = Marshaler(order["bootstrap"], group_id=order["group"],
                          client_id=order["client_id"], heartbeat_interval=HI_S,
                          fetcher=kind.client)
    alo = mode == "alo"

    def read(reader: _Reader, stop: threading.Event) -> None:
        see = reader.see
        try:
            consumer = marshaler.consumer([order["topic"]], mode, offset_reset="earliest")
            try:
                commit, commit_batch, poll = consumer.commit, consumer.commit_batch, consumer.poll
                if kind.loop == "iter":
                    def stop_iteration() -> None:
                        stop.wait()
                        consumer.stop()

                    threading.Thread(target=stop_iteration, daemon=True).start()
                    if alo:
                        for record in consumer:
                            see(record.partition, record.offset)
                            commit(record)
                    else:
                        for record in consumer:
                            see(record.partition, record.offset)
                elif kind.loop == "batch":
                    while not stop.is_set():
                        records = poll(timeout_s=POLL_TIMEOUT_S, max_records=POLL_RECORDS)
                        for record in records:
                            see(record.partition, record.offset)
                        commit_batch(records)
                elif alo:
                    while not stop.is_set():
                        for record in poll(timeout_s=POLL_TIMEOUT_S, max_records=POLL_RECORDS):
                            see(record.partition, record.offset)
                            commit(record)
                else:
                    while not stop.is_set():
                        for record in poll(timeout_s=POLL_TIMEOUT_S, max_records=POLL_RECORDS):
                            see(record.partition, record.offset)
            finally:
                consumer.close()
        finally:
            marshaler.close()

    return read


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
    wall_s: float = 0.0
    """The whole run, process start-up and shut-down included (for estimating run time)."""
    first_s: float = 0.0
    """Go to the first record handed out (joining and claiming, for ours)."""
    batches: int = 0
    """Spark rows: the micro-batches that read records."""
    batch_ms: float = 0.0
    """Spark rows: the median time of a batch after the first (see spark_rows.QueryRun)."""
    lost: int = 0
    """At most once: records never handed out because their owner was starved past 2 HI and
    its claim taken over after it had confirmed them (allowed by at-most-once)."""


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
    return _report(ctx, records, python, spark_runs, readers)


def _rates(runs: list[Run], records: int) -> Measured:
    return Measured([records / r.seconds for r in runs], "records/s")


def _steady_rates(runs: list[Run], records: int) -> Measured:
    """Records/s from the first record handed out to the last (joining left out)."""
    return Measured([records / max(1e-6, r.seconds - r.first_s) for r in runs], "records/s")


def _report(ctx: BenchContext, records: int, python: dict[tuple[str, int], list[Run]],
            spark_runs: dict[str, dict[str, list[Run]]],
            readers: tuple[ReaderKind, ...] = READERS) -> SuiteReport:
    report = SuiteReport("overhead" if readers == READERS else "overhead-readers",
                         ctx.command)
    if python:
        _python_tables(ctx, records, python, report, readers)
    for master, runs in spark_runs.items():
        _spark_table(ctx, records, master, runs, report)
    report.raw = {"records": records,
                  "readers": {k.name: {"label": k.label, "client": k.client, "mode": k.mode,
                                       "loop": k.loop, "anchor": k.anchor} for k in readers},
                  "python": {f"{k}x{n}": [vars(r) for r in runs]
                             for (k, n), runs in python.items()},
                  "spark": {master: {name: [vars(r) for r in done] for name, done in runs.items()}
                            for master, runs in spark_runs.items()}}
    return report


def _python_tables(ctx: BenchContext, records: int, python: dict[tuple[str, int], list[Run]],
                   report: SuiteReport, readers: tuple[ReaderKind, ...]) -> None:
    counts = process_counts(ctx.quick)
    for n in counts:
        rates = {k.name: _rates(python[(k.name, n)], records) for k in readers}
        steady = {k.name: _steady_rates(python[(k.name, n)], records) for k in readers}
        rows = []
        for kind in readers:
            runs = python[(kind.name, n)]
            dups = [r.duplicates for r in runs]
            first = statistics.median(r.first_s for r in runs)
            if kind.anchor is None:
                anchor, versus, steady_versus = "—", "anchor", "anchor"
            else:
                anchor = kind.anchor
                versus = ratio(rates[kind.name].median, rates[kind.anchor].median)
                steady_versus = ratio(steady[kind.name].median, steady[kind.anchor].median)
            rows.append([kind.name, kind.label, rates[kind.name].cell(), anchor, versus,
                         f"{first:.2f}", f"{steady[kind.name].median:,.0f}", steady_versus,
                         f"{max(dups):,}", f"{max(r.lost for r in runs):,}"])
        processes = "1 process" if n == 1 else f"{n} processes"
        report.tables.append(Table(
            f"Exclusive consumers, {processes}, {records:,} records of 100 B over "
            f"{PARTITIONS} partitions (records/s, median (range) of {ctx.repeat})",
            ["reader", "what", "records/s", "anchor", "ours / anchor", "first record (s)",
             "records/s after the first", "ours / anchor after the first", "duplicates (max)",
             "lost to takeovers (max)"],
            rows,
            ["records/s: go to the last record handed out; first record: go to the first "
             "record handed out (median); after the first: from the first record to the "
             "last, joining left out. Marshal joining and claiming (fresh group, "
             f"HI {HI_S:g} s) included, Python start-up not. Separate processes; 2 cores "
             "also run the broker. Anchors: kp-iter (kafka-python iteration) for alo-iter "
             "and amo-iter; kp-poll (kafka-python poll) for alo-poll, alo-batch, amo-poll; "
             "ck (confluent-kafka consume, with the librdkafka settings of our confluent "
             "fetcher) for the ck-* readers, taking what is there or waiting for one message "
             "as our fetcher does. AMO at its defaults (windows of at most 10,000 records "
             "and about 0.1 s). Lost to takeovers: AMO records a member confirmed and then "
             "lost with its claim, starved past 2 HI (the coordination log's audit shows the "
             "takeover); at-most-once allows it, and a record missing without one fails the "
             "run."]))
    for client, title in (("kafka-python", "kafka-python fetching"),
                          ("confluent", "librdkafka (confluent-kafka) fetching")):
        kinds = [k for k in readers if k.client == client]
        if not kinds:
            continue
        report.plots.append(Plot(
            f"Exclusive consumers, {title}: records/s (median)", "bar", "processes",
            "records/s", [str(n) for n in counts],
            {k.name: [_rates(python[(k.name, n)], records).median for n in counts]
             for k in kinds}))


def _spark_table(ctx: BenchContext, records: int, master: str, runs: dict[str, list[Run]],
                 report: SuiteReport) -> None:
    rates = {name: Measured([r.delivered / r.seconds for r in done], "records/s")
             for name, done in runs.items()}
    readers = [r for r in spark_rows.readers_on(master) if r.batch_records is None]
    rows = []
    for reader in readers:
        versus = ("anchor" if reader.anchor is None
                  else ratio(rates[reader.name].median, rates[reader.anchor].median))
        rows.append([reader.label, rates[reader.name].cell(), reader.anchor or "—", versus])
    where = spark_rows.master_label(master)
    only = ("" if master == "local" else " Only the readers marked for the cluster run here "
            "(format(\"kafka\"), format(\"marshal\") ALO, read_stream ALO).")
    report.tables.append(Table(
        f"Spark source, the same {records:,} records, {where}, availableNow, noop sink "
        f"(records/s, median (range) of {ctx.repeat})",
        ["reader", "records/s", "anchor", "ours / anchor"], rows,
        ["start() to the query's end (joining the group, planning and every batch); the "
         "session start-up is outside. "
         + ("A smoke run: no warm-up queries. " if ctx.quick else
            "Every repetition starts with an untimed warm-up query of each source (Spark's "
            "Python workers up), and the readers' order turns by one each repetition. ")
         + "Our executors fetch with librdkafka (option fetcher=auto, "
         "confluent-kafka installed). read_stream rows: from read_stream() (joining the "
         "group) to the end of run(available_now=True), each batch written with "
         "df.write.format(\"noop\"). Keyed records: 10,000 distinct keys. Spark's Kafka "
         f"source is spark-sql-kafka-0-10_2.13:{spark_rows.SPARK_KAFKA_VERSION}.{only}"]))
    report.plots.append(Plot(
        f"Spark sources, {where}: records/s (median)", "bar", "source", "records/s",
        [r.name for r in readers], {"records/s": [rates[r.name].median for r in readers]}))
    small = [r for r in spark_rows.readers_on(master) if r.batch_records is not None]
    if small:
        _small_batch_table(ctx, records, where, small, runs, rates, report)


def _small_batch_table(ctx: BenchContext, records: int, where: str,
                       small: list[spark_rows.SparkReader], runs: dict[str, list[Run]],
                       rates: dict[str, Measured], report: SuiteReport) -> None:
    """The small-batch rows: records/s and the time each micro-batch took."""
    per_batch = {r.name: statistics.median(run.batch_ms for run in runs[r.name]) for r in small}
    rows = []
    for reader in small:
        batches = statistics.median(run.batches for run in runs[reader.name])
        if reader.anchor is None:
            versus, extra = "anchor", "—"
        else:
            versus = ratio(rates[reader.name].median, rates[reader.anchor].median)
            extra = f"{per_batch[reader.name] - per_batch[reader.anchor]:+.0f}"
        rows.append([reader.label, rates[reader.name].cell(), f"{batches:.0f}",
                     f"{per_batch[reader.name]:.0f}", reader.anchor or "—", versus, extra])
    small_records = spark_rows.records_of(small[0], records, ctx.quick)
    report.tables.append(Table(
        f"Spark, small batches: {small_records:,} records in batches of at most "
        f"{spark_rows.SMALL_BATCH:,}, {where}, availableNow, noop sink (median of "
        f"{ctx.repeat})",
        ["reader", "records/s", "batches", "ms per batch", "anchor", "ours / anchor",
         "ms per batch over the anchor"], rows,
        ["The fixed cost of a micro-batch: every reader limited to "
         f"{spark_rows.SMALL_BATCH:,} records per batch (format(\"kafka\"): "
         "maxOffsetsPerTrigger; ours: maxRecordsPerTrigger), its own topic of "
         f"{small_records:,} records over {PARTITIONS} partitions. records/s: start() or "
         "read_stream() to the end, joining included. ms per batch: the median time of a "
         "batch after the first (a query's triggerExecution: planning, running and "
         "committing it; read_stream: from one batch's process() call to the next)."]))

if __name__ == "__main__" and sys.argv[1:] == ["--worker"]:
    worker_main()
