"""Start-up replay time of a consumer joining a group, with and without checkpoints.

Usage: python -m bench.replay [--records N] [--after M] [--bootstrap-servers B] [--quick]

Starts its own dev broker (KRaft, 127.0.0.1) unless ``--bootstrap-servers`` is given. Creates
a one-partition coordination topic and fills it with N records (default 1,000,000) of the
traffic of three groups consuming one 12-partition topic: each group has three members
holding four partitions each, heartbeating every partition and announcing membership, the
three groups interleaved. Then:

* **without checkpoints**: a consumer joins each group in turn (``Marshaler.consumer``);
  none of the groups has a checkpoint yet, so each join replays the whole partition (the
  replay window covers it all). Each joining member writes its group's first checkpoint.
* M more records (default 10,000: traffic written after the checkpoints, about one
  checkpoint interval's worth for a busy partition) are produced.
* **with checkpoints**: a consumer joins each group again; each starts from its group's
  newest checkpoint.

Reported: time from calling ``Marshaler.consumer`` to its return (replay, announcing the
member, catching up), the records read forwards, median of the three groups. ``--quick``
is a smoke run (20,000 records).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import NewTopic

from bench.audit import broker
from marshal_py import Marshaler
from marshal_py.devbroker import KAFKA_VERSION
from marshal_py.log.history import record_history
from marshal_py.log.kafka import KafkaLog, KafkaLogConfig
from marshal_py.protocol import ClaimingPartition, Heartbeat, MemberHeartbeat, Message, encode

HI_S = 10.0
PARTITIONS = 12
GROUPS = ("orders.billing", "orders.search", "orders.audit")
MEMBERS = 3


def say(message: str) -> None:
    print(f"  {message}", file=sys.stderr, flush=True)


def traffic(count: int, topic: str, start_round: int = 0,
            groups: Sequence[str] = GROUPS) -> Iterator[bytes]:
    """``count`` coordination records of ``groups`` (default the three), round after round."""
    sent = 0
    round_ = start_round
    while True:
        for group in groups:
            for m in range(MEMBERS):
                instance, client = f"{group[-4:]}{m:04x}", f"{group}-worker-{m}"
                mine = range(m * PARTITIONS // MEMBERS, (m + 1) * PARTITIONS // MEMBERS)
                messages: list[Message] = [
                    MemberHeartbeat(0, instance, client, group, topic, 1, -1)]
                if round_ == 0:
                    messages += [ClaimingPartition(0, instance, client, group, topic, p)
                                 for p in mine]
                messages += [Heartbeat(0, instance, client, group, topic, p, round_ * 10)
                             for p in mine]
                for message in messages:
                    yield encode(message)
                    sent += 1
                    if sent == count:
                        return
        round_ += 1


def produce(bootstrap: str, coordination_topic: str, values: Iterator[bytes], count: int,
            progress: Callable[[str], None] = say) -> float:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20,
                             batch_size=256 * 1024)
    started = time.monotonic()
    for i, value in enumerate(values, 1):
        producer.send(coordination_topic, value, partition=0)
        if i % 100_000 == 0:
            progress(f"produced {i:,} records")
    producer.flush()
    producer.close()
    return time.monotonic() - started


@dataclass
class Join:
    group: str
    seconds: float
    replayed: int


def join(bootstrap: str, coordination_topic: str, group: str, topic: str,
         wait_for_checkpoint: bool) -> Join:
    """Time a consumer joining ``group``; optionally wait until it wrote the group's first
    checkpoint; then leave."""
    with Marshaler(bootstrap, group, f"bench-joiner-{uuid.uuid4().hex[:6]}", HI_S,
                   coordination_topic=coordination_topic) as m:
        started = time.monotonic()
        consumer = m.consumer([topic], "alo")
        seconds = time.monotonic() - started
        engine = consumer._engine
        channel = engine.channel
        start = channel.replay_starts[0]
        replayed = m.rationalizer.next_position(0) - start
        deadline = time.monotonic() + 60
        while (wait_for_checkpoint and channel.checkpoints_written == 0
               and time.monotonic() < deadline):
            consumer.poll(timeout_s=0.2)  # the coordination thread writes it at its next tick
        if wait_for_checkpoint and channel.checkpoints_written == 0:
            raise SystemExit(f"no checkpoint of {group} was written within 60 s")
        consumer.close()
    return Join(group, seconds, replayed)


@dataclass
class ReplayResult:
    coordination_topic: str
    records: int  # in the coordination partition before the first joins
    without: list[Join]  # one join per group, no checkpoint yet (replays the whole window)
    with_checkpoints: list[Join]  # one join per group, from its newest checkpoint


def measure(bootstrap: str, records: int, after: int, groups: Sequence[str] = GROUPS,
            progress: Callable[[str], None] = say) -> ReplayResult:
    """Fill a fresh one-partition coordination topic with ``records`` records of ``groups``,
    join each group (no checkpoint yet), add ``after`` records, join each group again."""
    suffix = uuid.uuid4().hex[:8]
    coordination_topic, topic = f"__marshal_bench_{suffix}", f"orders-{suffix}"
    with KafkaLog(KafkaLogConfig(bootstrap, coordination_topic, partitions=1)) as log:
        for group in groups:  # what every writer does before its first record of a group
            record_history(log, group, topic)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()
    seconds = produce(bootstrap, coordination_topic, traffic(records, topic, groups=groups),
                      records, progress)
    progress(f"produced {records:,} records in {seconds:.1f} s")
    without = [join(bootstrap, coordination_topic, g, topic, True) for g in groups]
    produce(bootstrap, coordination_topic,
            traffic(after, topic, start_round=10**6, groups=groups), after, progress)
    with_checkpoints = [join(bootstrap, coordination_topic, g, topic, False) for g in groups]
    return ReplayResult(coordination_topic, records, without, with_checkpoints)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--after", type=int, default=10_000,
                        help="records produced after the checkpoints (default 10,000)")
    parser.add_argument("--bootstrap-servers", default=None)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20,000 records")
    args = parser.parse_args()
    if args.quick:
        args.records, args.after = 20_000, 2_000
    print(f"machine: {platform.machine()}, Python {platform.python_version()}, "
          f"Kafka {KAFKA_VERSION}")
    with broker(args.bootstrap_servers) as bootstrap:
        result = measure(bootstrap, args.records, args.after)
        without, with_checkpoints = result.without, result.with_checkpoints
    print(f"consumer start-up (Marshaler.consumer) on a coordination partition of "
          f"{args.records:,} records, median of {len(GROUPS)} groups:")
    for label, joins in (("without checkpoints", without),
                         ("with checkpoints", with_checkpoints)):
        median = statistics.median(j.seconds for j in joins)
        replayed = statistics.median(j.replayed for j in joins)
        each = ", ".join(f"{j.seconds:.2f} s" for j in joins)
        print(f"  {label}: {median:.2f} s ({each}); replayed {replayed:,.0f} records")


if __name__ == "__main__":
    main()
