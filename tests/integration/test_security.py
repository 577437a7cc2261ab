"""A secured broker (SASL_SSL with SCRAM-SHA-512, a test CA, ACLs on): the right credentials
work end to end through the library and the CLI's --command-config; a wrong password, an
unknown CA and a principal without WRITE on the coordination topic each stop with one clear
line (exit 2 on the CLI, a MarshalError subclass in the library)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from marshal_py import Marshaler
from marshal_py.config.kafka_properties import load_properties
from marshal_py.devbroker.security import SecureDevBroker, make_test_ca
from marshal_py.errors import KafkaAuthenticationError, KafkaAuthorizationError, MarshalError
from tests.support import secured_broker, write_as_admin

pytestmark = pytest.mark.integration

HI = 1.0
RECORDS = 40


def marshal(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "marshal_py.cli", *args], capture_output=True,
                          text=True, timeout=timeout,
                          env={k: v for k, v in os.environ.items()
                               if k not in ("MARSHAL_COMMAND_CONFIG",
                                            "MARSHAL_BOOTSTRAP_SERVERS")})


@pytest.fixture(scope="module")
def broker() -> Iterator[SecureDevBroker]:
    """A secure broker with users admin (super user), alice, bob, carol and dave, and
    `__marshal` (and its index) created by admin; the others have no ACLs until a test grants
    them some."""
    with secured_broker("alice", "bob", "carol", "dave") as secure:
        yield secure


@pytest.fixture(scope="module")
def data_topic(broker: SecureDevBroker) -> str:
    """A 2-partition topic holding RECORDS records per partition, written by admin."""
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    write_as_admin(broker, topic, 2, ((p, f"{p}-{i}".encode()) for p in range(2)
                                      for i in range(RECORDS)))
    return topic


def one_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_right_credentials_work_end_to_end(broker: SecureDevBroker, data_topic: str) -> None:
    bootstrap = broker.bootstrap_servers
    admin_config = str(broker.properties_path("admin"))
    alice_config = broker.properties_path("alice")
    # marshal init as admin (idempotent: the fixture created __marshal the same way).
    init = marshal("init", "--bootstrap-servers", bootstrap, "--command-config", admin_config,
                   "--timeout", "10")
    assert init.returncode == 0, init.stderr
    assert "__marshal: 4 partitions" in init.stdout
    broker.grant("alice", "__marshal", [data_topic])
    group = f"g-{uuid.uuid4().hex[:8]}"
    with Marshaler(bootstrap, group, "alice-1", HI, timeout=10,
                   kafka_config=load_properties(alice_config)) as m:
        consumer = m.consumer([data_topic], offset_reset="earliest", balance="greedy")
        seen: set[bytes] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 2 * RECORDS and time.monotonic() < deadline:
            for record in consumer.poll(timeout_s=0.5):
                seen.add(record.value)
                consumer.commit(record)
        assert len(seen) == 2 * RECORDS
        state = marshal("state", "--bootstrap-servers", bootstrap, "--command-config",
                        str(alice_config), "--group", group, "--heartbeat-interval", str(HI),
                        "--timeout", "10")
        assert state.returncode == 0, state.stderr
        rows = [line.split() for line in state.stdout.splitlines()[1:]]
        assert sorted(int(r[2]) for r in rows if r[3] == "alice-1") == [0, 1], state.stdout
        # The admin commands that read data topics' offsets, and the audit, as alice too.
        lag = marshal("lag", "--bootstrap-servers", bootstrap, "--command-config",
                      str(alice_config), "--group", group, "--heartbeat-interval", str(HI),
                      "--json", "--timeout", "10")
        assert lag.returncode == 0, lag.stderr
        assert '"alice-1"' in lag.stdout
        audit = marshal("audit", "--bootstrap-servers", bootstrap, "--command-config",
                        str(alice_config), "--group", group, "--json", "--timeout", "10")
        assert audit.returncode == 0, audit.stderr


#: Every command that connects to Kafka, with the arguments it needs.
CONNECTING = [("state",), ("tail",), ("init",), ("groups",), ("lag", "--group", "g"),
              ("watch", "--iterations", "1"),
              ("reset-offsets", "--group", "g", "--topic", "t", "--to-earliest"), ("audit",),
              ("consume", "--group", "g", "--topic", "t")]


@pytest.mark.parametrize("command", CONNECTING, ids=[c[0] for c in CONNECTING])
def test_a_wrong_password_is_one_line_as_soon_as_the_broker_answers(
        broker: SecureDevBroker, tmp_path: Path, command: tuple[str, ...]) -> None:
    """kafka-python's clients drop the broker's answer and retry until their timeout: the
    check made before they connect reports it at once, far inside --timeout."""
    wrong = broker.write_client_properties(tmp_path / "bob-wrong.properties", "bob",
                                           password="not-the-password")
    expected = (f"authentication failed for user 'bob' (SCRAM-SHA-512) at "
                f"{broker.bootstrap_servers}: check the username and password "
                f"(sasl.jaas.config in {wrong})")
    started = time.monotonic()
    result = marshal(*command, "--bootstrap-servers", broker.bootstrap_servers,
                     "--command-config", str(wrong), "--timeout", "60")
    took = time.monotonic() - started
    assert result.returncode == 2
    assert one_line(result.stderr).endswith(f" error: {expected}"), result.stderr
    assert took < 20, f"reported after {took:.1f} s"  # process start included; not the 60 s


def test_a_wrong_password_is_an_authentication_error_from_the_library_at_once(
        broker: SecureDevBroker, tmp_path: Path) -> None:
    wrong = broker.write_client_properties(tmp_path / "bob-wrong.properties", "bob",
                                           password="not-the-password")
    started = time.monotonic()
    with pytest.raises(KafkaAuthenticationError) as caught:
        Marshaler(broker.bootstrap_servers, "g", "bob-1", HI, timeout=60,
                  kafka_config=load_properties(wrong))
    took = time.monotonic() - started
    assert isinstance(caught.value, MarshalError)
    assert str(caught.value).startswith(
        f"authentication failed for user 'bob' (SCRAM-SHA-512) at {broker.bootstrap_servers}: "
        "check the username and password (sasl.jaas.config")
    assert took < 10, f"raised after {took:.1f} s of a 60 s timeout"


def test_a_wrong_password_is_reported_when_the_first_bootstrap_server_is_down(
        broker: SecureDevBroker, tmp_path: Path) -> None:
    """The check before connecting tries the bootstrap servers in turn: a first one that
    refuses connections does not hide the answer of the next, in the library and the CLI."""
    wrong = broker.write_client_properties(tmp_path / "bob-wrong.properties", "bob",
                                           password="not-the-password")
    with socket.socket() as sock:  # a local port nothing listens on
        sock.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{sock.getsockname()[1]}"
    bootstrap = f"{down},{broker.bootstrap_servers}"
    expected = (f"authentication failed for user 'bob' (SCRAM-SHA-512) at "
                f"{broker.bootstrap_servers}: check the username and password "
                f"(sasl.jaas.config in {wrong})")
    with pytest.raises(KafkaAuthenticationError) as caught:
        Marshaler(bootstrap, "g", "bob-1", HI, timeout=60, kafka_config=load_properties(wrong))
    assert str(caught.value) == expected
    result = marshal("state", "--bootstrap-servers", bootstrap, "--command-config", str(wrong),
                     "--timeout", "60")
    assert result.returncode == 2
    assert one_line(result.stderr).endswith(f" error: {expected}"), result.stderr


def test_unknown_ca_says_to_check_the_truststore(broker: SecureDevBroker,
                                                 tmp_path: Path) -> None:
    other_ca = make_test_ca(tmp_path / "other-ca", "other-ca-password", "some other CA")
    config = tmp_path / "alice-other-ca.properties"
    config.write_text(broker.properties_path("alice").read_text().replace(
        str(broker.ca_path), str(other_ca)))
    result = marshal("state", "--bootstrap-servers", broker.bootstrap_servers,
                     "--command-config", str(config), "--timeout", "3")
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert line.startswith(f"marshal: error: TLS handshake with {broker.bootstrap_servers} "
                           "failed: the broker's certificate is not signed by a CA in "
                           f"{other_ca}"), line
    assert f"check ssl.truststore.location in {config}" in line


def test_a_principal_without_write_cannot_claim_and_is_told_why(
        broker: SecureDevBroker, data_topic: str) -> None:
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

    def allow(operation: ACLOperation, topic: str) -> ACL:
        return ACL("User:bob", "*", operation, ACLPermissionType.ALLOW,
                   ResourcePattern(ResourceType.TOPIC, topic))

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers,
                             **broker.client_config())
    try:  # everything a member needs but WRITE on __marshal (and on its index)
        created = admin.create_acls([
            allow(ACLOperation.READ, "__marshal"), allow(ACLOperation.DESCRIBE, "__marshal"),
            allow(ACLOperation.DESCRIBE_CONFIGS, "__marshal"),
            allow(ACLOperation.READ, "__marshal-index"),
            allow(ACLOperation.DESCRIBE, "__marshal-index"),
            allow(ACLOperation.READ, data_topic), allow(ACLOperation.DESCRIBE, data_topic)])
    finally:
        admin.close()
    assert not created["failed"]
    # A member's first write is its group's History in the index topic (PROTOCOL.md 6).
    expected = ("not authorized to write to the coordination index topic '__marshal-index' as "
                "User:bob: grant WRITE (and READ, DESCRIBE) on it; it keeps the layout of "
                "'__marshal' and where each group's records and newest checkpoint are")
    group = f"g-{uuid.uuid4().hex[:8]}"
    bob = broker.properties_path("bob")
    with Marshaler(broker.bootstrap_servers, group, "bob-1", HI, timeout=10,
                   kafka_config=load_properties(bob)) as m:
        with pytest.raises(KafkaAuthorizationError) as caught:
            m.consumer([data_topic], offset_reset="earliest")
        assert str(caught.value) == expected
    result = marshal("consume", "--bootstrap-servers", broker.bootstrap_servers,
                     "--command-config", str(bob), "--group", group, "--topic", data_topic,
                     "--client-id", "bob-2", "--heartbeat-interval", str(HI),
                     "--timeout", "10")
    assert result.returncode == 2
    assert one_line(result.stderr) == f"marshal: error: {expected}"
    state = marshal("state", "--bootstrap-servers", broker.bootstrap_servers,
                    "--command-config", str(broker.properties_path("admin")),
                    "--group", group, "--timeout", "10")
    assert state.returncode == 0, state.stderr
    assert "no claims" in state.stdout


def test_a_principal_without_acls_on_the_index_is_told_which_to_grant(
        broker: SecureDevBroker, data_topic: str) -> None:
    """Every ACL of a member on `__marshal` but none on its index (a setup made before the
    index existed): one line naming the index topic and what to grant."""
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ResourcePattern, ResourceType

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers,
                             **broker.client_config())
    try:
        created = admin.create_acls([
            ACL("User:carol", "*", operation, ACLPermissionType.ALLOW,
                ResourcePattern(ResourceType.TOPIC, topic))
            for topic, operations in (
                ("__marshal", (ACLOperation.READ, ACLOperation.WRITE, ACLOperation.DESCRIBE,
                               ACLOperation.DESCRIBE_CONFIGS)),
                (data_topic, (ACLOperation.READ, ACLOperation.DESCRIBE)))
            for operation in operations])
    finally:
        admin.close()
    assert not created["failed"]
    expected = ("not authorized to read the coordination index topic '__marshal-index' as "
                "User:carol: grant READ and DESCRIBE (members and `marshal init` also WRITE) "
                "on it; it keeps the layout of '__marshal' and where each group's records and "
                "newest checkpoint are")
    carol = broker.properties_path("carol")
    with pytest.raises(KafkaAuthorizationError) as caught:
        Marshaler(broker.bootstrap_servers, "g", "carol-1", HI, timeout=10,
                  kafka_config=load_properties(carol))
    assert str(caught.value) == expected
    result = marshal("state", "--bootstrap-servers", broker.bootstrap_servers,
                     "--command-config", str(carol), "--timeout", "10")
    assert result.returncode == 2
    assert one_line(result.stderr) == f"marshal: error: {expected}"


def test_an_exactly_once_member_needs_its_transactional_ids_and_is_told_which(
        broker: SecureDevBroker, data_topic: str) -> None:
    """Every ACL of a member and WRITE on the output topic, but none on the transactional ids
    of the group: one line naming the prefix to grant; granted, the copy works."""
    output = f"copies-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers,
                             **broker.client_config())
    try:
        admin.create_topics({output: {"num_partitions": 2, "replication_factor": 1}},
                            wait_for_metadata=True)
    finally:
        admin.close()
    group = f"eos-{uuid.uuid4().hex[:8]}"
    broker.grant("dave", "__marshal", [data_topic], output_topics=[output])
    dave = str(broker.properties_path("dave"))
    command = ("consume", "--bootstrap-servers", broker.bootstrap_servers, "--command-config",
               dave, "--group", group, "--topic", data_topic, "--mode", "eos",
               "--output-topic", output, "--offset-reset", "earliest", "--heartbeat-interval",
               str(HI), "--timeout", "10", "--max-records", str(2 * RECORDS))
    refused = marshal(*command)
    assert refused.returncode == 2
    lines = [x for x in refused.stderr.splitlines()
             if x.strip() and not x.startswith("marshal consume: member ")]
    assert len(lines) == 1 and "Traceback" not in refused.stderr, refused.stderr
    partition = "0" if f"/{data_topic}/0'" in lines[0] else "1"  # the first one taken up
    assert lines[0] == (
        f"marshal: error: not authorized to use transactional id 'marshal/{group}/"
        f"{data_topic}/{partition}' as User:dave: grant WRITE and DESCRIBE on TransactionalId "
        f"'marshal/{group}/' (resource pattern type prefixed) for exactly-once consumers")
    broker.grant("dave", "__marshal", [data_topic], output_topics=[output],
                 transactional_group=group)
    copied = marshal(*command)
    assert copied.returncode == 0, copied.stderr
    assert f"copied {2 * RECORDS} records to {output} exactly once" in copied.stderr
