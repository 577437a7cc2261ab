"""`marshal audit` on the real broker: one-line errors and the local engine's happy path.

(The Spark engine's command line is tested in tests/spark/test_audit_engines.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from marshal_py.audit.observer import TABLES
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    ReleasingPartition,
    coordination_partition,
    encode,
)

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# The command as it is registered in marshal_py.cli (main.add_command(audit)).
RUN = ("import sys\n"
       "from marshal_py.cli import main\n"
       "from marshal_py.cli.audit import audit\n"
       "if 'audit' not in main.commands:\n"
       "    main.add_command(audit)\n"
       "BLOCK = sys.argv.pop(1)\n"
       "if BLOCK:\n"
       "    sys.modules[BLOCK] = None  # as if it were not installed\n"
       "main()\n")


def marshal_audit(*args: str, block: str = "",
                  timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "MARSHAL_BOOTSTRAP_SERVERS"}
    return subprocess.run([sys.executable, "-c", RUN, block, "audit", *args],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


@pytest.fixture
def populated(kafka_bootstrap: str, unique_name: str) -> tuple[str, str]:
    """A coordination topic (LogAppendTime, as marshal creates it) with a few stints."""
    ctopic = f"__marshal-{unique_name}"
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=ctopic)) as log:
        cp = coordination_partition("events", log.partition_count())
        for message in (
            ClaimingPartition(0, "aaaa0001", "worker-1", "team.job", "events", 0),
            ClaimingPartition(0, "bbbb0002", "worker-2", "team.job", "events", 0),
            ClaimingPartition(0, "bbbb0002", "worker-2", "team.job", "events", 1),
            Heartbeat(0, "aaaa0001", "worker-1", "team.job", "events", 0, 120),
            ClaimingMessages(0, "bbbb0002", "worker-2", "team.job", "events", 1, 55),
            ReleasingPartition(0, "bbbb0002", "worker-2", "team.job", "events", 1, 56),
            ClaimingPartition(0, "cccc0003", "w/3", "other", "events", 2),
        ):
            log.append(cp, encode(message))
        log.append(cp, b"\x00not a marshal record")
    return kafka_bootstrap, ctopic


def one_error_line(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("marshal audit: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_unreachable_broker() -> None:
    one_error_line(marshal_audit("--bootstrap-servers", "127.0.0.1:1", "--timeout", "2"),
                   "cannot reach Kafka at 127.0.0.1:1")


def test_missing_coordination_topic(kafka_bootstrap: str, unique_name: str) -> None:
    one_error_line(marshal_audit("--bootstrap-servers", kafka_bootstrap,
                                 "--coordination-topic", f"__none-{unique_name}"),
                   "does not exist", "--coordination-topic")


def test_output_that_is_a_file(populated: tuple[str, str], tmp_path: Path) -> None:
    bootstrap, ctopic = populated
    target = tmp_path / "file"
    target.write_text("")
    one_error_line(marshal_audit("--bootstrap-servers", bootstrap, "--coordination-topic",
                                 ctopic, "--output", str(target)), "is a file")


def test_output_that_cannot_be_created(populated: tuple[str, str], tmp_path: Path) -> None:
    bootstrap, ctopic = populated
    (tmp_path / "file").write_text("")
    one_error_line(marshal_audit("--bootstrap-servers", bootstrap, "--coordination-topic",
                                 ctopic, "--output", str(tmp_path / "file" / "below")),
                   "cannot create --output directory")


def test_spark_engine_without_pyspark(populated: tuple[str, str]) -> None:
    bootstrap, ctopic = populated
    one_error_line(marshal_audit("--engine", "spark", "--bootstrap-servers", bootstrap,
                                 "--coordination-topic", ctopic, block="pyspark"),
                   "pip install marshal_py[spark]")


def test_unknown_engine_is_a_usage_error() -> None:
    result = marshal_audit("--engine", "hadoop")
    assert result.returncode == 2
    assert "hadoop" in result.stderr


def test_local_audit_prints_the_summary_and_writes_the_tables(
        populated: tuple[str, str], tmp_path: Path) -> None:
    bootstrap, ctopic = populated
    result = marshal_audit("--bootstrap-servers", bootstrap, "--coordination-topic", ctopic,
                           "--output", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [name for name, _ in TABLES["summary"]]
    assert lines[1].split() == ["other", "events", "1", "1", "1", "0", "0"]
    assert lines[2].split() == ["team.job", "events", "2", "6", "2", "0", "0"]
    assert "violations: 0" in result.stdout
    assert "audited 8 coordination records" in result.stderr
    for name, spec in TABLES.items():
        table = pq.read_table(tmp_path / "out" / name)
        assert table.schema.names == [column for column, _ in spec]
    ownership = pq.read_table(tmp_path / "out" / "ownership").to_pylist()
    assert sorted((r["client_id"], r["end_reason"]) for r in ownership) == [
        ("w/3", "open"), ("worker-1", "open"), ("worker-2", "released")]
    amo = pq.read_table(tmp_path / "out" / "amo_ranges").to_pylist()
    assert [(r["partition"], r["first_confirmed"], r["batches"]) for r in amo] == [(1, 55, 1)]


def test_json_summary_with_filters(populated: tuple[str, str]) -> None:
    bootstrap, ctopic = populated
    result = marshal_audit("--bootstrap-servers", bootstrap, "--coordination-topic", ctopic,
                           "--group", "team.job", "--topic", "events", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert found["engine"] == "local" and found["violations"] == 0
    assert found["summary"] == [{"group": "team.job", "topic": "events", "partitions": 2,
                                 "records": 6, "owners": 2, "takeovers": 0, "violations": 0}]
    assert [row["malformed"] for row in found["coordination"]] == [1]
