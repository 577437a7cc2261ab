"""A real multi-node Apache Kafka cluster (KRaft) on 127.0.0.1, for failure tests.

Each node is a :class:`~marshal_py.devbroker.broker.DevBroker` running as broker and
controller, with its own data directory and ports, all voters of one static quorum and one
cluster id. Internal topics get replication 3 (or the node count) and min.insync.replicas 2,
and new topics default to the same, so that a cluster of three survives one node failing
without losing an acknowledged record.

:meth:`DevCluster.kill` SIGKILLs one node as a crash would (its data is kept);
:meth:`DevCluster.start_node` brings it back on the same data directory and ports.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from pathlib import Path
from types import TracebackType

from marshal_py.devbroker.broker import HOST, DevBroker, new_cluster_id
from marshal_py.errors import DevBrokerError
from marshal_py.jvm import free_port

log = logging.getLogger(__name__)

MAX_NODES = 5


class ClusterNode(DevBroker):
    """One node of a :class:`DevCluster` (broker and controller)."""

    def __init__(self, node_id: int, port: int, controller_port: int, data_dir: Path,
                 voters: str, cluster_id: str, replication: int,
                 cache_dir: Path | None = None, heap: str = "512m") -> None:
        super().__init__(port=port, data_dir=data_dir, cache_dir=cache_dir, heap=heap)
        self.node_id = node_id
        self.controller_port = controller_port
        self.cluster_id = cluster_id
        self.voters = voters
        self.replication = replication

    def _launch_node(self) -> None:
        assert self.controller_port is not None
        wanted = self.controller_port
        super()._launch_node()
        if self.controller_port != wanted:  # the quorum's address cannot move
            self._reap()
            raise DevBrokerError(
                f"controller port {HOST}:{wanted} of node {self.node_id} is taken by another "
                "process; stop it or start the cluster on other ports")

    def _server_properties(self) -> str:
        """The single broker's properties, as node ``node_id`` of the quorum ``voters``."""
        text = super()._server_properties()
        min_isr = min(2, self.replication)
        lines = []
        for line in text.splitlines():
            key = line.split("=", 1)[0]
            if key == "node.id":
                line = f"node.id={self.node_id}"
            elif key == "controller.quorum.voters":
                line = f"controller.quorum.voters={self.voters}"
            elif key.endswith(".replication.factor"):
                line = f"{key}={self.replication}"
            elif key.endswith(".min.isr"):
                line = f"{key}={min_isr}"
            lines.append(line)
        lines += [f"default.replication.factor={self.replication}",
                  f"min.insync.replicas={min_isr}",
                  "unclean.leader.election.enable=false",
                  # Fence a dead node after 3 s instead of 9: failover tests run faster.
                  "broker.session.timeout.ms=3000",
                  "broker.heartbeat.interval.ms=500"]
        return "\n".join(lines) + "\n"


class DevCluster:
    """``nodes`` KRaft nodes on 127.0.0.1 forming one cluster (see the module docstring).

    Use as a context manager or call :meth:`start` and :meth:`stop`. ``data_dir=None`` uses a
    temporary directory that :meth:`stop` removes; node ``n`` keeps its data in
    ``data_dir/node-n``.
    """

    def __init__(self, nodes: int = 3, data_dir: Path | None = None,
                 cache_dir: Path | None = None, heap: str = "512m") -> None:
        if not 1 <= nodes <= MAX_NODES:
            raise DevBrokerError(f"a development cluster has 1 to {MAX_NODES} nodes, not "
                                 f"{nodes}")
        self._owns_data_dir = data_dir is None
        self.data_dir = (Path(tempfile.mkdtemp(prefix="marshal-devcluster-")) if data_dir is None
                         else Path(data_dir).expanduser().resolve())
        taken: set[int] = set()
        ports = []
        for _ in range(2 * nodes):
            port = free_port(exclude=frozenset(taken))
            taken.add(port)
            ports.append(port)
        voters = ",".join(f"{n + 1}@{HOST}:{ports[nodes + n]}" for n in range(nodes))
        cluster_id = self._cluster_id()
        self.nodes: dict[int, ClusterNode] = {
            n + 1: ClusterNode(n + 1, ports[n], ports[nodes + n],
                               self.data_dir / f"node-{n + 1}", voters, cluster_id,
                               replication=min(3, nodes), cache_dir=cache_dir, heap=heap)
            for n in range(nodes)
        }

    def _cluster_id(self) -> str:
        """The id the nodes' storage is (or will be) formatted with."""
        path = self.data_dir / "cluster.id"
        if path.is_file():
            return path.read_text(encoding="ascii").strip()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        cluster_id = new_cluster_id()
        path.write_text(cluster_id + "\n", encoding="ascii")
        return cluster_id

    def __repr__(self) -> str:
        return f"DevCluster(bootstrap_servers={self.bootstrap_servers!r})"

    @property
    def log_path(self) -> Path:
        """Where the nodes' logs are (``node-N/broker.log`` below it)."""
        return self.data_dir

    def is_running(self) -> bool:
        """True while every node's JVM is alive."""
        return all(node.is_running() for node in self.nodes.values())

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address, comma separated."""
        return ",".join(node.bootstrap_servers for node in self.nodes.values())

    def start(self, timeout: float = 180.0) -> DevCluster:
        """Launch every node, then wait until each answers (a quorum needs most of them)."""
        deadline = time.monotonic() + timeout
        try:
            for node in self.nodes.values():
                if not node.is_running():
                    node._launch_node()
            for node in self.nodes.values():
                node._await_node(deadline, timeout)
        except BaseException:
            self.stop()
            raise
        log.info("Kafka cluster of %d nodes ready on %s", len(self.nodes), self.bootstrap_servers)
        return self

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash); its data directory and ports are kept."""
        self._node(node_id).kill()

    def start_node(self, node_id: int, timeout: float = 120.0) -> None:
        """Start a killed or stopped node again on its data directory and ports."""
        self._node(node_id).start(timeout)

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The node id leading a partition now (None while it has none, or while the running
        nodes cannot say: ask again)."""
        from kafka import KafkaAdminClient

        running = [n.bootstrap_servers for n in self.nodes.values() if n.is_running()]
        try:
            admin = KafkaAdminClient(bootstrap_servers=",".join(running),
                                     client_id="marshal-devcluster-probe",
                                     request_timeout_ms=5000)
        except Exception as exc:  # no node answers yet
            log.debug("cannot ask the cluster for leaders: %s", exc)
            return None
        try:
            for entry in admin.describe_topics([topic]):
                for p in entry.get("partitions") or []:
                    if p.get("partition_index") == partition:
                        leader = p.get("leader_id")
                        return int(leader) if leader is not None and leader >= 0 else None
        except Exception as exc:  # a node just died: the metadata still names it
            log.debug("cannot ask the cluster for leaders: %s", exc)
            return None
        finally:
            with contextlib.suppress(Exception):
                admin.close()
        return None

    def stop(self) -> None:
        """Stop every node; remove the data directory if it was a temporary one.

        Every node gets SIGTERM at once: stopped one by one, the last ones would wait for a
        quorum that is already gone."""
        for node in self.nodes.values():
            node.terminate()
        for node in self.nodes.values():
            node.stop()
        if self._owns_data_dir:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def _node(self, node_id: int) -> ClusterNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise DevBrokerError(f"no node {node_id}; the cluster has nodes "
                                 f"{sorted(self.nodes)}") from None

    def __enter__(self) -> DevCluster:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


__all__ = ["MAX_NODES", "ClusterNode", "DevCluster"]
