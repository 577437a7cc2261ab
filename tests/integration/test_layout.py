"""Partitions added to the coordination topic under a running group (PROTOCOL.md section 3):
members keep placing by the layout recorded at creation, so a member started afterwards
joins the same world instead of splitting the group. The at-most-once case, where a split
group breaks the guarantee, runs on Kafka 3.9 too."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions

from tests.integration.consumer_support import (
    ON_EVERY_BROKER,
    Cluster,
    ConsumerProcess,
    broker_bootstrap,
    wait_for,
)

pytestmark = pytest.mark.integration

WARNING = "has 16 partitions, but its layout"


@pytest.fixture
def cluster(request: pytest.FixtureRequest, unique_name: str,
            tmp_path: Path) -> Iterator[Cluster]:
    # A 4-partition coordination topic.
    c = Cluster(broker_bootstrap(request), unique_name, tmp_path)
    try:
        yield c
    finally:
        c.close()


def warnings_of(member: ConsumerProcess) -> list[str]:
    return [line for line in member.stderr_text().splitlines() if WARNING in line]


def test_partitions_added_to_the_coordination_topic_do_not_split_an_alo_group(
        cluster: Cluster) -> None:
    partitions_added_under_a_running_member(cluster, "alo")


@ON_EVERY_BROKER
def test_partitions_added_to_the_coordination_topic_do_not_split_an_amo_group(
        cluster: Cluster) -> None:
    partitions_added_under_a_running_member(cluster, "amo")


def partitions_added_under_a_running_member(cluster: Cluster, mode: str) -> None:
    """One member runs; 12 partitions are added to its 4-partition coordination topic; a
    second member joins: one world, no record delivered twice, one warning from each."""
    assert cluster.watcher.log.partition_count() == 4
    first_half = cluster.producer.send(1000)
    first = cluster.spawn("m1", mode=mode)
    first.wait_joined()
    cluster.wait_consumed(first_half, procs=[first])

    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
    try:
        admin.create_partitions({cluster.ctopic: NewPartitions(16)})
    finally:
        admin.close()
    second = cluster.spawn("m2", mode=mode)
    second.wait_joined()
    # One world: the newcomer sees the first member's claims and gets its fair share.
    cluster.watcher.wait_balanced([first.instance_id, second.instance_id], 6, timeout=30)
    second_half = cluster.producer.send(1000)
    cluster.wait_consumed(first_half + second_half, timeout=60)

    printed = Counter(cluster.printed())
    twice = sorted(tp for tp, n in printed.items() if n > 1)
    assert not twice, f"{len(twice)} records delivered twice, e.g. {twice[:5]}"
    assert set(printed) == set(first_half + second_half)
    assert {p for p, _ in second.printed()}, "the second member delivered nothing"
    # Both say once what happened: the newcomer as it opens the log, the first member when
    # its periodic check of the topic sees the new partitions.
    assert len(warnings_of(second)) == 1, second.stderr_text()
    wait_for(lambda: warnings_of(first), 30, "the first member's warning",
             describe=first.stderr_text)
    assert len(warnings_of(first)) == 1
    line = warnings_of(second)[0]
    assert f"coordination topic {cluster.ctopic} has 16 partitions, but its layout (in " \
           f"{cluster.ctopic}-index) places records on its first 4" in line
    assert "PROTOCOL.md section 3" in line
