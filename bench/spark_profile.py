"""Profile the ``marshal`` Spark source's driver and executor work, without Spark's JVM.

Drives :class:`~marshal_py.spark.reader.MarshalStreamReader` through the calls Spark makes in
an ``availableNow`` query (``prepareForTriggerAvailableNow``, then ``latestOffset`` /
``partitions`` / ``read`` of every task / ``commit`` until nothing is left) on a dev broker,
once per mode, under :mod:`cProfile`: the driver's calls (joining included) and the
executors' reads are profiled separately, so what each side costs per mode shows. Prints
wall times and the top functions of each side.

    PYTHONPATH=$PWD .venv/bin/python -m bench.spark_profile [--records N] [--modes alo,amo]

Not a benchmark (one run, profiler on): for where the time goes, not how fast.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time
import uuid
from typing import Any

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient, NewTopic

PARTITIONS = 12


def _produce(bootstrap: str, topic: str, records: int) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    admin.close()
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=20,
                             batch_size=256 * 1024)
    payload = b"x" * 100
    for i in range(records):
        producer.send(topic, value=payload, key=f"key-{i % 10_000}".encode(),
                      partition=i % PARTITIONS)
    producer.flush()
    producer.close()


def _profile_mode(bootstrap: str, topic: str, mode: str, records: int) -> dict[str, Any]:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from marshal_py.spark.options import parse_options
    from marshal_py.spark.reader import MarshalStreamReader
    from marshal_py.spark.source import SCHEMA

    options = parse_options({"bootstrap.servers": bootstrap, "topics": topic,
                             "group": f"profile.{mode}.{uuid.uuid4().hex[:8]}", "mode": mode,
                             "offset.reset": "earliest", "heartbeat.interval": "1",
                             "inflight.limit": "10000"})
    reader = MarshalStreamReader(options, SCHEMA)
    driver, executor = cProfile.Profile(), cProfile.Profile()
    times = {"driver_s": 0.0, "executor_s": 0.0}
    rows = batches = 0

    def on(side: str, profile: cProfile.Profile, call: Any, *args: Any) -> Any:
        began = time.perf_counter()
        profile.enable()
        try:
            return call(*args)
        finally:
            profile.disable()
            times[side] += time.perf_counter() - began

    started = time.perf_counter()
    start = on("driver_s", driver, reader.initialOffset)
    on("driver_s", driver, reader.prepareForTriggerAvailableNow)
    while True:
        end = on("driver_s", driver, reader.latestOffset, start, ReadAllAvailable())
        if end == start:
            break
        batches += 1
        for part in on("driver_s", driver, reader.partitions, start, end):
            for batch in on("executor_s", executor, lambda p=part: list(reader.read(p))):
                rows += batch.num_rows
        on("driver_s", driver, reader.commit, end)
        start = end
    on("driver_s", driver, reader.stop)
    total = time.perf_counter() - started
    if rows < records:
        raise SystemExit(f"{mode}: read {rows:,} of {records:,} records")
    return {"mode": mode, "total_s": total, "rows": rows, "batches": batches, **times,
            "driver": driver, "executor": executor}


def _top(profile: cProfile.Profile, lines: int) -> str:
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(lines)
    return out.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--modes", default="alo,amo,share,key-shared")
    parser.add_argument("--lines", type=int, default=25)
    args = parser.parse_args()
    from marshal_py.devbroker import DevBroker

    with DevBroker() as broker:
        bootstrap = broker.bootstrap_servers
        topic = f"profile-{uuid.uuid4().hex[:8]}"
        _produce(bootstrap, topic, args.records)
        results = [_profile_mode(bootstrap, topic, m, args.records)
                   for m in args.modes.split(",")]
    for r in results:
        print(f"== {r['mode']}: {r['rows']:,} rows in {r['batches']} batches, total "
              f"{r['total_s']:.2f} s: driver calls {r['driver_s']:.2f} s, executor reads "
              f"{r['executor_s']:.2f} s (profiler on)")
    for r in results:
        print(f"\n==== {r['mode']} driver\n{_top(r['driver'], args.lines)}")
        print(f"\n==== {r['mode']} executor\n{_top(r['executor'], args.lines)}")


if __name__ == "__main__":
    main()
