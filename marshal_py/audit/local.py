"""The local audit engine: one rationalizer over the whole coordination log, in this process.

Reads every partition of the coordination topic from its beginning with :class:`KafkaLog`
(in log order per coordination partition), observes every verdict with
:class:`~marshal_py.audit.observer.AuditObserver`, aggregates in Python and writes the tables as
Parquet (``OUTPUT/<table>/part-00000.parquet``).
"""

from __future__ import annotations

import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marshal_py.audit.observer import (
    COORDINATION,
    SUMMARY,
    TABLES,
    AuditObserver,
    AuditTables,
    ColumnSpec,
    LocalAggregator,
    topic_filter,
)
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLog, KafkaLogConfig
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.placement import coordination_partition
from marshal_py.replay.reading import catch_up
from marshal_py.world.rationalizer import Rationalizer, RationalizerConfig

log = logging.getLogger(__name__)

#: Called with a one-line progress message about once a second during long work.
Progress = Callable[[str], None]


@dataclass
class AuditResult:
    """What an audit run found (the small tables; the others are in ``output``)."""

    engine: str
    records: int
    seconds: float
    summary: list[tuple[Any, ...]]
    coordination: list[tuple[Any, ...]]
    violations: int
    output: Path | None
    extra: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """The result as ``--json`` prints it."""
        names = [n for n, _ in SUMMARY]
        cnames = [n for n, _ in COORDINATION]
        return {
            "engine": self.engine,
            "records": self.records,
            "seconds": round(self.seconds, 3),
            "violations": self.violations,
            "output": None if self.output is None else str(self.output),
            "summary": [dict(zip(names, row, strict=True)) for row in self.summary],
            "coordination": [dict(zip(cnames, row, strict=True)) for row in self.coordination],
        }


def prepare_output(output: Path | str | None) -> Path | None:
    """Check (and create) the output directory before any long work; replace nothing yet."""
    if output is None:
        return None
    path = Path(output)
    if path.exists() and not path.is_dir():
        raise ConfigurationError(f"--output {path} is a file; give a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigurationError(f"cannot create --output directory {path}: {exc.strerror}") \
            from exc
    if not os.access(path, os.W_OK | os.X_OK):
        raise ConfigurationError(f"--output directory {path} is not writable")
    return path


def clear_table_dir(path: Path) -> None:
    """Remove a table directory left by an earlier run (only directories we write)."""
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        raise ConfigurationError(f"{path} exists and is not a directory")


def arrow_schema(spec: ColumnSpec) -> Any:
    """The pyarrow schema of a table spec (every column nullable)."""
    import pyarrow as pa

    types = {"str": pa.string(), "int32": pa.int32(), "int64": pa.int64()}
    return pa.schema([pa.field(name, types[kind], nullable=True) for name, kind in spec])


def write_parquet(path: Path, spec: ColumnSpec, rows: Iterable[tuple[Any, ...]],
                  chunk: int = 500_000) -> int:
    """Write rows as ``path/part-00000.parquet`` in chunks (bounded memory); return count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema(spec)
    clear_table_dir(path)
    path.mkdir(parents=True)
    count = 0
    with pq.ParquetWriter(path / "part-00000.parquet", schema) as writer:
        batch: list[tuple[Any, ...]] = []

        def flush() -> None:
            columns: list[Any] = list(zip(*batch, strict=True)) if batch else [[] for _ in spec]
            arrays = [pa.array(list(col), type=f.type) for col, f in zip(columns, schema,
                                                                         strict=True)]
            writer.write_table(pa.Table.from_arrays(arrays, schema=schema))

        for row in rows:
            batch.append(row)
            if len(batch) >= chunk:
                flush()
                count += len(batch)
                batch = []
        if batch or count == 0:
            flush()
            count += len(batch)
    return count


def write_tables(tables: AuditTables, output: Path) -> dict[str, int]:
    """Write every audit table under ``output``; return rows per table."""
    return {name: write_parquet(output / name, spec, tables.table(name))
            for name, spec in TABLES.items()}


def open_log(bootstrap_servers: str, topic: str, timeout_s: float,
             kafka_config: Mapping[str, Any] | None = None,
             index_topic: str | None = None) -> KafkaLog:
    """The coordination topic, for reading only. CreateTime topics are accepted: an audit
    reads what members with ``allow_create_time`` decided (a warning says so)."""
    config = KafkaLogConfig(bootstrap_servers=bootstrap_servers, topic=topic,
                            create_topic=False, allow_create_time=True, timeout_s=timeout_s,
                            kafka_config=dict(kafka_config or {}),
                            config_source=getattr(kafka_config, "source", None),
                            index_topic=index_topic)
    return KafkaLog(config)


def timestamp_type(kafka_log: KafkaLog) -> str:
    """The coordination topic's ``message.timestamp.type`` (best effort: "unknown")."""
    try:
        from kafka import KafkaAdminClient
        from kafka.admin import ConfigResource, ConfigResourceType

        from marshal_py.log.kafka_config import new_client

        admin = new_client(KafkaAdminClient, **kafka_log.config.client_config(KafkaAdminClient))
        try:
            described = admin.describe_configs([ConfigResource(
                ConfigResourceType.TOPIC, kafka_log.topic,
                configs=["message.timestamp.type"])])
        finally:
            admin.close()
        entry = described.get("topic", {}).get(kafka_log.topic, {})
        return str(entry.get("message.timestamp.type", {}).get("value", "unknown"))
    except Exception:  # only for a warning
        log.debug("could not describe %s", kafka_log.topic, exc_info=True)
        return "unknown"


def run_local_audit(
    bootstrap_servers: str,
    coordination_topic: str,
    *,
    heartbeat_interval_ms: int,
    output: Path | str | None = None,
    group: str | None = None,
    topic: str | None = None,
    timeout_s: float = 15.0,
    kafka_config: Mapping[str, Any] | None = None,
    progress: Progress | None = None,
    group_keys: Mapping[str, tuple[GroupKey, ...]] | None = None,
    index_topic: str | None = None,
) -> AuditResult:
    """Audit the whole coordination log with one rationalizer and write the tables.
    ``group_keys``: the authenticated groups' keys; their unsigned, forged or replayed
    records are counted as ``rejected`` and change nothing, as for their members.
    ``index_topic``: the coordination topic's index (default ``<topic>-index``)."""
    out = prepare_output(output)
    started = time.monotonic()
    with open_log(bootstrap_servers, coordination_topic, timeout_s, kafka_config,
                  index_topic) as klog:
        count = klog.partition_count()
        partitions = ([coordination_partition(topic, count)] if topic is not None
                      else list(range(count)))
        rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=count, heartbeat_interval_ms=heartbeat_interval_ms,
            group_keys=dict(group_keys or {})))
        aggregator = LocalAggregator()
        observer = AuditObserver(rationalizer, aggregator, topic_filter(group, topic))
        rationalizer.observe(observer)
        last = [started]

        def on_progress(done: int, total: int) -> None:
            now = time.monotonic()
            if progress is not None and now - last[0] >= 1.0:
                last[0] = now
                progress(f"read {done:,} of {total:,} coordination records "
                         f"({done / max(now - started, 1e-9):,.0f} records/s)")

        records = catch_up(klog, rationalizer, partitions, fetch_timeout_s=2.0,
                           progress=on_progress)
        observer.finish()
    tables = aggregator.tables()
    if out is not None:
        write_tables(tables, out)
    else:
        for _ in tables.share_history:  # consume the generator (nothing to write)
            pass
    seconds = time.monotonic() - started
    log.info("local audit: %d records in %.1f s", records, seconds)
    log.debug("local audit: %d records read", records)
    return AuditResult("local", aggregator.records, seconds, list(tables.summary),
                       list(tables.coordination), len(tables.violations), out)
