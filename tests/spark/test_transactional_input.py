"""The ``marshal`` Spark source on transactional input (real broker, real local Spark).

Under the default ``isolation.level`` (read_committed) a query reads only records of committed
transactions, its batches end at the last stable offset (an open transaction is read by a
later batch once it commits), and the group's committed offset (share mode: the SPSO) ends
past the last marker, so lag is 0; ``read_uncommitted`` reads the aborted records too. In
share mode the log accepts exactly the records a batch delivered, and the tasks acknowledge
every other offset of their ranges (markers, aborted or compacted records) as a gap.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from pyspark.sql import SparkSession

from marshal_py.client.batch_member import PlannedRange
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.protocol.ranges import format_ranges, offsets_in, parse_ranges
from marshal_py.spark.fetch import read_task
from marshal_py.spark.options import parse_options
from marshal_py.spark.planning import ReadTask
from tests.integration.consumer_support import tail_json
from tests.integration.test_transactional_input import PLAN, lag_rows
from tests.spark.test_fetch import ARROW, FETCHERS
from tests.spark.test_fetch import rows as task_rows
from tests.spark.test_source_integration import (  # noqa: F401
    Query,
    all_rows,
    marshal_spark,
    share_acks,
)
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


def world_of(bootstrap: str, name: str, configs: dict[str, str] | None = None
             ) -> SimpleNamespace:
    create_topic(bootstrap, name, configs=configs)
    return SimpleNamespace(bootstrap=bootstrap, topic=name, group=f"{name}.g",
                           ctopic=f"__marshal-{name}")


def assert_share_log(world: SimpleNamespace, delivered: list[int], end: int) -> None:
    """The query's acknowledgements: ``accept`` names each delivered offset once, ``gap``
    every other offset up to ``end``; nothing released or rejected; every offset acquired
    once (so no delivery counted twice)."""
    acks = share_acks(world.bootstrap, world.ctopic)
    accepted = Counter(o for _, kind, pairs in acks if kind == "accept" for _, o in pairs)
    gaps = {o for _, kind, pairs in acks if kind == "gap" for _, o in pairs}
    assert {kind for _, kind, _ in acks} == {"accept", "gap"}
    assert sorted(accepted) == sorted(delivered)
    assert max(accepted.values()) == 1
    assert gaps == set(range(end)) - set(delivered)
    acquired: Counter[int] = Counter()
    for row in tail_json(world.bootstrap, world.ctopic):
        fields = str(row.get("record", "")).split("/")
        if fields[0] == "AcquiringRecords":
            acquired.update(offsets_in(parse_ranges(fields[-2])))
    assert set(acquired) == set(range(end))
    assert max(acquired.values()) == 1


def offsets(bootstrap: str, topic: str, isolation_level: str) -> list[int]:
    return [r.offset for r in read_all(bootstrap, topic, 0, isolation_level)]  # type: ignore[attr-defined]


@pytest.mark.parametrize(("mode", "isolation"), [
    ("alo", None), ("amo", "read_uncommitted"), ("share", None),
    ("share", "read_uncommitted")])
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
    if mode == "share":  # markers (and aborted records under read_committed) are gaps
        assert_share_log(world, [o for _, o, _ in rows], written.end)


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


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_a_task_ends_at_its_range_end_when_compaction_removed_the_last_offsets(
        kafka_bootstrap: str, unique_name: str, fetcher: str) -> None:
    """A planned range whose last offsets hold no record any more: the task ends when its
    consumer's position passes the range end, not after fetch.timeout, and reports every
    offset of the range it read past as a gap."""
    create_topic(kafka_bootstrap, unique_name, configs=COMPACT_FAST)
    write_compacted(kafka_bootstrap, unique_name, keys=3, rounds=3)
    present = present_offsets(kafka_bootstrap, unique_name)
    gone = max(set(range(present[-1])) - set(present))  # the newest offset compacted away
    for start, end in ((0, gone + 1), (gone, gone + 1), (0, gone + 2)):
        task = ReadTask((PlannedRange(unique_name, 0, start, end),))
        got = task_rows(task, kafka_bootstrap, timeout_s=5, fetcher=fetcher)
        assert [r["offset"] for r in got] == [o for o in present if start <= o < end]
        delivered, gaps = gaps_of(task, kafka_bootstrap, "read_uncommitted", fetcher)
        assert delivered == [o for o in present if start <= o < end]
        assert set(offsets_in(gaps[(unique_name, 0)])) == set(range(start, end)) - set(present)


def gaps_of(task: ReadTask, bootstrap: str, isolation_level: str = "read_committed",
            fetcher: str = "auto"
            ) -> tuple[list[int], dict[tuple[str, int], list[tuple[int, int]]]]:
    """Offsets a task delivered, and the gaps it reported."""
    reported: list[Any] = []
    config = KafkaLogConfig(bootstrap_servers=bootstrap,
                            kafka_config={"isolation_level": isolation_level})
    batches = list(read_task(task, config, ARROW, timeout_s=10, on_gaps=reported.append,
                             fetcher=fetcher))  # type: ignore[arg-type]
    delivered = [o for b in batches for o in b.column("offset").to_pylist()]
    assert len(reported) <= 1
    return delivered, (reported[0] if reported else {})


@pytest.mark.parametrize("fetcher", FETCHERS)
@pytest.mark.parametrize("isolation", ["read_committed", "read_uncommitted"])
def test_a_task_reports_as_gaps_exactly_the_offsets_of_its_ranges_it_read_past(
        kafka_bootstrap: str, unique_name: str, isolation: str, fetcher: str) -> None:
    """Markers (and aborted records under read_committed) inside the task's ranges are gaps;
    offsets between the ranges are neither delivered nor gaps."""
    create_topic(kafka_bootstrap, unique_name)
    written = write_transactions(kafka_bootstrap, unique_name, PLAN)
    present = set(offsets(kafka_bootstrap, unique_name, isolation))
    ranges = (PlannedRange(unique_name, 0, 0, 7), PlannedRange(unique_name, 0, 9, 20, 2),
              PlannedRange(unique_name, 0, 20, written.end))
    delivered, gaps = gaps_of(ReadTask(ranges), kafka_bootstrap, isolation, fetcher)
    inside = {o for r in ranges for o in range(r.start, r.end)}
    assert delivered == sorted(present & inside)
    assert list(gaps) == [(unique_name, 0)]
    assert set(offsets_in(gaps[(unique_name, 0)])) == inside - present
    # Reported as ranges: ascending, disjoint, and merged (no two adjacent).
    reported = gaps[(unique_name, 0)]
    format_ranges(reported)
    assert all(b + 1 < c for (_, b), (c, _) in pairwise(reported))


@pytest.mark.parametrize("fetcher", FETCHERS)
def test_a_task_without_gaps_reports_none(kafka_bootstrap: str, unique_name: str,
                                          fetcher: str) -> None:
    create_topic(kafka_bootstrap, unique_name)
    written = write_transactions(kafka_bootstrap, unique_name, [("commit", 5)])
    # Offsets 0..4 are the records, 5 the commit marker.
    delivered, gaps = gaps_of(ReadTask((PlannedRange(unique_name, 0, 0, 5),)), kafka_bootstrap,
                              fetcher=fetcher)
    assert (delivered, gaps) == ([0, 1, 2, 3, 4], {})
    _, gaps = gaps_of(ReadTask((PlannedRange(unique_name, 0, 0, written.end),)),
                      kafka_bootstrap, fetcher=fetcher)
    assert gaps == {(unique_name, 0): [(5, 5)]}


def test_share_mode_on_a_compacted_topic_accepts_what_it_read_and_gaps_the_rest(
        marshal_spark: SparkSession, kafka_bootstrap: str,  # noqa: F811
        unique_name: str, tmp_path: Path) -> None:
    world = world_of(kafka_bootstrap, unique_name, configs=COMPACT_FAST)
    latest = write_compacted(kafka_bootstrap, world.topic, keys=5, rounds=4)
    before = present_offsets(kafka_bootstrap, world.topic)
    end = before[-1] + 1
    assert len(before) < end  # the cleaner removed offsets: there are gaps
    Query(marshal_spark, world, tmp_path, 1, mode="share").wait()  # type: ignore[arg-type]
    after = present_offsets(kafka_bootstrap, world.topic)  # the cleaner may have gone on
    rows = all_rows(tmp_path / "out")
    delivered = sorted(o for _, o, _ in rows)
    assert set(after) <= set(delivered) <= set(before)
    assert len(delivered) == len(set(delivered))
    assert {count for _, _, count in rows} == {1}
    assert lag_rows(kafka_bootstrap, world.ctopic, world.group) == [(end, end, 0)]
    assert_share_log(world, delivered, end)
    # The five keys, and the filler when the cleaner needed more records to roll a segment
    # (it may compact while the keys are still being written: then there is none).
    assert {f"k{k}".encode() for k in range(5)} <= latest.keys() \
        <= {f"k{k}".encode() for k in range(5)} | {b"filler"}
