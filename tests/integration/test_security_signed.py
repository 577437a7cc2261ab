"""An authenticated (signed) group on the secured broker (SASL_SSL with SCRAM-SHA-512, a test
CA, ACLs on): two principals with a member's ACLs and the group's key consume it at least
once -- one `marshal consume` process, one library member -- through a rebalance and a
kill -9; every coordination record of the group is signed, and `marshal audit --auth-keys`,
run as a member, rejects nothing and finds no violation."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from marshal_py import GroupKey, Marshaler
from marshal_py.config.kafka_properties import load_properties
from marshal_py.devbroker.security import SecureDevBroker
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import decode_signed
from marshal_py.replay.checkpoints import read_range
from tests.integration.consumer_support import ConsumerProcess, run_marshal, wait_for
from tests.integration.test_auth import key_file
from tests.support import secured_broker, write_as_admin

pytestmark = pytest.mark.integration

HI = 1.0
PARTITIONS = 4
PER_PARTITION = 25  # records per partition in each of the two halves
KEY = GroupKey("k1", b"the-secret-of-a-signed-group-001")


@pytest.fixture(scope="module")
def broker() -> Iterator[SecureDevBroker]:
    """A secure broker with users admin (super user), alice and bob, and `__marshal` (and its
    index) created by admin."""
    with secured_broker("alice", "bob") as secure:
        yield secure


def write_half(broker: SecureDevBroker, topic: str, half: int) -> set[tuple[int, int]]:
    """Write PER_PARTITION records to every partition of ``topic`` as admin, acknowledged;
    where they landed."""
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=broker.bootstrap_servers, acks="all",
                             **broker.client_config())
    try:
        futures = [producer.send(topic, value=f"{half}-{p}-{i}".encode(), partition=p)
                   for i in range(PER_PARTITION) for p in range(PARTITIONS)]
        producer.flush()
        return {(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)}
    finally:
        producer.close()


def test_a_signed_group_consumes_hands_over_and_audits_clean(
        broker: SecureDevBroker, tmp_path: Path) -> None:
    bootstrap = broker.bootstrap_servers
    topic, group = f"orders-{uuid.uuid4().hex[:8]}", f"signed-{uuid.uuid4().hex[:8]}"
    write_as_admin(broker, topic, PARTITIONS, ())  # creates it
    first_half = write_half(broker, topic, 0)
    for user in ("alice", "bob"):
        broker.grant(user, "__marshal", [topic])
    keys = key_file(tmp_path / "keys", group, (KEY,))
    alice_config = broker.properties_path("alice")

    # bob, a `marshal consume` process, alone at first: it takes every partition.
    bob = ConsumerProcess(bootstrap, "__marshal", group, topic, "bob-1", tmp_path, hi=HI,
                          extra=("--command-config", str(broker.properties_path("bob")),
                                 "--auth-keys", str(keys)))
    try:
        bob.wait_joined()
        wait_for(lambda: first_half <= set(bob.printed()), 30, "bob to print the first half",
                 describe=bob.stderr_text)
        # alice, a library member writing a checkpoint every second, joins: bob hands her
        # her fair share (a release and her claim); then bob is killed and she takes the
        # rest over once his claims are stale (2 HI).
        with Marshaler(bootstrap, group, "alice-1", HI, timeout=10,
                       kafka_config=load_properties(alice_config), auth_keys=(KEY,),
                       checkpoint_interval=1.0) as alice:
            consumer = alice.consumer([topic], offset_reset="earliest")
            delivered: list[tuple[int, int]] = []

            def holds(count: int) -> bool:
                for record in consumer.poll(timeout_s=0.2):
                    delivered.append((record.partition, record.offset))
                    consumer.commit(record)
                return len(consumer.assignment()) == count

            wait_for(lambda: holds(PARTITIONS // 2), 30, "alice to get her fair share")
            bob.kill()
            second_half = write_half(broker, topic, 1)
            wait_for(lambda: holds(PARTITIONS) and second_half <= set(delivered), 30,
                     "alice to take bob's partitions over and deliver the second half",
                     describe=lambda: f"alice holds {consumer.assignment()}, "
                     f"{len(second_half - set(delivered))} of the second half missing")
    finally:
        bob.cleanup()
    # At least once: every record delivered by one of them.
    assert first_half | second_half <= set(bob.printed()) | set(delivered)

    # Every coordination record of the group is signed (version 3, with a sequence number).
    with KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, create_topic=False,
                                 kafka_config=broker.client_config())) as log:
        records = [r for p in range(log.partition_count())
                   for r in read_range(log, p, 0, log.end_position(p))]
    kinds: dict[str, set[str]] = {}
    count = 0
    for record in records:
        message, signature = decode_signed(record.value or b"")
        if message.group_id != group:
            continue
        count += 1
        assert signature is not None and (record.value or b"").startswith(b"Signed/3/"), \
            record.value
        kinds.setdefault(message.client_id, set()).add(type(message).__name__)
    assert {"ClaimingPartition", "Heartbeat", "ReleasingPartition",
            "MemberHeartbeat"} <= kinds["bob-1"], kinds
    assert {"ClaimingPartition", "Heartbeat", "ReleasingPartition", "MemberHeartbeat",
            "Checkpoint"} <= kinds["alice-1"], kinds

    # The audit, as alice with the group's keys: nothing rejected, no violation, and bob's
    # stale partitions taken over.
    audit = run_marshal("audit", "--bootstrap-servers", bootstrap, "--command-config",
                        str(alice_config), "--auth-keys", str(keys), "--group", group,
                        "--heartbeat-interval", str(HI), "--json", "--timeout", "10",
                        timeout=120)
    assert audit.returncode == 0, audit.stderr
    found = json.loads(audit.stdout)
    assert found["violations"] == 0, found
    assert [row["rejected"] for row in found["coordination"]] == [0] * len(
        found["coordination"]), found["coordination"]
    [summary] = found["summary"]
    assert summary["group"] == group and summary["records"] == count, (summary, count)
    assert summary["owners"] == 2, summary
    assert summary["takeovers"] >= 1, summary
