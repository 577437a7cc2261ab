"""The ``marshal`` Spark source on the real broker and real (local[2]) Spark.

Every batch a query runs is written by a ``foreachBatch`` sink to one JSON file per run and
batch id (``run1-batch00002.json``: [partition, offset, delivery count] per row), so a test
sees exactly which run read what, and a failure is injected deterministically by raising in
the sink before it writes (Spark then has the batch in its offset log and not in its commit
log: the next run re-runs it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from marshal_py import Marshaler
from marshal_py.protocol.ranges import offsets_in, parse_ranges
from marshal_py.spark.planning import BatchOffset
from marshal_py.spark.source import register
from tests.integration.consumer_support import (
    HI,
    TP,
    Cluster,
    run_marshal,
    tail_json,
    wait_for,
)
from tests.spark.query_process import restart_to_the_end

pytestmark = pytest.mark.integration

Row = tuple[int, int, int]  # partition, offset, delivery count


@pytest.fixture
def world(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def marshal_spark(spark: SparkSession) -> SparkSession:
    register(spark)
    return spark


class Query:
    """One run of a streaming query over the test's topic, sinking batches to files.

    ``after_read(batch_id, rows)`` runs in the sink once a batch's rows are read, before they
    are written (a test may hold the batch there)."""

    def __init__(self, spark: SparkSession, world: Cluster, workdir: Path, run: int, *,
                 mode: str = "alo", fail_at: int | None = None, available_now: bool = True,
                 options: dict[str, str] | None = None,
                 after_read: Callable[[int, list[Row]], None] | None = None) -> None:
        self.out = workdir / "out"
        self.out.mkdir(exist_ok=True)
        self.checkpoint = workdir / "checkpoint"
        reader = (spark.readStream.format("marshal")
                  .option("bootstrap.servers", world.bootstrap)
                  .option("coordination.topic", world.ctopic)
                  .option("group", world.group)
                  .option("topics", world.topic)
                  .option("mode", mode)
                  .option("client.id", "spark-query")
                  .option("heartbeat.interval", str(HI))
                  .option("offset.reset", "earliest"))
        for key, value in (options or {}).items():
            reader = reader.option(key, value)
        out = self.out

        def sink(batch: Any, batch_id: int) -> None:
            if fail_at is not None and batch_id == fail_at:
                raise RuntimeError(f"injected failure in batch {batch_id}")
            rows = [[r.partition, r.offset, r.delivery_count]
                    for r in batch.select("partition", "offset", "delivery_count").collect()]
            if after_read is not None:
                after_read(batch_id, [(p, o, c) for p, o, c in rows])
            # Written aside, then renamed: the test reads the directory while batches land.
            tmp = out / f".run{run}-batch{batch_id:05d}.tmp"
            tmp.write_text(json.dumps(rows))
            os.replace(tmp, out / f"run{run}-batch{batch_id:05d}.json")

        writer = (reader.load().writeStream.foreachBatch(sink)
                  .option("checkpointLocation", str(self.checkpoint)))
        if available_now:
            writer = writer.trigger(availableNow=True)
        else:
            writer = writer.trigger(processingTime="200 milliseconds")
        self.query = writer.start()

    def wait(self) -> None:
        self.query.awaitTermination(timeout=180)
        assert not self.query.isActive, "the query did not finish within 180 s"


def batches(out: Path, run: int | None = None) -> dict[tuple[int, int], list[Row]]:
    """(run, batch id) -> rows written."""
    found = {}
    for path in sorted(out.glob("run*-batch*.json")):
        r, b = path.stem.split("-")
        key = (int(r[3:]), int(b[5:]))
        if run is None or key[0] == run:
            found[key] = [tuple(row) for row in json.loads(path.read_text())]
    return found  # type: ignore[return-value]


def offsets_of(rows: Iterator[Row] | list[Row]) -> list[TP]:
    return [(p, o) for p, o, _ in rows]


def all_rows(out: Path, run: int | None = None) -> list[Row]:
    return [row for rows in batches(out, run).values() for row in rows]


def checkpointed(checkpoint: Path, batch_id: int) -> BatchOffset:
    """The source's end offset of a batch, as Spark wrote it to its offset log."""
    lines = (checkpoint / "offsets" / str(batch_id)).read_text().splitlines()
    return BatchOffset.from_json(json.loads(lines[-1]))


def fail_then_restart(spark: SparkSession, world: Cluster, tmp_path: Path, mode: str,
                      between: Any = None, **options: str) -> BatchOffset:
    """Run 1 fails in batch 2; ``between()`` runs; run 2 restarts from the checkpoint."""
    opts = {"maxRecordsPerTrigger": "500", **options}
    first = Query(spark, world, tmp_path, 1, mode=mode, fail_at=2, options=opts)
    with pytest.raises(StreamingQueryException, match="injected failure"):
        first.query.awaitTermination(timeout=180)
    interrupted = checkpointed(first.checkpoint, 2)
    if between is not None:
        between()
    Query(spark, world, tmp_path, 2, mode=mode, options=opts).wait()
    return interrupted


def test_alo_restart_from_checkpoint_re_runs_the_interrupted_batch_and_loses_nothing(
        marshal_spark: SparkSession, world: Cluster, tmp_path: Path) -> None:
    produced = world.producer.send(3000)
    interrupted = fail_then_restart(marshal_spark, world, tmp_path, "alo")
    out = tmp_path / "out"
    assert sorted(batches(out, 1)) == [(1, 0), (1, 1)]
    assert len(all_rows(out, 1)) == 1000  # maxRecordsPerTrigger
    rerun = batches(out, 2)[(2, 2)]
    # The re-run batch reads exactly what the interrupted one had planned.
    assert sorted(offsets_of(rerun)) == sorted(
        (r.partition, o) for r in interrupted.ranges for o in range(r.start, r.end))
    seen = Counter(offsets_of(all_rows(out)))
    assert set(seen) == set(produced), "records lost"
    assert max(seen.values()) == 1, "nothing needs re-reading after a clean hand-over"
    # The query released its partitions with everything committed.
    rows = world.state()
    assert {r["partition"]: r["committed_offset"] for r in rows} == world.producer.ends()
    assert all(r["status"] == "unclaimed" for r in rows)


def test_alo_restart_drops_what_another_member_processed_meanwhile(
        marshal_spark: SparkSession, world: Cluster, tmp_path: Path) -> None:
    produced = world.producer.send(3000)
    by_python: list[TP] = []

    def python_member_consumes_some() -> None:
        with Marshaler(world.bootstrap, world.group, client_id="python-member",
                       heartbeat_interval=HI, coordination_topic=world.ctopic) as m:
            consumer = m.consumer([world.topic], offset_reset="earliest")
            for record in consumer:
                by_python.append((record.partition, record.offset))
                consumer.commit(record)
                if len(by_python) == 700:
                    break

    interrupted = fail_then_restart(marshal_spark, world, tmp_path, "alo",
                                    between=python_member_consumes_some)
    out = tmp_path / "out"
    planned = {(r.partition, o) for r in interrupted.ranges for o in range(r.start, r.end)}
    assert planned & set(by_python), "the test needs the Python member to take some of them"
    run2 = offsets_of(all_rows(out, 2))
    assert not set(run2) & set(by_python), "re-read what another member had processed"
    everything = Counter(offsets_of(all_rows(out)) + by_python)
    assert set(everything) == set(produced), "records lost"
    assert max(everything.values()) == 1


def test_amo_restart_never_reads_the_interrupted_batch_again(
        marshal_spark: SparkSession, world: Cluster, tmp_path: Path) -> None:
    produced = world.producer.send(3000)
    interrupted = fail_then_restart(marshal_spark, world, tmp_path, "amo")
    seen = Counter(offsets_of(all_rows(tmp_path / "out")))
    assert max(seen.values()) == 1, "at-most-once delivered a record twice"
    planned = {(r.partition, o) for r in interrupted.ranges for o in range(r.start, r.end)}
    # Exactly the interrupted batch is lost: it was confirmed as delivered before it ran.
    assert set(produced) - set(seen) == planned
    assert len(planned) == 500


def test_share_restart_redelivers_the_interrupted_batch_with_a_higher_delivery_count(
        marshal_spark: SparkSession, world: Cluster, tmp_path: Path) -> None:
    produced = world.producer.send(2000)
    interrupted = fail_then_restart(marshal_spark, world, tmp_path, "share",
                                    **{"lock.duration": "5"})
    rows = all_rows(tmp_path / "out")
    seen = Counter(offsets_of(rows))
    assert set(seen) == set(produced), "records lost"
    assert max(seen.values()) == 1, "a record accepted twice"
    planned = {(r.partition, o) for r in interrupted.ranges for o in range(r.start, r.end)}
    counts = {(p, o): c for p, o, c in rows}
    assert {counts[tp] for tp in planned} == {2}
    assert {c for tp, c in counts.items() if tp not in planned} == {1}
    # Every record is acknowledged in the share-partitions' state in the log.
    result = run_marshal("state", "--shares", "--json", "--bootstrap-servers", world.bootstrap,
                         "--coordination-topic", world.ctopic, "--group", world.group,
                         "--heartbeat-interval", str(HI))
    assert result.returncode == 0, result.stderr
    spso = {row["partition"]: row["spso"] for row in json.loads(result.stdout)}
    assert spso == world.producer.ends()


def test_query_and_two_python_members_share_a_topic_and_python_takes_over_after_stop(
        marshal_spark: SparkSession, kafka_bootstrap: str, unique_name: str,
        tmp_path: Path) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=12)
    try:
        members = [world.spawn(f"py{i}") for i in (1, 2)]
        for member in members:
            member.wait_joined()
        query = Query(marshal_spark, world, tmp_path, 1, available_now=False)
        # Three members on 12 partitions: fair shares of 4 each.
        world.watcher.wait_owned(
            lambda owners: Counter(o.client_id for o in owners.values() if o) ==
            {"spark-query": 4, "py1": 4, "py2": 4}, 60, "4 partitions each")
        first = world.producer.send(6000)

        def consumed() -> set[TP]:
            return set(world.printed()) | set(offsets_of(all_rows(tmp_path / "out")))

        wait_for(lambda: set(first) <= consumed(), 90, "6000 records consumed by the three",
                 interval=0.2)
        by_spark = set(offsets_of(all_rows(tmp_path / "out")))
        assert len({p for p, _ in by_spark}) == 4
        query.query.stop()
        # The stopped query released its partitions: the Python members take all 12.
        world.watcher.wait_owned(
            lambda owners: Counter(o.client_id for o in owners.values() if o) ==
            {"py1": 6, "py2": 6}, 30, "the Python members to hold 6 each")
        second = world.producer.send(1200)
        world.wait_consumed(second, timeout=60, procs=members)
        assert set(first) | set(second) <= consumed(), "records lost"
    finally:
        world.close()


def test_bad_options_fail_at_load_with_the_option_named(marshal_spark: SparkSession) -> None:
    with pytest.raises(Exception, match="option 'mode' must be alo, amo, share or key-shared"):
        (marshal_spark.readStream.format("marshal").option("bootstrap.servers", "x:1")
         .option("group", "g").option("topics", "t").option("mode", "twice").load())


def test_a_missing_topic_fails_the_query_with_one_clear_line(
        marshal_spark: SparkSession, kafka_bootstrap: str, unique_name: str,
        tmp_path: Path) -> None:
    query = (marshal_spark.readStream.format("marshal")
             .option("bootstrap.servers", kafka_bootstrap).option("group", unique_name)
             .option("coordination.topic", f"__marshal-{unique_name}")
             .option("topics", f"{unique_name}-missing").load()
             .writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", str(tmp_path / "checkpoint")).start())
    with pytest.raises(StreamingQueryException,
                       match=f"topic '{unique_name}-missing' does not exist"):
        query.awaitTermination(timeout=120)


def test_alo_query_killed_9_mid_run_then_restarted_from_its_checkpoint_loses_nothing(
        marshal_spark: SparkSession, world: Cluster, tmp_path: Path) -> None:
    produced = world.producer.send(3000)
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "tests.spark.query_process", world.bootstrap, world.ctopic,
            world.group, world.topic, str(out), str(tmp_path / "checkpoint")]
    root = Path(__file__).parents[2]
    with open(tmp_path / "run1.err", "wb") as err:
        first = subprocess.Popen([*argv, "run1", "--follow", "--max-per-batch", "100"],
                                 cwd=root, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for(lambda: len(list(out.glob("run1-*.json"))) >= 3, 120,
                 "the first run to complete 3 batches",
                 describe=lambda: (tmp_path / "run1.err").read_text()[-2000:])
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    # The restart, in this process's session: the same query from the same checkpoint.
    restart_to_the_end(marshal_spark, world.bootstrap, world.ctopic, world.group, world.topic,
                       out, str(tmp_path / "checkpoint"), "run2", max_per_batch="5000")
    seen = Counter((p, o) for path in out.glob("*.json") for p, o in json.loads(path.read_text()))
    assert set(produced) <= set(seen), f"{len(set(produced) - set(seen))} records lost"


def test_share_available_now_reads_past_the_in_flight_limit(
        marshal_spark: SparkSession, world: Cluster, tmp_path: Path) -> None:
    # 4 partitions x at most 100 records in flight each: 2,000 records need several batches,
    # each made possible by the previous batch's acceptances.
    produced = world.producer.send(2000)
    Query(marshal_spark, world, tmp_path, 1, mode="share",
          options={"inflight.limit": "100"}).wait()
    batches_run = batches(tmp_path / "out", 1)
    seen = Counter(offsets_of(all_rows(tmp_path / "out")))
    assert set(seen) == set(produced)
    assert max(seen.values()) == 1
    assert len(batches_run) >= 5
    assert max(len(rows) for rows in batches_run.values()) <= 400


def share_acks(bootstrap: str, ctopic: str) -> list[tuple[str, str, list[TP]]]:
    """(client id, kind, (partition, offset) pairs) of every share acknowledgement in the
    log, in log order."""
    out = []
    for row in tail_json(bootstrap, ctopic, HI):
        fields = str(row.get("record", "")).split("/")
        if fields[0] == "AcknowledgingRecords":
            partition = int(fields[7])
            out.append((fields[4], fields[-1],
                        [(partition, o) for o in offsets_in(parse_ranges(fields[-2]))]))
    return out


def test_share_batch_stalled_past_max_poll_interval_gives_its_records_back(
        marshal_spark: SparkSession, world: Cluster, tmp_path: Path) -> None:
    """A batch whose sink hangs: after max.poll.interval its records are released (the lock,
    30 s, has not elapsed) and another member gets them with delivery count 2; when the batch
    ends after all, its acceptance does not count."""
    produced = world.producer.send(200)
    stalled: list[Row] = []
    held, resume = threading.Event(), threading.Event()

    def hold_first_batch(batch_id: int, rows: list[Row]) -> None:
        if batch_id == 0:
            stalled.extend(rows)
            held.set()
            assert resume.wait(120), "the test never let the stalled batch go on"

    query = Query(marshal_spark, world, tmp_path, 1, mode="share", after_read=hold_first_batch,
                  options={"max.poll.interval": "2", "lock.duration": "30"})
    try:
        assert held.wait(120), "the first batch never reached the sink"
        got: list[Any] = []
        with Marshaler(world.bootstrap, world.group, client_id="python-member",
                       heartbeat_interval=HI, coordination_topic=world.ctopic) as m:
            consumer = m.consumer([world.topic], "share", offset_reset="earliest")
            deadline = time.monotonic() + 90
            while len(got) < len(produced):
                assert time.monotonic() < deadline, f"{len(got)} of {len(produced)} came back"
                got += consumer.poll(timeout_s=0.5)
            consumer.close()
        assert sorted(offsets_of(stalled)) == sorted(produced)  # the batch had them all
        assert {c for _, _, c in stalled} == {1}
    finally:
        resume.set()
    query.wait()
    assert sorted((r.partition, r.offset) for r in got) == sorted(produced)
    assert {r.delivery_count for r in got} == {2}
    acks = share_acks(world.bootstrap, world.ctopic)
    by_query = {kind for client, kind, _ in acks if client == "spark-query"}
    assert by_query == {"release"}, "the stalled batch's late completion accepted records"
    released = [tp for client, _, pairs in acks if client == "spark-query" for tp in pairs]
    assert sorted(released) == sorted(produced)
    result = run_marshal("state", "--shares", "--json", "--bootstrap-servers", world.bootstrap,
                         "--coordination-topic", world.ctopic, "--group", world.group,
                         "--heartbeat-interval", str(HI))
    assert result.returncode == 0, result.stderr
    spso = {row["partition"]: row["spso"] for row in json.loads(result.stdout)}
    assert spso == world.producer.ends()
