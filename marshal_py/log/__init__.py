"""Coordination logs: the contract, and its Kafka and in-memory implementations.

A log knows records as bytes with positions and broker stamps, not what they mean; reading
one into a rationalizer is :mod:`marshal_py.replay`.
"""

from marshal_py.log.base import CoordinationLog
from marshal_py.log.kafka import (
    DEFAULT_COORDINATION_PARTITIONS,
    DEFAULT_COORDINATION_TOPIC,
    KafkaLog,
    KafkaLogConfig,
)
from marshal_py.log.memory import MemoryLog, VirtualClock

__all__ = [
    "DEFAULT_COORDINATION_PARTITIONS",
    "DEFAULT_COORDINATION_TOPIC",
    "CoordinationLog",
    "KafkaLog",
    "KafkaLogConfig",
    "MemoryLog",
    "VirtualClock",
]
