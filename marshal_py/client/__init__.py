"""The consumer side: Marshaler (one per process), Consumer, and the steppable engine."""

from marshal_py.client.clock import BrokerClock
from marshal_py.client.consumer import Consumer
from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.client.marshaler import Marshaler, default_client_id
from marshal_py.client.offsets import CommitTracker

__all__ = [
    "BrokerClock",
    "CommitTracker",
    "Consumer",
    "EngineConfig",
    "Marshaler",
    "MemberEngine",
    "default_client_id",
]
