"""Records/s of the ``marshal`` Spark source against a plain kafka-python consumer.

Usage: python -m bench.spark_source [--quick] [--records N] [--repeat R] [--modes alo,amo,share]

Starts its own dev broker, produces N records of 100 bytes over 12 partitions, then reads all
of them R times each (interleaved), median:

* ``plain``: one kafka-python KafkaConsumer, manual assignment of all 12 partitions, from the
  first record to the N-th (bench.consumer's reader; its time to the first record apart);
* ``spark-<mode>``: a Structured Streaming query over ``format("marshal")`` in local[2] Spark
  (a fresh group each run, ``trigger(availableNow=True)``, the ``noop`` sink, so only the
  source is measured). Two figures: records / wall time from ``start()`` to the query's end
  (joining the group, planning, Spark's scheduling included) and records / the summed
  ``addBatch`` time of its micro-batches (the reading itself). The Spark session is started
  once, before every run (its start-up, about 5-15 s, is printed apart).

``--quick``: N=5,000, R=1, modes alo only: a smoke run.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

from kafka import KafkaAdminClient

from bench.common import BenchError, create_topic, load, machine_line, median_range
from bench.consumer import produce, read_plain
from marshal_py.devbroker import DevBroker

HI_S = 1.0


@dataclass
class SparkRun:
    wall_s: float
    batches_s: float
    batches: int
    rows: int


def read_spark(spark: Any, bootstrap: str, topic: str, records: int, mode: str) -> SparkRun:
    group = f"bench.spark.{mode}.{uuid.uuid4().hex[:8]}"
    checkpoint = f"/tmp/marshal-bench-spark-{group}"
    started = time.perf_counter()
    query = (spark.readStream.format("marshal")
             .option("bootstrap.servers", bootstrap).option("group", group)
             .option("topics", topic).option("mode", mode)
             .option("offset.reset", "earliest").option("heartbeat.interval", str(HI_S))
             .load().writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", checkpoint).start())
    query.awaitTermination(timeout=600)
    wall = time.perf_counter() - started
    if query.isActive:
        query.stop()
        raise BenchError(f"the {mode} query did not finish in 600 s")
    progress = [p for p in query.recentProgress if p["numInputRows"]]
    rows = sum(p["numInputRows"] for p in progress)
    if rows != records:
        raise BenchError(f"the {mode} query read {rows:,} records, expected {records:,}")
    batches_s = sum(p["durationMs"].get("addBatch", 0) for p in progress) / 1000
    return SparkRun(wall, batches_s, len(progress), rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=None,
                        help="records to read (default 500,000; --quick 5,000)")
    parser.add_argument("--repeat", type=int, default=None, help="runs of each (default 3)")
    parser.add_argument("--modes", default=None, help="comma-separated (default alo,amo,share)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: small and once")
    args = parser.parse_args()
    records = args.records or (5_000 if args.quick else 500_000)
    repeat = args.repeat or (1 if args.quick else 3)
    modes = (args.modes or ("alo" if args.quick else "alo,amo,share")).split(",")
    if records < 1 or repeat < 1 or not set(modes) <= {"alo", "amo", "share"}:
        parser.error("--records and --repeat must be >= 1; modes are alo, amo, share")
    print(machine_line(), flush=True)
    print(f"before: {load()} (other work on the machine skews every figure)", flush=True)

    from marshal_py.spark import register
    from marshal_py.spark.session import local_session

    broker = DevBroker()
    broker.start()
    spark = None
    try:
        bootstrap = broker.bootstrap_servers
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        topic = f"bench-spark-{uuid.uuid4().hex[:8]}"
        create_topic(admin, topic)
        admin.close()
        produce(bootstrap, topic, records)
        began = time.perf_counter()
        spark = local_session("marshal-bench", master="local[2]")
        register(spark)
        print(f"spark session local[2] started in {time.perf_counter() - began:.1f} s",
              flush=True)
        plain: list[float] = []
        wall: dict[str, list[float]] = {m: [] for m in modes}
        batches: dict[str, list[float]] = {m: [] for m in modes}
        counts: dict[str, int] = {}
        for _ in range(repeat):
            plain.append(read_plain(bootstrap, topic, records).rate(records))
            for mode in modes:
                run = read_spark(spark, bootstrap, topic, records, mode)
                wall[mode].append(records / run.wall_s)
                batches[mode].append(records / run.batches_s if run.batches_s else 0.0)
                counts[mode] = run.batches
        base = statistics.median(plain)
        print(f"\nrecords/s ({records:,} records of 100 B, 12 partitions, x {repeat} runs, "
              "median [min..max]):")
        med, lo, hi = median_range(plain)
        print(f"  plain kafka-python consumer     {med:>10,.0f}  [{lo:,.0f}..{hi:,.0f}]")
        for mode in modes:
            med, lo, hi = median_range(wall[mode])
            bmed, blo, bhi = median_range(batches[mode])
            print(f"  spark marshal {mode:<5} wall      {med:>10,.0f}  [{lo:,.0f}..{hi:,.0f}]  "
                  f"{med / base:.2f}x plain")
            print(f"  spark marshal {mode:<5} batches   {bmed:>10,.0f}  [{blo:,.0f}..{bhi:,.0f}]  "
                  f"{bmed / base:.2f}x plain  ({counts[mode]} micro-batches)")
        print(f"after: {load()}")
    finally:
        if spark is not None:
            spark.stop()
        broker.stop()


if __name__ == "__main__":
    try:
        main()
    except BenchError as exc:
        print(f"bench.spark_source: {exc}", file=sys.stderr)
        sys.exit(1)
