"""How the Spark audit engine reads the coordination log.

With Spark's Kafka connector (``spark-sql-kafka-0-10``) on the session's classpath, the log is
read in the JVM by Spark's ``kafka`` source, up to the end offsets the driver read before
(a log still being written gives the same records to every stage). Without it, or when
kafka-python settings are given (``--kafka-config``: their names are kafka-python's, which
the JVM client does not take), it is read by the :mod:`~marshal_py.spark.log_source`
``marshal_log`` source in Python workers with kafka-python. Both give the same rows:
``coordination_partition`` int, ``offset`` long, ``timestamp_ms`` long, ``value`` binary.

At 1M records on 2 cores the JVM reader took 8-20 s where ``marshal_log`` took 37-61 s
(kafka-python decodes every record batch in Python).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

#: ``reader`` of :class:`~marshal_py.audit.local.AuditResult`'s extra: which one read.
JVM_READER, PYTHON_READER = "kafka", "marshal_log"


def connector_cached(cache_dir: Path | None = None) -> bool:
    """Is the pinned Kafka connector already in the project's Ivy cache (so a session can be
    started with it without reaching Maven Central)?"""
    from marshal_py.devbroker.jars import default_cache_dir
    from marshal_py.spark.connector import connector_version

    version = connector_version()
    root = (cache_dir or default_cache_dir()) / "ivy" / "cache" / "org.apache.spark"
    return any(root.glob(f"spark-sql-kafka-0-10_*/jars/spark-sql-kafka-0-10_*-{version}.jar"))


def _jvm_log(spark: SparkSession, bootstrap_servers: str, topic: str,
             ranges: Mapping[int, tuple[int, int]],
             split_records: int | None) -> DataFrame | None:
    """The log read by Spark's Kafka source, or None when the session has no connector."""
    from pyspark.sql import functions as F

    starts = {topic: {str(p): start for p, (start, _) in ranges.items()}}
    ends = {topic: {str(p): end for p, (_, end) in ranges.items()}}
    reader = (spark.read.format("kafka")
              .option("kafka.bootstrap.servers", bootstrap_servers)
              .option("kafka.isolation.level", "read_committed")
              .option("assign", json.dumps({topic: sorted(ranges)}))
              .option("startingOffsets", json.dumps(starts))
              .option("endingOffsets", json.dumps(ends)))
    if split_records is not None:
        total = sum(end - start for start, end in ranges.values())
        reader = reader.option("minPartitions",
                               str(max(len(ranges), math.ceil(total / split_records))))
    try:
        raw = reader.load()
    except Exception as exc:
        text = str(exc)
        if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text:
            return None
        raise
    return raw.select(F.col("partition").cast("int").alias("coordination_partition"),
                      F.col("offset").cast("long").alias("offset"),
                      F.unix_millis(F.col("timestamp")).alias("timestamp_ms"),
                      F.col("value"))


def read_log(spark: SparkSession, bootstrap_servers: str, topic: str,
             ranges: Mapping[int, tuple[int, int]], *, timeout_s: float,
             split_records: int | None = None,
             kafka_options: Mapping[str, str] | None = None) -> tuple[DataFrame, str]:
    """The records of ``ranges`` (coordination partition: [start, end) offsets) and the
    reader used (:data:`JVM_READER` or :data:`PYTHON_READER`)."""
    if not kafka_options and ranges:
        raw = _jvm_log(spark, bootstrap_servers, topic, ranges, split_records)
        if raw is not None:
            return raw, JVM_READER
        log.info("spark audit: no Kafka connector on the session; reading the log with "
                 "kafka-python in Python workers (slower)")
    return _python_log(spark, bootstrap_servers, topic, sorted(ranges), timeout_s=timeout_s,
                       split_records=split_records, kafka_options=kafka_options), PYTHON_READER


def _python_log(spark: SparkSession, bootstrap_servers: str, topic: str,
                partitions: Sequence[int], *, timeout_s: float, split_records: int | None,
                kafka_options: Mapping[str, str] | None) -> DataFrame:
    from marshal_py.spark.log_source import MarshalLogDataSource

    spark.dataSource.register(MarshalLogDataSource)
    reader = (spark.read.format("marshal_log")
              .option("bootstrap.servers", bootstrap_servers)
              .option("topic", topic)
              .option("timeout.ms", str(int(timeout_s * 1000) * 2))
              .option("partitions", ",".join(map(str, partitions))))
    if split_records is not None:
        reader = reader.option("split.records", str(split_records))
    for name, value in (kafka_options or {}).items():
        reader = reader.option(f"kafka.{name}", value)
    return reader.load()
