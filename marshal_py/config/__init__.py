"""Files users give marshal_py: Kafka client properties (``--command-config``, as Kafka's own
tools take them) and the key files of authenticated groups.

The names below are imported on first use (PEP 562), so that importing one module of this
package does not import all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.lazy import lazy_names

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


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
