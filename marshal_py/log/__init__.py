"""Coordination logs: the contract, and its Kafka and in-memory implementations.

A log knows records as bytes with positions and broker stamps, not what they mean; reading
one into a rationalizer is :mod:`marshal_py.replay`.

The names below are imported on first use (PEP 562), so that importing one module of this
package does not import all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.lazy import lazy_names

if TYPE_CHECKING:
    from marshal_py.log.base import CoordinationLog
    from marshal_py.log.kafka import (
        DEFAULT_COORDINATION_PARTITIONS,
        DEFAULT_COORDINATION_TOPIC,
        KafkaLog,
        KafkaLogConfig,
    )
    from marshal_py.log.memory import MemoryLog, VirtualClock

#: Public name -> the module that defines it (imported when first used).
_LAZY: dict[str, str] = {
    "CoordinationLog": "marshal_py.log.base",
    "DEFAULT_COORDINATION_PARTITIONS": "marshal_py.log.kafka",
    "DEFAULT_COORDINATION_TOPIC": "marshal_py.log.kafka",
    "KafkaLog": "marshal_py.log.kafka",
    "KafkaLogConfig": "marshal_py.log.kafka",
    "MemoryLog": "marshal_py.log.memory",
    "VirtualClock": "marshal_py.log.memory",
}

__all__ = [
    "DEFAULT_COORDINATION_PARTITIONS",
    "DEFAULT_COORDINATION_TOPIC",
    "CoordinationLog",
    "KafkaLog",
    "KafkaLogConfig",
    "MemoryLog",
    "VirtualClock",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
