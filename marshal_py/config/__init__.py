"""Files users give marshal_py: Kafka client properties (``--command-config``, as Kafka's own
tools take them) and the key files of authenticated groups."""

from marshal_py.config.group_keys import load_group_keys
from marshal_py.config.kafka_properties import KafkaProperties, load_properties

__all__ = ["KafkaProperties", "load_group_keys", "load_properties"]
