"""Coordination logs: the contract, Kafka and in-memory implementations, and replay."""

from marshal_py.log.base import CoordinationLog
from marshal_py.log.kafka import (
    DEFAULT_COORDINATION_PARTITIONS,
    DEFAULT_COORDINATION_TOPIC,
    KafkaLog,
    KafkaLogConfig,
)
from marshal_py.log.memory import MemoryLog, VirtualClock
from marshal_py.log.replay import (
    DEFAULT_REPLAY_WINDOW_MS,
    catch_up,
    follow,
    replay_start,
    seek_to_window,
)

__all__ = [
    "DEFAULT_COORDINATION_PARTITIONS",
    "DEFAULT_COORDINATION_TOPIC",
    "DEFAULT_REPLAY_WINDOW_MS",
    "CoordinationLog",
    "KafkaLog",
    "KafkaLogConfig",
    "MemoryLog",
    "VirtualClock",
    "catch_up",
    "follow",
    "replay_start",
    "seek_to_window",
]
