"""KafkaLog against the real broker: topic creation and the checks that protect the protocol."""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import replace

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions

from marshal_py.errors import BrokerUnavailableError, ConfigurationError, CoordinationTopicError
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.log.kafka import kafka_topic_id
from marshal_py.protocol.index import layout_key
from tests.integration.consumer_support import wait_for

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
    # Its index: compacted, one partition, holding the layout (PROTOCOL.md section 3).
    index = topic_configs(kafka_bootstrap, f"{topic}-index")
    assert index["cleanup.policy"] == "compact"
    assert index["unclean.leader.election.enable"] == "false"
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


def test_an_unreachable_broker_is_one_clear_error_and_leaves_no_thread_behind() -> None:
    before = set(threading.enumerate())
    with pytest.raises(BrokerUnavailableError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
        KafkaLog(KafkaLogConfig(bootstrap_servers="127.0.0.1:1", timeout_s=1.0))
    # kafka-python's failed constructor leaves its network thread retrying forever unless
    # closed (marshal_py.log.kafka_config.new_client): a process that retries would pile up.
    assert [t.name for t in threading.enumerate() if t not in before] == []


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


def test_a_time_lookup_never_answers_past_a_record_appended_while_it_asked(
        kafka_bootstrap: str, unique_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """position_for_time asks the broker for the first record at or after a time, finds
    none, and a peer appends its first record before the answer is given: the answer is
    the end as it was before asking, so a replay from it reads the peer's record (issue 22:
    members of a new group began past their peers' first records)."""
    topic = f"__marshal-{unique_name}"
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic, partitions=1)
    with KafkaLog(config) as log, KafkaLog(replace(config, create_topic=False)) as peer:
        consumer = log._get_consumer()
        asked = consumer.offsets_for_times
        appended: list[int] = []

        def then_a_peer_appends(*args: object, **kwargs: object) -> object:
            found = asked(*args, **kwargs)
            appended.append(peer.append(0, b"a peer's first record").position)
            return found

        monkeypatch.setattr(consumer, "offsets_for_times", then_a_peer_appends)
        since = int(time.time() * 1000) - 60_000
        assert log.position_for_time(0, since) == 0
        assert appended == [0]
        monkeypatch.undo()
        assert log.position_for_time(0, since) == 0  # the record is not older than the time
        assert log.end_position(0) == 1


# -- the layout (PROTOCOL.md section 3) --------------------------------------------------------


def create_plain_topic(bootstrap: str, topic: str, partitions: int,
                       configs: dict[str, str] | None = None) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1,
                                     "configs": configs or {}}}, wait_for_metadata=True)
    finally:
        admin.close()


def add_partitions(bootstrap: str, topic: str, total: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_partitions({topic: NewPartitions(total)})
    finally:
        admin.close()


def index_records(bootstrap: str, index: str) -> list[tuple[bytes | None, bytes | None]]:
    """The layout records of ``index`` (those of other kinds left out: a topic's creator
    also declares its history, PROTOCOL.md 6.1)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             auto_offset_reset="earliest", consumer_timeout_ms=1000)
    try:
        consumer.assign([TopicPartition(index, 0)])
        return [(r.key, r.value) for r in consumer
                if r.key is not None and r.key.startswith(b"layout/")]
    finally:
        consumer.close()


def marshal_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and r.name.startswith("marshal_py")]


def write_layout(bootstrap: str, index: str, value: bytes, writer: str = "ffffffff") -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        producer.send(index, key=layout_key(writer), value=value, partition=0).get(30)
    finally:
        producer.close()


def test_added_partitions_stay_unused_and_are_warned_about_once(
        kafka_bootstrap: str, unique_name: str, caplog: pytest.LogCaptureFixture) -> None:
    topic = f"__marshal-{unique_name}"
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic, partitions=4)
    with KafkaLog(config) as first:
        [(key, value)] = index_records(kafka_bootstrap, f"{topic}-index")
        assert key is not None and key.startswith(b"layout/")
        assert value == f"Layout/2/{topic}/{kafka_topic_id(first.topic_id)}/4".encode()
        add_partitions(kafka_bootstrap, topic, 16)
        caplog.set_level(logging.WARNING, logger="marshal_py")
        with KafkaLog(config) as second, KafkaLog(replace(config, create_topic=False)) as view:
            for opened in (second, view):
                assert opened.partition_count() == 4
                assert opened.metadata_partition_count == 16
        warnings = marshal_warnings(caplog)
        assert len(warnings) == 2, warnings  # one per opener
        assert all(f"{topic} has 16 partitions, but its layout (in {topic}-index) places "
                   "records on its first 4" in w and "PROTOCOL.md section 3" in w
                   for w in warnings)
        # The member that was running when they were added says so once, on its cadence.
        caplog.clear()
        first.identity_check_s = 0.0
        first.verify_identity()
        first.verify_identity()
        assert first.partition_count() == 4 and first.metadata_partition_count == 16
        assert len(marshal_warnings(caplog)) == 1
    assert len(index_records(kafka_bootstrap, f"{topic}-index")) == 1  # nobody wrote again


def test_a_topic_without_an_index_gets_its_layout_from_the_first_member(
        kafka_bootstrap: str, unique_name: str) -> None:
    """A coordination topic made by an older version (no index): the read-only CLI views
    are told to run `marshal init`; the first member (or `marshal init`) creates the index
    and records the topic's partition count."""
    topic = f"__marshal-{unique_name}"
    create_plain_topic(kafka_bootstrap, topic, 3, {"message.timestamp.type": "LogAppendTime"})
    view = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic, create_topic=False)
    with pytest.raises(CoordinationTopicError) as caught:
        KafkaLog(view)
    assert str(caught.value) == (
        f"the coordination index topic '{topic}-index' (which keeps the placement of "
        f"'{topic}', PROTOCOL.md section 3) does not exist on {kafka_bootstrap}; create it "
        "with `marshal init` (or let a member create it)")
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic)) as member:
        assert member.partition_count() == 3
    with KafkaLog(view) as reader:
        assert reader.partition_count() == 3


def test_concurrent_first_openers_agree_and_the_first_record_wins(
        kafka_bootstrap: str, unique_name: str) -> None:
    topic = f"__marshal-{unique_name}"
    create_plain_topic(kafka_bootstrap, topic, 2, {"message.timestamp.type": "LogAppendTime"})
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic)
    counts: list[int] = []
    errors: list[BaseException] = []
    start = threading.Barrier(3)

    def open_one() -> None:
        try:
            start.wait(30)
            with KafkaLog(config) as log:
                counts.append(log.partition_count())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors and counts == [2, 2, 2]
    # A later layout record (a first opener that wrote late, with another count) changes
    # nothing: the lowest offset wins, and compaction keeps both (different keys).
    with KafkaLog(config) as log:
        write_layout(kafka_bootstrap, f"{topic}-index",
                     f"Layout/2/{topic}/{kafka_topic_id(log.topic_id)}/8".encode())
    with KafkaLog(config) as log:
        assert log.partition_count() == 2


def test_fewer_partitions_than_the_layout_is_an_error(kafka_bootstrap: str,
                                                        unique_name: str) -> None:
    topic = f"__marshal-{unique_name}"
    create_plain_topic(kafka_bootstrap, topic, 2, {"message.timestamp.type": "LogAppendTime"})
    create_plain_topic(kafka_bootstrap, f"{topic}-index", 1, {"cleanup.policy": "compact"})
    write_layout(kafka_bootstrap, f"{topic}-index", f"Layout/2/{topic}//5".encode())
    with pytest.raises(CoordinationTopicError) as caught:
        KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic))
    assert f"{topic!r} has 2 partitions, fewer than the 5 its layout" in str(caught.value)
    assert "give it 5 partitions again (PROTOCOL.md section 3)" in str(caught.value)


def test_an_index_that_retention_would_empty_is_refused(kafka_bootstrap: str,
                                                         unique_name: str) -> None:
    topic = f"__marshal-{unique_name}"
    create_plain_topic(kafka_bootstrap, f"{topic}-index", 1)
    with pytest.raises(CoordinationTopicError) as caught:
        KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic))
    assert ("cleanup.policy=delete: retention would delete the layout it keeps; set it with "
            "`kafka-configs") in str(caught.value)


def test_a_recreated_coordination_topic_gets_a_layout_of_its_own(
        kafka_bootstrap: str, unique_name: str) -> None:
    topic = f"__marshal-{unique_name}"
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic,
                                 partitions=4)):
        pass
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_topics([topic])
        wait_for(lambda: topic not in admin.list_topics(), 30, "the topic to go")
    finally:
        admin.close()
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic,
                                 partitions=2)) as log:
        assert log.partition_count() == 2
    assert len(index_records(kafka_bootstrap, f"{topic}-index")) == 2


def test_a_custom_index_topic(kafka_bootstrap: str, unique_name: str) -> None:
    topic, index = f"__marshal-{unique_name}", f"layouts-{unique_name}"
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=topic, partitions=3,
                            index_topic=index)
    with KafkaLog(config) as log:
        assert log.partition_count() == 3
    assert len(index_records(kafka_bootstrap, index)) == 1
    with pytest.raises(ConfigurationError, match="must be another topic"):
        KafkaLogConfig(topic="x", index_topic="x")
