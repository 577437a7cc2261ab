"""`marshal state`, `marshal tail` and `marshal init` against the real broker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Sequence

import pytest

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

STATE_KEYS = {"group", "topic", "partition", "client_id", "instance_id", "status",
              "heartbeat_age_s", "committed_offset", "amo_claimed_offset"}


def marshal(*args: str, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "marshal_py.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {})})


@pytest.fixture
def populated(kafka_bootstrap: str, unique_name: str) -> tuple[str, str]:
    """A coordination topic holding a race, heartbeats, a release, AMO claims and garbage."""
    ctopic = f"__marshal-{unique_name}"
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=ctopic)) as log:
        cp = coordination_partition("events", log.partition_count())

        def put(message: object) -> None:
            log.append(cp, encode(message))  # type: ignore[arg-type]

        put(ClaimingPartition(0, "aaaa0001", "worker-1", "team.job", "events", 0))
        put(ClaimingPartition(0, "bbbb0002", "worker-2", "team.job", "events", 0))
        put(ClaimingPartition(0, "bbbb0002", "worker-2", "team.job", "events", 1))
        put(Heartbeat(0, "aaaa0001", "worker-1", "team.job", "events", 0, 120))
        put(Heartbeat(0, "bbbb0002", "worker-2", "team.job", "events", 0, 999))  # not owner
        put(ClaimingMessages(0, "bbbb0002", "worker-2", "team.job", "events", 1, 55))
        put(ReleasingPartition(0, "bbbb0002", "worker-2", "team.job", "events", 1, 56))
        put(ClaimingPartition(0, "cccc0003", "w/3", "other", "events", 2))
        log.append(cp, b"\x00not a marshal record")
        log.append(cp, b"Heartbeat/9/0/a/b/c/events/0/1")
    return kafka_bootstrap, ctopic


def test_state_prints_the_table(populated: tuple[str, str]) -> None:
    bootstrap, ctopic = populated
    result = marshal("state", "--bootstrap-servers", bootstrap, "--coordination-topic", ctopic)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["group", "topic", "partition", "client_id", "instance_id",
                                "status", "heartbeat_age_s", "committed_offset",
                                "amo_claimed_offset"]
    rows = [line.split() for line in lines[1:]]
    assert rows[0][:6] == ["other", "events", "2", "w/3", "cccc0003", "fresh"]
    assert rows[1][:6] == ["team.job", "events", "0", "worker-1", "aaaa0001", "fresh"]
    assert rows[1][7:] == ["120", "-"]
    assert rows[2][:6] == ["team.job", "events", "1", "-", "-", "unclaimed"]
    assert rows[2][7:] == ["56", "55"]
    assert "ignored by the rules: 2" in result.stderr
    assert "undecodable or unknown: 2" in result.stderr


def test_state_json_has_exactly_the_documented_keys(populated: tuple[str, str]) -> None:
    bootstrap, ctopic = populated
    result = marshal(
        "state", "--json", "--group", "team.job", "--topic", "events",
        "--coordination-topic", ctopic, env={"MARSHAL_BOOTSTRAP_SERVERS": bootstrap})
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert [set(r) for r in rows] == [STATE_KEYS, STATE_KEYS]
    assert rows[0]["client_id"] == "worker-1"
    assert rows[0]["status"] == "fresh"
    assert rows[0]["committed_offset"] == 120
    assert isinstance(rows[0]["heartbeat_age_s"], float)
    assert rows[1]["status"] == "unclaimed"
    assert rows[1]["amo_claimed_offset"] == 55


def test_state_heartbeat_interval_decides_freshness(populated: tuple[str, str]) -> None:
    bootstrap, ctopic = populated
    result = marshal("state", "--json", "--bootstrap-servers", bootstrap,
                     "--coordination-topic", ctopic, "--heartbeat-interval", "0.001")
    assert result.returncode == 0, result.stderr
    statuses = {(r["group"], r["partition"]): r["status"] for r in json.loads(result.stdout)}
    assert statuses[("team.job", 0)] == "stale"


def test_tail_prints_every_record_with_its_verdict(populated: tuple[str, str]) -> None:
    bootstrap, ctopic = populated
    result = marshal("tail", "--bootstrap-servers", bootstrap, "--coordination-topic", ctopic)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 10
    assert "claim_won" in lines[0] and "ClaimingPartition/1/0/aaaa0001/worker-1" in lines[0]
    assert "claim_lost" in lines[1]
    assert "not_owner" in lines[4]
    assert "ClaimingPartition/2/0/cccc0003/w%2F3/other/events/2" in lines[7]
    assert "malformed" in lines[8] and "<undecodable:" in lines[8]
    assert "unknown_version" in lines[9]
    as_json = marshal("tail", "--json", "-n", "2", "--bootstrap-servers", bootstrap,
                      "--coordination-topic", ctopic)
    objects = [json.loads(line) for line in as_json.stdout.splitlines()]
    assert [o["verdict"] for o in objects] == ["malformed", "unknown_version"]
    assert set(objects[0]) == {"partition", "position", "time", "verdict", "record"}


def test_tail_follow_prints_new_records_and_stops_on_sigterm(kafka_bootstrap: str,
                                                              unique_name: str) -> None:
    ctopic = f"__marshal-{unique_name}"
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=ctopic)) as log:
        cp = coordination_partition("events", log.partition_count())
        log.append(cp, encode(ClaimingPartition(0, "i1", "a", "g", "events", 0)))
        proc = subprocess.Popen(
            [sys.executable, "-m", "marshal_py.cli", "tail", "-f", "--bootstrap-servers",
             kafka_bootstrap, "--coordination-topic", ctopic],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            assert "claim_won" in proc.stdout.readline()
            log.append(cp, encode(Heartbeat(0, "i1", "a", "g", "events", 0, 7)))
            assert "heartbeat" in proc.stdout.readline()
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        finally:
            if proc.poll() is None:
                proc.kill()


def test_init_creates_the_topic_and_is_idempotent(kafka_bootstrap: str, unique_name: str) -> None:
    args = ("init", "--bootstrap-servers", kafka_bootstrap, "--coordination-topic", unique_name,
            "--partitions", "6")
    first = marshal(*args)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == (
        f"{unique_name}: 6 partitions, message.timestamp.type=LogAppendTime; layout kept in "
        f"{unique_name}-index (never add partitions)")
    again = marshal(*args[:-1], "9")  # an existing topic keeps its layout
    assert again.returncode == 0
    assert again.stdout == first.stdout


def test_every_command_can_name_another_index_topic(kafka_bootstrap: str,
                                                     unique_name: str) -> None:
    ctopic, index = f"__marshal-{unique_name}", f"layouts-{unique_name}"
    common = ("--bootstrap-servers", kafka_bootstrap, "--coordination-topic", ctopic)
    init = marshal("init", *common, "--index-topic", index, "--partitions", "2")
    assert init.returncode == 0, init.stderr
    assert f"layout kept in {index}" in init.stdout
    assert marshal("state", *common, "--index-topic", index).returncode == 0
    assert_one_line_error(marshal("state", *common), f"'{ctopic}-index'", "does not exist",
                          "marshal init")


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


def test_unreachable_broker_is_one_line_and_exit_2() -> None:
    for command in ("state", "tail"):
        result = marshal(command, "--bootstrap-servers", "127.0.0.1:1", "--timeout", "1")
        assert_one_line_error(result, "cannot reach Kafka at 127.0.0.1:1")


def test_missing_coordination_topic_is_one_line_and_exit_2(kafka_bootstrap: str,
                                                            unique_name: str) -> None:
    result = marshal("state", "--bootstrap-servers", kafka_bootstrap,
                     "--coordination-topic", unique_name)
    assert_one_line_error(result, unique_name, "does not exist", "marshal init")


@pytest.mark.parametrize("args", [
    ("state", "--heartbeat-interval", "soon"),
    ("state", "--heartbeat-interval", "0"),
    ("state", "--no-such-option"),
    ("tail", "--lines", "-3"),
    ("init", "--partitions", "0"),
    ("no-such-command",),
])
def test_bad_arguments_are_one_line_and_exit_2(args: Sequence[str]) -> None:
    assert_one_line_error(marshal(*args), "error:")


def test_tail_rejects_a_partition_the_topic_does_not_have(populated: tuple[str, str]) -> None:
    bootstrap, ctopic = populated
    result = marshal("tail", "--partition", "99", "--bootstrap-servers", bootstrap,
                     "--coordination-topic", ctopic)
    assert_one_line_error(result, "--partition", "99")
