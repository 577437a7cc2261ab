"""Failover time, claim latency and records/s of the consumer engine, on a real broker.

Usage: python -m bench.consumer [--quick] [--records N] [--repeat R]

Starts its own dev broker (Kafka 4.3.1, KRaft, 127.0.0.1) and measures, at a heartbeat
interval (HI) of 1 s:

1. Failover after kill -9: 3 ``marshal consume --print`` processes share a 12-partition topic;
   once every partition is held (4/4/4 when the balance gets there in time) and a warm-up
   record per partition has been printed, the member holding the most is killed with SIGKILL
   and one marker record is produced into each of its partitions. Measured from the kill:
   when the dead claims went stale and the dead member stopped counting as live by the rules
   (2 HI after its last heartbeat / last record: the floor the protocol sets), when an
   observer (a Marshaler of another group that only reads, polled every ~50 ms) sees the
   survivors own all 12 partitions, and when the survivors printed the first and the last
   marker (end to end). R runs; median and range.
2. Claim latency: members join a 12-partition topic one after the other (a new client id
   each time, the previous one closed) and claim all of it, or one partition
   (``max_claims=1``); the engine's ``stats.claim_latencies_ms`` (from proposing a claim to
   reading back the win, on a monotonic clock) of every join.
3. Records/s reading N records of 100 bytes from a 12-partition topic from the beginning: a
   plain kafka-python KafkaConsumer (manual assignment of all partitions, group_id=None, no
   commits), a Marshal ALO consumer (``commit`` after every record) and a Marshal AMO consumer
   (every fetched batch confirmed in ``__marshal`` before delivery), at its default
   ``amo_batch_size`` and at 500. Records/s is steady state, from the first record to the
   N-th; the time to the first record (joining, claiming) is shown apart. R runs of each
   (interleaved), median. ``--no-check-crcs`` turns off kafka-python's record CRC checks
   (pure Python without the crc32c extension, about half of a plain consumer's time).

``--quick`` is a smoke run (N=5,000, R=1, fewer joins) that finishes in well under a minute.
Every wait is bounded and fails with one line saying what did not happen; the consumer
processes and the broker are stopped whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import inspect
import signal
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, cast

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from bench.claim_latency import ClaimLatency, claim_latency
from bench.common import (
    HI_S,
    MEMBERS,
    PARTITIONS,
    RECORD_BYTES,
    BenchError,
    create_topic,
    load,
    machine_line,
    median_range,
    percentile,
    s,
    table,
)
from bench.failover_measure import FailoverRun, Observer, failover_run
from marshal_py import Marshaler
from marshal_py.client.engine_types import Mode
from marshal_py.devbroker import DevBroker

# -- 3. records per second ----------------------------------------------------------------------


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20,
                             batch_size=512 * 1024, max_request_size=8 * 1024 * 1024)
    try:
        for i in range(count):
            value = f"{i:012d}".encode().ljust(RECORD_BYTES, b".")
            producer.send(topic, value=value, partition=i % PARTITIONS)
        producer.flush(timeout=120)
    finally:
        producer.close()
    check = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        total = sum(check.end_offsets(tps).values())
    finally:
        check.close()
    if total != count:
        raise BenchError(f"produced {count:,} records but the topic holds {total:,}")


class Tally:
    """The same per-record work for every consumer: follows each partition's offsets."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.next = [0] * PARTITIONS
        self.progressed = 0  # sum of next: reaches total when every offset has been seen
        self.duplicates = 0
        self.gaps = 0
        self.first_at: float | None = None

    def see(self, partition: int, offset: int) -> bool:
        """Account one record; True once every record has been seen."""
        expected = self.next[partition]
        if offset == expected:
            self.next[partition] = offset + 1
            self.progressed += 1
        elif offset < expected:
            self.duplicates += 1
        else:
            self.gaps += offset - expected
            self.progressed += offset + 1 - expected
            self.next[partition] = offset + 1
        return self.progressed >= self.total


@dataclass
class ReadRun:
    seconds: float  # first record to the last
    to_first_s: float  # consumer creation to the first record
    duplicates: int
    gaps: int
    extra: str = ""

    def rate(self, records: int) -> float:
        return records / self.seconds if self.seconds > 0 else float("inf")


def default_amo_batch_size() -> object:
    """Marshaler.consumer's default at-most-once batch (records confirmed per round trip)."""
    parameter = inspect.signature(Marshaler.consumer).parameters.get("amo_batch_size")
    return "?" if parameter is None else parameter.default


def _deadline_s(records: int) -> float:
    return 60 + records / 1000


def read_plain(bootstrap: str, topic: str, records: int) -> ReadRun:
    tally = Tally(records)
    started = time.perf_counter()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        deadline = started + _deadline_s(records)
        done = False
        while not done:
            for batch in consumer.poll(timeout_ms=500, max_records=500).values():
                for record in batch:
                    if tally.first_at is None:
                        tally.first_at = time.perf_counter()
                    if tally.see(record.partition, record.offset):
                        done = True
            if not done and time.perf_counter() > deadline:
                raise BenchError(f"plain kafka-python read {tally.progressed:,}/{records:,} "
                                 f"records in {_deadline_s(records):.0f} s")
        ended = time.perf_counter()
    finally:
        consumer.close()
    assert tally.first_at is not None
    return ReadRun(ended - tally.first_at, tally.first_at - started, tally.duplicates,
                   tally.gaps)


def read_marshal(bootstrap: str, topic: str, records: int, mode: str,
                 amo_batch_size: int | None = None) -> ReadRun:
    tally = Tally(records)
    tag = uuid.uuid4().hex[:8]
    options: dict[str, Any] = {}
    if amo_batch_size is not None:
        options["amo_batch_size"] = amo_batch_size
    started = time.perf_counter()
    with Marshaler(bootstrap, group_id=f"bench.read.{mode}.{tag}", client_id=f"reader-{mode}",
                   heartbeat_interval=HI_S) as m:
        consumer = m.consumer([topic], cast(Mode, mode), offset_reset="earliest",
                              amo_batch_size=options.get("amo_batch_size", 100))
        watchdog = threading.Timer(_deadline_s(records), consumer.stop)
        watchdog.daemon = True
        watchdog.start()
        done = False
        try:
            if mode == "alo":
                for record in consumer:
                    if tally.first_at is None:
                        tally.first_at = time.perf_counter()
                    done = tally.see(record.partition, record.offset)
                    consumer.commit(record)
                    if done:
                        break
            else:
                for record in consumer:
                    if tally.first_at is None:
                        tally.first_at = time.perf_counter()
                    if tally.see(record.partition, record.offset):
                        done = True
                        break
            ended = time.perf_counter()
        finally:
            watchdog.cancel()
        if not done:
            raise BenchError(f"marshal {mode.upper()} read {tally.progressed:,}/{records:,} "
                             f"records in {_deadline_s(records):.0f} s")
        stats = consumer.stats
        if mode == "amo":
            extra = (f"{stats.amo_batches_confirmed:,} batches confirmed "
                     f"({records / max(1, stats.amo_batches_confirmed):,.0f} records each), "
                     f"{stats.amo_batches_refused} refused")
        else:
            extra = f"{stats.heartbeats:,} heartbeats"
        if stats.lost_after_winning:
            extra += f", {stats.lost_after_winning} claims lost"
    assert tally.first_at is not None
    return ReadRun(ended - tally.first_at, tally.first_at - started, tally.duplicates,
                   tally.gaps, extra)


AMO_BIG_BATCH = 500  # the data consumer's poll size in ALO mode
READERS: dict[str, str] = {
    "plain": "kafka-python KafkaConsumer (assign, no group, no commits)",
    "alo": "marshal ALO (commit every record)",
    "amo": f"marshal AMO (confirm every batch, amo_batch_size={default_amo_batch_size()})",
    "amo500": f"marshal AMO, amo_batch_size={AMO_BIG_BATCH}",
}


def throughput(bootstrap: str, admin: KafkaAdminClient, records: int,
               repeat: int) -> dict[str, list[ReadRun]]:
    topic = f"bench-read-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    produced = time.monotonic()
    produce(bootstrap, topic, records)
    print(f"  produced {records:,} records of {RECORD_BYTES} bytes in "
          f"{time.monotonic() - produced:.1f} s", flush=True)
    runs: dict[str, list[ReadRun]] = {k: [] for k in READERS}
    for _ in range(repeat):
        runs["plain"].append(read_plain(bootstrap, topic, records))
        runs["alo"].append(read_marshal(bootstrap, topic, records, "alo"))
        runs["amo"].append(read_marshal(bootstrap, topic, records, "amo"))
        runs["amo500"].append(read_marshal(bootstrap, topic, records, "amo", AMO_BIG_BATCH))
    return runs


# -- the report ---------------------------------------------------------------------------------


def report_failover(runs: list[FailoverRun]) -> None:
    header = ["run", "split", "victim held", "claims stale", "member expired",
              "all owned again", "first marker printed", "last marker printed"]
    rows = [[str(i + 1), r.split, str(r.victim_held), s(r.stale_s), s(r.expired_s),
             s(r.owned_s), s(r.first_record_s), s(r.last_record_s)]
            for i, r in enumerate(runs)]
    if len(runs) > 1:
        for name, pick in (("median", 0), ("min", 1), ("max", 2)):
            rows.append([name, "", "", *(s(median_range(vals)[pick]) for vals in (
                [r.stale_s for r in runs], [r.expired_s for r in runs],
                [r.owned_s for r in runs],
                [r.first_record_s for r in runs], [r.last_record_s for r in runs]))])
    print(table(header, rows))
    owned = median_range([r.owned_s for r in runs])
    e2e = median_range([r.last_record_s for r in runs])
    print(f"failover: all {PARTITIONS} partitions owned again {owned[0]:.2f} s after kill -9 "
          f"(median of {len(runs)}, range {owned[1]:.2f}..{owned[2]:.2f}); end to end "
          f"{e2e[0]:.2f} s (range {e2e[1]:.2f}..{e2e[2]:.2f})")


def report_claims(results: list[ClaimLatency]) -> None:
    rows = []
    for r in results:
        lat = r.latencies_ms
        rows.append([r.label, str(r.joins), str(len(lat)),
                     f"{percentile(lat, 50):.0f} ms", f"{percentile(lat, 99):.0f} ms",
                     f"{max(lat):.0f} ms", f"{statistics.median(r.first_of_join_ms):.0f} ms",
                     s(statistics.median(r.join_s))])
    print(table(["claims made by", "joins", "claims", "p50", "p99", "max",
                 "first win of a join (median)", "join to all held (median)"], rows))
    for r in results:
        lat = r.latencies_ms
        print(f"claim latency, {r.label}: {len(lat)} claims in {r.joins} joins, "
              f"p50 {percentile(lat, 50):.0f} ms, p99 {percentile(lat, 99):.0f} ms")


def report_throughput(runs: dict[str, list[ReadRun]], records: int) -> None:
    plain = statistics.median(r.rate(records) for r in runs["plain"])
    rows = []
    for key, label in READERS.items():
        rates = [r.rate(records) for r in runs[key]]
        med, low, high = median_range(rates)
        dups = sum(r.duplicates for r in runs[key])
        gaps = sum(r.gaps for r in runs[key])
        rows.append([label, f"{med:,.0f}", f"{low:,.0f}..{high:,.0f}", f"{med / plain:.2f}",
                     s(statistics.median(r.to_first_s for r in runs[key])),
                     f"{dups}/{gaps}", runs[key][-1].extra])
    print(table(["consumer", "records/s", "range", "vs plain", "to first record",
                 "dup/gap", "last run"], rows))
    summary = ", ".join(
        f"{k} {statistics.median(r.rate(records) for r in runs[k]):,.0f}" for k in READERS)
    print(f"records/s ({records:,} records x {len(runs['plain'])} runs, median): {summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=None,
                        help="Records to read (default 200,000; --quick 5,000).")
    parser.add_argument("--repeat", type=int, default=None,
                        help="Failover runs and read runs of each consumer (default 3; "
                             "--quick 1).")
    parser.add_argument("--joins", type=int, default=None,
                        help="Joins claiming all 12 partitions for the claim latency (default "
                             "10; --quick 2); three times as many claim one partition each.")
    parser.add_argument("--no-check-crcs", action="store_true",
                        help="Skip record CRC checks in every kafka-python consumer of this "
                             "process (about what the crc32c C extension would give).")
    parser.add_argument("--quick", action="store_true", help="A smoke run: small and once.")
    args = parser.parse_args()
    if args.no_check_crcs:
        # Marshaler's kafka_config goes to its producer and admin client too, which reject
        # check_crcs; the class default reaches the Consumer's data consumer.
        KafkaConsumer.DEFAULT_CONFIG["check_crcs"] = False
    records = args.records or (5_000 if args.quick else 200_000)
    repeat = args.repeat or (1 if args.quick else 3)
    joins = args.joins or (2 if args.quick else 10)
    if records < 1 or repeat < 1 or joins < 1:
        parser.error("--records, --repeat and --joins must be >= 1")
    balance_timeout_s = 15.0 if args.quick else 30.0

    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the consumers and the broker.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print(machine_line() + (", CRC checks off" if args.no_check_crcs else ""), flush=True)
    print(f"before: {load()} (other work on the machine skews every figure)", flush=True)
    began = time.monotonic()
    try:
        with DevBroker() as broker:
            bootstrap = broker.bootstrap_servers
            print(f"broker {bootstrap} up in {time.monotonic() - began:.1f} s; HI = {HI_S:g} s, "
                  f"{PARTITIONS} partitions", flush=True)
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
            observer = Observer(bootstrap)  # also creates __marshal
            try:
                print(f"\n1. failover after kill -9 of one of {MEMBERS} `marshal consume` "
                      f"processes ({repeat} runs)", flush=True)
                failovers = []
                for i in range(repeat):
                    failovers.append(failover_run(bootstrap, admin, producer, observer,
                                                  balance_timeout_s))
                    r = failovers[-1]
                    print(f"  run {i + 1}: owned again {r.owned_s:.2f} s, "
                          f"last marker {r.last_record_s:.2f} s", flush=True)
                report_failover(failovers)

                print(f"\n2. claim latency (members joining a {PARTITIONS}-partition topic "
                      "one after the other)", flush=True)
                report_claims([
                    claim_latency(bootstrap, admin, joins),
                    claim_latency(bootstrap, admin, joins * 3, max_claims=1),
                ])

                print(f"\n3. records/s reading {records:,} records of {RECORD_BYTES} bytes "
                      f"from {PARTITIONS} partitions ({repeat} runs each)", flush=True)
                report_throughput(throughput(bootstrap, admin, records, repeat), records)
            finally:
                for closing in (observer.close, producer.close, admin.close):
                    with contextlib.suppress(Exception):
                        closing()
    except BenchError as exc:
        print(f"bench.consumer: error: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"\ntotal {time.monotonic() - began:.0f} s; {load()}", flush=True)


if __name__ == "__main__":
    main()
