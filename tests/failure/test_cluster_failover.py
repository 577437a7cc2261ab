"""Broker failure in a real three-node cluster: the leader of the coordination partition is
killed with SIGKILL mid-run and restarted.

Checked: every coordination record a client was told was written is in the log afterwards;
`__marshal` has replication 3, min.insync.replicas 2 and unclean election off; no data
partition was delivered by two members at once (the hand-overs seen in the deliveries are
no more than the ownership changes in the log); and the consumers carry on: every record the
producer had acknowledged is consumed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pytest
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from marshal_py import Marshaler
from marshal_py.client.consumer import Consumer
from marshal_py.devbroker.cluster import DevCluster
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import coordination_partition
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig, Verdict

pytestmark = pytest.mark.integration

HI = 1.0
PARTITIONS = 6
RECORDS = 3_000
CTOPIC = "__marshal"


@pytest.fixture(scope="module")
def cluster() -> Iterator[DevCluster]:
    with DevCluster(3) as running:
        yield running


def wait_for(condition: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@dataclass
class Member:
    """A consumer thread that journals what it delivered and what its log acknowledged."""

    name: str
    marshaler: Marshaler
    delivered: list[tuple[int, int, float]]  # (partition, offset, monotonic time)
    acked: list[CoordinationRecord]
    error: BaseException | None = None


def run_member(member: Member, topic: str, stop: threading.Event) -> None:
    log = member.marshaler._log
    append = log.append

    def observed(partition: int, value: bytes) -> CoordinationRecord:
        record = append(partition, value)  # returns only once acks=all succeeded
        member.acked.append(record)
        return record

    log.append = observed  # type: ignore[method-assign]
    try:
        consumer = member.marshaler.consumer([topic], offset_reset="earliest")
        assert isinstance(consumer, Consumer)
        with consumer:
            while not stop.is_set():
                for record in consumer.poll(timeout_s=0.2):
                    member.delivered.append((record.partition, record.offset, time.monotonic()))
                    consumer.commit(record)
    except BaseException as exc:  # reported by the test
        member.error = exc


def test_killing_the_coordination_leader_loses_no_acknowledged_record(
        cluster: DevCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic, group = "orders", "orders.team"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 3)], validate_only=False)

    def partition_count(name: str) -> int:
        found = admin.describe_topics([name])
        return len(found[0].get("partitions") or []) if found else 0

    wait_for(lambda: partition_count(topic) == PARTITIONS, "the data topic's metadata")
    # The coordination topic, created as members create it; check what it rests on.
    KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, topic=CTOPIC)).close()
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, CTOPIC)])
    entry = configs.get("topic", {}).get(CTOPIC, {})
    values = {k: v.get("value") for k, v in entry.items()}
    assert values.get("min.insync.replicas") == "2"
    assert values.get("unclean.leader.election.enable") == "false"
    assert values.get("message.timestamp.type") == "LogAppendTime"
    described = admin.describe_topics([CTOPIC])[0]
    assert all(len(p["replica_nodes"]) == 3 for p in described["partitions"])
    admin.close()

    produced: set[tuple[int, int]] = set()
    producer_done = threading.Event()

    def produce() -> None:
        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                 enable_idempotence=True, linger_ms=5)
        for i in range(RECORDS):
            future = producer.send(topic, key=f"k{i}".encode(), value=b"x" * 50)
            meta = future.get(timeout=60)
            produced.add((meta.partition, meta.offset))
            if i % 100 == 0:
                time.sleep(0.05)  # spread the load over the failure
        producer.close()
        producer_done.set()

    stop = threading.Event()
    members = [Member(f"w{k}", Marshaler(bootstrap, group, f"w{k}", heartbeat_interval=HI,
                                         timeout=30), [], [])
               for k in range(3)]
    threads = [threading.Thread(target=run_member, args=(m, topic, stop), daemon=True)
               for m in members]
    producer_thread = threading.Thread(target=produce, daemon=True)
    for thread in threads:
        thread.start()
    producer_thread.start()
    try:
        wait_for(lambda: sum(len(m.delivered) for m in members) >= RECORDS // 4,
                 "a quarter of the records to be consumed")
        cp = coordination_partition(topic, 4)
        wait_for(lambda: cluster.leader_of(CTOPIC, cp) is not None, "a leader")
        victim = cluster.leader_of(CTOPIC, cp)
        assert victim is not None
        killed_at = time.monotonic()
        cluster.kill(victim)
        wait_for(lambda: cluster.leader_of(CTOPIC, cp) not in (None, victim),
                 "a new leader of the coordination partition")
        new_leader_s = time.monotonic() - killed_at
        cluster.start_node(victim)
        wait_for(producer_done.is_set, "the producer to finish", 180)
        wait_for(lambda: produced <= {(p, o) for m in members for p, o, _ in m.delivered},
                 "every acknowledged record to be consumed", 180)
        carried_on_s = time.monotonic() - killed_at
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=60)
        for m in members:
            m.marshaler.close()
    assert all(m.error is None for m in members), [m.error for m in members]
    print(f"new coordination leader {new_leader_s:.1f} s after the kill; every record "
          f"consumed {carried_on_s:.1f} s after it")

    # (a) Every acknowledged coordination record is in the log, at the position it was given.
    with KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, topic=CTOPIC)) as log:
        wanted = {r.partition for m in members for r in m.acked}
        ends = {p: log.end_position(p) for p in wanted}
        stored: dict[tuple[int, int], bytes | None] = {}
        positions = {p: log.start_position(p) for p in wanted}
        while any(positions[p] < ends[p] for p in wanted):
            batch = log.fetch({p: positions[p] for p in wanted if positions[p] < ends[p]}, 2.0)
            for record in batch:
                stored[(record.partition, record.position)] = record.value
                positions[record.partition] = max(positions[record.partition],
                                                  record.position + 1)
        acked = [r for m in members for r in m.acked]
        assert len(acked) > 100
        missing = [r for r in acked if stored.get((r.partition, r.position)) != r.value]
        assert missing == [], f"{len(missing)} acknowledged coordination records are lost"

        # (b) Ownership: replay the partition; hand-overs in the deliveries are no more than
        # the log's ownership changes, so no two members ever delivered a partition at once.
        owner_changes = dict.fromkeys(range(PARTITIONS), 0)
        replay = Rationalizer(RationalizerConfig(log.partition_count(), int(HI * 1000)))
        records: list[CoordinationRecord] = []
        position = log.start_position(cp)
        while position < ends.get(cp, 0):
            batch = [r for r in log.fetch({cp: position}, 2.0) if r.partition == cp]
            records += batch
            if batch:
                position = batch[-1].position + 1
        for record in records:
            outcome = replay.apply(record)
            message = outcome.message
            if outcome.verdict in (Verdict.CLAIM_WON, Verdict.CLAIM_RECLAIMED) and \
                    message is not None and message.topic == topic:
                owner_changes[message.partition] += 1  # type: ignore[attr-defined]
    for partition in range(PARTITIONS):
        timeline = sorted((t, m.name) for m in members for p, _, t in m.delivered
                          if p == partition)
        runs = sum(1 for i, (_, name) in enumerate(timeline)
                   if i == 0 or timeline[i - 1][1] != name)
        assert runs <= owner_changes[partition], (
            f"partition {partition}: {runs} delivery stints but only "
            f"{owner_changes[partition]} ownership changes in the log")
