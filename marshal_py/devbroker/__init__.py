"""A real Apache Kafka broker (or a cluster of them) that marshal_py starts by itself.

Used by the integration tests and by ``marshal dev-broker``: the broker jars are resolved once
with Maven from the pom that pins the chosen release (Kafka 4.3.1 by default, or 3.9.2: see
:data:`KAFKA_VERSIONS`) and cached outside the repository (see
:func:`default_cache_dir`); :class:`DevBroker` formats a KRaft data directory, launches the JVM
on 127.0.0.1 and waits until the broker answers; :class:`DevCluster` does the same for several
nodes forming one cluster (for failure tests: kill a node, restart it, ask who leads).

The click command lives in :mod:`marshal_py.cli.dev_broker` (not imported here, so that
``python -m marshal_py.cli.dev_broker`` runs cleanly).

The names below are imported on first use (PEP 562), so that importing one module of this
package does not import all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.lazy import lazy_names

if TYPE_CHECKING:
    from marshal_py.devbroker.broker import DevBroker
    from marshal_py.devbroker.cluster import DevCluster, PartitionState
    from marshal_py.devbroker.jars import (
        KAFKA_VERSION,
        KAFKA_VERSIONS,
        default_cache_dir,
        pinned_kafka_version,
        resolve_kafka_jars,
    )

#: Public name -> the module that defines it (imported when first used).
_LAZY: dict[str, str] = {
    "DevBroker": "marshal_py.devbroker.broker",
    "DevCluster": "marshal_py.devbroker.cluster",
    "KAFKA_VERSION": "marshal_py.devbroker.jars",
    "KAFKA_VERSIONS": "marshal_py.devbroker.jars",
    "PartitionState": "marshal_py.devbroker.cluster",
    "default_cache_dir": "marshal_py.devbroker.jars",
    "pinned_kafka_version": "marshal_py.devbroker.jars",
    "resolve_kafka_jars": "marshal_py.devbroker.jars",
}

__all__ = [
    "KAFKA_VERSION",
    "KAFKA_VERSIONS",
    "DevBroker",
    "DevCluster",
    "PartitionState",
    "default_cache_dir",
    "pinned_kafka_version",
    "resolve_kafka_jars",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
