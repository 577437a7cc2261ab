"""Hanging transactions on the real broker (marshal_py/log/hanging.py, `marshal find-hanging`):
one is found on the coordination topic with where else it is open, completed the way its
coordinator decided (commit or abort) on every partition holding it, and one whose outcome is
unknown is left alone with the Kafka tool's abort command for an operator.

A broker restart makes them only by chance (chaos/operator.py), so this test makes one on
purpose: on a broker that does not verify transactional writes, a producer writes to a
partition without registering it with its coordinator, whose markers then never reach it.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from marshal_py.devbroker import DevBroker
from marshal_py.errors import MarshalError
from marshal_py.log.hanging import HangingTransactions
from marshal_py.log.kafka_config import KafkaLogConfig
from tests.integration.consumer_support import create_topic, run_marshal

pytestmark = pytest.mark.integration


class UnverifiedBroker(DevBroker):
    """A broker that takes transactional writes to partitions never added to their
    transaction (as brokers before Kafka 3.6 did): what leaves a transaction hanging."""

    def _server_properties(self) -> str:
        return super()._server_properties() + "transaction.partition.verification.enable=false\n"


@pytest.fixture(scope="module")
def bootstrap() -> Iterator[str]:
    broker = UnverifiedBroker(heap="512m")
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture
def topics(bootstrap: str) -> dict[str, str]:
    tag = uuid.uuid4().hex[:8]
    names = {"coordination": f"__marshal_hang_{tag}", "output": f"hang-out-{tag}",
             "tid": f"marshal/hang.{tag}/in/0"}
    create_topic(bootstrap, names["coordination"], 2)
    create_topic(bootstrap, names["output"], 2)
    return names


def leave_hanging(bootstrap: str, tid: str, registered: TopicPartition,
                  unregistered: list[TopicPartition], commit: bool) -> None:
    """A transaction that writes to ``registered`` and (unknown to its coordinator) to
    ``unregistered``, then commits or aborts: only ``registered`` gets the marker."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        producer.send(registered.topic, b"kept", partition=registered.partition).get(10)
        manager = producer._transaction_manager  # skip the AddPartitionsToTxn of the rest
        for tp in unregistered:
            manager._partitions_in_transaction.add(tp)
            producer.send(tp.topic, b"hung", partition=tp.partition).get(10)
        if commit:
            producer.commit_transaction()
        else:
            producer.abort_transaction()
    finally:
        producer.close(timeout=5)


def committed_values(bootstrap: str, tp: TopicPartition) -> tuple[int, list[bytes]]:
    """The partition's last stable offset and the values read_committed readers see."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             isolation_level="read_committed", enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        end = consumer.end_offsets([tp])[tp]
        values: list[bytes] = []
        while consumer.position(tp) < end:
            for records in consumer.poll(timeout_ms=500).values():
                values.extend(r.value for r in records)
        return end, values
    finally:
        consumer.close()


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "aborted"])
def test_a_hanging_transaction_is_completed_as_its_coordinator_decided(
        bootstrap: str, topics: dict[str, str], commit: bool) -> None:
    coordination = TopicPartition(topics["coordination"], 1)
    output = TopicPartition(topics["output"], 0)
    leave_hanging(bootstrap, topics["tid"], TopicPartition(topics["output"], 1),
                  [coordination, output], commit)
    assert committed_values(bootstrap, coordination) == (0, [])  # held by the open one
    config = KafkaLogConfig(bootstrap_servers=bootstrap, topic=topics["coordination"])
    with HangingTransactions(config) as finder:
        (hanging,) = finder.find(finder.partitions_of([topics["coordination"]]), min_age_s=0)
        assert hanging.transactional_id == topics["tid"]
        assert hanging.decision == ("commit" if commit else "abort")
        assert {(o.topic, o.partition) for o in hanging.open_on} == {
            (coordination.topic, 1), (output.topic, 0)}  # found on the output topic too
        done = finder.resolve(hanging)
        assert len(done) == 2
        assert finder.find(finder.partitions_of([topics["coordination"]]), min_age_s=0) == []
    seen = [b"hung"] if commit else []
    for tp in (coordination, output):
        end, values = committed_values(bootstrap, tp)
        assert end == 2 and values == seen  # the record and the marker
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:  # the id was fenced before the markers: the old producer can add nothing more
        now = admin.describe_transactions([topics["tid"]])[topics["tid"]]
        assert (now.producer_id, now.producer_epoch) == (hanging.producer_id,
                                                         hanging.producer_epoch + 1)
    finally:
        admin.close()


def test_a_hanging_transaction_of_unknown_outcome_is_left_to_an_operator(
        bootstrap: str, topics: dict[str, str]) -> None:
    coordination = TopicPartition(topics["coordination"], 0)
    leave_hanging(bootstrap, topics["tid"], TopicPartition(topics["output"], 1),
                  [coordination], commit=True)
    fresh = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=topics["tid"])
    fresh.init_transactions()  # the coordinator no longer knows how the hanging one ended
    fresh.close(timeout=5)
    config = KafkaLogConfig(bootstrap_servers=bootstrap, topic=topics["coordination"])
    with HangingTransactions(config) as finder:
        (hanging,) = finder.find(finder.partitions_of([topics["coordination"]]), min_age_s=0)
        assert hanging.decision is None and hanging.coordinator_state == "Empty"
        with pytest.raises(MarshalError, match="outcome is unknown"):
            finder.resolve(hanging)
    result = run_marshal("find-hanging", "--bootstrap-servers", bootstrap,
                         "--coordination-topic", topics["coordination"], "--min-age", "0",
                         "--resolve")
    assert result.returncode == 0, result.stderr
    assert "the outcome is unknown" in result.stdout
    assert (f"kafka-transactions.sh --bootstrap-server {bootstrap} abort --topic "
            f"{coordination.topic} --partition 0 --start-offset 0") in result.stdout
    assert committed_values(bootstrap, coordination)[0] == 0  # still held: nothing written


def test_find_hanging_resolves_from_the_command_line(bootstrap: str,
                                                     topics: dict[str, str]) -> None:
    coordination = TopicPartition(topics["coordination"], 1)
    leave_hanging(bootstrap, topics["tid"], TopicPartition(topics["output"], 1),
                  [coordination], commit=True)
    listed = run_marshal("find-hanging", "--bootstrap-servers", bootstrap,
                         "--coordination-topic", topics["coordination"], "--min-age", "0",
                         "--json")
    assert listed.returncode == 0, listed.stderr
    (row,) = [json.loads(line) for line in listed.stdout.splitlines()]
    assert row["decision"] == "commit" and row["resolved"] is False
    assert row["open_on"] == [{"topic": coordination.topic, "partition": 1,
                               "start_offset": 0}]
    resolved = run_marshal("find-hanging", "--bootstrap-servers", bootstrap,
                           "--coordination-topic", topics["coordination"], "--min-age", "0",
                           "--resolve")
    assert resolved.returncode == 0, resolved.stderr
    assert "commit it; resolved" in resolved.stdout
    assert committed_values(bootstrap, coordination) == (2, [b"hung"])
    again = run_marshal("find-hanging", "--bootstrap-servers", bootstrap,
                        "--coordination-topic", topics["coordination"], "--min-age", "0")
    assert "no hanging transaction" in again.stdout


def test_find_hanging_names_a_missing_coordination_topic(bootstrap: str) -> None:
    result = run_marshal("find-hanging", "--bootstrap-servers", bootstrap,
                         "--coordination-topic", "__marshal_absent_x")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "does not exist" in result.stderr


def test_the_campaign_operator_completes_one_after_a_broker_fault(
        bootstrap: str, topics: dict[str, str]) -> None:
    from chaos.operator import HangingOperator

    coordination = TopicPartition(topics["coordination"], 0)
    leave_hanging(bootstrap, topics["tid"], TopicPartition(topics["output"], 1),
                  [coordination], commit=True)
    events: list[tuple[str, dict[str, object]]] = []
    notes: list[str] = []
    operator = HangingOperator(bootstrap, {}, [topics["coordination"], topics["output"]],
                               lambda event, **fields: events.append((event, fields)), notes)
    operator.tend()
    assert events == []  # not armed: no broker fault yet
    operator.arm()
    operator.tend()  # younger than the transaction timeout: left alone
    assert events == []
    operator = HangingOperator(bootstrap, {}, [topics["coordination"], topics["output"]],
                               lambda event, **fields: events.append((event, fields)), notes,
                               min_age_s=0.0)
    operator.arm()
    operator.tend()
    ((event, fields),) = events
    assert event == "hanging_resolved" and fields["decision"] == "commit"
    assert fields["partitions"] == [f"{coordination.topic}-0@0"]
    assert len(notes) == 1 and "completed" in notes[0]
    assert committed_values(bootstrap, coordination) == (2, [b"hung"])
