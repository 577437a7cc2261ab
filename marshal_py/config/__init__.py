"""Files users give marshal_py: Kafka client properties (``--command-config``, as Kafka's own
tools take them) and the key files of authenticated groups.

The names below are imported on first use (PEP 562), so that importing one module of this
package does not import all of them.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from marshal_py.config.group_keys import load_group_keys
    from marshal_py.config.kafka_properties import KafkaProperties, load_properties

#: Public name -> the module that defines it (imported when first used).
_LAZY: dict[str, str] = {
    "KafkaProperties": "marshal_py.config.kafka_properties",
    "load_group_keys": "marshal_py.config.group_keys",
    "load_properties": "marshal_py.config.kafka_properties",
}

__all__ = ["KafkaProperties", "load_group_keys", "load_properties"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups find it without coming here again
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
