"""BrokerClock estimates, kafka-python settings routed to the clients that know them, and
the validation every member configuration shares."""

from __future__ import annotations

import re

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

from marshal_py.client.clock import BrokerClock
from marshal_py.client.engine import EngineConfig
from marshal_py.client.key_shared_engine import KeySharedConfig
from marshal_py.client.member_base import MemberConfig
from marshal_py.client.share_engine import ShareConfig
from marshal_py.errors import ConfigurationError
from marshal_py.log import KafkaLogConfig


def test_broker_clock_trusts_short_round_trips_over_the_first_slow_one() -> None:
    clock = BrokerClock()
    # The first append opens the connection: 150 ms round trip, a poor sample (+70 ms off).
    clock.observe(broker_ms=10_145, sent_ms=10_000, acked_ms=10_150)
    assert clock.offset_ms == pytest.approx(70)
    # Fast appends show the broker 5 ms ahead of us: the estimate moves to them.
    base = clock.offset_ms
    clock.observe(broker_ms=20_001 + 5, sent_ms=int(20_000 + base), acked_ms=int(20_002 + base))
    assert clock.offset_ms == pytest.approx(5, abs=1)
    # A slow sample later does not drag it away.
    base = clock.offset_ms
    clock.observe(broker_ms=30_150 + 400, sent_ms=int(30_000 + base), acked_ms=int(30_300 + base))
    assert clock.offset_ms == pytest.approx(5, abs=1)


def test_kafka_config_goes_only_to_the_clients_that_know_each_setting() -> None:
    config = KafkaLogConfig(kafka_config={"check_crcs": False, "linger_ms": 5,
                                          "security_protocol": "PLAINTEXT"})
    consumer = config.client_config(KafkaConsumer)
    producer = config.client_config(KafkaProducer)
    admin = config.client_config(KafkaAdminClient)
    assert consumer["check_crcs"] is False and "linger_ms" not in consumer
    assert producer["linger_ms"] == 5 and "check_crcs" not in producer
    assert "check_crcs" not in admin and "linger_ms" not in admin
    assert all(c["security_protocol"] == "PLAINTEXT" for c in (consumer, producer, admin))


@pytest.mark.parametrize("setting", [{"acks": 1}, {"enable_idempotence": False},
                                     {"retries": 0},
                                     {"max_in_flight_requests_per_connection": 6}])
def test_settings_that_would_lose_or_reorder_coordination_records_are_refused(
        setting: dict[str, object]) -> None:
    name = next(iter(setting))
    with pytest.raises(ConfigurationError, match=rf"kafka_config sets {name}=.*coordination "
                       r"producer cannot use.*in the order they were sent"):
        KafkaLogConfig(kafka_config=setting)
    ok = {"acks": "all", "enable_idempotence": True, "retries": 5,
          "max_in_flight_requests_per_connection": 5}
    KafkaLogConfig(kafka_config={name: ok[name]})


@pytest.mark.parametrize(("name", "instead"), [
    ("group_id", "without a Kafka consumer group"),
    ("group_instance_id", "without a Kafka consumer group"),
    ("enable_auto_commit", "committed to the coordination topic"),
    ("auto_commit_interval_ms", "committed to the coordination topic"),
    ("auto_offset_reset", "is offset_reset"),
    ("bootstrap_servers", "give the brokers as bootstrap_servers"),
    ("transactional_id", "a transactional id of its own"),
    ("value_deserializer", "to deserialize in your handler"),
    ("key_deserializer", "read and write bytes"),
    ("value_serializer", "coordination records are bytes"),
    ("key_serializer", "coordination records are bytes"),
])
def test_settings_that_our_clients_set_themselves_are_refused_naming_what_stands_for_them(
        name: str, instead: str) -> None:
    """Given to the clients beside our own value, the first five made kafka-python raise a
    TypeError ("got multiple values for keyword argument") when a member opened its fetcher;
    a deserializer stopped it with an AttributeError reading the coordination topic's index,
    a serializer would have changed the coordination records it writes, a transactional id
    failed its first append as "broker unavailable", and the brokers given here were used
    while errors named the others."""
    with pytest.raises(ConfigurationError, match=rf"^kafka_config sets {name}, which "
                       rf"marshal_py's Kafka clients set themselves \(.*{instead}.*\); remove it$"):
        KafkaLogConfig(kafka_config={name: "x"})


def test_a_clients_own_choices_give_way_to_kafka_config_and_its_fixed_ones_do_not() -> None:
    config = KafkaLogConfig(kafka_config={"fetch_max_wait_ms": 300, "linger_ms": 5,
                                          "acks": "all"})
    consumer = config.client_config(KafkaConsumer, defaults={"fetch_max_wait_ms": 200},
                                    fixed={"group_id": None})
    assert consumer["fetch_max_wait_ms"] == 300 and consumer["group_id"] is None
    producer = config.client_config(KafkaProducer, defaults={"linger_ms": 0, "batch_size": 7},
                                    fixed={"acks": "all", "enable_idempotence": True})
    assert (producer["linger_ms"], producer["batch_size"]) == (5, 7)
    assert producer["acks"] == "all" and producer["enable_idempotence"] is True


def test_unknown_kafka_settings_are_a_clear_error() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown kafka-python setting.*chek_crcs"):
        KafkaLogConfig(kafka_config={"chek_crcs": False})


@pytest.mark.parametrize("config_class", [EngineConfig, ShareConfig, KeySharedConfig])
@pytest.mark.parametrize(("change", "message"), [
    ({"group_id": ""}, "group_id is required"),
    ({"client_id": ""}, "client_id is empty"),
    ({"instance_id": ""}, "instance_id is empty"),
    ({"topics": ()}, "at least one topic"),
    ({"topics": ("orders", "")}, "none empty"),
    ({"offset_reset": "earlest"}, "offset_reset must be 'latest' or 'earliest', not 'earlest'"),
    ({"heartbeat_interval_ms": 0}, "heartbeat_interval must be between 0.01 and 3600 seconds"),
    ({"heartbeat_interval_ms": -5}, "heartbeat_interval must be between"),
    ({"heartbeat_interval_ms": 3_600_001}, "not 3600.001"),
    ({"replay_window_ms": -1}, "replay_window must be >= 0"),
    ({"replay_window_ms": 30_000}, "at least 4 heartbeat intervals"),
    ({"group_id": "g" * 256}, "group_id has 256 characters, more than 255"),
    ({"client_id": "worker\n1"}, "holds control characters"),
    ({"topics": ("t" * 250,)}, "topic has 250 characters, more than 249"),
    ({"checkpoint_interval_ms": 999}, "checkpoint_interval must be at least 1 second"),
])
def test_every_member_config_refuses_the_same_bad_base_settings(
        config_class: type[MemberConfig], change: dict[str, object], message: str) -> None:
    settings: dict[str, object] = {"group_id": "g", "client_id": "c", "instance_id": "i",
                                   "topics": ("orders",)}
    settings.update(change)
    with pytest.raises(ConfigurationError, match=re.escape(message)):
        config_class(**settings)  # type: ignore[arg-type]


def test_every_member_config_renews_claims_a_quarter_window_apart() -> None:
    for config_class in (EngineConfig, ShareConfig, KeySharedConfig):
        config = config_class(group_id="g", client_id="c", instance_id="i", topics=("t",),
                              heartbeat_interval_ms=1000, replay_window_ms=400_000)
        assert config.renew_interval_ms == 100_000


def test_the_isolation_level_is_the_argument_else_kafka_config_else_read_committed() -> None:
    from marshal_py.client.settings import data_config, isolation_level_of

    assert isolation_level_of(None, {}) == "read_committed"
    assert isolation_level_of(None, {"isolation_level": "read_uncommitted"}) == \
        "read_uncommitted"
    assert isolation_level_of("read_committed", {"isolation_level": "read_uncommitted"}) == \
        "read_committed"
    with pytest.raises(ConfigurationError, match="isolation_level must be one of "
                                                 "'read_committed', 'read_uncommitted', not 'x'"):
        isolation_level_of("x", {})
    base = KafkaLogConfig("127.0.0.1:9092", kafka_config={"client_id": "c"})
    data = data_config(base, "read_uncommitted")
    assert data.client_config(KafkaConsumer)["isolation_level"] == "read_uncommitted"
    assert "isolation_level" not in data.client_config(KafkaProducer)
    assert base.kafka_config == {"client_id": "c"}  # the coordination log's stays as it was
