"""The one-line messages of Kafka security failures (no broker needed)."""

from __future__ import annotations

import socket
import time

from kafka.errors import (
    ClusterAuthorizationFailedError,
    KafkaError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)

from marshal_py.errors import (
    BrokerUnavailableError,
    ConfigurationError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
)
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.log.kafka_auth import (
    check_credentials,
    connection_error,
    data_topic_error,
    index_not_authorized,
    is_authorization_failure,
    not_authorized,
    principal,
)

SASL = {"security_protocol": "SASL_SSL", "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": "bob", "sasl_plain_password": "pw"}


def config(**kafka: object) -> KafkaLogConfig:
    return KafkaLogConfig(bootstrap_servers="127.0.0.1:9", kafka_config=kafka, timeout_s=1)


def test_the_errors_are_configuration_errors_so_members_stop() -> None:
    assert issubclass(KafkaAuthenticationError, ConfigurationError)
    assert issubclass(KafkaAuthorizationError, ConfigurationError)


def test_principal_as_acls_name_it() -> None:
    assert principal(config(**SASL)) == "User:bob"
    assert principal(config()) == "User:ANONYMOUS"
    assert principal(config(security_protocol="SSL", ssl_certfile="c.pem")) \
        == "the principal of this client's TLS certificate"


def test_what_to_grant_on_the_coordination_topic() -> None:
    bob = config(**SASL)
    assert str(not_authorized(bob, "write")) == (
        "not authorized to write to the coordination topic '__marshal' as User:bob: grant "
        "WRITE (and READ, DESCRIBE) on it")
    assert "grant DESCRIBE_CONFIGS" in str(not_authorized(bob, "describe_configs"))
    assert "`marshal init`" in str(not_authorized(bob, "create"))
    assert "CREATE on the cluster" in str(not_authorized(bob, "describe"))
    assert str(not_authorized(bob, "read", "orders")) == (
        "not authorized to read topic 'orders' as User:bob: grant READ and DESCRIBE on it")


def test_authorization_failures_are_recognized() -> None:
    assert is_authorization_failure(TopicAuthorizationFailedError({"__marshal"}))
    # An idempotent producer without any WRITE is refused its producer id.
    assert is_authorization_failure(KafkaError(
        "Unexpected error in InitProducerIdResponse: [Error 31] "
        "ClusterAuthorizationFailedError"))
    assert is_authorization_failure(ClusterAuthorizationFailedError())
    assert not is_authorization_failure(KafkaTimeoutError())


def test_data_topic_errors_name_the_refused_topic() -> None:
    bob = config(**SASL)
    refused = data_topic_error(bob, TopicAuthorizationFailedError({"payments"}), "x", "orders")
    assert isinstance(refused, KafkaAuthorizationError)
    assert "topic 'payments'" in str(refused)
    other = data_topic_error(bob, KafkaError("boom"), "fetching records failed: boom")
    assert isinstance(other, BrokerUnavailableError)
    assert str(other) == "fetching records failed: boom"


def test_a_broker_that_is_not_there_is_unreachable_at_once() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    started = time.monotonic()
    error = connection_error(KafkaLogConfig(bootstrap_servers=f"127.0.0.1:{port}",
                                            kafka_config=SASL, timeout_s=2),
                             KafkaTimeoutError("Unable to bootstrap"))
    assert isinstance(error, BrokerUnavailableError)
    assert str(error).startswith(f"cannot reach Kafka at 127.0.0.1:{port}")
    assert time.monotonic() - started < 2


def test_what_to_grant_on_the_coordination_index() -> None:
    bob = config(**SASL)
    assert str(index_not_authorized(bob, "read")) == (
        "not authorized to read the coordination index topic '__marshal-index' as User:bob: "
        "grant READ and DESCRIBE (members and `marshal init` also WRITE) on it; it keeps the "
        "layout of '__marshal' and where each group's records and newest checkpoint are")
    assert "grant WRITE (and READ, DESCRIBE)" in str(index_not_authorized(bob, "write"))
    assert "`marshal init`, or grant CREATE on the cluster" in str(
        index_not_authorized(bob, "create"))


def test_credentials_are_checked_before_connecting_only_on_a_secured_listener() -> None:
    """PLAINTEXT has no credentials: no connection is made. On a secured listener a broker
    that is not there is left for the clients to report (it is no credentials problem)."""
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    check_credentials(KafkaLogConfig(bootstrap_servers=f"127.0.0.1:{port}", timeout_s=2))
    check_credentials(KafkaLogConfig(bootstrap_servers=f"127.0.0.1:{port}",
                                     kafka_config=SASL, timeout_s=2))
