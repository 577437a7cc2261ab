"""``read_stream``: the driver coordinates, Spark's own Kafka reader reads (docs/spark.md).

The crash tests run the stream in a process of its own (tests/spark/range_stream_process.py,
a session with Spark's Kafka connector), kill it with SIGKILL mid-run and start it again. The
runs that need no process of their own (restarts, streams that end by themselves) run one after
another in one more such process, started once for the module (``streams``).
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from marshal_py.spark.connector import KafkaConnectorMissingError
from marshal_py.spark.range_stream import read_stream
from marshal_py.world import Owner
from tests.integration.consumer_support import Cluster, wait_for
from tests.integration.test_auth import key_file
from tests.integration.test_transactional_input import PLAN, lag_rows
from tests.spark.session_server import SessionProcess
from tests.spark.test_source_auth import KEY, group_records, rejected_line
from tests.txn_input import create_topic, read_all, write_transactions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from marshal_py.spark.cluster import StandaloneCluster

pytestmark = pytest.mark.integration

ROOT = Path(__file__).parents[2]


def delivered(out: Path, pattern: str = "run*.json") -> list[tuple[int, int]]:
    rows: list[tuple[int, int]] = []
    for path in sorted(out.glob(pattern)):
        rows.extend((p, o) for p, o in json.loads(path.read_text()))
    return rows


def released(topic: str, *stderrs: str) -> set[int]:
    """The partitions of ``topic`` a member released because no heartbeat of it was
    confirmed for one interval (its own warning, marshal_py.client.holdings)."""
    pattern = re.compile(rf"no heartbeat of {re.escape(topic)}/(\d+) confirmed")
    return {int(m.group(1)) for text in stderrs for m in pattern.finditer(text)}


def twice_unexplained(rows: list[tuple[int, int]], topic: str,
                      *stderrs: str) -> list[tuple[int, int]]:
    """Records delivered more than once outside the partitions their at-least-once member
    released under load (:func:`released`): after such a release it claims the partition
    again and delivers from its last commit, as at-least-once allows."""
    again = released(topic, *stderrs)
    return [tp for tp, n in Counter(rows).items() if n > 1 and tp[0] not in again]


@dataclass
class Ran:
    """How a run of the stream ended."""

    returncode: int
    stderr: str


@pytest.fixture(scope="module")
def streams(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SessionProcess]:
    """A range_stream_process serving runs on one session (``--serve``)."""
    server = SessionProcess("tests.spark.range_stream_process", ["--serve"],
                            tmp_path_factory.mktemp("streams"), "the range-stream process")
    try:
        yield server
    finally:
        server.close()


def run_stream(world: Cluster | SimpleNamespace, out: Path, tag: str, *extra: str,
               on: SessionProcess | None = None) -> Ran:
    """One run of the stream until it ends: ``on`` the serving process, or in a process of
    its own when None."""
    argv = [world.bootstrap, world.ctopic, world.group, world.topic, str(out), tag, *extra]
    if on is None:
        done = subprocess.run([sys.executable, "-m", "tests.spark.range_stream_process", *argv],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        return Ran(done.returncode, done.stderr)
    on.submit({"argv": argv})
    answer = on.answer("running a stream", 300)
    assert answer["ok"], answer["error"]
    return Ran(**answer["result"])


def kill_mid_run_then_restart(world: Cluster, tmp_path: Path, mode: str,
                              streams: SessionProcess) -> Path:
    """Run a stream in ``mode`` until it wrote 3 batches, SIGKILL it, run it again until it
    has read what is available; return the directory of the batches written."""
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "tests.spark.range_stream_process", world.bootstrap,
            world.ctopic, world.group, world.topic, str(out)]
    with open(tmp_path / "run1.err", "wb") as err:
        first = subprocess.Popen([*argv, "run1", "--follow", "--mode", mode,
                                  "--max-per-batch", "100"],
                                 cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    try:
        wait_for(lambda: len(list(out.glob("run1-*.json"))) >= 3, 180,
                 "the first run to write 3 batches",
                 describe=lambda: (tmp_path / "run1.err").read_text()[-2000:])
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
    second = run_stream(world, out, "run2", "--mode", mode, "--max-per-batch", "5000",
                        on=streams)
    assert second.returncode == 0, second.stderr[-3000:]
    assert list(out.glob("run2-*.json")), "the restarted stream read nothing"
    return out


def test_alo_stream_killed_9_mid_run_then_restarted_delivers_every_record(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        streams: SessionProcess) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    try:
        produced = world.producer.send(2000)
        out = kill_mid_run_then_restart(world, tmp_path, "alo", streams)
        seen = set(delivered(out))
        assert set(produced) <= seen, f"lost {len(set(produced) - seen)} records"
    finally:
        world.close()


def test_amo_stream_killed_9_mid_run_then_restarted_never_delivers_a_record_twice(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        streams: SessionProcess) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    try:
        produced = world.producer.send(2000)
        out = kill_mid_run_then_restart(world, tmp_path, "amo", streams)
        counts = Counter(delivered(out))
        assert [tp for tp, n in counts.items() if n > 1] == []
        assert set(counts) <= set(produced)
    finally:
        world.close()


def test_alo_batch_whose_function_raised_is_not_committed_and_is_read_after_restart(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        streams: SessionProcess) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    try:
        produced = world.producer.send(1000)
        out = tmp_path / "out"
        out.mkdir()
        first = run_stream(world, out, "run1", "--max-per-batch", "100", "--fail-at", "2",
                           on=streams)
        assert first.returncode == 1, first.stderr[-3000:]
        assert "failed on purpose" in first.stderr
        failed = set(delivered(out, "failed-run1.json"))
        assert len(failed) == 100
        second = run_stream(world, out, "run2", "--max-per-batch", "5000", on=streams)
        assert second.returncode == 0, second.stderr[-3000:]
        again = set(delivered(out, "run2-*.json"))
        assert failed <= again
        assert set(produced) <= set(delivered(out))
    finally:
        world.close()


def test_alo_stream_stopped_then_restarted_reads_no_record_twice(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        streams: SessionProcess) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    try:
        produced = world.producer.send(1000)
        out = tmp_path / "out"
        out.mkdir()
        first = run_stream(world, out, "run1", "--follow", "--max-per-batch", "100",
                           "--stop-after", "2", on=streams)
        assert first.returncode == 0, first.stderr[-3000:]
        assert len(list(out.glob("run1-*.json"))) == 3  # the batch calling stop() completes
        second = run_stream(world, out, "run2", "--max-per-batch", "5000", on=streams)
        assert second.returncode == 0, second.stderr[-3000:]
        rows = delivered(out)
        assert set(rows) == set(produced)
        assert twice_unexplained(rows, world.topic, first.stderr, second.stderr) == []
    finally:
        world.close()


def test_max_batches_runs_that_many_then_a_restart_continues_after_them(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        streams: SessionProcess) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    try:
        produced = world.producer.send(1000)
        out = tmp_path / "out"
        out.mkdir()
        first = run_stream(world, out, "run1", "--max-per-batch", "100", "--max-batches", "2",
                           on=streams)
        assert first.returncode == 0, first.stderr[-3000:]
        assert len(delivered(out, "run1-*.json")) == 200
        assert len(list(out.glob("run1-*.json"))) == 2
        second = run_stream(world, out, "run2", "--max-per-batch", "5000", on=streams)
        assert second.returncode == 0, second.stderr[-3000:]
        rows = delivered(out)
        assert set(rows) == set(produced)
        assert twice_unexplained(rows, world.topic, first.stderr, second.stderr) == []
    finally:
        world.close()


def test_read_committed_stream_reads_each_committed_record_once_and_lag_ends_at_zero(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        streams: SessionProcess) -> None:
    create_topic(kafka_bootstrap, unique_name)
    written = write_transactions(kafka_bootstrap, unique_name, PLAN)
    expected = [r.offset for r in read_all(kafka_bootstrap, unique_name, 0,  # type: ignore[attr-defined]
                                           "read_committed")]
    assert len(expected) == len(written.committed)
    world = SimpleNamespace(bootstrap=kafka_bootstrap, topic=unique_name,
                            ctopic=f"__marshal-{unique_name}", group=f"{unique_name}.g")
    out = tmp_path / "out"
    out.mkdir()
    done = run_stream(world, out, "run1", "--max-per-batch", "7", on=streams)
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(o for _, o in delivered(out)) == expected  # each once, nothing aborted
    assert lag_rows(kafka_bootstrap, world.ctopic, world.group) == \
        [(written.end, written.end, 0)]


def test_a_missing_topic_is_one_line_naming_it(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        streams: SessionProcess) -> None:
    """The stream raises a MarshalError whose one line names the topic (the serving process
    answers as the script's own process exits: status 2, that line on stderr)."""
    world = SimpleNamespace(bootstrap=kafka_bootstrap, topic=f"{unique_name}-missing",
                            ctopic=f"__marshal-{unique_name}", group=f"{unique_name}.g")
    out = tmp_path / "out"
    out.mkdir()
    done = run_stream(world, out, "run1", on=streams)
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and world.topic in errors[0], done.stderr[-3000:]
    assert "Traceback" not in done.stderr


def test_signed_group_stream_signs_every_record_and_reads_every_record(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        streams: SessionProcess) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=2)
    try:
        produced = world.producer.send(400)
        keys = key_file(tmp_path / "keys", world.group, (KEY,))
        out = tmp_path / "out"
        out.mkdir()
        done = run_stream(world, out, "run1", "--option", f"auth.keys={keys}", on=streams)
        assert done.returncode == 0, done.stderr[-3000:]
        assert sorted(delivered(out)) == sorted(produced)
        records = group_records(world)
        assert records and all(r.startswith(f"Signed/3/{KEY.key_id}/") for r in records)
        assert rejected_line(world, keys).endswith(f"group {world.group}: 0")
    finally:
        world.close()


def test_on_a_standalone_cluster_executor_jvms_read_every_record(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path,
        spark_cluster: StandaloneCluster) -> None:
    """On the suite's standalone cluster (its application runs before the ``cluster_session``
    one takes the cluster's cores: see tests/spark/conftest.py)."""
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    try:
        produced = world.producer.send(1000)
        out = tmp_path / "out"
        out.mkdir()
        done = run_stream(world, out, "run1", "--master", spark_cluster.master_url,
                          "--max-per-batch", "300")
        assert done.returncode == 0, done.stderr[-3000:]
        assert sorted(delivered(out)) == sorted(produced)
        assert len(list(out.glob("run1-*.json"))) == 4
    finally:
        world.close()


def test_alo_stream_beside_a_python_consumer_shares_the_group_and_each_record_goes_to_one(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """A read_stream and a `marshal consume` process in one ALO group: the partitions are
    split between them, and while they hold their claims every record is delivered, each by
    the holder of its partition only. A holder whose heartbeat went unconfirmed for a whole
    interval (a loaded machine) releases that partition and claims it again: at least once,
    it then delivers again from its last commit, so records of that partition may come twice
    from it, and only from it."""
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "tests.spark.range_stream_process", world.bootstrap,
            world.ctopic, world.group, world.topic, str(out), "run1", "--follow",
            "--max-per-batch", "200"]
    with open(tmp_path / "stream.err", "wb") as err:
        stream = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    try:
        python = world.spawn("python-1")
        python.wait_joined(timeout=60)

        def split(owners: dict[int, Owner | None]) -> bool:
            held = Counter(o.client_id for o in owners.values() if o is not None)
            return held == {"crash-stream": 2, "python-1": 2}

        owners = world.watcher.wait_owned(split, 180, "2 partitions each for the stream and "
                                          "the Python consumer", world.partitions)
        produced = world.producer.send(2000)

        def both() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
            return delivered(out), python.printed()

        wait_for(lambda: set(produced) <= set(both()[0]) | set(both()[1]), 180,
                 "every record delivered by the stream or the Python consumer",
                 describe=lambda: (f"stream {len(both()[0])}, python {len(both()[1])}; "
                                   f"{(tmp_path / 'stream.err').read_text()[-1500:]}"))
        assert world.watcher.owners(world.partitions) == owners, "the claims moved"
        by_stream, by_python = both()
        assert set(by_stream) & set(by_python) == set()
        unexplained = twice_unexplained(by_stream + by_python, world.topic,
                                        (tmp_path / "stream.err").read_text(),
                                        python.stderr_text())
        assert unexplained == [], unexplained[:5]
        assert set(by_stream) | set(by_python) == set(produced)
        holders = {p: o.client_id for p, o in owners.items() if o is not None}
        assert {holders[p] for p, _ in by_stream} == {"crash-stream"}
        assert {holders[p] for p, _ in by_python} == {"python-1"}
    finally:
        if stream.poll() is None:
            stream.kill()
            stream.wait(timeout=30)
        world.close()


def test_bad_mode_is_one_line_naming_the_option(spark: SparkSession) -> None:
    from marshal_py.errors import ConfigurationError

    with pytest.raises(ConfigurationError) as caught:
        read_stream(spark, {"bootstrap.servers": "127.0.0.1:1", "group": "g", "topics": "t",
                            "mode": "share"}, lambda df, batch_id: None)
    assert "\n" not in str(caught.value)
    assert "mode" in str(caught.value) and "format(\"marshal\")" in str(caught.value)


def test_a_session_without_the_kafka_connector_fails_in_one_line_saying_how_to_get_it(
        spark: SparkSession) -> None:
    # The suite's shared session is started without spark.jars.packages.
    with pytest.raises(KafkaConnectorMissingError) as caught:
        read_stream(spark, {"bootstrap.servers": "127.0.0.1:1", "group": "g", "topics": "t"},
                    lambda df, batch_id: None)
    text = str(caught.value)
    assert "\n" not in text
    assert "spark-sql-kafka-0-10" in text and "kafka_connector_conf()" in text
