"""One-line errors for Kafka security failures: authentication, TLS and ACLs.

kafka-python reports a wrong password or an unknown CA only as a bootstrap that timed out
(``KafkaTimeoutError: Unable to bootstrap``), and an ACL that is missing as a bare
``TopicAuthorizationFailedError`` (or, for an idempotent producer without any WRITE, a
``KafkaError`` about ``InitProducerId``). This module turns them into
:class:`~marshal_py.errors.KafkaAuthenticationError` and
:class:`~marshal_py.errors.KafkaAuthorizationError` messages that name the user, the broker,
the resource and what to change:

* :func:`check_credentials`: before the clients of a secured listener connect, one
  diagnostic connection (TCP, TLS handshake, SASL) to the first bootstrap server that
  answers reports a wrong password or an untrusted certificate as soon as it answers;
* :func:`connection_error`: after a client could not connect, the same diagnostic connection
  tells a wrong password or an untrusted certificate from a broker that is down;
* :func:`not_authorized` / :func:`is_authorization_failure`: the ACL to grant.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafka.errors import AuthorizationError, KafkaError, SaslAuthenticationFailedError

from marshal_py.errors import (
    BrokerUnavailableError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    MarshalError,
)

if TYPE_CHECKING:
    from marshal_py.log.kafka_config import KafkaLogConfig

log = logging.getLogger(__name__)

#: Longest one diagnostic connection attempt may take.
PROBE_TIMEOUT_S = 10.0
_PROBE_ATTEMPTS = 3


def _settings(config: KafkaLogConfig) -> Mapping[str, Any]:
    return config.kafka_config


def principal(config: KafkaLogConfig) -> str:
    """The Kafka principal this client authenticates as, as ACLs name it."""
    settings = _settings(config)
    protocol = str(settings.get("security_protocol", "PLAINTEXT")).upper()
    user = settings.get("sasl_plain_username")
    if protocol.startswith("SASL_") and user:
        return f"User:{user}"
    if protocol == "SSL" and settings.get("ssl_certfile"):
        return "the principal of this client's TLS certificate"
    return "User:ANONYMOUS"


def _setting_hint(config: KafkaLogConfig, java: str, python: str) -> str:
    """Where to fix a setting: the properties file's key, or the kafka-python setting."""
    if config.config_source:
        return f"{java} in {config.config_source}"
    return f"{java} (kafka-python: {python})"


# -- authentication and TLS ---------------------------------------------------------------------


def connection_error(config: KafkaLogConfig, exc: BaseException) -> MarshalError:
    """The error to raise when a client could not connect to ``config``'s cluster: an
    authentication or TLS failure when a diagnostic connection shows one, else
    :class:`BrokerUnavailableError` (the broker is down or unreachable)."""
    if isinstance(exc, SaslAuthenticationFailedError):
        # Which broker refused is not known here: name the cluster, not one of its addresses.
        return _authentication_failed(config, config.bootstrap_servers)
    diagnosed = diagnose_connection(config)
    if diagnosed is not None:
        return diagnosed
    return BrokerUnavailableError(
        f"cannot reach Kafka at {config.bootstrap_servers} ({type(exc).__name__}); check that "
        "the broker runs and --bootstrap-servers / MARSHAL_BOOTSTRAP_SERVERS points at it"
    )


def check_credentials(config: KafkaLogConfig) -> None:
    """On a secured listener (``security_protocol`` SSL or SASL_*), connect once to a
    bootstrap server before the clients do and raise the authentication or TLS failure at
    once: kafka-python's own clients drop the broker's SaslAuthenticate error (it arrives
    together with the connection's end) and retry until their bootstrap timeout. The bootstrap
    servers are tried in turn until one answers, so a first one that is down does not hide a
    wrong password. Costs one connection (tens of milliseconds) when a server answers; when
    none does, the clients are left to report it."""
    protocol = str(_settings(config).get("security_protocol", "PLAINTEXT")).upper()
    if protocol == "PLAINTEXT":
        return
    failure = diagnose_connection(config)
    if failure is not None:
        raise failure


def diagnose_connection(config: KafkaLogConfig) -> KafkaAuthenticationError | None:
    """Connect the way kafka-python does to the first bootstrap server that accepts a TCP
    connection (each tried in turn, within ``min(PROBE_TIMEOUT_S, config.timeout_s)`` in
    all) and return the authentication or TLS failure that stops it, or None (connected, or
    no server reachable at all)."""
    deadline = time.monotonic() + min(PROBE_TIMEOUT_S, config.timeout_s)
    for address in _bootstrap_addresses(config):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        if not _accepts_connections(address, min(3.0, left)):
            continue  # down or unreachable: nothing about security to tell; try the next
        answered, failure = _diagnose_at(config, address, deadline)
        if answered:
            return failure
    return None


def _bootstrap_addresses(config: KafkaLogConfig) -> list[str]:
    """The bootstrap servers in the order given, without blanks."""
    return [part.strip() for part in config.bootstrap_servers.split(",") if part.strip()]


def _diagnose_at(config: KafkaLogConfig, address: str,
                 deadline: float) -> tuple[bool, KafkaAuthenticationError | None]:
    """Whether ``address`` (which accepted a TCP connection just now) answered the
    diagnostic connection before ``deadline`` (``time.monotonic()``), and the authentication
    or TLS failure it showed (None: connected)."""
    settings = _settings(config)
    protocol = str(settings.get("security_protocol", "PLAINTEXT")).upper()
    disconnected = False
    for _ in range(_PROBE_ATTEMPTS):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            failure = _probe(config, address, left)
        except Exception:  # the probe leans on kafka-python's internals: never fail on it
            log.debug("the diagnostic connection could not run", exc_info=True)
            return True, None
        if failure is None:
            return True, None
        text = str(failure)
        log.debug("diagnostic connection to %s: %s: %s", address, type(failure).__name__, text)
        if isinstance(failure, SaslAuthenticationFailedError) \
                or "SaslAuthenticationFailed" in text:
            return True, _authentication_failed(config, address)
        if "UnsupportedSaslMechanism" in text or "does not support" in text:
            return True, KafkaAuthenticationError(
                f"the broker at {address} does not offer SASL mechanism "
                f"{settings.get('sasl_mechanism')} ({_short(text)}): check "
                f"{_setting_hint(config, 'sasl.mechanism', 'sasl_mechanism')}")
        if "Handshake failed" in text:
            return True, _tls_failed(config, address, text)
        if "disconnected" not in text:
            return False, None  # refused, timed out: the broker is not there
        disconnected = True
    if not disconnected:
        return False, None
    if protocol.startswith("SASL_"):
        # The broker closes the connection when authentication fails; kafka-python sometimes
        # sees the close before the error response.
        return True, KafkaAuthenticationError(
            f"the broker at {address} closed the connection while authenticating "
            f"{principal(config)} ({settings.get('sasl_mechanism')}): check the username and "
            f"password ({_setting_hint(config, 'sasl.jaas.config', 'sasl_plain_username')}), "
            f"the mechanism and security.protocol={protocol}")
    return True, KafkaAuthenticationError(
        f"the broker at {address} closed the connection as soon as it was made: its listener "
        f"probably expects TLS or SASL; check "
        f"{_setting_hint(config, 'security.protocol', 'security_protocol')} (now {protocol})")


def _accepts_connections(address: str, timeout_s: float) -> bool:
    """True when a TCP connection to ``HOST:PORT`` (``[V6]:PORT``) succeeds."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            return True
    except (OSError, ValueError):
        return False


def _probe(config: KafkaLogConfig, address: str, timeout_s: float) -> BaseException | None:
    """One connection to ``address`` through kafka-python's connection manager: its
    failure, or None."""
    from kafka.net.manager import KafkaConnectionManager
    from kafka.net.selector import NetworkSelector

    settings = dict(config.client_config())
    settings["bootstrap_servers"] = address
    settings["request_timeout_ms"] = int(timeout_s * 1000)
    settings["socket_connection_setup_timeout_ms"] = int(timeout_s * 1000)
    settings["reconnect_backoff_ms"] = 0
    net = NetworkSelector()
    manager = KafkaConnectionManager(net, **settings)
    node = manager.cluster.bootstrap_brokers()[0]

    sasl_failures: list[BaseException] = []

    async def attempt() -> None:
        connection = manager.get_connection(
            node.node_id, timeout_ms=int(timeout_s * 1000), pop_on_close=False,
            refresh_metadata_on_err=False)
        authenticate = connection._sasl_authenticate

        async def recorded(*args: Any, **kwargs: Any) -> Any:
            try:
                return await authenticate(*args, **kwargs)
            except Exception as exc:
                sasl_failures.append(exc)
                raise

        # The broker closes the connection right after its SaslAuthenticate error response.
        # kafka-python 3.0 drops bytes read together with the end of the stream (and reports
        # only "socket disconnected"): hand such bytes over first, the end on the next read.
        # And should the close still win, record the authentication's own failure.
        connection._sasl_authenticate = recorded
        made = connection.connection_made

        def connection_made(transport: Any) -> Any:
            receive = transport._sock_recv

            def sock_recv() -> tuple[bytes, BaseException | None]:
                data, error = receive()
                return (data, None) if data and error is not None else (data, error)

            transport._sock_recv = sock_recv
            return made(transport)

        connection.connection_made = connection_made
        try:
            await connection
        except Exception:
            await net.sleep(0.2)
            if sasl_failures:
                raise sasl_failures[0] from None
            raise

    started = time.monotonic()
    try:
        net.run(attempt)
    except Exception as exc:
        log.debug("diagnostic connection failed after %.1f s", time.monotonic() - started)
        return exc
    finally:
        for close in (manager.close, net.close):
            try:
                close()
            except Exception:
                log.debug("closing the diagnostic connection failed", exc_info=True)
    return None


def _authentication_failed(config: KafkaLogConfig, address: str) -> KafkaAuthenticationError:
    settings = _settings(config)
    user = settings.get("sasl_plain_username")
    mechanism = settings.get("sasl_mechanism")
    where = _setting_hint(config, "sasl.jaas.config",
                          "sasl_plain_username and sasl_plain_password")
    return KafkaAuthenticationError(
        f"authentication failed for user {user!r} ({mechanism}) at {address}: check the "
        f"username and password ({where})")


def _short(text: str) -> str:
    """kafka-python's exception text without its repeated class names."""
    for prefix in ("KafkaConnectionError: ", "Handshake failed: "):
        while prefix in text:
            text = text.split(prefix, 1)[1]
    return text.strip()[:200]


def _tls_failed(config: KafkaLogConfig, address: str, text: str) -> KafkaAuthenticationError:
    reason = _short(text)
    truststore = _setting_hint(config, "ssl.truststore.location", "ssl_cafile")
    if "mismatch" in reason or "doesn't match" in reason:
        skip = _setting_hint(config, "ssl.endpoint.identification.algorithm=",
                             "ssl_check_hostname=False")
        return KafkaAuthenticationError(
            f"TLS handshake with {address} failed: the broker's certificate is not for that "
            f"address ({reason}): connect by a name its certificate holds, or set {skip} to "
            "skip the check")
    if "CERTIFICATE_VERIFY_FAILED" in reason or "certificate verify failed" in reason:
        trusted = _settings(config).get("ssl_cafile") or "the system's CAs"
        return KafkaAuthenticationError(
            f"TLS handshake with {address} failed: the broker's certificate is not signed by a "
            f"CA in {trusted} ({reason}): check {truststore} (the PEM of the CA that signed "
            "the broker's certificate)")
    return KafkaAuthenticationError(
        f"TLS handshake with {address} failed ({reason}): check that the listener speaks TLS "
        f"(security.protocol) and {truststore}")


# -- authorization ------------------------------------------------------------------------------


def is_authorization_failure(exc: BaseException) -> bool:
    """True for a Kafka error that means an ACL is missing (topic or cluster), including an
    idempotent producer's refused InitProducerId."""
    if isinstance(exc, AuthorizationError):
        return True
    return isinstance(exc, KafkaError) and "AuthorizationFailed" in str(exc)


#: What each operation on the coordination topic needs, as the message says it.
_COORDINATION_NEEDS = {
    "write": ("write to", "WRITE (and READ, DESCRIBE)"),
    "read": ("read", "READ and DESCRIBE (members also WRITE)"),
    "describe": ("describe", "DESCRIBE, READ and DESCRIBE_CONFIGS (members also WRITE)"),
    "describe_configs": ("read the configuration (message.timestamp.type) of",
                         "DESCRIBE_CONFIGS (and READ, DESCRIBE; members also WRITE)"),
}


def data_topic_error(config: KafkaLogConfig, exc: KafkaError, message: str,
                     topic: str | None = None) -> MarshalError:
    """The error for a failed request about data topics: the READ and DESCRIBE ACLs to grant
    when it was refused (on the topic the error names, else ``topic``), else
    :class:`BrokerUnavailableError` with ``message``."""
    if is_authorization_failure(exc):
        named = exc.args[0] if exc.args else None
        if isinstance(named, (set, frozenset, list, tuple)) and len(named) == 1:
            topic = str(next(iter(named)))
        elif isinstance(named, str) and named and " " not in named:
            topic = named
        if topic is not None:
            return not_authorized(config, "read", topic)
        return KafkaAuthorizationError(
            f"not authorized to read the consumed topics as {principal(config)}: grant READ "
            f"and DESCRIBE on them ({_short(str(exc))})")
    return BrokerUnavailableError(message)


#: What each operation on the coordination index needs, as the message says it.
_INDEX_NEEDS = {
    "write": ("write to", "WRITE (and READ, DESCRIBE)"),
    "read": ("read", "READ and DESCRIBE (members and `marshal init` also WRITE)"),
}


def index_not_authorized(config: KafkaLogConfig, operation: str) -> KafkaAuthorizationError:
    """The error for an ACL missing on the coordination index topic (``operation``:
    ``read``, ``write`` or ``create``)."""
    who = principal(config)
    name = config.index_name
    holds = (f"it keeps the layout of {config.topic!r} and where each group's records and "
             "newest checkpoint are")
    if operation == "create":
        return KafkaAuthorizationError(
            f"not authorized to create the coordination index topic {name!r} as {who}: "
            "create it as an administrator with `marshal init`, or grant CREATE on the "
            f"cluster; {holds}")
    verb, grant = _INDEX_NEEDS[operation]
    return KafkaAuthorizationError(
        f"not authorized to {verb} the coordination index topic {name!r} as {who}: grant "
        f"{grant} on it; {holds}")


def not_authorized(config: KafkaLogConfig, operation: str,
                   topic: str | None = None) -> KafkaAuthorizationError:
    """The error for an ACL missing on the coordination topic (``topic`` None) or on a data
    topic. ``operation``: ``write``, ``read``, ``describe``, ``describe_configs`` or
    ``create`` (the coordination topic)."""
    who = principal(config)
    if topic is not None:
        if operation == "write":
            return KafkaAuthorizationError(
                f"not authorized to write to topic {topic!r} as {who}: grant WRITE and "
                "DESCRIBE on it")
        return KafkaAuthorizationError(
            f"not authorized to read topic {topic!r} as {who}: grant READ and DESCRIBE on it")
    name = config.topic
    if operation == "create":
        return KafkaAuthorizationError(
            f"not authorized to create the coordination topic {name!r} as {who}: create it as "
            "an administrator with `marshal init`, or grant CREATE on the cluster")
    verb, grant = _COORDINATION_NEEDS[operation]
    creating = ""
    if operation == "describe" and config.create_topic:
        # Kafka answers so for a missing topic too: it may have to be created first.
        creating = ("; if it does not exist yet, create it as an administrator with "
                    "`marshal init` (or grant CREATE on the cluster)")
    return KafkaAuthorizationError(
        f"not authorized to {verb} the coordination topic {name!r} as {who}: grant {grant} "
        f"on it{creating}")
