"""Leader kills on a three-node cluster: ``bin/chaos --brokers 3``.

:class:`LeaderKiller` drives a :class:`~marshal_py.devbroker.cluster.DevCluster` the way the
campaign drives its single broker: the ``broker`` fault SIGKILLs the node that leads the
run's coordination partition (where the group's claims, heartbeats and exactly-once commit
records go) at that moment, and the restart brings that node back on its data directory. The
cluster keeps serving meanwhile (replication 3, min.insync.replicas 2): a leader kill tests
failover of the coordination log and of open transactions, not an outage.
"""

from __future__ import annotations

import logging
from pathlib import Path

from marshal_py.devbroker.cluster import DevCluster

log = logging.getLogger("chaos")


class LeaderKiller:
    """A development cluster whose ``kill()`` SIGKILLs the leader of :attr:`target`."""

    def __init__(self, nodes: int, data_dir: Path) -> None:
        self.cluster = DevCluster(nodes, data_dir=data_dir)
        #: The replication of the topics a run creates.
        self.replication = min(3, nodes)
        #: (topic, partition) whose leader a ``kill()`` targets (set by each run).
        self.target: tuple[str, int] | None = None
        self._killed: int | None = None

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    def is_running(self) -> bool:
        return self.cluster.is_running()

    def start(self) -> None:
        """Restart the node killed last (or start the whole cluster)."""
        if self._killed is not None:
            node, self._killed = self._killed, None
            self.cluster.start_node(node)
            return
        stopped = self.cluster.stopped_nodes()
        if len(stopped) == len(self.cluster.nodes):
            self.cluster.start()
        else:
            for stopped_node in stopped:
                self.cluster.start_node(stopped_node.node_id)

    def kill(self) -> None:
        """SIGKILL the node leading :attr:`target` (the first node when it has none)."""
        leader = self.cluster.leader_of(*self.target) if self.target is not None else None
        node = leader if leader is not None else min(self.cluster.nodes)
        log.info("  killing node %d (leader of %s)", node, self.target)
        self.cluster.kill(node)
        self._killed = node

    def stop(self) -> None:
        self.cluster.stop()
