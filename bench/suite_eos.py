"""Suite ``eos``: exactly-once consume -> transform -> produce, and what it costs its neighbours.

**Throughput.** The data: N records of 100 bytes over 4 partitions (N = 100,000; ``--quick``
2,000; ``BENCH_EOS_RECORDS`` overrides), produced once. Each reader copies all of it to a
fresh output topic of 4 partitions (value and key), in the bench process, from the start of
the input, ``ctx.repeat`` times, interleaved; the clock runs from opening the consumer (joining
is inside it) until the last record's copy is committed:

* ``alo-copy``: ours, at-least-once: ``poll(max_records=500)``, each record sent with an
  idempotent producer (``acks=all``), ``flush()``, then ``commit_batch`` -- the same work
  without transactions (a crash copies some records twice);
* ``eos-copy``: ours, ``mode="eos"``: ``poll_batch(max_records=500)``, each record sent with
  ``batch.send``, then ``batch.commit()`` (output and input offset in one transaction);
* ``kp-eos-copy`` (the anchor): a kafka-python classic group (``KafkaConsumer(group_id=...,
  isolation_level="read_committed")``, ``subscribe``) and a transactional producer:
  ``poll(max_records=500)``, ``begin_transaction``, the sends, ``send_offsets_to_transaction``
  (offsets after the batch, the consumer's group metadata) and ``commit_transaction`` --
  Kafka's own exactly-once, through the group coordinator.

**Neighbours.** An open transaction holds back the last stable offset of every partition it
wrote to, and members read the coordination topic ``read_committed``: while an exactly-once
member's commit is under way, every group placed on the same coordination partition reads
its own records back later. Measured on a coordination topic of ONE partition (every group
shares it), for another group at HI 1 s, with and without an exactly-once member (a ``marshal
consume --mode eos`` process) copying a topic fed at about 1,000 records/s in small batches
(many transactions per second):

* claim latency: a new at-least-once member of a fresh group claims a 4-partition topic
  (``claim_latencies_ms``: proposal to won, per partition), 5 joins per repetition;
* failover: a ``marshal consume`` member holding a 1-partition topic is killed with SIGKILL;
  from the kill until the surviving member of its group hands out a record produced right
  after the kill;
* (full runs only) a dangling commit: a transactional producer writes a record to the
  coordination partition and never ends its transaction (an exactly-once member killed
  inside its commit); a new member's claim then waits until the broker aborts it:
  ``transaction_timeout`` (10 s by default) plus up to the broker's
  ``transaction.abort.timed.out.transaction.cleanup.interval.ms`` (10 s by default).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from bench.eos_neighbours import measure_neighbours
from bench.harness import BenchContext, BenchError
from bench.report import Measured, SuiteReport, Table, ratio
from marshal_py import Marshaler

PARTITIONS = 4
BATCH = 500
HI_S = 1.0


def _records(quick: bool) -> int:
    return int(os.environ.get("BENCH_EOS_RECORDS", 2_000 if quick else 100_000))


def copy_alo(bootstrap: str, topic: str, output: str, count: int, tag: str) -> float:
    """``alo-copy``: seconds to copy ``count`` records at least once."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True,
                             linger_ms=5)
    started = time.monotonic()
    copied = 0
    try:
        with Marshaler(bootstrap, f"bench.eos.alo.{tag}", "copier", HI_S) as m:
            consumer = m.consumer([topic], "alo", offset_reset="earliest")
            deadline = started + 600
            while copied < count:
                if time.monotonic() > deadline:
                    raise BenchError(f"alo-copy copied {copied:,} of {count:,} records")
                records = consumer.poll(timeout_s=0.2, max_records=BATCH)
                for record in records:
                    producer.send(output, value=record.value, key=record.key)
                producer.flush(timeout=60)
                consumer.commit_batch(records)
                copied += len(records)
            elapsed = time.monotonic() - started
    finally:
        producer.close(timeout=10)
    return elapsed


def copy_eos(bootstrap: str, topic: str, output: str, count: int, tag: str) -> float:
    """``eos-copy``: seconds to copy ``count`` records exactly once."""
    started = time.monotonic()
    copied = 0
    with Marshaler(bootstrap, f"bench.eos.eos.{tag}", "copier", HI_S) as m:
        consumer = m.consumer([topic], "eos", offset_reset="earliest")
        deadline = started + 600
        while copied < count:
            if time.monotonic() > deadline:
                raise BenchError(f"eos-copy copied {copied:,} of {count:,} records")
            batch = consumer.poll_batch(0.2, max_records=BATCH)
            if batch is None:
                continue
            for record in batch:
                batch.send(output, record.value, key=record.key)
            if batch.commit():
                copied += len(batch)
        return time.monotonic() - started


def copy_kafka_eos(bootstrap: str, topic: str, output: str, count: int, tag: str) -> float:
    """``kp-eos-copy``: seconds to copy ``count`` records with Kafka's transactions and a
    classic group (offsets through the group coordinator)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=f"bench.eos.kp.{tag}",
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             isolation_level="read_committed")
    producer = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"bench-kp-{tag}",
                             linger_ms=5)
    started = time.monotonic()
    copied = 0
    try:
        producer.init_transactions()
        consumer.subscribe([topic])
        deadline = started + 600
        while copied < count:
            if time.monotonic() > deadline:
                raise BenchError(f"kp-eos-copy copied {copied:,} of {count:,} records")
            polled = consumer.poll(timeout_ms=200, max_records=BATCH)
            if not polled:
                continue
            producer.begin_transaction()
            offsets = {}
            for tp, records in polled.items():
                for record in records:
                    producer.send(output, value=record.value, key=record.key)
                offsets[tp] = OffsetAndMetadata(records[-1].offset + 1, "", -1)
                copied += len(records)
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()
        return time.monotonic() - started
    finally:
        consumer.close()
        producer.close(timeout=10)


def output_count(bootstrap: str, topic: str) -> int:
    """Records of ``topic`` a read_committed reader sees (its committed records)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        seen = 0
        deadline = time.monotonic() + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            if time.monotonic() > deadline:
                raise BenchError(f"could not read {topic} to its end")
            seen += sum(len(b) for b in consumer.poll(timeout_ms=200).values())
        return seen
    finally:
        consumer.close()


COPIERS: dict[str, Callable[[str, str, str, int, str], float]] = {
    "alo-copy": copy_alo, "eos-copy": copy_eos, "kp-eos-copy": copy_kafka_eos}


def run(ctx: BenchContext) -> SuiteReport:
    count = _records(ctx.quick)
    topic = ctx.create_topic(f"bench-eos-{ctx.tag()}", PARTITIONS)
    ctx.produce(topic, count, PARTITIONS, key=lambda i: f"k{i % 97}".encode())
    rates: dict[str, list[float]] = {name: [] for name in COPIERS}
    for i in range(ctx.repeat):
        for name, copier in COPIERS.items():
            ctx.say(f"throughput {name}: repetition {i + 1}/{ctx.repeat}")
            output = ctx.create_topic(f"bench-eos-out-{ctx.tag()}", PARTITIONS)
            seconds = copier(ctx.bootstrap, topic, output, count, ctx.tag())
            copied = output_count(ctx.bootstrap, output)
            if copied < count:
                raise BenchError(f"{name} left {copied:,} of {count:,} records in {output}")
            rates[name].append(count / seconds)
    measured = {name: Measured(values, "records/s") for name, values in rates.items()}
    eos = measured["eos-copy"].median
    throughput = Table(
        f"Copying {count:,} records of 100 bytes over {PARTITIONS} partitions "
        f"(records/s, median of {ctx.repeat})",
        ["copier", "records/s", "eos-copy / this"],
        [[name, m.cell(), ratio(eos, m.median)] for name, m in measured.items()],
        ["alo-copy: ours, at-least-once, no transactions; kp-eos-copy: kafka-python classic "
         "group with send_offsets_to_transaction (the group coordinator commits the input "
         "offsets); eos-copy: ours, the input offsets committed in __marshal in the output's "
         "transaction."])
    ctx.say("neighbours: claim latency and failover of another group on the same "
            "coordination partition")
    neighbours = measure_neighbours(ctx)
    raw = {"records": count, "rates": rates, "neighbours": neighbours.raw}
    return SuiteReport("eos", ctx.command, [throughput, neighbours.table()], [], raw)
