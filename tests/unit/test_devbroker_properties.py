"""The dev broker's server.properties: what it changes from Kafka's defaults, and why a test
would notice (see docs/development.md)."""

from __future__ import annotations

from pathlib import Path

from marshal_py.devbroker import DevBroker
from marshal_py.devbroker.cluster import ClusterNode


def _properties(text: str) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in text.splitlines()
             if line and not line.startswith("#"))
    return {key: value for key, value in pairs}


def test_a_single_broker_gives_its_coordinators_one_partition_each(tmp_path: Path) -> None:
    broker = DevBroker(port=19092, data_dir=tmp_path)
    broker.controller_port = 19093
    properties = _properties(broker._server_properties())
    assert properties["offsets.topic.num.partitions"] == "1"
    assert properties["transaction.state.log.num.partitions"] == "1"
    assert properties["offsets.topic.replication.factor"] == "1"


def test_a_cluster_node_gives_the_coordinators_one_partition_per_node(tmp_path: Path) -> None:
    voters = "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    node = ClusterNode(2, 19094, 19095, tmp_path, voters, "cluster-id", replication=3)
    properties = _properties(node._server_properties())
    assert properties["offsets.topic.num.partitions"] == "3"
    assert properties["transaction.state.log.num.partitions"] == "3"
    assert properties["transaction.state.log.replication.factor"] == "3"
    assert properties["node.id"] == "2"
