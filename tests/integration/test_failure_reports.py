"""Topics deleted under a running `marshal consume` (real broker): the coordination topic
stops the member within one heartbeat interval with one line; a data topic is warned about
within one interval and given up (released with its committed offsets) until it comes back;
as a new topic, the member stops saying to reset the group's offsets."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kafka import KafkaAdminClient

from marshal_py.devbroker import DevBroker
from tests.integration.consumer_support import (
    Cluster,
    ConsumerProcess,
    Producer,
    create_topic,
    run_marshal,
    wait_for,
)

pytestmark = pytest.mark.integration

HI = 4.0
PARTITIONS = 4


@pytest.fixture
def cluster(kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=PARTITIONS, hi=HI)
    try:
        yield c
    finally:
        c.close()


def delete_topic(bootstrap: str, topic: str) -> float:
    """Delete ``topic``; return when the brokers stopped listing it (monotonic)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.delete_topics([topic])
        wait_for(lambda: topic not in admin.list_topics(), 30, f"{topic} to go",
                 interval=0.02)
    finally:
        admin.close()
    return time.monotonic()


def stderr_lines(member: ConsumerProcess) -> list[str]:
    return [line for line in member.stderr_text().splitlines() if line.strip()]


def consuming_member(cluster: Cluster, mode: str) -> ConsumerProcess:
    """A member that has consumed the first records of every partition."""
    first = cluster.producer.send(40)
    member = cluster.spawn("m1", mode=mode)
    member.wait_joined()
    cluster.wait_consumed(first, procs=[member])
    return member


@pytest.mark.serial  # bounds the stop by one HI: a loaded machine stretches it
@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_a_deleted_coordination_topic_stops_the_member_within_one_interval(
        cluster: Cluster, mode: str) -> None:
    member = consuming_member(cluster, mode)
    gone_at = delete_topic(cluster.bootstrap, cluster.ctopic)
    wait_for(lambda: not member.alive(), 3 * HI, "the member to stop",
             describe=member.stderr_text)
    stopped_s = time.monotonic() - gone_at
    assert member.wait() == 2
    lines = stderr_lines(member)
    assert len(lines) == 2, lines  # the member's start line, then one line: why it stopped
    assert "Traceback" not in member.stderr_text()
    assert lines[1] == (
        f"marshal: error: coordination topic '{cluster.ctopic}' was deleted under this member, "
        "so every claim and offset known from it is void. Stop every member using it, restore "
        "the topic (or accept that the groups start over), then start them again")
    assert stopped_s < HI, f"stopped {stopped_s:.1f} s after the deletion"


@pytest.mark.serial  # bounds the warning by one HI: a loaded machine stretches it
def test_a_deleted_data_topic_is_warned_about_given_up_and_a_recreated_one_stops_the_member(
        cluster: Cluster) -> None:
    member = consuming_member(cluster, "alo")
    ends = cluster.producer.ends()
    gone_at = delete_topic(cluster.bootstrap, cluster.topic)

    def warned() -> list[str]:
        return [line for line in stderr_lines(member) if "was deleted" in line]

    wait_for(warned, 3 * HI, "the warning", describe=member.stderr_text, interval=0.02)
    warned_s = time.monotonic() - gone_at
    assert warned_s < HI, f"warned {warned_s:.1f} s after the deletion"
    assert warned()[0].endswith(
        f"WARNING marshal_py.client.topic_watch: {cluster.group}: topic '{cluster.topic}' was "
        "deleted (it is gone from the cluster's metadata): released its partitions, waiting "
        "for it to come back (as a new topic, its committed offsets would point into another "
        "log: this member then stops)")
    # Nothing held that cannot be delivered: every partition released with its offset.
    wait_for(lambda: all(row["status"] == "unclaimed" for row in cluster.state()), 3 * HI,
             "the partitions to be released")
    assert {row["partition"]: row["committed_offset"] for row in cluster.state()} == ends
    assert member.alive()  # waiting for the topic to come back

    create_topic(cluster.bootstrap, cluster.topic, PARTITIONS)  # a new topic, a new id
    wait_for(lambda: not member.alive(), 3 * HI, "the member to stop",
             describe=member.stderr_text)
    assert member.wait() == 2
    lines = stderr_lines(member)
    assert len(lines) == 3, lines  # start, the warning, the error
    assert lines[2].startswith(
        f"marshal: error: topic '{cluster.topic}' was deleted and created again under this "
        "member (topic id ")
    assert lines[2].endswith(
        f"the offsets group '{cluster.group}' committed point into the old topic's log. Stop "
        "every member of the group, reset its offsets (`marshal reset-offsets --group "
        f"{cluster.group} --topic {cluster.topic} --to-earliest`, or --to-datetime), then "
        "start them again")
    # Done as said, the group consumes the new topic from its start.
    reset = run_marshal("reset-offsets", "--bootstrap-servers", cluster.bootstrap,
                        "--coordination-topic", cluster.ctopic, "--group", cluster.group,
                        "--topic", cluster.topic, "--to-earliest",
                        "--heartbeat-interval", str(HI))
    assert reset.returncode == 0, reset.stderr
    cluster.producer.close()  # a producer of the new topic (offsets start again at 0)
    cluster.producer = Producer(cluster.bootstrap, cluster.topic, PARTITIONS)
    new_records = cluster.producer.send(8)
    again = cluster.spawn("m2")
    again.wait_joined()
    cluster.wait_consumed(new_records, procs=[again])
    assert sorted(again.printed()) == sorted(new_records)


class AutoCreatingBroker(DevBroker):
    """A dev broker that creates a topic a client asks metadata about, as Kafka brokers do
    by default (auto.create.topics.enable=true)."""

    def _server_properties(self) -> str:
        return super()._server_properties().replace("auto.create.topics.enable=false",
                                                    "auto.create.topics.enable=true")


@pytest.fixture(scope="module")
def auto_creating_bootstrap() -> Iterator[str]:
    broker = AutoCreatingBroker(heap="512m")
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


def test_members_never_bring_a_deleted_topic_back(auto_creating_bootstrap: str,
                                                  unique_name: str, tmp_path: Path) -> None:
    """On a broker that creates topics on request, neither the data fetcher nor the
    coordination clients re-create what was deleted by asking for its metadata (it would
    come back as another topic, with default settings)."""
    cluster = Cluster(auto_creating_bootstrap, unique_name, tmp_path, partitions=PARTITIONS,
                      hi=HI)
    try:
        member = consuming_member(cluster, "alo")
        delete_topic(cluster.bootstrap, cluster.topic)
        # Released: by then the fetcher has asked for the topic's metadata over and over.
        wait_for(lambda: all(row["status"] == "unclaimed" for row in cluster.state()),
                 3 * HI, "the partitions to be released")
        delete_topic(cluster.bootstrap, cluster.ctopic)
        wait_for(lambda: not member.alive(), 3 * HI, "the member to stop")
        assert "was deleted under this member" in stderr_lines(member)[-1]
        admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap)
        try:
            topics = admin.list_topics()
        finally:
            admin.close()
        assert cluster.topic not in topics
        assert cluster.ctopic not in topics
    finally:
        cluster.close()
