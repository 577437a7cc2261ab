"""How marshal_py reaches Kafka: :class:`KafkaLogConfig` and the kafka-python client
settings and workarounds every client of the library shares."""

from __future__ import annotations

import base64
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.errors import KafkaTimeoutError

from marshal_py.errors import ConfigurationError
from marshal_py.protocol.index import index_topic_for

log = logging.getLogger(__name__)

_Client = TypeVar("_Client", KafkaConsumer, KafkaProducer, KafkaAdminClient)

DEFAULT_COORDINATION_TOPIC = "__marshal"
DEFAULT_COORDINATION_PARTITIONS = 4
#: Time retention given to a coordination topic marshal_py creates: the default offset
#: retention (7 days) plus a day, so an Empty group's last checkpoint outlives its offsets
#: (PROTOCOL.md, checkpoints).
DEFAULT_RETENTION_MS = 8 * 24 * 3600 * 1000
_MAX_TOPIC_NAME = 249
_KNOWN_SETTINGS = frozenset(KafkaConsumer.DEFAULT_CONFIG) | frozenset(
    KafkaProducer.DEFAULT_CONFIG
) | frozenset(KafkaAdminClient.DEFAULT_CONFIG)


#: What every consumer marshal_py opens sets (none belongs to a Kafka consumer group).
GROUPLESS: Mapping[str, Any] = {"group_id": None, "enable_auto_commit": False}
#: What every producer marshal_py opens sets: no acknowledged record lost, and each
#: partition's records kept in the order they were sent.
SAFE_PRODUCER: Mapping[str, Any] = {"acks": "all", "enable_idempotence": True}

_WHY_GROUPLESS = ("they read without a Kafka consumer group: the group is Marshaler's "
                  "group_id, --group")
_WHY_NO_KAFKA_COMMITS = ("offsets are committed to the coordination topic by commit and "
                         "commit_batch, never by Kafka's consumer")
_WHY_BYTES = ("they read and write bytes: coordination records are bytes, and records are "
              "handed out as the broker stores them, to deserialize in your handler")
#: kafka-python settings that marshal_py's clients set themselves: refused in
#: ``kafka_config``, with what stands for them.
OWN_SETTINGS = {
    "group_id": _WHY_GROUPLESS,
    "group_instance_id": _WHY_GROUPLESS,
    "enable_auto_commit": _WHY_NO_KAFKA_COMMITS,
    "auto_commit_interval_ms": _WHY_NO_KAFKA_COMMITS,
    "auto_offset_reset": "where a partition without a committed offset starts is offset_reset "
                         "(--offset-reset)",
    "bootstrap_servers": "give the brokers as bootstrap_servers, --bootstrap-servers",
    "transactional_id": "the coordination writer is idempotent, not transactional, and "
                        "exactly-once mode gives each partition's producer a transactional id "
                        "of its own",
    "key_deserializer": _WHY_BYTES,
    "value_deserializer": _WHY_BYTES,
    "key_serializer": _WHY_BYTES,
    "value_serializer": _WHY_BYTES,
}


@dataclass(frozen=True)
class KafkaLogConfig:
    """How to reach Kafka and what the coordination topic looks like.

    ``kafka_config`` passes any other kafka-python setting (security, SASL, SSL) through to
    every client. ``create_topic``: create the coordination topic when it is missing (with
    ``partitions``, ``replication_factor`` — default min(3, brokers) — LogAppendTime, and
    ``retention_ms``). ``allow_create_time``: run on a topic stamped with CreateTime anyway.
    ``config_source``: where ``kafka_config`` came from (a properties file), named in error
    messages about authentication. ``index_topic``: the compacted topic that keeps the
    coordination topic's layout (default ``<topic>-index``; PROTOCOL.md section 3), created
    with the coordination topic; with ``create_topic`` the layout is also recorded there
    when it is missing.
    """

    bootstrap_servers: str = "127.0.0.1:9092"
    topic: str = DEFAULT_COORDINATION_TOPIC
    create_topic: bool = True
    partitions: int = DEFAULT_COORDINATION_PARTITIONS
    replication_factor: int | None = None
    retention_ms: int = DEFAULT_RETENTION_MS
    allow_create_time: bool = False
    timeout_s: float = 15.0
    kafka_config: Mapping[str, Any] = field(default_factory=dict)
    config_source: str | None = None
    index_topic: str | None = None

    def __post_init__(self) -> None:
        if not self.bootstrap_servers.strip():
            raise ConfigurationError("bootstrap_servers is empty; give HOST:PORT[,HOST:PORT]")
        if not self.topic:
            raise ConfigurationError("the coordination topic name is empty")
        if self.index_name == self.topic or len(self.index_name) > _MAX_TOPIC_NAME:
            raise ConfigurationError(
                f"the coordination index topic {self.index_name!r} must be another topic than "
                f"{self.topic!r}, of at most {_MAX_TOPIC_NAME} characters: name it with "
                "index_topic")
        if self.partitions < 1:
            raise ConfigurationError(f"partitions must be >= 1, got {self.partitions}")
        if self.replication_factor is not None and self.replication_factor < 1:
            raise ConfigurationError("replication_factor must be >= 1")
        if self.timeout_s <= 0:
            raise ConfigurationError("timeout_s must be > 0")

        check_kafka_settings(self.kafka_config)
        conflict = coordination_producer_conflict(self.kafka_config)
        if conflict is not None:
            raise ConfigurationError(
                f"kafka_config sets {conflict}, which the coordination producer cannot use: "
                "it writes with acks=all and idempotence (retries > 0, at most 5 requests in "
                "flight), so no acknowledged coordination record is lost and the records "
                "of one writer land in the order they were sent (PROTOCOL.md, sections 4.1 "
                "and 12); remove the setting")

    @property
    def index_name(self) -> str:
        """The coordination index topic: ``index_topic``, or ``<topic>-index``."""
        return self.index_topic or index_topic_for(self.topic)

    def client_config(self, client: type | None = None, *,
                      defaults: Mapping[str, Any] | None = None,
                      fixed: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Settings for a kafka-python ``client`` class talking to this cluster: ours, plus
        those of ``kafka_config`` that this kind of client knows (all of them if None).
        ``defaults``: a client's own choices that ``kafka_config`` may change (e.g.
        ``fetch_max_wait_ms``); ``fixed``: those it may not (e.g. ``acks``), which win."""
        return {**(defaults or {}), **self._client_config(client), **(fixed or {})}

    def _client_config(self, client: type | None) -> dict[str, Any]:
        known = getattr(client, "DEFAULT_CONFIG", {})
        extra = {
            k: v for k, v in self.kafka_config.items() if client is None or k in known
        }
        ours: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap_servers,
            "bootstrap_timeout_ms": int(self.timeout_s * 1000),
            "request_timeout_ms": int(self.timeout_s * 1000) + 5000,
            # Reconnect to a restarted broker within a second, as the Java client does
            # (kafka-python backs off up to 30 s; members would stall that long).
            "reconnect_backoff_max_ms": 1000,
        }
        if "allow_auto_create_topics" in known:
            # Never bring a deleted topic back by asking for its metadata (brokers create
            # topics on request by default): it would come back as another topic.
            ours["allow_auto_create_topics"] = False
        return {**ours, **extra}


#: How long (ms) the coordination producer's send() waits for the topic's metadata at most.
SEND_BLOCK_MS = 1000

#: How long (ms) kafka-python's cluster metadata waits after one refresh before the next.
METADATA_BACKOFF_MS = 10


def quick_metadata(client: Any) -> Any:
    """Give a kafka-python client's cluster metadata the settings kafka-python 3.0 leaves
    out: a new topic's metadata is asked for at once, and topics are created on request only
    if the client's ``allow_auto_create_topics`` says so (:meth:`KafkaLogConfig.client_config`
    says no).

    kafka-python 3.0 builds its ClusterMetadata without the client's ``retry_backoff_ms`` and
    ``allow_auto_create_topics``: the first request about a topic waits out the default
    100 ms after the bootstrap refresh (measured: the first ListOffsets of a new consumer
    107 ms, with this 11 ms; failed refreshes still back off, KIP-580), and every metadata
    request asks the brokers to create the topics it names -- which brokers do by default
    (``auto.create.topics.enable``), bringing a deleted topic back as another one, with
    default settings. A client whose internals look different is left as it is. Returns
    ``client``."""
    own = getattr(client, "config", None)
    creates = own.get("allow_auto_create_topics") if isinstance(own, dict) else None
    clusters = [getattr(client, "_metadata", None),
                getattr(getattr(getattr(client, "_client", None), "_manager", None),
                        "cluster", None)]
    for cluster in clusters:
        config = getattr(cluster, "config", None)
        if not isinstance(config, dict):
            continue
        if "retry_backoff_ms" in config:
            config["retry_backoff_ms"] = min(config["retry_backoff_ms"], METADATA_BACKOFF_MS)
        if "allow_auto_create_topics" in config and isinstance(creates, bool):
            config["allow_auto_create_topics"] = creates
    return client


def new_client(cls: type[_Client], **settings: Any) -> _Client:
    """``cls(**settings)`` (a kafka-python KafkaConsumer, KafkaProducer or KafkaAdminClient),
    closing what a failed construction leaves behind. kafka-python 3.0 starts a client's
    network thread before it bootstraps, and when no broker answers its constructor raises
    with that thread still running: it keeps trying to connect for as long as the process
    lives, so every failed attempt of a process that retries (a member waiting out a broker
    outage, a probe waiting for a broker to start) would leave one more."""
    if "metrics_enabled" in getattr(cls, "DEFAULT_CONFIG", {}):
        # kafka-python's own sensors (read by nothing here) cost a few dozen Python calls
        # per request in every client thread; a caller may still ask for them.
        settings.setdefault("metrics_enabled", False)
    client: Any = object.__new__(cls)
    try:
        client.__init__(**settings)
    except BaseException:
        network = getattr(client, "_client", None)  # set before the bootstrap
        if network is not None:
            with contextlib.suppress(Exception):
                network.close()
        raise
    return cast(_Client, client)


def kafka_topic_id(text: str | None) -> str | None:
    """A topic id as Kafka's tools show it (URL-safe base64 of its 16 bytes, unpadded), from
    kafka-python's UUID text; None stays None, anything unreadable is returned as given."""
    if text is None:
        return None
    try:
        raw = uuid.UUID(text).bytes
    except ValueError:
        return text
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def close_producer(producer: KafkaProducer, timeout_s: float) -> None:
    """Close ``producer``, giving records still pending ``timeout_s`` to complete.

    kafka-python 3.0's close() raises KafkaTimeoutError when they do not (say they were for a
    topic that was deleted) and leaves the producer open: its sender thread runs on, and the
    close retried at exit prints a traceback. Then stop the sender without them."""
    try:
        producer.close(timeout=timeout_s)
    except KafkaTimeoutError:
        sender = getattr(producer, "_sender", None)
        if sender is not None:
            sender.force_close()  # fails what is pending, ends the thread
        producer._closed = True  # nothing left to close at exit
        log.debug("closed the producer without its pending records")


def check_kafka_settings(kafka_config: Mapping[str, Any], given_as: str = "kafka_config"
                         ) -> None:
    """Raise a one-line :class:`ConfigurationError` for a setting of ``kafka_config`` that
    kafka-python does not know, or that marshal_py's clients set themselves
    (:data:`OWN_SETTINGS`); ``given_as`` names where the settings came from."""
    unknown = sorted(set(kafka_config) - _KNOWN_SETTINGS)
    if unknown:
        raise ConfigurationError(
            f"unknown kafka-python setting(s) {', '.join(unknown)} in {given_as}; see the "
            "settings of KafkaConsumer, KafkaProducer and KafkaAdminClient")
    owned = [name for name in OWN_SETTINGS if name in kafka_config]
    if owned:
        raise ConfigurationError(
            f"{given_as} sets {owned[0]}, which marshal_py's Kafka clients set themselves "
            f"({OWN_SETTINGS[owned[0]]}); remove it")


def coordination_producer_conflict(kafka_config: Mapping[str, Any]) -> str | None:
    """The first setting of ``kafka_config`` that would let the coordination producer lose
    an acknowledged record or reorder a writer's records (``name=value``), or None."""
    checks: dict[str, Callable[[Any], bool]] = {
        "acks": lambda v: str(v).lower() in ("all", "-1"),
        "enable_idempotence": lambda v: v is True or str(v).lower() == "true",
        "retries": lambda v: not isinstance(v, (int, float)) or v > 0,
        "max_in_flight_requests_per_connection": lambda v: isinstance(v, int) and 1 <= v <= 5,
    }
    for name, allowed in checks.items():
        if name in kafka_config and not allowed(kafka_config[name]):
            return f"{name}={kafka_config[name]!r}"
    return None
