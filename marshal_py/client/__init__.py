"""The consumer side: Marshaler (one per process), Consumer, and the steppable engine.

The names below are imported on first use (PEP 562), so that importing one module of this
package does not import all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.lazy import lazy_names

if TYPE_CHECKING:
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

#: Public name -> the module that defines it (imported when first used).
_LAZY: dict[str, str] = {
    "BrokerClock": "marshal_py.client.clock",
    "Consumer": "marshal_py.client.consumer",
    "EngineConfig": "marshal_py.client.engine",
    "ExactlyOnceConsumer": "marshal_py.client.eos_consumer",
    "KeySharedConfig": "marshal_py.client.key_shared_engine",
    "KeySharedConsumer": "marshal_py.client.key_shared_consumer",
    "KeySharedEngine": "marshal_py.client.key_shared_engine",
    "Marshaler": "marshal_py.client.marshaler",
    "MemberEngine": "marshal_py.client.engine",
    "ShareConfig": "marshal_py.client.share_engine",
    "ShareConsumer": "marshal_py.client.share_consumer",
    "ShareEngine": "marshal_py.client.share_engine",
    "ShareRecord": "marshal_py.client.share_consumer",
    "TransactionBatch": "marshal_py.client.eos_batch",
    "default_client_id": "marshal_py.client.marshaler",
}

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


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
