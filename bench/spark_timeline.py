"""Where an ``availableNow`` query's time goes: Spark's Kafka source against ``format("marshal")``.

Starts a dev broker and a local[2] Spark session with Spark's Kafka connector, writes N
records of 100 bytes over 12 partitions, then runs the queries ``kafka``, ``alo`` and ``amo``
(a fresh group each) into the ``noop`` sink, ``--repeat`` rounds in one session, and prints
for each: how long ``start()`` took, when each micro-batch began after ``start()`` was
called, and Spark's own durations of the batch (``latestOffset``, ``queryPlanning``,
``addBatch``, ...). What sits between ``start()`` and the first batch is the query's fixed
cost: for ``format("marshal")``, Spark starting a fresh Python process for the source's
driver side, importing pyspark and marshal_py there, and the member joining its group.

    PYTHONPATH=$PWD .venv/bin/python -m bench.spark_timeline [--records N] [--repeat R]

Not a benchmark (the suite's rows are in ``python -m bench overhead``): one timeline per
query, to see where a query's seconds are.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from datetime import datetime
from typing import Any

from bench.spark_profile import _produce

READERS = ("kafka", "alo", "amo")


def _query(spark: Any, bootstrap: str, topic: str, kind: str) -> list[str]:
    stream = spark.readStream
    if kind == "kafka":
        stream = (stream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
    else:
        stream = stream.format("marshal")
        for key, value in {"bootstrap.servers": bootstrap, "topics": topic, "mode": kind,
                           "group": f"timeline.{kind}.{uuid.uuid4().hex[:8]}",
                           "offset.reset": "earliest", "heartbeat.interval": "1"}.items():
            stream = stream.option(key, value)
    began = time.time()
    query = (stream.load().writeStream.format("noop").trigger(availableNow=True)
             .option("checkpointLocation", f"/tmp/marshal-timeline-{uuid.uuid4().hex[:8]}")
             .start())
    started = time.time()
    query.awaitTermination()
    ended = time.time()
    lines = [f"{kind}: start() {started - began:.2f} s, query {ended - began:.2f} s"]
    for progress in query.recentProgress:
        at = datetime.fromisoformat(progress["timestamp"].replace("Z", "+00:00")).timestamp()
        lines.append(f"  batch {progress['batchId']} began +{at - began:.2f} s, "
                     f"{progress['numInputRows']:,} rows, "
                     f"durations ms {json.dumps(progress['durationMs'], sort_keys=True)}")
    return lines


def main() -> None:
    """Print the timelines (see the module's docstring)."""
    parser = argparse.ArgumentParser(prog="python -m bench.spark_timeline",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    from bench.spark_rows import IVY_CACHE, IVY_SETTINGS, SPARK_KAFKA_VERSION
    from marshal_py.devbroker import DevBroker
    from marshal_py.spark import register
    from marshal_py.spark.session import local_session

    with DevBroker() as broker:
        topic = "timeline"
        _produce(broker.bootstrap_servers, topic, args.records)
        IVY_CACHE.mkdir(parents=True, exist_ok=True)
        spark = local_session("marshal-bench-timeline", master="local[2]", **{
            "spark.jars.packages":
                f"org.apache.spark:spark-sql-kafka-0-10_2.13:{SPARK_KAFKA_VERSION}",
            "spark.jars.ivy": str(IVY_CACHE), "spark.jars.ivySettings": str(IVY_SETTINGS)})
        try:
            register(spark)
            for round_ in range(1, args.repeat + 1):
                print(f"== round {round_} of {args.repeat} ({args.records:,} records)")
                for kind in READERS:
                    print("\n".join(_query(spark, broker.bootstrap_servers, topic, kind)),
                          flush=True)
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
