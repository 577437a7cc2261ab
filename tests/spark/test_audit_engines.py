"""Both audit engines give identical tables on the same coordination log (real broker, local
Spark). The last test audits a generated log of a million records with both (about 4 minutes
on 2 cores): it is what the issue asks, "the audit of a 1M-record generated coordination log
agrees between engines"."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq
import pytest
from kafka import KafkaProducer

from marshal_py.audit.generate import create_topic, generate_in_background, produce
from marshal_py.audit.local import AuditResult, run_local_audit
from marshal_py.audit.observer import (
    AMO_RECONFIRMED,
    OVERLAPPING_OWNERS,
    SHARE_ACCEPTED_TWICE,
    TABLES,
    route,
    sorted_rows,
)
from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    InitializingSharePartition,
    MemberHeartbeat,
    Message,
    ReleasingPartition,
    ResettingSharePartition,
    coordination_partition,
    encode,
)
from marshal_py.spark.audit import run_spark_audit
from tests.background import BackgroundJobs, Job, background_job

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration

HI = 10_000
CP = 4
T0 = 1_700_000_000_000
ROOT = Path(__file__).resolve().parents[2]
HANDMADE_RECORDS = 34


def read_tables(output: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table of an audit output, rows sorted canonically."""
    return {name: sorted_rows(tuple(row.values()) for row in
                              pq.read_table(output / name).to_pylist())
            for name in TABLES}


def assert_same_tables(local: Path, spark: Path) -> dict[str, list[tuple[Any, ...]]]:
    a, b = read_tables(local), read_tables(spark)
    for name in TABLES:
        assert pq.read_schema(next((local / name).glob("*.parquet"))).names == \
            [column for column, _ in TABLES[name]]
        only_local = set(a[name]) - set(b[name])
        only_spark = set(b[name]) - set(a[name])
        assert a[name] == b[name], (name, sorted(only_local)[:5], sorted(only_spark)[:5])
    return a


def both(bootstrap: str, ctopic: str, tmp_path: Path, spark: SparkSession,
         **filters: str) -> tuple[AuditResult, AuditResult, dict[str, list[tuple[Any, ...]]]]:
    local = run_local_audit(bootstrap, ctopic, heartbeat_interval_ms=HI,
                            output=tmp_path / "local", **filters)  # type: ignore[arg-type]
    on_spark = run_spark_audit(bootstrap, ctopic, heartbeat_interval_ms=HI,
                               output=tmp_path / "spark", spark=spark,
                               **filters)  # type: ignore[arg-type]
    tables = assert_same_tables(tmp_path / "local", tmp_path / "spark")
    assert sorted(local.summary) == sorted(on_spark.summary)
    assert local.coordination == on_spark.coordination
    assert (local.records, local.violations) == (on_spark.records, on_spark.violations)
    return local, on_spark, tables


def handmade(bootstrap: str, topic: str) -> int:
    """A log with every kind of record, three violations, garbage and a tombstone."""
    create_topic(bootstrap, topic, CP)
    g = "team.job"
    home = coordination_partition("events", CP)
    queue = coordination_partition("jobs", CP)
    log: list[tuple[int, int, Message | bytes | None]] = []

    def put(at: int, message: Message | bytes | None, cp: int = home) -> None:
        log.append((cp, T0 + at, message))

    for p in range(3):
        put(p, ClaimingPartition(0, "aaaa0001", "w1", g, "events", p))
        put(10 + p, ClaimingPartition(0, "bbbb0002", "w2", g, "events", p))   # lost races
    put(20, MemberHeartbeat(0, "aaaa0001", "w1", g, "events", 1))
    put(30, ClaimingMessages(0, "aaaa0001", "w1", g, "events", 0, 199))
    put(40, Heartbeat(0, "aaaa0001", "w1", g, "events", 0, 100))
    put(50, Heartbeat(0, "aaaa0001", "w1", g, "events", 1, 7))
    put(60, ReleasingPartition(0, "aaaa0001", "w1", g, "events", 1, 8))
    put(70, ClaimingPartition(0, "bbbb0002", "w2", g, "events", 1))
    put(80, Heartbeat(0, "aaaa0001", "w1", g, "events", 1, 9))              # not the owner
    put(2 * HI + 100, ClaimingPartition(0, "bbbb0002", "w2", g, "events", 0))  # takeover
    put(2 * HI + 110, ClaimingMessages(0, "bbbb0002", "w2", g, "events", 0, 150))  # AMO!
    put(2 * HI + 115, Heartbeat(0, "bbbb0002", "w2", g, "events", 1, 10))
    put(2 * HI + 120, ClaimingPartition(0, "cccc0003", "w2", g, "events", 1))  # too soon
    put(2 * HI + 130, b"\x00garbage")
    put(2 * HI + 140, b"Heartbeat/9/0/a/b/c/events/0/1", cp=(home + 1) % CP)
    put(2 * HI + 150, None)
    put(2 * HI + 160, ClaimingPartition(0, "dddd0004", "w4", g, "events", 2), cp=(home + 2) % CP)
    odd = "team/%2F%25"                                    # escaped: version 2 on the wire
    put(2 * HI + 170, ClaimingPartition(0, "eeee0005", "w/5", odd, "events", 0))
    put(2 * HI + 180, Heartbeat(0, "eeee0005", "w/5", odd, "events", 0, 3))
    put(2 * HI + 190, MemberHeartbeat(0, "eeee0005", "w/5", odd, "events", 1))
    s = "jobs.workers"
    put(0, InitializingSharePartition(0, "aaaa0001", "w1", s, "jobs", 0, 0, 3, 50), queue)
    put(10, AcquiringRecords(0, "aaaa0001", "w1", s, "jobs", 0, "0-9", 30_000), queue)
    put(20, AcknowledgingRecords(0, "aaaa0001", "w1", s, "jobs", 0, "0-5", "accept"), queue)
    put(30, AcknowledgingRecords(0, "aaaa0001", "w1", s, "jobs", 0, "6", "reject"), queue)
    put(40, AcknowledgingRecords(0, "aaaa0001", "w1", s, "jobs", 0, "7", "release"), queue)
    put(50, InitializingSharePartition(0, "aaaa0001", "w1", s, "jobs", 1, 5, 3, 50), queue)
    put(60, AcquiringRecords(0, "aaaa0001", "w1", s, "jobs", 1, "5-6", 30_000), queue)
    put(3 * HI, ResettingSharePartition(0, "admin000", "admin", s, "jobs", 0, 2), queue)
    put(3 * HI + 10, AcquiringRecords(0, "bbbb0002", "w2", s, "jobs", 0, "2-4", 30_000), queue)
    put(3 * HI + 20, AcknowledgingRecords(0, "bbbb0002", "w2", s, "jobs", 0, "2-3", "accept"),
        queue)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for cp, ts, message in sorted(log, key=lambda e: (e[1], e[0])):
        value = message if message is None or isinstance(message, bytes) else encode(message)
        producer.send(topic, key=b"k", value=value, partition=cp, timestamp_ms=ts)
    producer.flush()
    producer.close()
    return len(log)


@pytest.fixture(scope="module")
def handmade_topic(kafka_bootstrap: str) -> Iterator[str]:
    topic = f"__audit-hand-{os.getpid()}-{int(time.time() * 1000)}"
    assert handmade(kafka_bootstrap, topic) == HANDMADE_RECORDS
    yield topic


def test_engines_agree_on_a_handmade_log(kafka_bootstrap: str, handmade_topic: str,
                                         tmp_path: Path, spark: SparkSession) -> None:
    local, _, tables = both(kafka_bootstrap, handmade_topic, tmp_path, spark)
    assert sorted(v[0] for v in tables["violations"]) == sorted(
        [AMO_RECONFIRMED, OVERLAPPING_OWNERS, SHARE_ACCEPTED_TWICE, SHARE_ACCEPTED_TWICE])
    assert local.records == HANDMADE_RECORDS
    coordination = {row[0]: row for row in tables["coordination"]}
    home = coordination_partition("events", CP)
    assert coordination[home][2] == 1 and coordination[home][5] == 1   # garbage, tombstone
    assert coordination[(home + 1) % CP][4] == 1                       # unknown version
    assert coordination[(home + 2) % CP][6] == 1                       # misplaced
    reasons = sorted(str(row[8]) for row in tables["ownership"])
    assert reasons == ["open", "open", "open", "open", "reclaimed", "released", "taken_over"]


def test_sql_routing_matches_the_python_route(kafka_bootstrap: str, handmade_topic: str,
                                              spark: SparkSession) -> None:
    from pyspark.sql import functions as F

    from marshal_py.spark.audit import routing_columns
    from marshal_py.spark.log_source import MarshalLogDataSource

    spark.dataSource.register(MarshalLogDataSource)
    raw = (spark.read.format("marshal_log").option("bootstrap.servers", kafka_bootstrap)
           .option("topic", handmade_topic).load())
    kind, group, topic, partition = routing_columns(F.col("value"))
    rows = raw.select("coordination_partition", "value", kind.alias("k"), group.alias("g"),
                      topic.alias("t"), partition.alias("p")).collect()
    assert len(rows) == HANDMADE_RECORDS
    checked = 0
    for row in rows:
        expected = route(row["value"], row["coordination_partition"], CP)
        if expected.kind == "garbage":
            continue
        checked += 1
        sql_kind = row["k"] if expected.kind != "misplaced" else "misplaced"
        assert (sql_kind, row["g"], row["t"], row["p"]) == tuple(expected), row
    assert checked == HANDMADE_RECORDS - 3  # garbage, unknown version, tombstone


def test_engines_agree_with_filters(kafka_bootstrap: str, handmade_topic: str,
                                    tmp_path: Path, spark: SparkSession) -> None:
    _, _, tables = both(kafka_bootstrap, handmade_topic, tmp_path, spark,
                        group="jobs.workers", topic="jobs")
    assert [row[:2] for row in tables["summary"]] == [("jobs.workers", "jobs")]
    assert tables["ownership"] == []
    assert {row[0] for row in tables["violations"]} == {SHARE_ACCEPTED_TWICE}


def test_engines_agree_on_generated_traffic(kafka_bootstrap: str, tmp_path: Path,
                                            spark: SparkSession) -> None:
    topic = f"__audit-gen-{os.getpid()}-{int(time.time() * 1000)}"
    create_topic(kafka_bootstrap, topic, CP)
    produce(kafka_bootstrap, topic, generate_in_background(30_000, seed=11, faults=0.01))
    local, _, tables = both(kafka_bootstrap, topic, tmp_path, spark)
    assert local.records == 30_000
    assert len(tables["share_history"]) > 1_000 and len(tables["ownership"]) > 50


def test_the_spark_engine_from_the_command_line(kafka_bootstrap: str, handmade_topic: str,
                                                tmp_path: Path, spark: SparkSession) -> None:
    """In this process, so the command uses the test session (as it would a notebook's)."""
    from click.testing import CliRunner

    from marshal_py.cli.audit import audit

    result = CliRunner().invoke(audit, [
        "--engine", "spark", "--bootstrap-servers", kafka_bootstrap,
        "--coordination-topic", handmade_topic, "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, (result.output, result.stderr)
    assert "violations: 4" in result.stdout
    assert f"audited {HANDMADE_RECORDS} coordination records" in result.stderr
    assert "spark engine" in result.stderr
    assert (tmp_path / "out" / "share_history").is_dir()
    assert not spark.sparkContext._jsc.sc().isStopped()  # type: ignore[union-attr]


#: Runs the Spark engine on a session with Spark's Kafka connector (so it reads the log in
#: the JVM) and prints its result as JSON: argv bootstrap, topic, output directory.
_JVM_READER_SCRIPT = """
import json, sys
from marshal_py.spark.audit import run_spark_audit
from marshal_py.spark.connector import kafka_connector_conf
from marshal_py.spark.session import local_session
spark = local_session("audit-jvm-reader", "local[2]", **kafka_connector_conf(),
                      **{"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"})
try:
    result = run_spark_audit(sys.argv[1], sys.argv[2], heartbeat_interval_ms=HI_VALUE,
                             output=sys.argv[3], spark=spark)
finally:
    spark.stop()
print(json.dumps({**result.as_json(), **result.extra}))
""".replace("HI_VALUE", str(HI))


def test_the_jvm_reader_gives_the_tables_of_the_local_engine(
        kafka_bootstrap: str, handmade_topic: str, tmp_path: Path) -> None:
    """With the Kafka connector on the session, the Spark engine reads the log with Spark's
    kafka source (garbage, a tombstone, escaped ids, misplaced records): same tables."""
    import subprocess

    local = run_local_audit(kafka_bootstrap, handmade_topic, heartbeat_interval_ms=HI,
                            output=tmp_path / "local")
    done = subprocess.run(
        [sys.executable, "-c", _JVM_READER_SCRIPT, kafka_bootstrap, handmade_topic,
         str(tmp_path / "spark")], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    on_spark = json.loads(done.stdout.strip().splitlines()[-1])
    assert on_spark["reader"] == "kafka"
    assert_same_tables(tmp_path / "local", tmp_path / "spark")
    assert on_spark["records"] == local.records == HANDMADE_RECORDS
    assert on_spark["violations"] == local.violations


#: Records of the large agreement test: the issue's 1M case (about 4 to 5 min of a 2-core
#: machine's time, in the background). MARSHAL_AUDIT_RECORDS overrides it.
LARGE_AUDIT_RECORDS = int(os.environ.get("MARSHAL_AUDIT_RECORDS", "1000000"))
LARGE_AUDIT = background_job(Job(
    name="audit-large",
    test="tests/spark/test_audit_engines.py::test_a_large_generated_log_agrees_between_engines",
    command=lambda scratch: [
        sys.executable, "-m", "bench.audit", "--records", str(LARGE_AUDIT_RECORDS),
        "--engines", "local,spark", "--keep", str(scratch / "tables"),
        "--json", str(scratch / "result.json")],
    timeout_s=1500,
    order=1,  # after the bench smoke run, whose heartbeats would suffer more from nice 19
))


@pytest.mark.timeout(2700)
def test_a_large_generated_log_agrees_between_engines(background: BackgroundJobs) -> None:
    """Both engines on a large generated log, every table compared: ``python -m bench.audit``
    (its own broker and Spark session), run in the background from the start of the session
    (tests/background.py); the slowest check of the suite."""
    done = background.outcome(LARGE_AUDIT.name)
    assert done.returncode == 0, done.tail()
    (run,) = json.loads((done.scratch / "result.json").read_text())
    local, on_spark = run["engines"]["local"], run["engines"]["spark"]
    n = LARGE_AUDIT_RECORDS
    assert run["records"] == local["records"] == on_spark["records"] == n
    assert local["violations"] == on_spark["violations"]
    assert local["coordination"] == on_spark["coordination"]

    def rows(summary: list[dict[str, Any]]) -> list[str]:
        return sorted(json.dumps(row, sort_keys=True) for row in summary)

    assert rows(local["summary"]) == rows(on_spark["summary"])
    tables_dir = done.scratch / "tables" / str(n)
    tables = assert_same_tables(tables_dir / "local", tables_dir / "spark")
    assert sum(row[3] for row in tables["summary"]) > n * 0.99  # type: ignore[misc]
    print(f"\n{n:,} records: produced in {run['produce_seconds']:.0f} s, local audit "
          f"{local['seconds']:.0f} s, Spark audit {on_spark['seconds']:.0f} s "
          f"(job {done.seconds:.0f} s)")


def test_engines_agree_on_a_standalone_cluster(kafka_bootstrap: str, handmade_topic: str,
                                               tmp_path: Path,
                                               cluster_session: SparkSession) -> None:
    """Executors in processes of their own: the source and the per-domain rationalizers hold
    no state on the driver."""
    both(kafka_bootstrap, handmade_topic, tmp_path, cluster_session)


def test_engines_check_signatures_with_auth_keys(kafka_bootstrap: str, tmp_path: Path,
                                                 spark: SparkSession) -> None:
    """With the group's key, unsigned and wrongly signed records of an authenticated group
    are counted as rejected and change nothing, in both engines; without it they count."""
    from marshal_py.protocol.auth import GroupKey, sign

    topic = f"__audit-signed-{os.getpid()}-{int(time.time() * 1000)}"
    create_topic(kafka_bootstrap, topic, CP)
    key = GroupKey("k1", b"s" * 32)
    wrong = GroupKey("k1", b"x" * 32)
    g, home = "secure.job", coordination_partition("events", CP)
    at = T0 // 1000
    records = [
        sign(encode(ClaimingPartition(at, "aaaa0001", "w1", g, "events", 0)), key, 1),
        sign(encode(Heartbeat(at, "aaaa0001", "w1", g, "events", 0, 40)), key, 2),
        encode(Heartbeat(at, "ffff0009", "mallory", g, "events", 0, 5)),  # unsigned
        sign(encode(ClaimingPartition(at, "ffff0009", "mallory", g, "events", 1)), wrong, 1),
    ]
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i, value in enumerate(records):
        producer.send(topic, key=b"k", value=value, partition=home, timestamp_ms=T0 + i)
    producer.flush()
    producer.close()

    keyed, _, tables = both(kafka_bootstrap, topic, tmp_path / "keyed", spark,
                            group_keys={g: (key,)})  # type: ignore[arg-type]
    rejected = {row[0]: row[8] for row in tables["coordination"]}
    assert rejected == {home: 2}
    claims_won = {row[2]: row[3] for row in tables["partitions"]}
    assert claims_won.get(0) == 1 and not claims_won.get(1)  # mallory's claim did nothing
    _, _, open_tables = both(kafka_bootstrap, topic, tmp_path / "open", spark)
    assert {row[0]: row[8] for row in open_tables["coordination"]} == {home: 0}
    assert keyed.records == 4
