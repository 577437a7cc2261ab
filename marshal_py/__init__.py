"""marshal_py: leaderless Kafka consumer coordination through a shared coordination log.

Consumers write small records to a coordination topic (``__marshal``); every client replays
that log with the same deterministic rationalizer and so reaches the same world state.

The public names below are imported on first use (PEP 562): ``import marshal_py`` costs only
the errors module, so a process that needs one corner of the package (a Spark worker, the
CLI's ``--help``) does not pay for kafka-python and every consumer. ``from marshal_py import
Consumer`` works as before.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.errors import (
    BrokerUnavailableError,
    ClientIdInUseError,
    CommitFailedError,
    ConfigurationError,
    CoordinationLogLostError,
    CoordinationTopicError,
    DevBrokerError,
    KafkaAuthenticationError,
    KafkaAuthorizationError,
    MarshalError,
    TopicNotFoundError,
    TopicRecreatedError,
)
from marshal_py.lazy import lazy_names

if TYPE_CHECKING:
    from marshal_py.client.consumer import Consumer
    from marshal_py.client.eos_batch import TransactionBatch
    from marshal_py.client.eos_consumer import ExactlyOnceConsumer
    from marshal_py.client.key_shared_consumer import KeySharedConsumer
    from marshal_py.client.marshaler import Marshaler
    from marshal_py.client.share_consumer import ShareConsumer, ShareRecord
    from marshal_py.config.group_keys import load_group_keys
    from marshal_py.config.kafka_properties import load_properties
    from marshal_py.protocol.auth import GroupKey
    from marshal_py.protocol.records import CoordinationRecord
    from marshal_py.world.rationalizer import Rationalizer, RationalizerConfig, Verdict
    from marshal_py.world.state import ClaimStatus, Owner, PartitionClaim, PartitionKey

__version__ = "0.1.0"

#: Public name -> the module that defines it (imported when the name is first used).
_LAZY: dict[str, str] = {
    "ClaimStatus": "marshal_py.world.state",
    "Consumer": "marshal_py.client.consumer",
    "CoordinationRecord": "marshal_py.protocol.records",
    "ExactlyOnceConsumer": "marshal_py.client.eos_consumer",
    "GroupKey": "marshal_py.protocol.auth",
    "KeySharedConsumer": "marshal_py.client.key_shared_consumer",
    "Marshaler": "marshal_py.client.marshaler",
    "Owner": "marshal_py.world.state",
    "PartitionClaim": "marshal_py.world.state",
    "PartitionKey": "marshal_py.world.state",
    "Rationalizer": "marshal_py.world.rationalizer",
    "RationalizerConfig": "marshal_py.world.rationalizer",
    "ShareConsumer": "marshal_py.client.share_consumer",
    "ShareRecord": "marshal_py.client.share_consumer",
    "TransactionBatch": "marshal_py.client.eos_batch",
    "Verdict": "marshal_py.world.rationalizer",
    "load_group_keys": "marshal_py.config.group_keys",
    "load_properties": "marshal_py.config.kafka_properties",
}

__all__ = [
    "BrokerUnavailableError",
    "ClaimStatus",
    "ClientIdInUseError",
    "CommitFailedError",
    "ConfigurationError",
    "Consumer",
    "CoordinationRecord",
    "CoordinationLogLostError",
    "CoordinationTopicError",
    "DevBrokerError",
    "ExactlyOnceConsumer",
    "GroupKey",
    "KafkaAuthenticationError",
    "KafkaAuthorizationError",
    "KeySharedConsumer",
    "MarshalError",
    "Marshaler",
    "Owner",
    "PartitionClaim",
    "PartitionKey",
    "Rationalizer",
    "RationalizerConfig",
    "ShareConsumer",
    "ShareRecord",
    "TopicNotFoundError",
    "TopicRecreatedError",
    "TransactionBatch",
    "Verdict",
    "__version__",
    "load_group_keys",
    "load_properties",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
