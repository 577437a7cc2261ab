"""marshal_py: leaderless Kafka consumer coordination through a shared coordination log.

Consumers write small records to a coordination topic (``__marshal``); every client replays
that log with the same deterministic rationalizer and so reaches the same world state.
"""

from marshal_py.client import (
    Consumer,
    ExactlyOnceConsumer,
    KeySharedConsumer,
    Marshaler,
    ShareConsumer,
    ShareRecord,
    TransactionBatch,
)
from marshal_py.config.group_keys import load_group_keys
from marshal_py.config.kafka_properties import load_properties
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
from marshal_py.protocol.auth import GroupKey
from marshal_py.world import (
    ClaimStatus,
    CoordinationRecord,
    Owner,
    PartitionClaim,
    PartitionKey,
    Rationalizer,
    RationalizerConfig,
    Verdict,
)

__version__ = "0.1.0"

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
