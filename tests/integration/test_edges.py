"""Faults at the edges, on the real broker: partitions added to a data topic while a group
consumes it, committed offsets deleted by retention, and the coordination topic deleted and
recreated under running members."""

from __future__ import annotations

import logging
import time

import pytest
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import NewPartitions

from marshal_py import CoordinationLogLostError, Marshaler
from marshal_py.admin.world_view import load_world
from marshal_py.client.consumer import Consumer
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import ClaimingPartition, Message, ReleasingPartition, encode
from marshal_py.replay import catch_up
from marshal_py.world import Outcome, Rationalizer, RationalizerConfig
from tests.integration.test_cli_admin import make_topic, wait_for

pytestmark = pytest.mark.integration

HI = 1.0



def produce(bootstrap: str, topic: str, per_partition: dict[int, int], tag: str) -> set[bytes]:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    values = set()
    for partition, count in per_partition.items():
        for i in range(count):
            value = f"{tag}-{partition}-{i}".encode()
            producer.send(topic, key=f"k{i % 7}".encode(), value=value, partition=partition)
            values.add(value)
    producer.flush()
    producer.close()
    return values


@pytest.mark.parametrize("mode", ["alo", "share", "key-shared"])
def test_partitions_added_while_consuming_are_read_from_their_beginning(
        kafka_bootstrap: str, unique_name: str, mode: str) -> None:
    topic = unique_name
    make_topic(kafka_bootstrap, topic, 2, 3)  # read before the group: skipped ("latest")
    with Marshaler(kafka_bootstrap, f"{topic}.g", "w1", heartbeat_interval=HI,
                   coordination_topic=f"__marshal-{topic}") as m:
        consumer = m.consumer([topic], mode, offset_reset="latest")  # type: ignore[call-overload]
        got: list[bytes] = []

        def take() -> None:
            for record in consumer.poll(timeout_s=0.2):
                got.append(record.value)
                if mode == "alo":
                    consumer.commit(record)

        def started() -> bool:
            take()
            if mode == "share":
                return all(m.rationalizer.share_partition(f"{topic}.g", topic, p) is not None
                           for p in (0, 1))
            if mode == "key-shared":
                return all(consumer.slots(topic, p) for p in (0, 1))  # type: ignore[union-attr]
            return len(consumer.assignment()) == 2

        wait_for(started, "the group to start on both partitions")
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        admin.create_partitions({topic: NewPartitions(total_count=4)})
        admin.close()
        # Produced at once to the new partitions, before any member can have noticed them.
        expected = produce(kafka_bootstrap, topic, {0: 4, 1: 4, 2: 6, 3: 6}, "after")
        wait_for(lambda: (take(), expected <= set(got))[1],
                 f"every record produced after the start ({len(expected)})")
        assert not any(v.startswith(b"0-") or v.startswith(b"1-") for v in got), \
            "records older than the group's start were delivered despite offset_reset=latest"
        consumer.close()


def test_committed_offsets_deleted_by_retention_restart_at_the_log_start(
        kafka_bootstrap: str, unique_name: str, caplog: pytest.LogCaptureFixture) -> None:
    topic, group = unique_name, f"{unique_name}.g"
    make_topic(kafka_bootstrap, topic, 1, 30)
    settings = dict(heartbeat_interval=HI, coordination_topic=f"__marshal-{topic}")
    with Marshaler(kafka_bootstrap, group, "w1", **settings) as m:
        consumer = m.consumer([topic], offset_reset="earliest")
        assert isinstance(consumer, Consumer)
        done = 0
        deadline = time.monotonic() + 60
        while done < 10 and time.monotonic() < deadline:
            for record in consumer.poll(timeout_s=0.5, max_records=10 - done):
                consumer.commit(record)
                done += 1
        consumer.close()  # releases the partition with committed offset 10
        assert [c.committed_offset for c in m.claims(topic)] == [10]
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.delete_records({TopicPartition(topic, 0): 20})  # what retention would do
    admin.close()
    caplog.set_level(logging.WARNING, logger="marshal_py")
    with Marshaler(kafka_bootstrap, group, "w2", **settings) as m:
        consumer = m.consumer([topic], offset_reset="earliest")
        first: list[int] = []
        wait_for(lambda: bool(first.extend(r.offset for r in consumer.poll(timeout_s=0.2)))
                 or bool(first), "the first record")
        assert first[0] == 20  # the log start, not the deleted committed offset 10
        consumer.close()
    assert any("committed offset 10 was deleted by retention; starting at 20" in r.message
               for r in caplog.records)


def test_a_recreated_coordination_topic_stops_running_members(
        kafka_bootstrap: str, unique_name: str) -> None:
    topic, group, ctopic = unique_name, f"{unique_name}.g", f"__marshal-{unique_name}"
    make_topic(kafka_bootstrap, topic, 2, 5)
    with Marshaler(kafka_bootstrap, group, "w1", heartbeat_interval=HI,
                   coordination_topic=ctopic) as m:
        consumer = m.consumer([topic], offset_reset="earliest")
        assert isinstance(consumer, Consumer)
        got = 0
        deadline = time.monotonic() + 60
        while got < 10 and time.monotonic() < deadline:
            for record in consumer.poll(timeout_s=0.5):
                consumer.commit(record)
                got += 1
        assert got == 10 and len(consumer.assignment()) == 2
        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        admin.delete_topics([ctopic])
        admin.close()

        admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        wait_for(lambda: ctopic not in admin.list_topics(), "the coordination topic to go")
        admin.close()
        # Recreated (as `marshal init` would), empty: everything the member read is gone.
        KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=ctopic)).close()
        produce(kafka_bootstrap, topic, {0: 5, 1: 5}, "later")
        # The member finds out at its next read of the log (PROTOCOL.md section 7: a read
        # position sent back, a record appended below what was read, or another topic id);
        # records produced meanwhile may go out under leases the old log still confirms.
        with pytest.raises(CoordinationLogLostError,
                           match=r"went back on partition|deleted and recreated"):
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                consumer.poll(timeout_s=0.2)
        assert consumer.poll(timeout_s=0.5) == []  # stopped: nothing more is handed out
        assert consumer.assignment() == set()  # nothing is held any more
        consumer.close()  # releases nothing into the new topic
    # The new log holds no claim or release of the stopped member: a member started on it
    # owns the partitions alone.
    written: list[Message] = []

    def note(outcome: Outcome) -> None:
        if outcome.message is not None:
            written.append(outcome.message)

    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=ctopic,
                                 create_topic=False)) as new_log:
        view = load_world(new_log, heartbeat_interval_ms=int(HI * 1000), window_ms=0,
                          on_outcome=note)
    assert not any(isinstance(msg, (ClaimingPartition, ReleasingPartition)) for msg in written)
    assert all(c.owner is None for c in view.rationalizer.claims(group, topic))


def _delete_topic(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
        wait_for(lambda: topic not in admin.list_topics(), f"{topic} to go")
    finally:
        admin.close()


def test_a_coordination_topic_recreated_and_refilled_past_the_read_position_is_detected(
        kafka_bootstrap: str, unique_name: str) -> None:
    """Its ends no longer go back, so only the topic id tells the new topic apart: reading
    on from the old position would mix two logs (and could show a claim that is gone)."""
    ctopic = f"__marshal-{unique_name}"
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=ctopic, partitions=1,
                            timeout_s=5)
    with KafkaLog(config) as reader:
        reader.identity_check_s = 0.0
        for i in range(5):
            reader.append(0, encode(ClaimingPartition(0, f"{i:08x}", "w1", "g", "t", 0)))
        world = Rationalizer(RationalizerConfig(1, int(HI * 1000)))
        assert catch_up(reader, world, [0]) == 5
        first_id = reader.topic_id
        assert first_id is not None
        _delete_topic(kafka_bootstrap, ctopic)
        with KafkaLog(config) as writer:  # recreated, and refilled past position 5
            for i in range(20):
                writer.append(0, encode(ClaimingPartition(0, f"{i:08x}", "w2", "g", "t", 0)))
            assert writer.topic_id not in (None, first_id)
        with pytest.raises(CoordinationLogLostError, match="deleted and recreated"):
            catch_up(reader, world, [0])
        assert world.next_position(0) == 5  # nothing of the new topic was applied


def test_a_deleted_coordination_topic_is_told_from_a_broker_away_at_once(
        kafka_bootstrap: str, unique_name: str) -> None:
    """A deleted topic answers no request (reads of its ends would wait out the whole
    timeout): the first read that waits asks the brokers, which say it is gone."""
    ctopic = f"__marshal-{unique_name}"
    config = KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=ctopic, partitions=1,
                            timeout_s=30)
    with KafkaLog(config) as reader:
        reader.append(0, encode(ClaimingPartition(0, "00000001", "w1", "g", "t", 0)))
        world = Rationalizer(RationalizerConfig(1, int(HI * 1000)))
        assert catch_up(reader, world, [0]) == 1
        _delete_topic(kafka_bootstrap, ctopic)
        started = time.monotonic()
        with pytest.raises(CoordinationLogLostError, match="was deleted under this member"):
            catch_up(reader, world, [0])
        # Told by the brokers' answer within one identity check, not after the 30 s timeout.
        assert time.monotonic() - started < config.timeout_s / 2
