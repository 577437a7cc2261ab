"""KafkaLog against the real broker: topic creation and the checks that protect the protocol."""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType

from marshal_py.errors import BrokerUnavailableError, ConfigurationError, CoordinationTopicError
from marshal_py.log import KafkaLog, KafkaLogConfig

pytestmark = pytest.mark.integration


def topic_configs(bootstrap: str, topic: str) -> dict[str, str]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        return {k: v["value"] for k, v in described["topic"][topic].items()}
    finally:
        admin.close()


def test_creates_the_coordination_topic_with_the_settings_the_protocol_needs(
        kafka_bootstrap: str, unique_name: str) -> None:
    topic = f"__marshal-{unique_name}"
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic,
                                 partitions=3, retention_ms=3_600_000)) as log:
        assert log.partition_count() == 3
    configs = topic_configs(kafka_bootstrap, topic)
    assert configs["message.timestamp.type"] == "LogAppendTime"
    assert configs["retention.ms"] == "3600000"
    assert configs["unclean.leader.election.enable"] == "false"
    # Opening it again finds it instead of creating it.
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic,
                                 partitions=9, create_topic=False)) as log:
        assert log.partition_count() == 3


def test_a_missing_topic_is_an_error_when_creation_is_off(kafka_bootstrap: str,
                                                           unique_name: str) -> None:
    with pytest.raises(CoordinationTopicError, match="does not exist"):
        KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=unique_name,
                                create_topic=False))


def test_a_create_time_topic_is_refused_with_the_risk_explained(kafka_bootstrap: str,
                                                                 unique_name: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.create_topics({unique_name: {"num_partitions": 2, "replication_factor": 1}},
                            wait_for_metadata=True)
    finally:
        admin.close()
    with pytest.raises(CoordinationTopicError) as info:
        KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=unique_name))
    message = str(info.value)
    assert "message.timestamp.type=CreateTime" in message
    assert "clock" in message and "LogAppendTime" in message
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=unique_name,
                                 allow_create_time=True)) as log:
        assert log.partition_count() == 2


def test_an_unreachable_broker_is_one_clear_error() -> None:
    with pytest.raises(BrokerUnavailableError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
        KafkaLog(KafkaLogConfig(bootstrap_servers="127.0.0.1:1", timeout_s=1.0))


def test_bad_settings_are_rejected_before_connecting() -> None:
    with pytest.raises(ConfigurationError):
        KafkaLogConfig(bootstrap_servers=" ")
    with pytest.raises(ConfigurationError):
        KafkaLogConfig(partitions=0)


def test_appends_are_durable_and_stamped_by_the_broker(kafka_bootstrap: str,
                                                       unique_name: str) -> None:
    topic = f"__marshal-{unique_name}"
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic,
                                 partitions=1)) as writer:
        stored = [writer.append(0, f"m{i}".encode()) for i in range(20)]
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic,
                                 create_topic=False)) as reader:
        got = []
        while len(got) < 20:
            got.extend(reader.fetch({0: len(got)}, timeout_s=5.0))
    assert [(r.position, r.timestamp_ms, r.value) for r in got] == [
        (r.position, r.timestamp_ms, r.value) for r in stored
    ]
