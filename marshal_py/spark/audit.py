"""The Spark audit engine: the coordination log audited in parallel, per rationalizer domain.

1. ``marshal_log`` (:mod:`marshal_py.spark.log_source`) reads the raw records, one task per
   coordination partition (or offset range of one).
2. Each record is decoded once to route it (:func:`marshal_py.admin.audit.route`): its bucket
   is its (group, topic, partition); member heartbeats of a (group, topic) are one bucket;
   every record of a (group, topic) whose log holds a ``ResettingSharePartition`` is one bucket
   (a reset's verdict depends on the liveness of the whole (group, topic)); undecodable
   records are one bucket per coordination partition.
3. ``groupBy(bucket).applyInArrow``: per bucket, its records sorted by (coordination
   partition, offset) go through a fresh :class:`Rationalizer` observed by the same
   :class:`~marshal_py.admin.audit.AuditObserver` as the local engine's, giving observation
   rows (one wide schema, :data:`~marshal_py.admin.audit.WIDE_COLUMNS`).
4. The tables — partition counters, stints, AMO ranges, per-offset share history, summaries
   and every invariant check — are DataFrame operations over those rows, then Parquet.

Why a bucket's own rationalizer gives each record the verdict one rationalizer over the whole
log gives it: see :mod:`marshal_py.admin.audit` and ``tests/property/test_audit_decomposition.py``.
"""

from __future__ import annotations

import logging
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from marshal_py.admin.audit import (
    AMO_RECONFIRMED,
    AMO_REGRESSED,
    GARBAGE,
    OVERLAPPING_OWNERS,
    RESET,
    ROW_KINDS,
    SHARE_ACCEPTED_TWICE,
    TABLES,
    WHOLE_TOPIC,
    WIDE_COLUMNS,
    AuditObserver,
    ColumnSpec,
    RecordRow,
    ShareRangeRow,
    ShareStateRow,
    StintRow,
    topic_filter,
)
from marshal_py.admin.audit_local import AuditResult, Progress, prepare_output
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.messages import ResettingOffsets, ResettingSharePartition
from marshal_py.protocol.placement import coordination_partition
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world.lifecycle import DEFAULT_OFFSETS_RETENTION_MS
from marshal_py.world.rationalizer import Rationalizer, RationalizerConfig

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


def _arrow_schema(spec: ColumnSpec) -> Any:
    import pyarrow as pa

    types = {"str": pa.string(), "int32": pa.int32(), "int64": pa.int64()}
    return pa.schema([(name, types[kind]) for name, kind in spec])


class _WideSink:
    """Collects observation rows per kind; :meth:`table` lays them out in the wide schema."""

    def __init__(self) -> None:
        self.rows: dict[str, list[tuple[Any, ...]]] = {kind: [] for kind in ROW_KINDS}

    def record(self, row: RecordRow) -> None:
        self.rows["record"].append(row)

    def stint(self, row: StintRow) -> None:
        self.rows["stint"].append(row)

    def share_range(self, row: ShareRangeRow) -> None:
        self.rows["share_range"].append(row)

    def share_state(self, row: ShareStateRow) -> None:
        self.rows["share_state"].append(row)

    def table(self) -> Any:
        import pyarrow as pa

        schema = _arrow_schema(WIDE_COLUMNS)
        parts = []
        for kind, rows in self.rows.items():
            if not rows:
                continue
            fields: tuple[str, ...] = ROW_KINDS[kind]._fields  # type: ignore[attr-defined]
            columns = dict(zip(fields, zip(*rows, strict=True), strict=True))
            count = len(rows)
            arrays = []
            for f in schema:
                if f.name == "kind":
                    arrays.append(pa.array([kind] * count, type=f.type))
                elif f.name in columns:
                    arrays.append(pa.array(columns[f.name], type=f.type))
                else:
                    arrays.append(pa.nulls(count, type=f.type))
            parts.append(pa.Table.from_arrays(arrays, schema=schema))
        if not parts:
            return schema.empty_table()
        return pa.concat_tables(parts)


def observe_bucket(partition_count: int, heartbeat_interval_ms: int,
                   group: str | None = None, topic: str | None = None,
                   group_intervals: dict[str, int] | None = None,
                   group_keys: Mapping[str, tuple[GroupKey, ...]] | None = None,
                   ) -> Callable[[Any], Any]:
    """applyInArrow function: one bucket's records through a fresh rationalizer (which
    checks the signatures of the groups of ``group_keys``, as their members do)."""
    keys = dict(group_keys or {})

    def run(table: Any) -> Any:
        table = table.sort_by([("coordination_partition", "ascending"),
                               ("offset", "ascending")])
        rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=partition_count,
            heartbeat_interval_ms=heartbeat_interval_ms,
            group_heartbeat_intervals=dict(group_intervals or {}), group_keys=keys))
        sink = _WideSink()
        observer = AuditObserver(rationalizer, sink, topic_filter(group, topic))
        rationalizer.observe(observer)
        cps = table.column("coordination_partition").to_pylist()
        offsets = table.column("offset").to_pylist()
        stamps = table.column("timestamp_ms").to_pylist()
        values = table.column("value").to_pylist()
        for cp, offset, ts, value in zip(cps, offsets, stamps, values, strict=True):
            rationalizer.apply(CoordinationRecord(cp, offset, ts, value))
        observer.finish()
        return sink.table()

    return run


def routing_columns(value: Any) -> tuple[Any, Any, Any, Any]:
    """(kind, group, topic, partition) of a raw record value, as Spark column expressions.

    The SQL counterpart of :func:`marshal_py.admin.audit.route`, without decoding in Python:
    split on ``/``, take fields 5-7 (group, topic, partition: the same place in every message
    type), unescape them at version 2 and later. For every record that decodes, it gives the
    decoded group, topic and partition (None for types without one) and says ``reset`` for a
    ``ResettingSharePartition``; what it says of records that do not decode does not matter
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
    parts = F.split(value.cast("string"), "/", -1)
    kind_name, version = parts.getItem(0), parts.getItem(1)

    def field(index: int) -> Any:
        raw = parts.getItem(index)
        unescaped = F.regexp_replace(F.regexp_replace(raw, "%2[Ff]", "/"), "%25", "%")
        return F.when(version == "1", raw).otherwise(unescaped)

    known = ((kind_name.isin(with_partition) & (F.size(parts) >= 8))
             | (kind_name.isin(without) & (F.size(parts) >= 7)))
    garbage = value.isNull() | ~known
    kind = (F.when(garbage, F.lit(GARBAGE))
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
        F.max((F.col("r_kind") == RESET).cast("int")).alias("has_reset"),
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


def _tables(obs: DataFrame) -> dict[str, DataFrame]:
    """Every audit table from the observation rows, with DataFrame operations only."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    key = ["group", "topic", "partition"]
    rec = obs.filter(F.col("kind") == "record")
    stints = obs.filter(F.col("kind") == "stint")
    shares = obs.filter(F.col("kind") == "share_range")
    states = obs.filter(F.col("kind") == "share_state")
    v = F.col("verdict")

    def count_if(cond: Any) -> Any:
        return F.sum(F.when(cond, 1).otherwise(0)).cast("long")

    coordination = rec.groupBy("coordination_partition").agg(
        F.count(F.lit(1)).cast("long").alias("records"),
        count_if(v == "malformed").alias("malformed"),
        count_if(v == "unknown_type").alias("unknown_type"),
        count_if(v == "unknown_version").alias("unknown_version"),
        count_if(v == "tombstone").alias("tombstones"),
        count_if(v == "misplaced").alias("misplaced"),
        count_if(v == "duplicate").alias("duplicates"),
        count_if(v == "rejected").alias("rejected"))

    exclusive = rec.filter(F.col("group").isNotNull() & F.col("partition").isNotNull()
                           & (v != "misplaced") & F.col("hi_ms").isNotNull())
    first_amo = F.min(F.when(v == "messages_claimed",
                             F.struct("position", "amo_after"))).getField("amo_after")
    partitions = exclusive.groupBy(*key).agg(
        count_if(v == "claim_won").alias("claims_won"),
        count_if(v == "claim_lost").alias("claims_lost"),
        count_if((v == "claim_won") & (F.col("ended") == "taken_over")).alias("takeovers"),
        count_if(v == "claim_reclaimed").alias("reclaims"),
        count_if(v == "released").alias("releases"),
        count_if(v == "heartbeat").alias("heartbeats"),
        F.max("gap_ms").alias("max_heartbeat_gap_ms"),
        count_if(F.col("gap_ms") > F.col("hi_ms")).alias("gaps_over_hi"),
        first_amo.alias("amo_first_confirmed"),
        F.max(F.struct("position", "amo_after")).getField("amo_after")
        .alias("amo_last_confirmed"))

    ownership = stints.select(*key, "client_id", "instance_id", "start_ms", "end_ms",
                              "last_heartbeat_ms", "end_reason", "first_committed",
                              "last_committed")
    amo_ranges = stints.filter(F.col("batches") > 0).select(
        *key, "client_id", "instance_id", "first_confirmed", "last_confirmed", "batches")

    # -- invariants ------------------------------------------------------------------------
    def str_or_none(column: str) -> Any:
        return F.coalesce(F.col(column).cast("string"), F.lit("None"))

    regressed = exclusive.filter(
        F.col("amo_before").isNotNull()
        & (F.col("amo_after").isNull() | (F.col("amo_after") < F.col("amo_before")))
        & ~F.coalesce((v == "released") & F.col("offset").isNotNull()
                      & (F.col("amo_after") == F.col("offset") - 1), F.lit(False))
    ).select(F.lit(AMO_REGRESSED).alias("invariant"), *key, F.concat(
        F.lit("AMO-confirmed offset fell from "), str_or_none("amo_before"), F.lit(" to "),
        str_or_none("amo_after"), F.lit(" on "), v).alias("detail"),
        F.col("timestamp_ms").alias("at_ms"))
    reconfirmed = exclusive.filter(
        (v == "messages_claimed") & F.col("amo_floor").isNotNull()
        & F.col("offset").isNotNull() & (F.col("offset") <= F.col("amo_floor"))
    ).select(F.lit(AMO_RECONFIRMED).alias("invariant"), *key, F.concat(
        F.col("client_id"), F.lit("/"), F.col("instance_id"), F.lit(" confirmed up to "),
        F.col("offset").cast("string"), F.lit(", at or below "),
        F.col("amo_floor").cast("string"),
        F.lit(" confirmed before its stint began")).alias("detail"),
        F.col("timestamp_ms").alias("at_ms"))
    by_start = Window.partitionBy(*key).orderBy("coordination_partition", "position")
    until = (F.when(F.col("end_reason") == "released", F.col("end_ms"))
             .when(F.col("end_reason") == "open", F.lit(None).cast("long"))
             .otherwise(F.col("last_heartbeat_ms") + F.col("hi_ms")))
    paired = stints.select(
        *key, "client_id", "instance_id", "start_ms", "coordination_partition", "position",
        F.lag("client_id").over(by_start).alias("prev_client"),
        F.lag("instance_id").over(by_start).alias("prev_instance"),
        F.lag(until).over(by_start).alias("prev_until"),
        F.lag(F.lit(1)).over(by_start).alias("has_prev"))
    overlapping = paired.filter(
        F.col("has_prev").isNotNull()
        & (F.col("prev_until").isNull() | (F.col("start_ms") < F.col("prev_until")))
    ).select(F.lit(OVERLAPPING_OWNERS).alias("invariant"), *key, F.concat(
        F.col("client_id"), F.lit("/"), F.col("instance_id"), F.lit(" began while "),
        F.col("prev_client"), F.lit("/"), F.col("prev_instance"),
        F.lit(" could hand out records until "),
        F.coalesce(F.col("prev_until"), F.lit(-1)).cast("string")).alias("detail"),
        F.col("start_ms").alias("at_ms"))
    accepts = shares.filter(F.col("action") == "accept").select(
        *key, "position", "timestamp_ms", "client_id", "instance_id",
        F.explode(F.sequence("first", "last")).alias("offset"))
    nth = F.row_number().over(Window.partitionBy(*key, "offset").orderBy("position"))
    twice = accepts.withColumn("nth", nth).filter(F.col("nth") == 2).select(
        F.lit(SHARE_ACCEPTED_TWICE).alias("invariant"), *key, F.concat(
            F.lit("offset "), F.col("offset").cast("string"), F.lit(" accepted again by "),
            F.col("client_id"), F.lit("/"), F.col("instance_id")).alias("detail"),
        F.col("timestamp_ms").alias("at_ms"))
    violations = regressed.unionByName(reconfirmed).unionByName(overlapping) \
        .unionByName(twice)

    # -- share history ---------------------------------------------------------------------
    exploded = shares.select(*key, "position", "action", "epoch",
                             F.explode(F.sequence("first", "last")).alias("offset"))
    act = F.col("action")
    per_epoch = exploded.groupBy(*key, "offset", "epoch").agg(
        count_if(act == "grant").alias("n"),
        count_if(act == "accept").alias("accepts"),
        count_if(act == "release").alias("releases"),
        count_if(act == "reject").alias("rejects"),
        F.max(F.when(act == "grant", F.col("position"))).alias("lgp"),
        F.max(F.when(act == "accept", F.col("position"))).alias("lap"))
    per_offset = per_epoch.groupBy(*key, "offset").agg(
        F.sum("n").cast("long").alias("acquisitions"),
        F.sum("accepts").cast("long").alias("accepts"),
        F.sum("releases").cast("long").alias("releases"),
        F.sum("rejects").cast("long").alias("rejects"),
        F.max(F.when(F.col("n") > 0, F.struct("epoch", "n"))).getField("n")
        .alias("last_delivery_count"),
        F.max("lgp").alias("last_grant_position"),
        F.max("lap").alias("last_accept_position"))
    bounds = states.groupBy(*key).agg(F.first("spso").alias("spso"),
                                      F.first("speo").alias("speo"))
    in_flight = states.filter(F.col("first").isNotNull()).select(
        *key, "state", F.explode(F.sequence("first", "last")).alias("offset"))
    history = (per_offset.filter(F.col("acquisitions") > 0)
               .join(F.broadcast(bounds), key, "left")
               .join(F.broadcast(in_flight), [*key, "offset"], "left"))
    final_state = (
        F.when(F.col("offset") >= F.col("speo"), F.lit("available"))
        .when(F.col("offset") >= F.col("spso"), F.coalesce(F.col("state"), F.lit("available")))
        .when(F.coalesce(F.col("last_accept_position"), F.lit(-1))
              > F.col("last_grant_position"), F.lit("acknowledged"))
        .otherwise(F.lit("archived")))
    share_history = history.select(
        *key, "offset", "acquisitions", "accepts", "releases", "rejects",
        "last_delivery_count", final_state.alias("final_state"))

    # -- summary ---------------------------------------------------------------------------
    gt = ["group", "topic"]
    named = rec.filter(F.col("group").isNotNull())
    # Two plain aggregations, not countDistinct (which expands every row of the log).
    per_partition = named.groupBy(*gt, "partition").agg(
        F.count(F.lit(1)).cast("long").alias("n"),
        count_if(v != "misplaced").alias("placed"))
    per_topic = per_partition.groupBy(*gt).agg(
        F.sum("n").cast("long").alias("records"),
        count_if(F.col("partition").isNotNull() & (F.col("placed") > 0)).alias("partitions"))
    owners = stints.groupBy(*gt).agg(
        F.countDistinct("client_id", "instance_id").cast("long").alias("owners"),
        count_if(F.col("end_reason") == "taken_over").alias("takeovers"))
    violated = violations.groupBy(*gt).agg(F.count(F.lit(1)).cast("long").alias("violations"))
    summary = (per_topic.join(owners, gt, "left").join(violated, gt, "left").select(
        *gt, "partitions", "records",
        F.coalesce(F.col("owners"), F.lit(0)).cast("long").alias("owners"),
        F.coalesce(F.col("takeovers"), F.lit(0)).cast("long").alias("takeovers"),
        F.coalesce(F.col("violations"), F.lit(0)).cast("long").alias("violations")))

    found = {"ownership": ownership, "partitions": partitions, "amo_ranges": amo_ranges,
             "share_history": share_history, "violations": violations, "summary": summary,
             "coordination": coordination}
    return {name: found[name].select(*(F.col(c).cast("int" if k == "int32" else
                                                     "long" if k == "int64" else "string")
                                       for c, k in spec))
            for name, spec in TABLES.items()}


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
    :func:`~marshal_py.admin.audit_local.run_local_audit`.

    Uses ``spark`` if given, else the active session of this process if there is one (both
    are left running; ``master`` is then not used), else starts a session on ``master`` and
    stops it at the end.
    """
    from marshal_py.admin.audit_local import open_log
    from marshal_py.spark.log_source import MarshalLogDataSource

    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")
    out = prepare_output(output)
    started = time.monotonic()
    # The checks (broker, topic) and the partition count, with the local engine's errors.
    from marshal_py.spark.options import _kafka_value

    typed = {name: _kafka_value(value) for name, value in (kafka_options or {}).items()}
    with open_log(bootstrap_servers, coordination_topic, timeout_s, typed,
                  index_topic) as klog:
        partition_count = klog.partition_count()  # the layout: read no partition past it
    own_session = False
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()  # a notebook's or a caller's: keep it
        if spark is None:
            spark, own_session = _session(master), True
    try:
        spark.dataSource.register(MarshalLogDataSource)
        reader = (spark.read.format("marshal_log")
                  .option("bootstrap.servers", bootstrap_servers)
                  .option("topic", coordination_topic)
                  .option("timeout.ms", str(int(timeout_s * 1000) * 2)))
        chosen = ([coordination_partition(topic, partition_count)] if topic is not None
                  else range(partition_count))
        reader = reader.option("partitions", ",".join(map(str, chosen)))
        if split_records is not None:
            reader = reader.option("split.records", str(split_records))
        for name, value in (kafka_options or {}).items():
            reader = reader.option(f"kafka.{name}", value)
        raw = reader.load()
        buckets, routed = _bucketed(raw)
        observed = (buckets.groupBy("b_group", "b_topic", "b_partition",
                                    "coordination_partition")
                    .applyInArrow(observe_bucket(partition_count, heartbeat_interval_ms,
                                                 group, topic, group_keys=group_keys),
                                  spark_schema(WIDE_COLUMNS)))
        with _StageProgress(spark, progress), _settings(spark, _observe_settings(spark)):
            # Cut the lineage: later queries must not plan (list Kafka) or read the log again.
            obs = observed.localCheckpoint(eager=True)
        routed.unpersist()
        _step(progress, "read, routed and rationalized the log", started)
        with _StageProgress(spark, progress):
            tables = _tables(obs)
            small = {name: tables[name].persist() for name in ("violations", "summary",
                                                                "coordination")}
            tables.update(small)
            if out is not None:
                for name, df in tables.items():
                    df.write.mode("overwrite").parquet(str(out / name))
                    _step(progress, f"wrote {name}", started)
            summary = [tuple(r) for r in tables["summary"].orderBy("group", "topic").collect()]
            coordination = [tuple(r) for r in
                            tables["coordination"].orderBy("coordination_partition").collect()]
            violations = tables["violations"].count()
        for df in small.values():
            df.unpersist()
        obs.unpersist()
        records = sum(int(row[1]) for row in coordination)
    finally:
        if own_session:
            spark.stop()
    seconds = time.monotonic() - started
    log.info("spark audit: %d records in %.1f s", records, seconds)
    return AuditResult("spark", records, seconds, summary, coordination, violations, out)
