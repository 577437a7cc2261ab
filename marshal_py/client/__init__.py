"""The consumer side: Marshaler (one per process), Consumer, and the steppable engine."""

from marshal_py.client.clock import BrokerClock
from marshal_py.client.consumer import Consumer
from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.client.eos_batch import TransactionBatch
from marshal_py.client.eos_consumer import ExactlyOnceConsumer
from marshal_py.client.key_shared_consumer import KeySharedConsumer
from marshal_py.client.key_shared_engine import KeySharedConfig, KeySharedEngine
from marshal_py.client.marshaler import Marshaler, default_client_id
from marshal_py.client.share_consumer import ShareConsumer, ShareRecord
from marshal_py.client.share_engine import ShareConfig, ShareEngine

__all__ = [
    "BrokerClock",
    "Consumer",
    "EngineConfig",
    "ExactlyOnceConsumer",
    "KeySharedConfig",
    "KeySharedConsumer",
    "KeySharedEngine",
    "Marshaler",
    "MemberEngine",
    "ShareConfig",
    "ShareConsumer",
    "ShareEngine",
    "ShareRecord",
    "TransactionBatch",
    "default_client_id",
]
