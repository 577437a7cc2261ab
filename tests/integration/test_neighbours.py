"""Neighbours and checkpoints of any size on the real broker (PROTOCOL.md 6.1, 6.2, 11).

* A brand-new group on a coordination partition full of other groups' records starts at its
  end (reads none of them), while a group with real history, joined meanwhile, still takes up
  exactly where its earlier member left off.
* A share group with 50 share-partitions of 2,000 in-flight records each checkpoints in parts
  (the state is several times the topic's max.message.bytes); a joiner restores it exactly,
  and a torn checkpoint (parts missing) is ignored for the whole one before it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer

from bench.replay import traffic
from marshal_py import Marshaler
from marshal_py.client.channel import CoordinationChannel
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.log.checkpoint_chunks import split_checkpoint
from marshal_py.log.history import read_index_view, record_history
from marshal_py.log.signing import MessageWriter
from marshal_py.protocol import (
    AcquiringRecords,
    Checkpoint,
    InitializingSharePartition,
    MemberHeartbeat,
    coordination_partition,
    encode,
)
from marshal_py.protocol.index import CheckpointAt, checkpoint_key, encode_entry
from marshal_py.replay import catch_up
from marshal_py.world import Owner, Rationalizer, RationalizerConfig

NEIGHBOURS = tuple(f"neighbour.g{i}" for i in range(5))
HI_S = 1.0


class WallClock:
    """The EngineClock of a channel used directly: this machine's time."""

    def now_ms(self) -> int:
        return int(time.time() * 1000)

    def observe(self, broker_ms: int, sent_ms: int, acked_ms: int) -> None:
        pass

    def monotonic_ms(self) -> float:
        return time.monotonic() * 1000


def wait_for(what: str, probe: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        answer = probe()
        if answer:
            return answer
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def make_topic(bootstrap: str, name: str, partitions: int, records: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}},
                            wait_for_metadata=True)
    finally:
        admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    for i in range(records):
        producer.send(name, value=f"{i}".encode(), partition=i % partitions)
    producer.flush()
    producer.close()


def test_a_new_group_skips_its_neighbours_and_a_group_with_history_restores_it(
        kafka_bootstrap: str, unique_name: str) -> None:
    coordination, data = f"__marshal-{unique_name}", f"orders-{unique_name}"
    make_topic(kafka_bootstrap, data, 4, 400)
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=coordination,
                                 partitions=1)) as log:
        assert log.created_topic
        for group in NEIGHBOURS:
            record_history(log, group, data)
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, linger_ms=20,
                             batch_size=256 * 1024)
    for value in traffic(50_000, data, groups=NEIGHBOURS):
        producer.send(coordination, value, partition=0)
    producer.flush()
    producer.close()

    def marshaler(group: str, client: str) -> Marshaler:
        return Marshaler(kafka_bootstrap, group, client, HI_S, coordination_topic=coordination)

    with marshaler("history.g", "first") as m:
        first = m.consumer([data], "alo", offset_reset="earliest")
        done: dict[int, int] = {}

        def committed_25_each() -> bool:
            for record in first.poll(timeout_s=0.2):
                if record.offset < 25:
                    first.commit(record)
                    done[record.partition] = record.offset + 1
            return sorted(done.values()) == [25] * 4

        wait_for("the first member to commit 25 records of each partition", committed_25_each)
        first.close()  # releases every partition with its committed offset (25 each)
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=coordination,
                                 create_topic=False)) as log:
        end = log.end_position(0)
        history = read_index_view(log).history_start("history.g", data)
    assert history is not None and 50_000 <= history < end
    with marshaler("brand.new", "newcomer") as m:
        newcomer = m.consumer([data], "alo", offset_reset="earliest")
        assert newcomer._engine.channel.replay_starts[0] >= end
        assert m.rationalizer.groups() == [("brand.new", data)]  # no neighbour applied
        wait_for("the newcomer's first record", lambda: newcomer.poll(timeout_s=0.2))
        newcomer.close()
    with marshaler("history.g", "second") as m:
        second = m.consumer([data], "alo", offset_reset="earliest")
        starts = second._engine.channel.replay_starts[0]
        assert history <= starts < end  # from the group's checkpoint, never before its history
        firsts: dict[int, int] = {}

        def all_partitions_started() -> bool:
            for record in second.poll(timeout_s=0.2):
                firsts.setdefault(record.partition, record.offset)
            return len(firsts) == 4

        wait_for("the second member's records of every partition", all_partitions_started)
        assert firsts == {p: 25 for p in range(4)}  # where the first left off, exactly
        second.close()


def test_a_checkpoint_larger_than_a_record_is_written_in_parts_and_restored(
        kafka_bootstrap: str, unique_name: str) -> None:
    coordination, topic, group = f"__marshal-{unique_name}", f"jobs-{unique_name}", "big.share"
    me = Owner("aaaa0001", "w1")
    ids = (me.instance_id, me.client_id, group, topic)
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=coordination,
                                 partitions=1)) as log:
        cp = coordination_partition(topic, log.partition_count())
        record_history(log, group, topic)
        now_s = int(time.time())
        messages: list[Any] = [MemberHeartbeat(now_s, *ids, 1, -1, 3_600_000)]
        for p in range(50):
            messages += [InitializingSharePartition(now_s, *ids, p, 0, 5, 2_000),
                         AcquiringRecords(now_s, *ids, p, "0-1999", 3_600_000)]
        MessageWriter(log).write([(cp, m) for m in messages])

        def channel() -> CoordinationChannel:
            r = Rationalizer(RationalizerConfig(1, 3_600_000))
            c = CoordinationChannel(log, r, WallClock(), [topic], group=group)
            c.open(7 * 86_400_000)
            return c

        writer = channel()
        assert writer.maybe_checkpoint(me) == 1
        snapshot = writer.rationalizer.snapshot(group, topic)
        assert len(snapshot) > 2 * log.max_value_bytes  # 50 x 2,000 records in flight
        pointer = writer.index  # the index as the writer read it: no checkpoint yet
        assert pointer is not None and pointer.checkpoint_position(group, topic) is None
        joiner = channel()
        assert joiner.index is not None
        at = joiner.index.checkpoint_position(group, topic)
        assert at is not None and joiner.replay_starts[cp] <= at
        full = Rationalizer(RationalizerConfig(1, 3_600_000))
        catch_up(log, full, [cp])
        assert joiner.rationalizer.snapshot(group, topic) == full.snapshot(group, topic)
        parts = [r for r in log.fetch({cp: at}, 5.0) if r.value and
                 r.value.startswith(b"CheckpointChunk/")]
        assert len(parts) >= 3

        # A newer checkpoint torn half-way: two of its parts in the log, and the index
        # pointing at it. A joiner ignores it and restores the whole one.
        torn = split_checkpoint(Checkpoint(0, *ids, log.end_position(cp), snapshot),
                                log.max_value_bytes)
        written = log.append_all([(cp, encode(m)) for m in torn[:2]])
        log.append_index(checkpoint_key(group, topic), encode_entry(
            CheckpointAt(log.topic, log.index_topic_id, group, topic, written[0].position)))
        again = channel()
        assert again.replay_starts[cp] == joiner.replay_starts[cp]
        catch_up(log, full, [cp])
        assert again.rationalizer.snapshot(group, topic) == full.snapshot(group, topic)
