"""``read_stream`` against a secured broker (SASL_SSL, SCRAM-SHA-512, a test CA, ACLs on): the
driver's coordination clients get kafka-python settings (``kafka.<setting>`` options), Spark's
Kafka reader gets the JVM client's settings (``reader_options``), and a user with only a
member's ACLs reads every record."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from marshal_py.devbroker.security import SecureDevBroker
from tests.spark.test_range_stream import ROOT, delivered, twice_unexplained
from tests.support import secured_broker, write_as_admin

pytestmark = pytest.mark.integration

PARTITIONS = 2
RECORDS = 300


@pytest.fixture(scope="module")
def broker() -> Iterator[SecureDevBroker]:
    """A secure broker with user alice (no ACLs until the test grants them) and `__marshal`
    (and its index) created by admin."""
    with secured_broker("alice") as secure:
        yield secure


def produce(broker: SecureDevBroker, topic: str) -> list[tuple[int, int]]:
    """Create ``topic`` and write RECORDS records over its partitions, as admin."""
    return write_as_admin(broker, topic, PARTITIONS,
                          ((i % PARTITIONS, f"{i}".encode()) for i in range(RECORDS)))


def test_sasl_ssl_stream_with_reader_options_reads_every_record_as_a_member_user(
        broker: SecureDevBroker, tmp_path: Path) -> None:
    topic = f"secured-{uuid.uuid4().hex[:8]}"
    group = f"secured.{uuid.uuid4().hex[:8]}"
    produced = produce(broker, topic)
    broker.grant("alice", "__marshal", [topic])
    password = broker.password("alice")
    jaas = ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="alice" password="{password}";')
    coordination = {"kafka.security_protocol": "SASL_SSL", "kafka.sasl_mechanism": "SCRAM-SHA-512",
                    "kafka.sasl_plain_username": "alice", "kafka.sasl_plain_password": password,
                    "kafka.ssl_cafile": str(broker.ca_path)}
    reader = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "SCRAM-SHA-512",
              "kafka.sasl.jaas.config": jaas, "kafka.ssl.truststore.type": "PEM",
              "kafka.ssl.truststore.location": str(broker.ca_path)}
    out = tmp_path / "out"
    out.mkdir()
    argv = [sys.executable, "-m", "tests.spark.range_stream_process", broker.bootstrap_servers,
            "__marshal", group, topic, str(out), "run1", "--max-per-batch", "100"]
    argv += [a for k, v in coordination.items() for a in ("--option", f"{k}={v}")]
    argv += [a for k, v in reader.items() for a in ("--reader-option", f"{k}={v}")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = delivered(out)
    assert set(rows) == set(produced)
    assert twice_unexplained(rows, topic, done.stderr) == []
    assert len(list(out.glob("run1-*.json"))) == RECORDS // 100
