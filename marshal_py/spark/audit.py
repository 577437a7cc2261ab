"""The Spark audit engine: the coordination log audited in parallel, per rationalizer domain.

1. ``marshal_log`` (:mod:`marshal_py.spark.log_source`) reads the raw records, one task per
   coordination partition (or offset range of one).
2. Each record is decoded once to route it (:func:`marshal_py.audit.observer.route`): its bucket
   is its (group, topic, partition); member heartbeats of a (group, topic) are one bucket;
   every record of a (group, topic) whose log holds a ``ResettingSharePartition`` or a signed
   record is one bucket (a reset's verdict depends on the liveness of the whole (group,
   topic); the replay guard keeps one sequence per sender and pair); undecodable
   records are one bucket per coordination partition.
3. ``groupBy(bucket).applyInArrow``: per bucket, its records sorted by (coordination
   partition, offset) go through a fresh rationalizer observed and aggregated as in the local
   engine, in the Python worker (:mod:`marshal_py.spark.audit_buckets`): the worker returns
   the bucket's table rows, share history as runs of offsets, summary and coordination
   counts as partials.
4. The tables are written as Parquet (share history expanded to one row per offset in the
   JVM); summary and coordination are merged on the driver.

The log is read by Spark's Kafka source when the session has the connector, else by
``marshal_log`` (:mod:`marshal_py.spark.audit_read`).

Why a bucket's own rationalizer gives each record the verdict one rationalizer over the whole
log gives it: see :mod:`marshal_py.audit.observer` and
``tests/property/test_audit_decomposition.py``.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marshal_py.audit.local import AuditResult, Progress, prepare_output
from marshal_py.audit.observer import (
    GARBAGE,
    RESET,
    SIGNED,
    TABLES,
    WHOLE_TOPIC,
    WHOLE_TOPIC_KINDS,
    ColumnSpec,
)
from marshal_py.protocol.auth import SIGNED_TYPE, UNSEQUENCED_VERSION, GroupKey
from marshal_py.protocol.messages import ResettingOffsets, ResettingSharePartition
from marshal_py.protocol.placement import coordination_partition
from marshal_py.spark.audit_buckets import (
    BUCKET_COLUMNS,
    PARTIAL_TABLE,
    SHARE_RUNS_TABLE,
    audit_bucket,
    merge_partials,
)
from marshal_py.spark.audit_read import connector_cached, read_log
from marshal_py.world.lifecycle import DEFAULT_OFFSETS_RETENTION_MS

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: JVM heap of a local-mode audit session (Spark's default, 1g, is small for 10 M records).
DRIVER_MEMORY = "4g"



def spark_schema(spec: ColumnSpec) -> Any:
    """The Spark StructType of a column spec (every column nullable)."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
    )

    types = {"str": StringType(), "int32": IntegerType(), "int64": LongType(),
             "binary": BinaryType()}
    return StructType([StructField(name, types[kind], True) for name, kind in spec])


def routing_columns(value: Any) -> tuple[Any, Any, Any, Any]:
    """(kind, group, topic, partition) of a raw record value, as Spark column expressions.

    The SQL counterpart of :func:`marshal_py.audit.observer.route`, without decoding in Python:
    split on ``/``, take fields 5-7 (group, topic, partition: the same place in every message
    type), unescape them at version 2 and later. For every record that decodes, it gives the
    decoded group, topic and partition (None for types without one), says ``reset`` for a
    ``ResettingSharePartition`` and ``signed`` for a signed record (its own message's fields);
    what it says of records that do not decode does not matter
    (their verdict depends on nothing else). Misplaced records need no kind of their own:
    buckets are per coordination partition, so they never meet their topic's records.
    ``tests/spark/test_audit_engines.py`` checks it against ``route``.
    """
    from pyspark.sql import functions as F

    from marshal_py.protocol.codec import registered_types
    from marshal_py.protocol.messages import PartitionMessage

    types = list(registered_types())
    with_partition = [t.TYPE for t in types if issubclass(t, PartitionMessage)]
    without = [t.TYPE for t in types if not issubclass(t, PartitionMessage)]
    outer = F.split(value.cast("string"), "/", -1)
    # A signed record: Signed/3/key/sequence/mac/<the message's own fields> (version 2:
    # no sequence).
    signed = outer.getItem(0) == SIGNED_TYPE
    inner = F.when(outer.getItem(1) == str(UNSEQUENCED_VERSION), F.lit(5)).otherwise(F.lit(6))
    parts = F.when(signed, F.slice(outer, inner, F.lit(1 << 30))).otherwise(outer)
    kind_name, version = parts.getItem(0), parts.getItem(1)

    def field(index: int) -> Any:
        raw = parts.getItem(index)
        unescaped = F.regexp_replace(F.regexp_replace(raw, "%2[Ff]", "/"), "%25", "%")
        return F.when(version == "1", raw).otherwise(unescaped)

    known = ((kind_name.isin(with_partition) & (F.size(parts) >= 8))
             | (kind_name.isin(without) & (F.size(parts) >= 7)))
    garbage = value.isNull() | ~known
    kind = (F.when(garbage, F.lit(GARBAGE))
            .when(signed, F.lit(SIGNED))
            .when(kind_name.isin(without), F.lit("member"))
            .when(kind_name.isin(ResettingSharePartition.TYPE, ResettingOffsets.TYPE),
                  F.lit(RESET))
            .otherwise(F.lit("partition")))
    group = F.when(garbage, F.lit(None).cast("string")).otherwise(field(5))
    topic = F.when(garbage, F.lit(None).cast("string")).otherwise(field(6))
    partition = F.when(garbage | kind_name.isin(without), F.lit(None).cast("int")) \
        .otherwise(parts.getItem(7).cast("int"))
    return kind, group, topic, partition


def _bucketed(raw: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The records with their bucket columns, and the persisted routed records (unpersist
    them when done)."""
    from pyspark.sql import functions as F

    kind, r_group, r_topic, r_partition = routing_columns(F.col("value"))
    routed = raw.select("*", kind.alias("r_kind"), r_group.alias("r_group"),
                        r_topic.alias("r_topic"), r_partition.alias("r_partition"))
    # No filtering here: a record whose fields look like another group's may not decode, and
    # then it is counted as garbage like every undecodable record; the observer filters.
    routed = routed.persist()
    # needs_whole_topic: a reset in the (group, topic), or records spanning more than the
    # offset retention (offsets may expire, which every partition's records decide).
    pairs = routed.filter(F.col("r_kind") != GARBAGE).groupBy("r_group", "r_topic").agg(
        F.max(F.col("r_kind").isin(*WHOLE_TOPIC_KINDS).cast("int")).alias("has_reset"),
        F.min("timestamp_ms").alias("first_ms"), F.max("timestamp_ms").alias("last_ms"))
    resets = (pairs.filter((F.col("has_reset") == 1)
                           | (F.col("last_ms") - F.col("first_ms") > DEFAULT_OFFSETS_RETENTION_MS))
              .select("r_group", "r_topic").withColumn("r_whole", F.lit(True)))
    joined = routed.join(F.broadcast(resets), ["r_group", "r_topic"], "left")
    bucket_partition = (
        F.when(F.col("r_kind") == GARBAGE, F.lit(None).cast("int"))
        .when((F.col("r_kind") == "member") | F.col("r_whole").isNotNull(), F.lit(WHOLE_TOPIC))
        .otherwise(F.col("r_partition")))
    return joined.select(
        "coordination_partition", "offset", "timestamp_ms", "value",
        F.col("r_group").alias("b_group"), F.col("r_topic").alias("b_topic"),
        bucket_partition.alias("b_partition")), routed


def _table(rows: DataFrame, name: str) -> DataFrame:
    """One final table from the buckets' rows, with its own columns and types."""
    from pyspark.sql import functions as F

    spec = TABLES[name]
    if name == "share_history":
        runs = rows.filter(F.col("table") == SHARE_RUNS_TABLE)
        return runs.select(*(F.explode(F.sequence("first", "last")).alias("offset")
                             if column == "offset" else F.col(column) for column, _ in spec))
    return rows.filter(F.col("table") == name).select(*(column for column, _ in spec))


def _small_table(spark: SparkSession, name: str, rows: list[tuple[object, ...]]) -> DataFrame:
    """A table merged on the driver, as a DataFrame of one partition."""
    return spark.createDataFrame(rows, spark_schema(TABLES[name])).coalesce(1)


class _StageProgress:
    """Reports Spark's progress (tasks done) on a background thread."""

    def __init__(self, spark: SparkSession, progress: Progress | None) -> None:
        self.spark = spark
        self.progress = progress
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="audit-progress")

    def _run(self) -> None:
        tracker = self.spark.sparkContext.statusTracker()
        started = time.monotonic()
        while not self.stop.wait(2.0):
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            if total and self.progress is not None:
                self.progress(f"spark: {done}/{total} tasks of the running stages done "
                              f"({time.monotonic() - started:.0f} s)")

    def __enter__(self) -> _StageProgress:
        if self.progress is not None:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()


def _observe_settings(spark: SparkSession) -> dict[str, str]:
    """Many small shuffle partitions, not coalesced: buckets cost CPU, not bytes, so Spark's
    size-based coalescing would leave cores idle behind one big task."""
    cores = max(1, spark.sparkContext.defaultParallelism)
    return {"spark.sql.shuffle.partitions": str(max(8, 4 * cores)),
            "spark.sql.adaptive.coalescePartitions.enabled": "false"}


@contextmanager
def _settings(spark: SparkSession, settings: dict[str, str]) -> Iterator[None]:
    """Set session settings for a block, then restore them."""
    before: dict[str, str | None] = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _step(progress: Progress | None, what: str, started: float) -> None:
    message = f"spark: {what} ({time.monotonic() - started:.1f} s)"
    log.info(message)
    if progress is not None:
        progress(message)


def _session(master: str) -> SparkSession:
    """A session for the audit: the project's local_session (loopback, quiet, this Python)."""
    try:
        from marshal_py.spark.session import local_session
    except ImportError:  # pragma: no cover - a plain session when the helper is absent
        import os
        import sys

        from pyspark.sql import SparkSession

        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
        return SparkSession.builder.master(master).appName("marshal-audit").getOrCreate()
    conf: dict[str, str] = {}
    if connector_cached():
        # Spark's Kafka source reads the log in the JVM (audit_read): already downloaded,
        # so starting the session needs no network.
        from marshal_py.spark.connector import kafka_connector_conf

        conf.update(kafka_connector_conf())
    if master.startswith("local"):
        # Local mode runs the executors in the driver's JVM: give the log room (it spills).
        conf["spark.driver.memory"] = DRIVER_MEMORY
    return local_session("marshal-audit", master, **conf)


def run_spark_audit(
    bootstrap_servers: str,
    coordination_topic: str,
    *,
    heartbeat_interval_ms: int,
    output: Path | str | None = None,
    group: str | None = None,
    topic: str | None = None,
    master: str = "local[*]",
    timeout_s: float = 15.0,
    kafka_options: dict[str, str] | None = None,
    spark: SparkSession | None = None,
    progress: Progress | None = None,
    split_records: int | None = None,
    group_keys: Mapping[str, tuple[GroupKey, ...]] | None = None,
    index_topic: str | None = None,
) -> AuditResult:
    """Audit the coordination log on Spark and write the tables (``output``, Parquet).
    ``group_keys``, ``index_topic``: as for
    :func:`~marshal_py.audit.local.run_local_audit`.

    Uses ``spark`` if given, else the active session of this process if there is one (both
    are left running; ``master`` is then not used), else starts a session on ``master`` and
    stops it at the end.
    """
    from marshal_py.audit.local import open_log

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    out = prepare_output(output)
    started = time.monotonic()
    # The checks (broker, topic) and the partition count, with the local engine's errors.
    from marshal_py.spark.options import _kafka_value

    typed = {name: _kafka_value(value) for name, value in (kafka_options or {}).items()}
    with open_log(bootstrap_servers, coordination_topic, timeout_s, typed,
                  index_topic) as klog:
        partition_count = klog.partition_count()  # the layout: read no partition past it
        chosen = ([coordination_partition(topic, partition_count)] if topic is not None
                  else range(partition_count))
        # What every stage reads, even if members append meanwhile.
        ranges = {p: (klog.start_position(p), klog.end_position(p)) for p in chosen}
    own_session = False
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()  # a notebook's or a caller's: keep it
        if spark is None:
            spark, own_session = _session(master), True
    try:
        raw, reader = read_log(spark, bootstrap_servers, coordination_topic, ranges,
                               timeout_s=timeout_s, split_records=split_records,
                               kafka_options=kafka_options)
        _step(progress, f"reading the log with the {reader} source", started)
        buckets, routed = _bucketed(raw)
        audited = (buckets.groupBy("b_group", "b_topic", "b_partition",
                                   "coordination_partition")
                   .applyInArrow(audit_bucket(partition_count, heartbeat_interval_ms,
                                              group, topic, group_keys=group_keys),
                                 spark_schema(BUCKET_COLUMNS)))
        with _StageProgress(spark, progress), _settings(spark, _observe_settings(spark)):
            # Cut the lineage: the tables must not plan (list Kafka) or read the log again.
            rows = audited.localCheckpoint(eager=True)
        routed.unpersist()
        _step(progress, "read, routed, rationalized and aggregated the log", started)
        partials = [r[0] for r in rows.filter(rows["table"] == PARTIAL_TABLE)
                    .select("partial").collect()]
        summary, coordination = merge_partials(partials)
        with _StageProgress(spark, progress):
            if out is not None:
                for name in TABLES:
                    if name == "summary":
                        df = _small_table(spark, name, summary)
                    elif name == "coordination":
                        df = _small_table(spark, name, coordination)
                    else:
                        df = _table(rows, name)
                    df.write.mode("overwrite").parquet(str(out / name))
                    _step(progress, f"wrote {name}", started)
        violations = sum(int(row[6]) for row in summary)  # type: ignore[call-overload]
        rows.unpersist()
        records = sum(int(row[1]) for row in coordination)  # type: ignore[call-overload]
    finally:
        if own_session:
            spark.stop()
    seconds = time.monotonic() - started
    log.info("spark audit: %d records in %.1f s", records, seconds)
    return AuditResult("spark", records, seconds, summary, coordination, violations, out,
                       {"reader": reader})
