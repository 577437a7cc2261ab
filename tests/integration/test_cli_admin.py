"""`marshal groups`, `lag`, `reset-offsets` (exclusive groups) and `watch` on the real broker,
against real consumers."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaProducer

from marshal_py import Marshaler
from marshal_py.client.consumer import Consumer
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import coordination_partition

pytestmark = pytest.mark.integration

HI = "1"  # every command judges liveness with the consumers' heartbeat interval
WEEK_MS = 7 * 24 * 3600 * 1000


def marshal(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the CLI with its output to pipes, in the environment of a shell without a terminal:
    without ``COLUMNS`` and ``LINES``, which pytest-xdist's workers set (80 x 24) and which
    would make ``marshal watch`` cut its table to 80 columns under them only."""
    env = {key: value for key, value in os.environ.items() if key not in ("COLUMNS", "LINES")}
    return subprocess.run([sys.executable, "-m", "marshal_py.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def make_topic(bootstrap: str, topic: str, partitions: int, per_partition: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}},
                        wait_for_metadata=True)
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for p in range(partitions):
        for i in range(per_partition):
            producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
    producer.flush()
    producer.close()


class Setup:
    def __init__(self, bootstrap: str, name: str) -> None:
        self.bootstrap = bootstrap
        self.topic = name
        self.group = f"{name}.group"
        self.ctopic = f"__marshal-{name}"

    @property
    def common(self) -> tuple[str, ...]:
        return ("--bootstrap-servers", self.bootstrap, "--coordination-topic", self.ctopic,
                "--heartbeat-interval", HI)

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return marshal(args[0], *self.common, *args[1:])

    def json(self, *args: str) -> object:
        result = self.run(*args, "--json")
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    @contextmanager
    def member(self, client_id: str, offset_reset: str = "earliest", **settings: Any
               ) -> Iterator[tuple[Marshaler, Consumer]]:
        with Marshaler(self.bootstrap, group_id=self.group, client_id=client_id,
                       heartbeat_interval=float(HI), coordination_topic=self.ctopic) as m:
            consumer = m.consumer([self.topic], offset_reset=offset_reset,  # type: ignore[arg-type]
                                  **settings)
            assert isinstance(consumer, Consumer)
            yield m, consumer

    def coordination_end(self) -> int:
        with KafkaLog(KafkaLogConfig(bootstrap_servers=self.bootstrap, topic=self.ctopic)) as log:
            return log.end_position(coordination_partition(self.topic, log.partition_count()))


@pytest.fixture
def setup(kafka_bootstrap: str, unique_name: str) -> Setup:
    return Setup(kafka_bootstrap, unique_name)


def holds_all(consumer: Consumer, partitions: int) -> bool:
    consumer.poll(timeout_s=0.1, max_records=0)
    return len(consumer.assignment()) == partitions


def test_groups_shows_stable_with_a_live_consumer_and_empty_after_it_closes(
        setup: Setup) -> None:
    make_topic(setup.bootstrap, setup.topic, 2, 5)
    with setup.member("w1") as (m, consumer):
        wait_for(lambda: holds_all(consumer, 2), "the claims")
        groups = setup.json("groups")
        assert groups == [{"group": setup.group, "state": "stable", "topics": [
            {"topic": setup.topic, "state": "stable",
             "members": [{"client_id": "w1", "instance_id": m.instance_id,
                          "heartbeat_interval_s": float(HI)}],
             "since_ms": groups[0]["topics"][0]["since_ms"],  # type: ignore[index]
             "since": groups[0]["topics"][0]["since"],  # type: ignore[index]
             "expires_at_ms": None, "expires_at": None}]}]
        text = setup.run("groups")
        assert text.returncode == 0, text.stderr
        assert text.stdout.splitlines()[0].split() == [
            "group", "topic", "state", "group_state", "members", "since", "expires"]
        assert f"w1 (instance {m.instance_id})" in text.stdout
        assert "1 group(s): 1 stable, 0 empty, 0 dead" in text.stderr
    after = setup.json("groups")
    pair = after[0]["topics"][0]  # type: ignore[index]
    assert (after[0]["state"], pair["state"], pair["members"]) == (  # type: ignore[index]
        "empty", "empty", [])
    assert pair["expires_at_ms"] == pair["since_ms"] + WEEK_MS
    assert abs(pair["since_ms"] - time.time() * 1000) < 60_000
    assert "offsets expire in 6d23h" in setup.run("groups").stdout


def test_lag_is_exact_against_what_was_produced_and_consumed(setup: Setup) -> None:
    make_topic(setup.bootstrap, setup.topic, 2, 20)
    consumed = {0: 0, 1: 0}
    with setup.member("w1") as (_, consumer):
        wait_for(lambda: holds_all(consumer, 2), "the claims")
        deadline = time.monotonic() + 60
        while sum(consumed.values()) < 15 and time.monotonic() < deadline:
            for record in consumer.poll(timeout_s=0.5, max_records=1):
                assert record.offset == consumed[record.partition]  # in order, from 0
                consumer.commit(record)
                consumed[record.partition] += 1
        assert sum(consumed.values()) == 15
        live = setup.json("lag", "--group", setup.group)
        assert [(p["partition"], p["owners"], p["status"], p["end_offset"])  # type: ignore[index]
                for p in live["partitions"]] == [  # type: ignore[index]
            (0, ["w1"], "fresh", 20), (1, ["w1"], "fresh", 20)]
    # Closing released both partitions with exactly what was committed.
    report = setup.json("lag", "--group", setup.group, "--topic", setup.topic)
    assert isinstance(report, dict)
    assert [(p["partition"], p["mode"], p["end_offset"], p["committed_offset"], p["lag"])
            for p in report["partitions"]] == [
        (0, "exclusive", 20, consumed[0], 20 - consumed[0]),
        (1, "exclusive", 20, consumed[1], 20 - consumed[1])]
    assert report["topics"] == [{"topic": setup.topic, "lag": 25, "partitions": 2,
                                 "unknown": 0}]
    assert report["total_lag"] == 25
    text = setup.run("lag", "--group", setup.group)
    assert text.returncode == 0, text.stderr
    assert text.stdout.splitlines()[0].split() == [
        "topic", "partition", "mode", "end_offset", "committed_offset", "lag", "owners",
        "status"]
    assert f"total lag of {setup.group}: 25" in text.stdout


def test_lag_of_an_at_most_once_group_counts_confirmed_batches_as_consumed(
        setup: Setup) -> None:
    make_topic(setup.bootstrap, setup.topic, 1, 20)
    handed: list[int] = []
    with setup.member("w1", mode="amo", amo_batch_size=5) as (_, consumer):
        deadline = time.monotonic() + 60
        while len(handed) < 12 and time.monotonic() < deadline:
            handed += [r.offset for r in consumer.poll(timeout_s=0.5, max_records=1)]
        assert handed == list(range(12))
        live = setup.json("lag", "--group", setup.group)
        claims = setup.json("state", "--group", setup.group)
        confirmed = claims[0]["amo_claimed_offset"]  # type: ignore[index]
        row = live["partitions"][0]  # type: ignore[index]
        # Live, a crash would lose the confirmed batch: the next owner starts after it.
        assert (row["mode"], row["end_offset"]) == ("amo", 20)
        assert 12 <= confirmed < 20 and row["committed_offset"] == confirmed + 1
        assert row["lag"] == 20 - (confirmed + 1)
    # Closing released the partition at exactly what was handed out: nothing lost.
    closed = setup.json("lag", "--group", setup.group)
    row = closed["partitions"][0]  # type: ignore[index]
    assert (row["committed_offset"], row["lag"]) == (12, 8)
    assert closed["total_lag"] == 8  # type: ignore[index]


def test_reset_offsets_of_an_exclusive_group(setup: Setup) -> None:
    make_topic(setup.bootstrap, setup.topic, 1, 10)
    reset = ("reset-offsets", "--group", setup.group, "--topic", setup.topic, "--to-offset", "3")
    with setup.member("w1") as (m, consumer):
        got = 0
        deadline = time.monotonic() + 60
        while got < 10 and time.monotonic() < deadline:
            for record in consumer.poll(timeout_s=0.5):
                consumer.commit(record)
                got += 1
        assert got == 10
        refused = setup.run(*reset)
        assert refused.returncode == 2
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in refused.stderr
        assert f"live members: w1 (instance {m.instance_id})" in lines[0]
    before = setup.coordination_end()
    dry = setup.run(*reset, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[1].split() == ["0", "exclusive", "10", "3", "dry", "run"]
    assert setup.coordination_end() == before  # a dry run writes nothing
    done = setup.json(*reset)
    assert done == {"group": setup.group, "topic": setup.topic, "mode": "exclusive",
                    "dry_run": False, "partitions": [
                        {"partition": 0, "current_offset": 10, "new_offset": 3,
                         "applied": True}]}
    lag = setup.json("lag", "--group", setup.group, "--topic", setup.topic)
    assert lag["partitions"][0]["committed_offset"] == 3  # type: ignore[index]
    # A new member (offset_reset latest) starts where the reset put the group.
    with setup.member("w2", offset_reset="latest") as (_, consumer):
        offsets: list[int] = []
        deadline = time.monotonic() + 60
        while len(offsets) < 7 and time.monotonic() < deadline:
            offsets += [r.offset for r in consumer.poll(timeout_s=0.5)]
        assert offsets == [3, 4, 5, 6, 7, 8, 9]


@pytest.mark.serial
def test_watch_renders_the_ownership_table(setup: Setup) -> None:
    make_topic(setup.bootstrap, setup.topic, 2, 3)
    with setup.member("w1") as (_, consumer):
        wait_for(lambda: holds_all(consumer, 2), "the claims")
        result = setup.run("watch", "--iterations", "2", "--refresh", "0.2")
        assert result.returncode == 0, result.stderr
        assert result.stdout.count("marshal watch —") == 2
        assert "Partition ownership" in result.stdout and "Groups" in result.stdout
        # In each frame's ownership table, each partition's row names its owner (its
        # freshness depends on how long ago the member's last heartbeat was: not what this
        # test is about; the groups table above it names the member too).
        for frame in result.stdout.split("marshal watch —")[1:]:
            table = frame.split("Partition ownership", 1)[1]
            rows = [line for line in table.splitlines()
                    if setup.topic in line and "w1" in line]
            assert len(rows) == 2, frame
        frames = setup.run("watch", "--group", setup.group, "--topic", setup.topic,
                           "--iterations", "2", "--refresh", "0.1", "--json")
        assert frames.returncode == 0, frames.stderr
        parsed = [json.loads(line) for line in frames.stdout.splitlines()]
        assert len(parsed) == 2
        assert [(p["partition"], p["owner"], p["end_offset"]) for p in parsed[1]["partitions"]
                ] == [(0, "w1", 3), (1, "w1", 3)]
        assert parsed[1]["groups"][0]["state"] == "stable"


def run_on_a_terminal(args: Sequence[str], timeout_s: float = 120) -> str:
    """Run the CLI with a pseudo-terminal as stdout and stderr; return all it wrote."""
    controller, terminal = pty.openpty()
    env = {**os.environ, "TERM": "xterm-256color", "COLUMNS": "200", "LINES": "50"}
    env.pop("NO_COLOR", None)
    proc = subprocess.Popen([sys.executable, "-m", "marshal_py.cli", *args], stdin=terminal,
                            stdout=terminal, stderr=terminal, env=env, close_fds=True)
    os.close(terminal)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.5)
            if not ready:
                if proc.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # the terminal closed: the process exited
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert proc.wait(timeout=10) == 0, b"".join(chunks).decode("utf-8", "replace")
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(controller)
    return b"".join(chunks).decode("utf-8", "replace")


def test_watch_redraws_in_place_on_a_terminal(setup: Setup) -> None:
    make_topic(setup.bootstrap, setup.topic, 2, 3)
    with setup.member("w1") as (_, consumer):
        wait_for(lambda: holds_all(consumer, 2), "the claims")
        out = run_on_a_terminal(["watch", *setup.common, "--group", setup.group,
                                 "--iterations", "3", "--refresh", "0.2"])
    # Frame k+1 starts by moving the cursor up over every line frame k printed, erasing each
    # (rich's Live: ESC[2K erase line, ESC[1A up), so the view redraws in place instead of
    # scrolling. (Live draws the last frame once more when it stops.)
    assert out.startswith("\x1b[?25l") and out.rstrip().endswith("\x1b[?25h")  # cursor
    frames = out.split("marshal watch —")[1:]
    assert len(frames) >= 3
    for previous in frames[:-1]:
        erase = re.search(r"((?:\x1b\[2K\x1b\[1A)*)\x1b\[2K\x1b\[1m$", previous)
        assert erase is not None, f"a frame was not erased before the next: {previous[-80:]!r}"
        printed = previous[:erase.start()].count("\n")
        # Back to the frame's first line (whether or not its last line ended with a newline).
        assert printed >= 10 and erase.group(1).count("\x1b[1A") in (printed - 1, printed)
    rows = [line for line in out.splitlines() if setup.topic in line and "fresh" in line]
    assert len(rows) >= 2 and all("w1" in row for row in rows)


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize("args", [
    ("lag",),
    ("lag", "--group"),
    ("groups", "--offsets-retention", "1"),
    ("watch", "--refresh", "0"),
    ("watch", "--iterations", "0"),
    ("reset-offsets", "--group", "g", "--topic", "t", "--to-offset", "-1"),
    ("reset-offsets", "--group", "g", "--to-latest"),
    ("consume", "--group", "g", "--topic", "t", "--metrics-port", "70000"),
])
def test_bad_arguments_are_one_line_and_exit_2(args: Sequence[str]) -> None:
    assert_one_line_error(marshal(*args, "--bootstrap-servers", "127.0.0.1:1"), "error:")


@pytest.mark.parametrize("command", [("groups",), ("lag", "--group", "g"), ("watch",)])
def test_unreachable_broker_is_one_line(command: Sequence[str]) -> None:
    result = marshal(*command, "--bootstrap-servers", "127.0.0.1:1", "--timeout", "1")
    assert_one_line_error(result, "cannot reach Kafka at 127.0.0.1:1")


def test_unknown_group_missing_topic_and_missing_coordination_topic(setup: Setup) -> None:
    make_topic(setup.bootstrap, setup.topic, 1, 1)
    with setup.member("w1") as (_, consumer):
        wait_for(lambda: holds_all(consumer, 1), "the claim")
    assert_one_line_error(setup.run("lag", "--group", "nobody"), "unknown group 'nobody'")
    assert_one_line_error(setup.run("watch", "--group", "nobody"), "unknown group 'nobody'")
    assert_one_line_error(setup.run("groups", "--group", "nobody"), "unknown group 'nobody'")
    assert_one_line_error(setup.run("reset-offsets", "--group", "nobody", "--topic",
                                    setup.topic, "--to-latest"), "no share group 'nobody'")
    assert_one_line_error(setup.run("lag", "--group", setup.group, "--topic", "no-such-topic"),
                          "topic 'no-such-topic' does not exist")
    assert_one_line_error(marshal("groups", "--bootstrap-servers", setup.bootstrap,
                                  "--coordination-topic", f"{setup.ctopic}-missing"),
                          "does not exist", "marshal init")
