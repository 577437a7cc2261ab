"""The ``marshal`` Spark source on transactional input (real broker, real local Spark).

Under the default ``isolation.level`` (read_committed) a query reads only records of committed
transactions, its batches end at the last stable offset (an open transaction is read by a
later batch once it commits), and the group's committed offset (share mode: the SPSO) ends
past the last marker, so lag is 0; ``read_uncommitted`` reads the aborted records too.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
from pyspark.sql import SparkSession

from marshal_py.client.batch_member import PlannedRange
from marshal_py.errors import ConfigurationError
from marshal_py.spark.options import parse_options
from marshal_py.spark.planning import ReadTask
from tests.integration.test_transactional_input import PLAN, lag_rows
from tests.spark.test_fetch import rows as task_rows
from tests.spark.test_source_integration import Query, all_rows, marshal_spark  # noqa: F401
from tests.txn_input import (
    COMPACT_FAST,
    create_topic,
    present_offsets,
    read_all,
    transactional_producer,
    write_compacted,
    write_transactions,
)

pytestmark = pytest.mark.integration


def world_of(bootstrap: str, name: str) -> SimpleNamespace:
    create_topic(bootstrap, name)
    return SimpleNamespace(bootstrap=bootstrap, topic=name, group=f"{name}.g",
                           ctopic=f"__marshal-{name}")


def offsets(bootstrap: str, topic: str, isolation_level: str) -> list[int]:
    return [r.offset for r in read_all(bootstrap, topic, 0, isolation_level)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("mode", "isolation"), [
    ("alo", None), ("amo", "read_uncommitted"), ("share", None)])
def test_a_query_reads_at_its_isolation_level_and_lag_ends_at_zero(
        marshal_spark: SparkSession, kafka_bootstrap: str,  # noqa: F811
        unique_name: str, tmp_path: Path, mode: str, isolation: str | None) -> None:
    world = world_of(kafka_bootstrap, unique_name)
    written = write_transactions(kafka_bootstrap, world.topic, PLAN)
    level = isolation or "read_committed"
    expected = offsets(kafka_bootstrap, world.topic, level)
    assert len(expected) == len(written.every if isolation else written.committed)
    options = {} if isolation is None else {"isolation.level": isolation}
    Query(marshal_spark, world, tmp_path, 1, mode=mode,  # type: ignore[arg-type]
          options=options).wait()
    rows = all_rows(tmp_path / "out")
    assert sorted(o for _, o, _ in rows) == expected  # each once, nothing aborted (by default)
    assert {count for _, _, count in rows} == {1}
    assert lag_rows(kafka_bootstrap, world.ctopic, world.group) == \
        [(written.end, written.end, 0)]


def test_an_open_transaction_is_read_by_a_later_batch_once_it_commits(
        marshal_spark: SparkSession, kafka_bootstrap: str,  # noqa: F811
        unique_name: str, tmp_path: Path) -> None:
    world = world_of(kafka_bootstrap, unique_name)
    first = write_transactions(kafka_bootstrap, world.topic, [("commit", 4), ("abort", 2)])
    producer = transactional_producer(kafka_bootstrap, f"open-{world.topic}")
    try:
        producer.begin_transaction()
        for i in range(3):
            producer.send(world.topic, f"open-{i}".encode(), partition=0)
        producer.flush()
        Query(marshal_spark, world, tmp_path, 1).wait()  # type: ignore[arg-type]
        assert len(all_rows(tmp_path / "out", 1)) == len(first.committed)
        producer.commit_transaction()
    finally:
        producer.close()
    Query(marshal_spark, world, tmp_path, 2).wait()  # type: ignore[arg-type]
    rows = all_rows(tmp_path / "out")
    assert Counter(o for _, o, _ in rows) == Counter(
        offsets(kafka_bootstrap, world.topic, "read_committed"))
    assert len(all_rows(tmp_path / "out", 2)) == 3
    end = first.end + 4  # three records and the commit marker
    assert lag_rows(kafka_bootstrap, world.ctopic, world.group) == [(end, end, 0)]


def test_a_bad_isolation_level_is_one_clear_error() -> None:
    base = {"bootstrap.servers": "127.0.0.1:9092", "group": "g", "topics": "t"}
    with pytest.raises(ConfigurationError, match=r"option 'isolation\.level' must be "
                                                 r"read_committed or read_uncommitted, not 'x'"):
        parse_options({**base, "isolation.level": "x"})
    assert parse_options(base).isolation_level == "read_committed"
    assert parse_options({**base, "kafka.isolation_level": "read_uncommitted"}) \
        .isolation_level == "read_uncommitted"
    assert parse_options({**base, "kafka.isolation_level": "read_uncommitted",
                          "isolation.level": "read_committed"}).isolation_level == \
        "read_committed"
    assert parse_options({**base, "isolation.level": "READ_UNCOMMITTED"}) \
        .isolation_level == "read_uncommitted"
    # The coordination log's clients get kafka.* as given: checked even when overridden.
    with pytest.raises(ConfigurationError, match=r"option 'kafka\.isolation_level' must be "
                                                 r"read_committed or read_uncommitted, not 'x'"):
        parse_options({**base, "kafka.isolation_level": "x",
                       "isolation.level": "read_committed"})


def test_a_task_ends_at_its_range_end_when_compaction_removed_the_last_offsets(
        kafka_bootstrap: str, unique_name: str) -> None:
    """A planned range whose last offsets hold no record any more: the task ends when its
    consumer's position passes the range end, not after fetch.timeout."""
    create_topic(kafka_bootstrap, unique_name, configs=COMPACT_FAST)
    write_compacted(kafka_bootstrap, unique_name, keys=3, rounds=3)
    present = present_offsets(kafka_bootstrap, unique_name)
    gone = max(set(range(present[-1])) - set(present))  # the newest offset compacted away
    for start, end in ((0, gone + 1), (gone, gone + 1), (0, gone + 2)):
        task = ReadTask((PlannedRange(unique_name, 0, start, end),))
        got = task_rows(task, kafka_bootstrap, timeout_s=5)
        assert [r["offset"] for r in got] == [o for o in present if start <= o < end]
