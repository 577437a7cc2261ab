"""The Spark rows of the ``overhead`` suite: ``format("marshal")`` against ``format("kafka")``.

Every reader is a Structured Streaming query, ``trigger(availableNow=True)`` and the ``noop``
sink (so only the source is measured), timed from ``start()`` to the query's end. The
readers, and the anchor each is compared with:

* ``kafka``: Spark's own Kafka source (``spark-sql-kafka-0-10``, ``startingOffsets``
  earliest) over the suite's records (no keys); the anchor of ``marshal-alo``,
  ``marshal-amo`` and ``marshal-share``;
* ``marshal-alo``, ``marshal-amo``, ``marshal-share``: ``format("marshal")`` in that mode, a
  fresh group each run (HI 1 s, ``offset.reset`` earliest); share mode with
  ``inflight.limit`` 10,000 (the most; at the default 2,000 a batch holds 24,000 records);
* ``stream-alo``, ``stream-amo``: :func:`marshal_py.spark.range_stream.read_stream` in that
  mode (the driver coordinates, Spark's batch Kafka reader reads the claimed ranges in the
  JVM), a fresh group each run, ``available_now``, every batch written to the ``noop`` sink;
  timed from ``read_stream()`` (joining the group) to the end of ``run()``; anchor ``kafka``;
* ``kafka-keyed``: Spark's Kafka source over the same number of records with keys (10,000
  distinct keys), the anchor of ``marshal-key-shared``;
* ``marshal-key-shared``: ``format("marshal")`` in key-shared mode over the keyed records.

Python workers: Spark stops an idle Python worker after a minute, and starts Python workers
(a fork, then pyspark, pyarrow, pandas and marshal_py imported) when a task needs one. So the
first Python query after a pause pays that start: seconds on two busy cores. Until issue 21
the Spark readers ran in a fixed order after the Python readers' minutes, so ALO (always the
first Python query of its repetition) paid it every time and AMO never: that was the whole
"ALO is slower than AMO" gap. Now every repetition starts with an untimed warm-up (one small
query of each source) and the order of the readers turns by one each repetition.

Small batches (the fixed cost of a micro-batch): ``kafka-small`` (``maxOffsetsPerTrigger``),
``marshal-alo-small`` and ``stream-alo-small`` (``maxRecordsPerTrigger``) read a topic of their
own (:data:`SMALL_RECORDS` records, :data:`SMALL_BATCH` records per batch: a few dozen
batches), so a user sees what each batch costs beyond its records; anchor ``kafka-small``.

``masters`` (``BENCH_SPARK_MASTERS``, default ``local,cluster``): ``local`` (``local[2]``: the
driver and both executor threads in one JVM) and ``cluster`` (a
:class:`~marshal_py.spark.cluster.StandaloneCluster` on 127.0.0.1: a master and 2 workers of 1
core each, one executor JVM per worker). The cluster runs only the readers marked ``cluster``
(``kafka``, ``marshal-alo``, ``stream-alo``): its start and every query cost more there, and
those three answer the question it is for (does the ALO ratio hold with executors in their
own processes). ``BENCH_SPARK_MASTERS=local`` leaves it out.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import BenchContext, BenchError, amo_takeovers

HI_S = 1.0
#: Spark's Kafka source. pyspark 4.3 runs the 4.2 connector (the newest on Maven Central
#: when this was written); BENCH_SPARK_KAFKA_VERSION picks another.
SPARK_KAFKA_VERSION = os.environ.get("BENCH_SPARK_KAFKA_VERSION", "4.2.0")
IVY_SETTINGS = Path(__file__).resolve().parent / "ivysettings.xml"
IVY_CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "marshal_py" / "ivy"
#: The JVM options of a smoke run's Spark driver and executors (``--quick``).
QUICK_JVM = "-XX:TieredStopAtLevel=1"
ROOT = Path(__file__).resolve().parent.parent
#: Records of the warm-up queries.
WARM_UP_RECORDS = 2_000
#: Distinct keys of the keyed records (key-shared mode and its anchor).
KEYS = 10_000
#: Records of the small-batch topic, and the records per batch its readers are limited to.
SMALL_RECORDS = int(os.environ.get("BENCH_SPARK_SMALL_RECORDS", "20000"))
SMALL_BATCH = 1_000
QUICK_SMALL_RECORDS = 3 * SMALL_BATCH


@dataclass(frozen=True)
class SparkReader:
    """One Spark query: which source, mode and records, and its anchor."""

    name: str
    label: str
    source: str
    """``kafka``, ``marshal`` (format("marshal")) or ``range`` (read_stream)."""
    data: str = "plain"
    """Which records: ``plain`` (the suite's), ``keyed`` (with keys) or ``small`` (the
    small-batch topic)."""
    mode: str | None = None
    anchor: str | None = None
    options: dict[str, str] = field(default_factory=dict)
    cluster: bool = False
    """Also run on the standalone cluster."""
    batch_records: int | None = None
    """Records per micro-batch at most (``maxOffsetsPerTrigger`` / ``maxRecordsPerTrigger``);
    None: everything in one batch."""


SPARK_READERS: tuple[SparkReader, ...] = (
    SparkReader("kafka", 'Spark format("kafka")', "kafka", cluster=True),
    SparkReader("marshal-alo", 'Spark format("marshal") ALO', "marshal", mode="alo",
                anchor="kafka", cluster=True),
    SparkReader("marshal-amo", 'Spark format("marshal") AMO', "marshal", mode="amo",
                anchor="kafka"),
    SparkReader("marshal-share", 'Spark format("marshal") share (inflight.limit 10000)',
                "marshal", mode="share", anchor="kafka",
                options={"inflight.limit": "10000"}),
    SparkReader("stream-alo", "read_stream ALO (Spark's Kafka reader)", "range", mode="alo",
                anchor="kafka", cluster=True),
    SparkReader("stream-amo", "read_stream AMO (Spark's Kafka reader)", "range", mode="amo",
                anchor="kafka"),
    SparkReader("kafka-keyed", 'Spark format("kafka"), keyed records', "kafka", data="keyed"),
    SparkReader("marshal-key-shared", 'Spark format("marshal") key-shared, keyed records',
                "marshal", data="keyed", mode="key-shared", anchor="kafka-keyed"),
    SparkReader("kafka-small", f'Spark format("kafka"), batches of {SMALL_BATCH:,}', "kafka",
                data="small", batch_records=SMALL_BATCH),
    SparkReader("marshal-alo-small", f'Spark format("marshal") ALO, batches of {SMALL_BATCH:,}',
                "marshal", data="small", mode="alo", anchor="kafka-small",
                batch_records=SMALL_BATCH),
    SparkReader("stream-alo-small", f"read_stream ALO, batches of {SMALL_BATCH:,}", "range",
                data="small", mode="alo", anchor="kafka-small", batch_records=SMALL_BATCH),
)
READERS_BY_NAME = {r.name: r for r in SPARK_READERS}
MASTERS = ("local", "cluster")


def masters_wanted(default: str | None = None) -> list[str]:
    """``BENCH_SPARK_MASTERS`` (comma-separated: local, cluster; default ``default``, else
    both)."""
    chosen = os.environ.get("BENCH_SPARK_MASTERS", default or "local,cluster")
    wanted = [m.strip() for m in chosen.split(",") if m.strip()]
    unknown = [m for m in wanted if m not in MASTERS]
    if unknown or not wanted:
        raise BenchError(f"BENCH_SPARK_MASTERS names {unknown or 'nothing'}; use local, "
                         "cluster or local,cluster")
    return wanted


def readers_on(master: str) -> list[SparkReader]:
    """The readers run on ``master`` (the cluster runs those marked ``cluster``)."""
    return [r for r in SPARK_READERS if master == "local" or r.cluster]


def small_records(records: int, quick: bool = False) -> int:
    """Records of the small-batch topic when the suite's other topics hold ``records``
    (``--quick``: three batches, enough for a time per batch after the first)."""
    return min(QUICK_SMALL_RECORDS if quick else SMALL_RECORDS, records)


def records_of(reader: SparkReader, records: int, quick: bool = False) -> int:
    """Records ``reader`` reads when the suite's topics hold ``records``."""
    return small_records(records, quick) if reader.data == "small" else records


def master_label(master: str) -> str:
    return ("local[2]" if master == "local"
            else "standalone cluster, 2 workers x 1 core on 127.0.0.1")


@contextlib.contextmanager
def spark_session(ctx: BenchContext, master: str) -> Iterator[Any]:
    """A SparkSession on ``master`` with Spark's Kafka connector and ``format("marshal")``;
    for ``cluster``, the standalone cluster it runs on is started and stopped here."""
    from marshal_py.spark import register
    from marshal_py.spark.cluster import StandaloneCluster
    from marshal_py.spark.session import local_session

    IVY_CACHE.mkdir(parents=True, exist_ok=True)
    conf: dict[str, str | int] = {
        "spark.jars.packages": f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_KAFKA_VERSION}",
        "spark.jars.ivy": str(IVY_CACHE), "spark.jars.ivySettings": str(IVY_SETTINGS)}
    if ctx.quick:
        # A smoke run measures nothing quoted: its short-lived JVMs start quicker and spend
        # less CPU with the quick compiler alone (as the test suite's drivers do).
        conf["spark.driver.extraJavaOptions"] = QUICK_JVM
        conf["spark.executor.extraJavaOptions"] = QUICK_JVM
    with contextlib.ExitStack() as stack:
        if master == "local":
            url = "local[2]"
        else:
            ctx.say("starting a standalone Spark cluster: a master and 2 workers")
            cluster = stack.enter_context(StandaloneCluster(workers=2, cores=1, memory="1g"))
            url = cluster.master_url
            conf.update({"spark.executor.cores": 1, "spark.cores.max": 2,
                         "spark.executor.memory": "768m",
                         "spark.scheduler.minRegisteredResourcesRatio": "1.0",
                         "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
                         "spark.executorEnv.PYTHONPATH": os.pathsep.join(
                             p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)})
        spark = local_session(f"marshal-bench-overhead-{master}", master=url, **conf)
        stack.callback(spark.stop)
        register(spark)
        yield spark


def read(spark: Any, ctx: BenchContext, reader: SparkReader, topic: str,
         options: dict[str, str] | None = None) -> Any:
    """The streaming DataFrame of ``reader`` over ``topic`` (a fresh group for ours, or the
    one of ``options``)."""
    stream = spark.readStream
    if reader.source == "kafka":
        stream = (stream.format("kafka").option("kafka.bootstrap.servers", ctx.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        if reader.batch_records is not None:
            stream = stream.option("maxOffsetsPerTrigger", str(reader.batch_records))
        return stream.load()
    stream = stream.format("marshal")
    for key, value in (options or marshal_options(ctx, reader, topic)).items():
        stream = stream.option(key, value)
    return stream.load()


def marshal_options(ctx: BenchContext, reader: SparkReader, topic: str) -> dict[str, str]:
    """Options of ``reader`` (format("marshal") or read_stream), a fresh group."""
    limit = ({} if reader.batch_records is None
             else {"maxRecordsPerTrigger": str(reader.batch_records)})
    return {"bootstrap.servers": ctx.bootstrap,
            "group": f"bench.overhead.spark.{reader.name}.{uuid.uuid4().hex[:8]}",
            "topics": topic, "mode": str(reader.mode), "offset.reset": "earliest",
            "heartbeat.interval": str(HI_S), **limit, **reader.options}


@dataclass(frozen=True)
class QueryRun:
    """One measured query: seconds, rows read and micro-batches that read rows."""

    seconds: float
    rows: int
    batches: int
    batch_ms: float = 0.0
    """The median time of a batch after the first (0: one batch): a query's
    ``triggerExecution``; for read_stream, from one batch's ``process`` call to the next
    (planning, reading, processing and committing one batch)."""


def run_range_stream(spark: Any, reader: SparkReader, ctx: BenchContext, topic: str,
                     records: int) -> QueryRun:
    """One read_stream, available_now, every batch into the noop sink: seconds from
    joining to the end of its run, offsets read, batches."""
    from marshal_py.spark.range_stream import read_stream

    calls: list[float] = []

    def process(frame: Any, batch_id: int) -> None:
        calls.append(time.perf_counter())
        frame.write.format("noop").mode("overwrite").save()

    started = time.perf_counter()
    with read_stream(spark, marshal_options(ctx, reader, topic), process) as stream:
        batches = stream.run(available_now=True)
        rows = stream.records
    seconds = time.perf_counter() - started
    if rows < records:
        raise BenchError(f"the Spark {reader.name} stream read {rows:,} of {records:,} records")
    cycles = [(b - a) * 1000 for a, b in itertools.pairwise(calls)]
    return QueryRun(seconds, rows, batches, statistics.median(cycles) if cycles else 0.0)


def run_query(spark: Any, ctx: BenchContext, reader: SparkReader, topic: str, records: int
              ) -> QueryRun:
    """One availableNow query into the noop sink: seconds from start() to its end, rows,
    batches. A query that Spark failed (e.g. a Python worker that did not connect back on a
    loaded machine) is a :class:`BenchError` of one line, not Spark's traceback."""
    from pyspark.errors import PySparkException

    try:
        return _run_query(spark, ctx, reader, topic, records)
    except PySparkException as exc:
        lines = str(exc).strip().splitlines()
        raise BenchError(f"the Spark {reader.name} query failed: "
                         f"{lines[0] if lines else type(exc).__name__}") from None


def _run_query(spark: Any, ctx: BenchContext, reader: SparkReader, topic: str, records: int
               ) -> QueryRun:
    if reader.source == "range":
        return run_range_stream(spark, reader, ctx, topic, records)
    checkpoint = tempfile.mkdtemp(prefix=f"marshal-bench-{reader.name}-")
    try:
        return _run_checkpointed(spark, ctx, reader, topic, records, checkpoint)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)  # the query's: nothing reads it again


def _run_checkpointed(spark: Any, ctx: BenchContext, reader: SparkReader, topic: str,
                      records: int, checkpoint: str) -> QueryRun:
    limit_s = 60 + records / 1_000
    started = time.perf_counter()
    options = None if reader.source == "kafka" else marshal_options(ctx, reader, topic)
    query = (read(spark, ctx, reader, topic, options).writeStream.format("noop")
             .trigger(availableNow=True).option("checkpointLocation", checkpoint).start())
    finished = query.awaitTermination(timeout=limit_s)
    seconds = time.perf_counter() - started
    if not finished:
        query.stop()
        raise BenchError(f"the Spark {reader.name} query did not read {records:,} records in "
                         f"{limit_s:.0f} s")
    if query.exception() is not None:
        raise BenchError(f"the Spark {reader.name} query failed: {query.exception()}")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    if rows < records:
        if reader.mode != "amo" or options is None:
            raise BenchError(f"the Spark {reader.name} query read {rows:,} of {records:,} "
                             "records")
        _lost_to_takeovers(ctx, reader, options["group"], topic, records - rows)
    later = [p["durationMs"]["triggerExecution"] for p in progress[1:]]
    return QueryRun(seconds, rows, len(progress), statistics.median(later) if later else 0.0)


def _lost_to_takeovers(ctx: BenchContext, reader: SparkReader, group: str, topic: str,
                       missing: int) -> None:
    """An at-most-once query that read fewer records than there are: allowed only where the
    coordination log shows a partition taken over (the source's member starved past 2 HI on
    a loaded machine loses its claim and the window it had confirmed); else BenchError.
    Spark's noop sink gives no per-partition counts, so the check is per query, not per
    partition as for the Python rows."""
    taken = sorted(p for p, seen in amo_takeovers(ctx.bootstrap, group, topic,
                                                   int(HI_S * 1000)).items()
                   if seen.takeovers > 0)
    if not taken:
        raise BenchError(f"the Spark {reader.name} query missed {missing:,} records and the "
                         "log shows no takeover")
    ctx.say(f"  {missing:,} records lost to takeovers of partitions {taken} (at most once, "
            "a member starved past 2 HI)")


def warm_up(spark: Any, ctx: BenchContext, topic: str, records: int = WARM_UP_RECORDS) -> None:
    """One untimed query of each source over ``topic`` (``records`` records): with the small
    warm-up topic before every repetition, so that no measured query starts Spark's Python
    workers alone; over the suite's records once per session, so that the JVM's compiler has
    seen both sources' hot paths before the first measured query (on 2 busy cores a session's
    first million-record queries took up to twice as long as its later ones)."""
    for reader in (READERS_BY_NAME["kafka"], READERS_BY_NAME["marshal-alo"]):
        run_query(spark, ctx, reader, topic, records)


def order(readers: list[SparkReader], repetition: int) -> list[SparkReader]:
    """The readers of one repetition: the list turned by one place per repetition."""
    turn = repetition % len(readers)
    return readers[turn:] + readers[:turn]


def keyed(i: int) -> bytes:
    """The key of keyed record ``i``."""
    return f"key-{i % KEYS}".encode()
