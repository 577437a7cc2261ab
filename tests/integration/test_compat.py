"""``marshal consume --compat v1`` on the real broker: what it writes is what the original
implementation reads, and what it cannot do is one line and exit 2 (PROTOCOL.md 13.1).

Every test runs on the default broker and on Kafka 3.9: the original's Kafka client speaks
only protocol versions that Kafka 4.0 removed, so a group shared with it lives on a 3.x
broker."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewPartitions

from marshal_py.log import KafkaLog, KafkaLogConfig
from tests.integration.consumer_support import (
    ON_EVERY_BROKER_BOOTSTRAP,
    broker_bootstrap,
    create_topic,
    run_marshal,
)
from tests.integration.test_cli import assert_one_line_error
from tests.simulation.test_compat import original_parse

pytestmark = [pytest.mark.integration, ON_EVERY_BROKER_BOOTSTRAP]


@pytest.fixture
def bootstrap(request: pytest.FixtureRequest) -> str:
    return broker_bootstrap(request)


def test_a_compat_member_consumes_and_writes_only_original_records(
        bootstrap: str, unique_name: str) -> None:
    ctopic = f"__marshal-{unique_name}"
    create_topic(bootstrap, unique_name, 2)
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    for i in range(50):
        producer.send(unique_name, str(i).encode(), partition=i % 2)
    producer.flush()
    producer.close()
    result = run_marshal(
        "consume", "--bootstrap-servers", bootstrap, "--coordination-topic", ctopic,
        "--group", "mixed", "--topic", unique_name, "--compat", "v1", "--heartbeat-interval",
        "60", "--offset-reset", "earliest", "--max-records", "50")
    assert result.returncode == 0, result.stderr
    assert "consumed 50 records" in result.stderr
    assert "heartbeat_interval" not in result.stderr  # 60 s: the original's interval
    with KafkaLog(KafkaLogConfig(bootstrap, ctopic, create_topic=False)) as log:
        records = log.fetch(dict.fromkeys(range(log.partition_count()), 0), 5)
    kinds = [original_parse(r.value)[0] for r in records if r.value is not None]
    assert "ClaimingPartition" in kinds and "ReleasingPartition" in kinds
    assert all(r.value is not None and r.value.split(b"/")[1] == b"1" for r in records)


@pytest.mark.parametrize("args, needle", [
    (("--mode", "share"), "'alo' or 'amo' only"),
    (("--mode", "key-shared"), "'alo' or 'amo' only"),
    (("--group", "team/mixed"), "holds a '/'"),
])
def test_what_the_original_cannot_follow_is_one_line_and_exit_2(
        bootstrap: str, unique_name: str, args: tuple[str, ...], needle: str) -> None:
    create_topic(bootstrap, unique_name, 1)
    base = {"--group": "mixed", "--mode": "alo"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    flags = [x for kv in base.items() for x in kv]
    result = run_marshal("consume", "--bootstrap-servers", bootstrap,
                         "--coordination-topic", f"__marshal-{unique_name}", "--topic",
                         unique_name, "--compat", "v1", "--heartbeat-interval", "60", *flags)
    assert_one_line_error(result, needle)


def test_a_coordination_topic_with_added_partitions_refuses_compat(
        bootstrap: str, unique_name: str) -> None:
    ctopic = f"__marshal-{unique_name}"
    create_topic(bootstrap, unique_name, 1)
    init = run_marshal("init", "--bootstrap-servers", bootstrap, "--coordination-topic",
                       ctopic, "--partitions", "2")
    assert init.returncode == 0, init.stderr
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_partitions({ctopic: NewPartitions(total_count=4)})
    finally:
        admin.close()
    result = run_marshal("consume", "--bootstrap-servers", bootstrap,
                         "--coordination-topic", ctopic, "--group", "mixed", "--topic",
                         unique_name, "--compat", "v1", "--heartbeat-interval", "60")
    # The layout's own warning (partitions were added), then the refusal.
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "has 4 partitions but its layout places by 2" in result.stderr.splitlines()[-1]
    assert "would split the group" in result.stderr.splitlines()[-1]
