"""marshal_py: leaderless Kafka consumer coordination through a shared coordination log.

Consumers write small records to a coordination topic (``__marshal``); every client replays
that log with the same deterministic rationalizer and so reaches the same world state.
"""

from marshal_py.errors import (
    BrokerUnavailableError,
    ConfigurationError,
    CoordinationTopicError,
    DevBrokerError,
    MarshalError,
)
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
    "ConfigurationError",
    "CoordinationRecord",
    "CoordinationTopicError",
    "DevBrokerError",
    "MarshalError",
    "Owner",
    "PartitionClaim",
    "PartitionKey",
    "Rationalizer",
    "RationalizerConfig",
    "Verdict",
    "__version__",
]
