"""`marshal state` share views and `marshal reset-offsets` on the real broker."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from kafka import KafkaAdminClient, KafkaProducer

from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    InitializingSharePartition,
    MemberHeartbeat,
    coordination_partition,
    encode,
)

pytestmark = pytest.mark.integration


def marshal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "marshal_py.cli", *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))


@pytest.fixture
def share_group(kafka_bootstrap: str, unique_name: str) -> tuple[str, str, str]:
    """A share group on `unique_name` (1 partition, 50 records) with records in flight."""
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics({unique_name: {"num_partitions": 1, "replication_factor": 1}},
                        wait_for_metadata=True)
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    for i in range(50):
        producer.send(unique_name, value=f"{i}".encode(), partition=0)
    producer.flush()
    producer.close()
    ctopic = f"__marshal-{unique_name}"
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=ctopic)) as log:
        cp = coordination_partition(unique_name, log.partition_count())
        base = (0, "aaaa0001", "w1", "jobs", unique_name, 0)
        for message in (InitializingSharePartition(*base, 0, 5, 2000),
                        AcquiringRecords(*base, "0-9", 3_600_000),
                        AcknowledgingRecords(*base, "0-4", "accept"),
                        AcknowledgingRecords(*base, "5", "release")):
            log.append(cp, encode(message))
    return kafka_bootstrap, ctopic, unique_name


def test_state_shows_share_partitions_and_records(share_group: tuple[str, str, str]) -> None:
    bootstrap, ctopic, topic = share_group
    common = ("--bootstrap-servers", bootstrap, "--coordination-topic", ctopic, "--group", "jobs")
    shares = json.loads(marshal("state", *common, "--json", "--shares").stdout)
    assert shares == [{"group": "jobs", "topic": topic, "partition": 0, "spso": 5, "speo": 10,
                       "available": 1, "acquired": 4, "acknowledged": 0, "archived": 0,
                       "dead_letter": 0,
                       "oldest_lock_expires_in_s": shares[0]["oldest_lock_expires_in_s"]}]
    assert 3000 < shares[0]["oldest_lock_expires_in_s"] <= 3600
    records = json.loads(marshal("state", *common, "--json", "--records").stdout)
    assert [(r["offset"], r["state"], r["delivery_count"], r["client_id"]) for r in records] == [
        (5, "available", 1, None), (6, "acquired", 1, "w1"), (7, "acquired", 1, "w1"),
        (8, "acquired", 1, "w1"), (9, "acquired", 1, "w1")]
    text = marshal("state", *common, "--records")
    assert text.returncode == 0, text.stderr
    assert "spso" in text.stdout and "acquired" in text.stdout


def test_reset_offsets_refuses_with_live_members_and_moves_an_empty_group(
        share_group: tuple[str, str, str]) -> None:
    bootstrap, ctopic, topic = share_group
    common = ("--bootstrap-servers", bootstrap, "--coordination-topic", ctopic)
    refused = marshal("reset-offsets", *common, "--group", "jobs", "--topic", topic,
                      "--to-earliest")
    assert refused.returncode == 2
    assert "live members: w1 (instance aaaa0001)" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    with KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, topic=ctopic)) as log:
        cp = coordination_partition(topic, log.partition_count())
        log.append(cp, encode(MemberHeartbeat(0, "aaaa0001", "w1", "jobs", topic, 0)))
    dry = marshal("reset-offsets", *common, "--group", "jobs", "--topic", topic,
                  "--to-offset", "20", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines()[1].split() == ["0", "5", "20", "5"]
    done = marshal("reset-offsets", *common, "--group", "jobs", "--topic", topic, "--to-latest")
    assert done.returncode == 0, done.stderr
    shares = json.loads(marshal("state", *common, "--json", "--shares").stdout)
    assert (shares[0]["spso"], shares[0]["speo"], shares[0]["acquired"]) == (50, 50, 0)


@pytest.mark.parametrize(("args", "says"), [
    (("--group", "jobs", "--topic", "t"), "exactly one of"),
    (("--group", "jobs", "--topic", "t", "--to-earliest", "--to-latest"), "exactly one of"),
    (("--group", "jobs", "--topic", "t", "--to-datetime", "yesterday"), "ISO 8601"),
])
def test_reset_offsets_argument_errors_are_one_line(args: tuple[str, ...], says: str) -> None:
    result = marshal("reset-offsets", "--bootstrap-servers", "127.0.0.1:1", *args)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert says in result.stderr


def test_reset_offsets_of_an_unknown_share_group(share_group: tuple[str, str, str]) -> None:
    bootstrap, ctopic, topic = share_group
    result = marshal("reset-offsets", "--bootstrap-servers", bootstrap, "--coordination-topic",
                     ctopic, "--group", "nobody", "--topic", topic, "--to-latest")
    assert result.returncode == 2
    assert "no share group 'nobody'" in result.stderr


def test_a_new_share_group_can_start_at_a_time(kafka_bootstrap: str, unique_name: str) -> None:
    import time
    from datetime import UTC, datetime

    from marshal_py import Marshaler

    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics({unique_name: {"num_partitions": 1, "replication_factor": 1}},
                        wait_for_metadata=True)
    admin.close()
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    before = [producer.send(unique_name, value=b"old", partition=0).get(10) for _ in range(5)]
    cut = max(m.timestamp for m in before) + 1
    while int(time.time() * 1000) <= cut:  # the next records must be stamped after the cut
        time.sleep(0.001)
    for _ in range(5):
        producer.send(unique_name, value=b"new", partition=0).get(10)
    producer.close()
    with Marshaler(kafka_bootstrap, group_id="by-time", client_id="w1", heartbeat_interval=1.0,
                   coordination_topic=f"__marshal-{unique_name}") as m:
        consumer = m.consumer([unique_name], "share",
                              start_time=datetime.fromtimestamp(cut / 1000, UTC))
        got: list[int] = []
        deadline = time.monotonic() + 30
        while len(got) < 5 and time.monotonic() < deadline:
            got += [r.offset for r in consumer.poll(timeout_s=0.5)]
        assert got == [5, 6, 7, 8, 9]
