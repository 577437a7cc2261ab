"""The coordination topic as :class:`~marshal_py.log.kafka.KafkaLog` opens it (the admin
side): finding it, creating it with what coordination needs (``LogAppendTime``, no unclean
leader election, ``min.insync.replicas``), and checking an existing one's timestamp type,
retention and largest message."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, NamedTuple, TypeVar

from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError, TopicAlreadyExistsError

from marshal_py.errors import CoordinationTopicError
from marshal_py.log.kafka_auth import is_authorization_failure, not_authorized
from marshal_py.log.kafka_config import KafkaLogConfig

__all__ = ["OpenedTopic", "describe_topic", "ensure_topic", "replication", "retry_until"]

# Logged as the log it opens the topic for, as before this module was split off.
log = logging.getLogger("marshal_py.log.kafka")

_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29
T = TypeVar("T")


class OpenedTopic(NamedTuple):
    """What opening the coordination topic learnt of it."""

    #: The topic as ``describe_topics`` gives it.
    described: dict[str, Any]
    #: True when this client created it.
    created: bool
    #: Its retention.ms as the broker reports it (-1: forever; None: not reported).
    retention_ms: int | None
    #: Its max.message.bytes as the broker reports it.
    max_message_bytes: int | None


def replication(described: dict[str, Any]) -> int:
    """The replication factor of a described topic (its first partition's replicas)."""
    partitions = described.get("partitions") or [{}]
    return max(1, len(partitions[0].get("replica_nodes") or partitions[0].get("replicas") or []))


def retry_until(probe: Callable[[], T], timeout_s: float, interval_s: float = 0.1) -> T:
    """Call ``probe`` until it returns something truthy or ``timeout_s`` has passed (at
    least once); return its last answer."""
    deadline = time.monotonic() + timeout_s
    answer = probe()
    while not answer and time.monotonic() < deadline:
        time.sleep(interval_s)
        answer = probe()
    return answer


def describe_topic(admin: KafkaAdminClient, config: KafkaLogConfig) -> dict[str, Any] | None:
    """The coordination topic as the brokers describe it; None when it does not exist."""
    for topic in admin.describe_topics([config.topic]):
        if topic["name"] == config.topic:
            if topic.get("error_code", 0) == _TOPIC_AUTHORIZATION_FAILED:
                raise not_authorized(config, "describe")
            if topic.get("error_code", 0) == _UNKNOWN_TOPIC or not topic.get("partitions"):
                return None
            return dict(topic)
    return None


def ensure_topic(admin: KafkaAdminClient, config: KafkaLogConfig) -> OpenedTopic:
    """Describe the coordination topic, creating it when it is missing and ``config`` lets
    it; check its settings (:func:`check_topic_configs`)."""
    described = describe_topic(admin, config)
    created = False
    if described is None:
        created = True
        if not config.create_topic:
            raise CoordinationTopicError(
                f"coordination topic {config.topic!r} does not exist on "
                f"{config.bootstrap_servers}; create it with `marshal init` (or let a "
                "consumer create it), or name the right one with --coordination-topic"
            )
        create_topic(admin, config)
        # In a cluster the new topic's metadata reaches every broker a moment later.
        described = retry_until(lambda: describe_topic(admin, config), config.timeout_s)
        if described is None:
            raise CoordinationTopicError(
                f"created {config.topic!r} but the brokers did not describe it within "
                f"{config.timeout_s:g} s; try again"
            )
    retention_ms, max_message_bytes = check_topic_configs(admin, config, created=created)
    return OpenedTopic(described, created, retention_ms, max_message_bytes)


def create_topic(admin: KafkaAdminClient, config: KafkaLogConfig) -> None:
    """Create the coordination topic (nothing when another client created it first)."""
    brokers = len(admin.describe_cluster().get("brokers", [])) or 1
    rf = config.replication_factor or min(3, brokers)
    configs = {
        "message.timestamp.type": "LogAppendTime",
        "retention.ms": str(config.retention_ms),
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": str(min(2, rf)),
        "cleanup.policy": "delete",
    }
    log.info(
        "creating coordination topic %s (%d partitions, replication %d)",
        config.topic, config.partitions, rf,
    )
    if config.replication_factor is None and 1 < rf < 3:
        # A cluster that is still starting may list fewer brokers than it will have.
        log.warning(
            "only %d brokers are registered, so %s gets replication %d: losing one broker "
            "then stops coordination (min.insync.replicas %d); create it with `marshal init "
            "--replication-factor 3` once the cluster is up to survive a broker loss",
            brokers, config.topic, rf, min(2, rf))
    try:
        admin.create_topics(
            {
                config.topic: {
                    "num_partitions": config.partitions,
                    "replication_factor": rf,
                    "configs": configs,
                }
            },
            wait_for_metadata=True,
        )
    except TopicAlreadyExistsError:
        return  # another client created it first
    except KafkaError as exc:
        if is_authorization_failure(exc):
            raise not_authorized(config, "create") from exc
        raise CoordinationTopicError(
            f"could not create coordination topic {config.topic!r}: {exc}"
        ) from exc


def check_topic_configs(admin: KafkaAdminClient, config: KafkaLogConfig,
                        created: bool = False) -> tuple[int | None, int | None]:
    """Refuse a CreateTime topic; return its retention.ms and max.message.bytes (None when
    not reported). ``created``: this client has just created it, and the broker answering
    may not know it yet (in a cluster)."""
    resource = ConfigResource(
        ConfigResourceType.TOPIC, config.topic,
        configs=["message.timestamp.type", "retention.ms", "max.message.bytes"],
    )
    # "all": an authorized answer holds both settings even at their defaults, so an empty
    # one means DESCRIBE_CONFIGS was refused (kafka-python drops the error code) -- or,
    # right after creating the topic, that the broker asked has not learnt of it yet.

    def entry_now() -> dict[str, Any]:
        described = admin.describe_configs([resource], config_filter="all")
        return dict(described.get("topic", {}).get(config.topic, {}))

    entry = retry_until(entry_now, config.timeout_s if created else 0.0) or {}
    if not entry and not config.allow_create_time:
        raise not_authorized(config, "describe_configs")
    retention = entry.get("retention.ms", {}).get("value")
    largest = entry.get("max.message.bytes", {}).get("value")
    retention_ms: int | None = None
    max_message_bytes: int | None = None
    try:
        retention_ms = int(retention) if retention is not None else None
        max_message_bytes = int(largest) if largest is not None else None
    except ValueError:
        retention_ms = None
    value = entry.get("message.timestamp.type", {}).get("value", "CreateTime")
    if value != "LogAppendTime" and not config.allow_create_time:
        raise CoordinationTopicError(
            f"coordination topic {config.topic!r} uses message.timestamp.type={value}: "
            "claims would then be decided by each client's own clock, so clock skew could "
            "give a partition two owners; set it with `kafka-configs --alter --entity-type "
            f"topics --entity-name {config.topic} --add-config "
            "message.timestamp.type=LogAppendTime` (or pass allow_create_time to accept "
            "the risk)"
        )
    return retention_ms, max_message_bytes
