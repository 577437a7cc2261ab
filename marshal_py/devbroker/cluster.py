"""A real multi-node Apache Kafka cluster (KRaft) on 127.0.0.1, for failure tests.

Each node is a :class:`~marshal_py.devbroker.broker.DevBroker` running as broker and
controller, with its own data directory and ports, all voters of one static quorum and one
cluster id. Internal topics get replication 3 (or the node count) and min.insync.replicas 2,
and new topics default to the same, so that a cluster of three survives one node failing
without losing an acknowledged record. The group and transaction coordinators' topics have one
partition per node (a single dev broker's one), so that their coordinators spread over the
nodes as on a production cluster.

:meth:`DevCluster.kill` SIGKILLs one node as a crash would (its data is kept);
:meth:`DevCluster.start_node` brings it back on the same data directory and ports.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

from marshal_py.devbroker.broker import HOST, DevBroker, await_ready, find_java, new_cluster_id
from marshal_py.devbroker.jars import pinned_kafka_version, resolve_kafka_jars
from marshal_py.devbroker.jvm import free_port
from marshal_py.errors import DevBrokerError

log = logging.getLogger(__name__)

MAX_NODES = 5
"""The most nodes :class:`DevCluster` (and ``marshal dev-broker --brokers``) starts."""


@dataclass(frozen=True)
class PartitionState:
    """One partition as the cluster's metadata describes it (node ids)."""

    leader: int | None
    """The leading node, None while the partition has none."""
    replicas: tuple[int, ...]
    """Every node holding a replica, the preferred leader first."""
    in_sync: tuple[int, ...]
    """The in-sync replicas (ISR)."""


#: The settings of the group and transaction coordinators' topic partition counts.
COORDINATOR_TOPIC_PARTITIONS = ("offsets.topic.num.partitions",
                                "transaction.state.log.num.partitions")


class ClusterNode(DevBroker):
    """One node of a :class:`DevCluster` (broker and controller): a :class:`DevBroker` whose
    properties make it voter ``node_id`` of the cluster's static quorum."""

    def __init__(self, node_id: int, port: int, controller_port: int, data_dir: Path,
                 voters: str, cluster_id: str, replication: int,
                 cache_dir: Path | None = None, heap: str = "512m",
                 kafka_version: str | None = None) -> None:
        """Prepare node ``node_id`` (nothing is launched until :meth:`start`).

        Args:
            node_id: its KRaft node id (1 to the node count).
            port: its client (PLAINTEXT) port; controller_port: its controller port.
            data_dir: its own data directory (kept: the cluster removes a temporary parent).
            voters: the ``controller.quorum.voters`` value every node shares.
            cluster_id: the KRaft cluster id every node is formatted with.
            replication: the replication factor of internal and new topics.
            cache_dir, heap, kafka_version: as for :class:`DevBroker`.
        """
        super().__init__(port=port, data_dir=data_dir, cache_dir=cache_dir, heap=heap,
                         kafka_version=kafka_version)
        self.node_id = node_id
        self.name = f"node {node_id} of the Kafka cluster"
        self.controller_port = controller_port
        self.cluster_id = cluster_id
        self.voters = voters
        self.replication = replication
        #: How many live brokers this node's DescribeCluster answer must list (itself
        #: included) before it counts as ready: the whole cluster on a first start, so that
        #: topics created right after get their full replication; itself on a restart.
        self.ready_brokers = 1

    def __repr__(self) -> str:
        return f"ClusterNode({self.node_id}, bootstrap_servers={self.bootstrap_servers!r}, " \
               f"pid={self.pid})"

    @property
    def _port_label(self) -> str:
        return f"node {self.node_id}'s client port"

    def _prepare_node(self) -> tuple[str, Path, Path]:
        assert self.controller_port is not None
        wanted = self.controller_port
        prepared = super()._prepare_node()
        if self.controller_port != wanted:  # the quorum's address cannot move
            self.controller_port = wanted
            raise DevBrokerError(
                f"controller port {HOST}:{wanted} of node {self.node_id} is taken by another "
                "process; stop it or start the cluster on other ports")
        return prepared

    def _answers(self) -> bool:
        """Ready once the node answers DescribeCluster listing itself (registered and not
        fenced) and at least :attr:`ready_brokers` live brokers."""
        cluster = self._describe_cluster()
        if cluster is None or cluster.get("controller_id") in (None, -1):
            return False
        brokers = cluster.get("brokers")
        live = {b.get("broker_id") for b in brokers if isinstance(b, dict)
                and not b.get("is_fenced")} if isinstance(brokers, list) else set()
        return self.node_id in live and len(live) >= self.ready_brokers

    def _server_properties(self) -> str:
        """The single broker's properties, as node ``node_id`` of the quorum ``voters``."""
        text = super()._server_properties()
        min_isr = min(2, self.replication)
        nodes = len(self.voters.split(","))
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
            elif key in COORDINATOR_TOPIC_PARTITIONS:
                line = f"{key}={nodes}"
            lines.append(line)
        lines += [f"default.replication.factor={self.replication}",
                  f"min.insync.replicas={min_isr}",
                  "unclean.leader.election.enable=false"]
        # (A dead node is fenced after 3 s, not 9: the single broker's properties say so.)
        return "\n".join(lines) + "\n"


class DevCluster:
    """``nodes`` KRaft nodes on 127.0.0.1 forming one cluster (see the module docstring).

    Use as a context manager or call :meth:`start` and :meth:`stop`. ``data_dir=None`` uses a
    temporary directory that :meth:`stop` removes (unless a node failed: it keeps the logs);
    node ``n`` keeps its data in ``data_dir/node-n`` and its output in
    ``data_dir/node-n/broker.log``. Ports are free ones, picked once: a node restarted with
    :meth:`start_node` comes back on the same ports and data.
    """

    def __init__(self, nodes: int = 3, data_dir: Path | None = None,
                 cache_dir: Path | None = None, heap: str = "512m", *,
                 kafka_version: str | None = None) -> None:
        """Prepare a cluster (nothing is launched until :meth:`start`).

        Args:
            nodes: how many nodes, 1 to :data:`MAX_NODES`; each is broker and controller.
                Topics get replication min(3, nodes) and min.insync.replicas min(2, that).
            data_dir: where the nodes keep their data (``node-N`` below it) and the cluster
                id; re-used on the next start. A temporary directory when None.
            cache_dir: the jar cache root, as for :class:`DevBroker`.
            heap: each node's maximum JVM heap.
            kafka_version: the Kafka release every node runs, as for :class:`DevBroker`.

        Raises:
            DevBrokerError: a setting is invalid (the node count, an unsupported version).
        """
        if not 1 <= nodes <= MAX_NODES:
            raise DevBrokerError(f"a development cluster has 1 to {MAX_NODES} nodes, not "
                                 f"{nodes}")
        #: The Kafka release every node runs (e.g. ``"4.3.1"``).
        self.kafka_version: str = pinned_kafka_version(kafka_version)
        self._owns_data_dir = data_dir is None
        self._keep_for_inspection = False
        self.data_dir = (Path(tempfile.mkdtemp(prefix="marshal-devcluster-")) if data_dir is None
                         else Path(data_dir).expanduser().resolve())
        taken: set[int] = set()
        ports = []
        for _ in range(2 * nodes):
            port = free_port(exclude=frozenset(taken))
            taken.add(port)
            ports.append(port)
        voters = ",".join(f"{n + 1}@{HOST}:{ports[nodes + n]}" for n in range(nodes))
        try:
            cluster_id = self._cluster_id()
        except OSError as exc:
            raise DevBrokerError(f"cannot write the cluster id into {self.data_dir} ({exc}); "
                                 "choose a writable data directory") from exc
        #: The nodes by node id (1 to ``nodes``).
        self.nodes: dict[int, ClusterNode] = {
            n + 1: ClusterNode(n + 1, ports[n], ports[nodes + n],
                               self.data_dir / f"node-{n + 1}", voters, cluster_id,
                               replication=min(3, nodes), cache_dir=cache_dir, heap=heap,
                               kafka_version=self.kafka_version)
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

    def stopped_nodes(self) -> list[ClusterNode]:
        """The nodes whose JVM is not running (killed, stopped or exited by itself)."""
        return [node for node in self.nodes.values() if not node.is_running()]

    @property
    def bootstrap_servers(self) -> str:
        """Every node's client address, comma separated."""
        return ",".join(node.bootstrap_servers for node in self.nodes.values())

    def start(self, timeout: float = 180.0) -> DevCluster:
        """Launch every node, then wait until each answers and every node is registered.

        All nodes are launched before any is awaited: a KRaft quorum answers only once most
        voters run. Returns self; starting a running cluster does nothing.

        Raises:
            DevBrokerError: as :meth:`DevBroker.start`, naming the node that failed and its
                log (every node is stopped then; a temporary data directory is kept).
        """
        if self.is_running():
            return self
        deadline = time.monotonic() + timeout
        self._keep_for_inspection = False
        try:
            stopped = self.stopped_nodes()
            # Java and the jars once, here: the nodes' preparation then finds them cached.
            find_java(self.kafka_version)
            resolve_kafka_jars(stopped[0].cache_dir, version=self.kafka_version)
            # Storage formats run a JVM each: in parallel they take the time of one.
            with ThreadPoolExecutor(len(stopped), thread_name_prefix="devcluster") as pool:
                prepared = list(pool.map(ClusterNode._prepare_node, stopped))
            for node, (java, lib, properties) in zip(stopped, prepared, strict=True):
                node.ready_brokers = len(self.nodes)
                node._launch(java, lib, properties)  # on this thread: the JVM dies with it
            await_ready(list(self.nodes.values()), deadline, timeout)
        except DevBrokerError:
            self._keep_for_inspection = True
            self.stop()
            raise
        except BaseException:
            self.stop()
            raise
        finally:
            for node in self.nodes.values():
                node.ready_brokers = 1
        log.info("Kafka %s cluster of %d nodes ready on %s", self.kafka_version, len(self.nodes),
                 self.bootstrap_servers)
        return self

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash); its data directory and ports are kept."""
        self._node(node_id).kill()

    def start_node(self, node_id: int, timeout: float = 120.0) -> None:
        """Start a killed or stopped node again on its data directory and ports; return
        once it is registered with the cluster again (it may still be catching up: see
        :meth:`partition_state` for the in-sync replicas)."""
        self._node(node_id).start(timeout)

    def partition_state(self, topic: str, partition: int) -> PartitionState | None:
        """The leader, replicas and in-sync replicas of a partition as the running nodes
        describe it, or None when they cannot say right now (no node answers, the topic or
        partition is unknown to them): ask again."""
        from kafka import KafkaAdminClient

        from marshal_py.log.kafka_config import new_client

        running = [n.bootstrap_servers for n in self.nodes.values() if n.is_running()]
        if not running:
            return None
        try:
            admin = new_client(KafkaAdminClient, bootstrap_servers=",".join(running),
                               client_id="marshal-devcluster-probe", request_timeout_ms=5000)
        except Exception as exc:  # no node answers yet
            log.debug("cannot describe %s: %s", topic, exc)
            return None
        try:
            for entry in admin.describe_topics([topic]):
                for p in entry.get("partitions") or []:
                    if p.get("partition_index") == partition:
                        leader = p.get("leader_id")
                        return PartitionState(
                            leader=int(leader) if leader is not None and leader >= 0 else None,
                            replicas=tuple(p.get("replica_nodes") or ()),
                            in_sync=tuple(p.get("isr_nodes") or ()),
                        )
        except Exception as exc:  # a node just died: the metadata still names it
            log.debug("cannot describe %s: %s", topic, exc)
        finally:
            with contextlib.suppress(Exception):
                admin.close()
        return None

    def leader_of(self, topic: str, partition: int) -> int | None:
        """The node id leading a partition now (None while it has none, or while the running
        nodes cannot say: ask again). Right after a node dies the metadata may name it for
        a few seconds, until the controller fences it."""
        state = self.partition_state(topic, partition)
        return None if state is None else state.leader

    def stop(self) -> None:
        """Stop every node; remove the data directory if it was a temporary one (kept, with
        the logs, when a node failed).

        Every node gets SIGTERM at once: stopped one by one, the last ones would wait for a
        quorum that is already gone."""
        for node in self.nodes.values():
            node.terminate()
        for node in self.nodes.values():
            node.stop()
        failed = self._keep_for_inspection or any(
            node._keep_for_inspection for node in self.nodes.values())
        if self._owns_data_dir and self.data_dir.exists():
            if failed:
                log.warning("kept %s (the failed cluster's data and logs); remove it when done",
                            self.data_dir)
            else:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def _node(self, node_id: int) -> ClusterNode:
        try:
            return self.nodes[node_id]
        except KeyError:
            raise DevBrokerError(f"no node {node_id}; the cluster has nodes "
                                 f"{sorted(self.nodes)}") from None

    def __enter__(self) -> DevCluster:
        """Start the cluster (see :meth:`start`)."""
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop the cluster (see :meth:`stop`)."""
        self.stop()


__all__ = ["MAX_NODES", "ClusterNode", "DevCluster", "PartitionState"]
