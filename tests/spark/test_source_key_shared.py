"""Key-shared mode of the ``marshal`` Spark source on the real broker and real (local[2])
Spark: per-key order across the tasks and batches of a query, keys split with a Python
member of the group, and a restart from the checkpoint that loses nothing.

The queries and their output files are those of :mod:`tests.spark.test_source_integration`
(one JSON file per run and batch: [partition, offset, delivery count] per row, in the order
``collect()`` returned them: task by task, each task's rows in the order it read them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from tests.integration.consumer_support import TP, Cluster, wait_for
from tests.spark.test_source_integration import (
    Query,
    all_rows,
    batches,
    fail_then_restart,
    marshal_spark,
    offsets_of,
)

pytestmark = pytest.mark.integration

__all__ = ["marshal_spark"]  # a fixture, imported to be used here

KEYS = 40
PARTITIONS = 2


@pytest.fixture
def keyed(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=PARTITIONS)
    try:
        yield c
    finally:
        c.close()


def send_keyed(world: Cluster, per_partition: int, first: int = 0) -> dict[TP, bytes]:
    """Produce ``per_partition`` records to every partition, keys cycling through
    :data:`KEYS` keys; (partition, offset) -> key."""
    keys: dict[TP, bytes] = {}
    for partition in range(world.partitions):
        records = [(f"k{(first + i) % KEYS}".encode(), f"v{first + i}".encode())
                   for i in range(per_partition)]
        offsets = world.producer.send_raw(records, partition)
        keys.update({(partition, o): k for o, (k, _) in zip(offsets, records, strict=True)})
    return keys


def per_key_order_kept(rows: list[TP], keys: dict[TP, bytes]) -> bool:
    """True when, in the order given, every (partition, key)'s offsets increase."""
    last: dict[tuple[int, bytes], int] = {}
    for partition, offset in rows:
        key = (partition, keys[(partition, offset)])
        if offset <= last.get(key, -1):
            return False
        last[key] = offset
    return True


def test_key_shared_query_keeps_per_key_order_across_tasks_and_batches(
        marshal_spark: SparkSession, keyed: Cluster, tmp_path: Path) -> None:
    keys = send_keyed(keyed, 1500)
    # Small tasks: each batch of a partition is cut by key slots into several tasks.
    Query(marshal_spark, keyed, tmp_path, 1, mode="key-shared",
          options={"maxRecordsPerTrigger": "1000", "maxRecordsPerPartition": "200"}).wait()
    out = tmp_path / "out"
    run = batches(out, 1)
    assert len(run) >= 3
    rows = [tp for _, b in sorted(run.items()) for tp in offsets_of(b)]
    assert sorted(rows) == sorted(keys), "every record once"
    assert per_key_order_kept(rows, keys)


def test_key_shared_query_and_a_python_member_split_the_keys(
        marshal_spark: SparkSession, keyed: Cluster, tmp_path: Path) -> None:
    python = keyed.spawn("py1", mode="key-shared")
    python.wait_joined()
    query = Query(marshal_spark, keyed, tmp_path, 1, mode="key-shared", available_now=False)
    out = tmp_path / "out"
    keys: dict[TP, bytes] = {}
    try:
        # The Python member owned every slot; once the query joined, some move to it.
        def query_read_some() -> bool:
            keys.update(send_keyed(keyed, 50, first=len(keys) // PARTITIONS))
            return bool(all_rows(out))

        wait_for(query_read_some, 90, "the query to read records of its own slots",
                 interval=1.0)
        later = send_keyed(keyed, 600, first=len(keys) // PARTITIONS)
        keys.update(later)

        def consumed() -> set[TP]:
            return set(keyed.printed([python])) | set(offsets_of(all_rows(out)))

        wait_for(lambda: set(keys) <= consumed(), 90, "every record consumed", interval=0.2)
    finally:
        query.query.stop()
    spark_rows = [tp for _, b in sorted(batches(out).items()) for tp in offsets_of(b)]
    python_rows = keyed.printed([python])
    assert per_key_order_kept(spark_rows, keys)
    assert per_key_order_kept(python_rows, keys)
    assert {tp for tp in spark_rows if tp in later}, "the query holds key slots"
    assert {tp for tp in python_rows if tp in later}, "the Python member holds key slots"
    # A key moves once, from the Python member to the query, at a committed offset: every
    # record of it the query read comes after every one the Python member read.
    by_python: dict[tuple[int, bytes], int] = {}
    for p, o in python_rows:
        by_python[(p, keys[(p, o)])] = max(by_python.get((p, keys[(p, o)]), -1), o)
    for p, o in spark_rows:
        assert o > by_python.get((p, keys[(p, o)]), -1), (
            f"partition {p} key {keys[(p, o)]!r}: the query read offset {o} before the "
            "Python member was done with the key")


def test_key_shared_restart_from_checkpoint_re_runs_the_interrupted_batch_and_loses_nothing(
        marshal_spark: SparkSession, keyed: Cluster, tmp_path: Path) -> None:
    keys = send_keyed(keyed, 1500)
    interrupted = fail_then_restart(marshal_spark, keyed, tmp_path, "key-shared")
    out = tmp_path / "out"
    assert sorted(batches(out, 1)) == [(1, 0), (1, 1)]
    planned = {(r.partition, o) for r in interrupted.ranges for o in range(r.start, r.end)}
    assert planned, "the interrupted batch planned records"
    assert all(r.slots is not None for r in interrupted.ranges)
    rerun = set(offsets_of(batches(out, 2)[(2, 2)]))
    assert planned <= rerun, "the re-run batch reads what the interrupted one had planned"
    everything = Counter(offsets_of(all_rows(out)))
    assert set(everything) == set(keys), "records lost"
    assert max(everything.values()) == 1, "nothing needs re-reading after a clean hand-over"
    second = [tp for _, b in sorted(batches(out, 2).items()) for tp in offsets_of(b)]
    assert per_key_order_kept(second, keys)
