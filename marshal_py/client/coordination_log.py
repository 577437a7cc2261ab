"""Opening a Marshaler's connection to the coordination log, with the checks made once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from marshal_py.client.settings import MarshalerConfig
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLog, KafkaLogConfig
from marshal_py.log.kafka_identity import IDENTITY_CHECK_S


def open_coordination_log(config: MarshalerConfig, *, bootstrap_servers: str,
                          coordination_topic: str, timeout: float,
                          kafka_config: Mapping[str, Any] | None,
                          index_topic: str | None) -> tuple[KafkaLogConfig, KafkaLog]:
    """The coordination log of a member with ``config`` (arguments as the Marshaler's), open,
    with its settings; closed again when a compatibility-mode member could not share it."""
    log_config = KafkaLogConfig(
        bootstrap_servers=bootstrap_servers,
        topic=coordination_topic,
        timeout_s=timeout,
        kafka_config=dict(kafka_config or {}),
        # load_properties' result names its file: error messages point at it
        config_source=getattr(kafka_config, "source", None),
        index_topic=index_topic,
    )
    kafka_log = KafkaLog(log_config)
    if config.compat is not None:
        check_original_placement(kafka_log, config.compat)
    # A deleted (or replaced) coordination topic is noticed within one heartbeat interval.
    heartbeat_interval = config.heartbeat_interval_ms / 1000
    kafka_log.identity_check_s = max(0.25, min(IDENTITY_CHECK_S, heartbeat_interval / 2))
    return log_config, kafka_log


def check_original_placement(kafka_log: KafkaLog, compat: str) -> None:
    """Compatibility mode: the original places by the coordination topic's partition count
    in its metadata, we by its layout (PROTOCOL.md 3); they must be equal (else the log is
    closed and a ConfigurationError raised)."""
    layout, metadata = kafka_log.partition_count(), kafka_log.metadata_partition_count
    if layout != metadata:
        kafka_log.close()
        raise ConfigurationError(
            f"compat={compat!r}: {kafka_log.config.topic} has {metadata} partitions but "
            f"its layout places by {layout}: the original implementation places by the "
            "partition count and would split the group (PROTOCOL.md 3, 13.1); give the "
            "group a coordination topic that never had partitions added")
