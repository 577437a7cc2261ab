"""The Spark audit engine's per-bucket work: rationalize a bucket and aggregate it in place.

Each bucket's records go through a fresh rationalizer observed by the local engine's
:class:`~marshal_py.audit.observer.AuditObserver` and aggregated by its
:class:`~marshal_py.audit.observer.LocalAggregator`, in the Python worker that rationalized
them. A bucket holds every placed record of its partitions (or of its whole (group, topic)),
so the rows it gives of ``ownership``, ``partitions``, ``amo_ranges`` and ``violations`` are
final; ``share_history`` leaves as runs of offsets (the JVM expands them to one row per
offset while writing); ``summary`` and ``coordination`` leave as partial counts that add up
(:func:`~marshal_py.audit.observer.merge_summaries`,
:func:`~marshal_py.audit.observer.merge_coordination`), merged on the driver.

This replaced moving one observation row per record into the JVM and aggregating there
(several shuffles, share history exploded to one row per offset before grouping): the
workers now hand the JVM about one row per table row, not one per record.

Pure Python and pyarrow (no Spark): the functions here run in Spark's Python workers.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from marshal_py.audit.observer import (
    TABLES,
    AuditObserver,
    ColumnSpec,
    LocalAggregator,
    topic_filter,
)
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world.rationalizer import Rationalizer, RationalizerConfig

#: The tables a bucket gives row by row (final rows).
FINAL_TABLES = ("ownership", "partitions", "amo_ranges", "violations")
#: ``share_history`` as runs: the table's columns with ``offset`` replaced by first/last.
SHARE_RUNS: ColumnSpec = (
    ("group", "str"), ("topic", "str"), ("partition", "int32"), ("first", "int64"),
    ("last", "int64"), ("acquisitions", "int64"), ("accepts", "int64"), ("releases", "int64"),
    ("rejects", "int64"), ("last_delivery_count", "int64"), ("final_state", "str"),
)
SHARE_RUNS_TABLE = "share_runs"
#: One row per bucket: its summary and coordination counts as JSON.
PARTIAL_TABLE = "partial"


def _bucket_columns() -> ColumnSpec:
    columns: dict[str, str] = {"table": "str"}
    for spec in (*(TABLES[name] for name in FINAL_TABLES), SHARE_RUNS,
                 (("partial", "str"),)):
        for name, kind in spec:
            if columns.setdefault(name, kind) != kind:  # pragma: no cover - a spec mistake
                raise AssertionError(f"column {name} has two types")
    return tuple(columns.items())


#: The schema of what a bucket gives: the column ``table`` says which table a row is of;
#: the other tables' columns are null.
BUCKET_COLUMNS: ColumnSpec = _bucket_columns()


def arrow_schema(spec: ColumnSpec) -> Any:
    """The pyarrow schema of a column spec."""
    import pyarrow as pa

    types = {"str": pa.string(), "int32": pa.int32(), "int64": pa.int64()}
    return pa.schema([(name, types[kind]) for name, kind in spec])


def _arrow_table(parts: Mapping[str, tuple[ColumnSpec, list[tuple[Any, ...]]]]) -> Any:
    """The rows of every table in the :data:`BUCKET_COLUMNS` layout."""
    import pyarrow as pa

    schema = arrow_schema(BUCKET_COLUMNS)
    tables = []
    for table, (spec, rows) in parts.items():
        if not rows:
            continue
        names = [name for name, _ in spec]
        columns = dict(zip(names, zip(*rows, strict=True), strict=True))
        count = len(rows)
        arrays = []
        for f in schema:
            if f.name == "table":
                arrays.append(pa.array([table] * count, type=f.type))
            elif f.name in columns:
                arrays.append(pa.array(columns[f.name], type=f.type))
            else:
                arrays.append(pa.nulls(count, type=f.type))
        tables.append(pa.Table.from_arrays(arrays, schema=schema))
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def audit_bucket(partition_count: int, heartbeat_interval_ms: int,
                 group: str | None = None, topic: str | None = None,
                 group_intervals: dict[str, int] | None = None,
                 group_keys: Mapping[str, tuple[GroupKey, ...]] | None = None,
                 ) -> Callable[[Any], Any]:
    """applyInArrow function: one bucket's records (an Arrow table with
    ``coordination_partition``, ``offset``, ``timestamp_ms``, ``value``) through a fresh
    rationalizer (checking the signatures of the groups of ``group_keys``, as their members
    do), aggregated; returns its rows in the :data:`BUCKET_COLUMNS` layout."""
    keys = dict(group_keys or {})
    intervals = dict(group_intervals or {})

    def run(table: Any) -> Any:
        table = table.sort_by([("coordination_partition", "ascending"),
                               ("offset", "ascending")])
        rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=partition_count,
            heartbeat_interval_ms=heartbeat_interval_ms,
            group_heartbeat_intervals=intervals, group_keys=keys))
        aggregator = LocalAggregator()
        observer = AuditObserver(rationalizer, aggregator, topic_filter(group, topic))
        rationalizer.observe(observer)
        rationalizer.apply_all(map(
            CoordinationRecord, table.column("coordination_partition").to_pylist(),
            table.column("offset").to_pylist(), table.column("timestamp_ms").to_pylist(),
            table.column("value").to_pylist()))
        observer.finish()
        tables = aggregator.tables()
        parts: dict[str, tuple[ColumnSpec, list[tuple[Any, ...]]]] = {
            name: (TABLES[name], list(tables.table(name))) for name in FINAL_TABLES}
        parts[SHARE_RUNS_TABLE] = (SHARE_RUNS, [
            (key.group, key.topic, key.partition, first, last, stats.acquisitions,
             stats.accepts, stats.releases, stats.rejects, stats.grants_in_epoch, state)
            for key, first, last, stats, state in aggregator.share_runs()])
        partial = json.dumps({"summary": aggregator.topic_partials(),
                              "coordination": aggregator.coordination_partials()})
        parts[PARTIAL_TABLE] = ((("partial", "str"),), [(partial,)])
        return _arrow_table(parts)

    return run


def merge_partials(texts: list[str]) -> tuple[list[tuple[object, ...]],
                                             list[tuple[object, ...]]]:
    """The ``summary`` and ``coordination`` rows from every bucket's partial counts."""
    from marshal_py.audit.observer import merge_coordination, merge_summaries

    summaries: list[Any] = []
    coordination: list[Any] = []
    for text in texts:
        partial = json.loads(text)
        summaries.extend(partial["summary"])
        coordination.extend(partial["coordination"])
    return merge_summaries(summaries), merge_coordination(coordination)
