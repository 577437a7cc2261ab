"""A streaming query in its own process, for crash tests: reads the test topic through the
``marshal`` source and writes every batch's (partition, offset) pairs to
``<out>/<tag>-<batch id>.json`` (written to a temporary name, then renamed, so a kill -9 never
leaves half a file).

    python -m tests.spark.query_process BOOTSTRAP CTOPIC GROUP TOPIC OUT CHECKPOINT TAG \\
        [--follow] [--mode alo] [--kafka-output TOPIC]

With ``--kafka-output`` the sink also produces every row to that topic (acks=all), keyed by
the input record's coordinates ``<topic>/<partition>/<offset>``, before it writes the file:
the recipe docs/spark.md gives for Kafka output.

The run that is killed needs a process of its own; the restart that follows does not:
:func:`restart_to_the_end` runs the same query in the test's own session.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from marshal_py.spark import register
from tests.spark.quick_jvm import quick_session


def start_query(spark: Any, bootstrap: str, ctopic: str, group: str, topic: str, out: Path,
                checkpoint: str, tag: str, *, follow: bool = False, mode: str = "alo",
                max_per_batch: str = "300",
                kafka_output: str | None = None) -> tuple[Any, Callable[[], None]]:
    """Start the query on ``spark`` (``marshal`` registered); return it and what to call
    once it has ended (it closes the Kafka output's producer)."""
    producer = None
    if kafka_output:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                 enable_idempotence=True)

    def sink(batch: Any, batch_id: int) -> None:
        rows = [[r.partition, r.offset] for r in batch.select("partition", "offset").collect()]
        if producer is not None:
            for r in batch.select("topic", "partition", "offset", "value").collect():
                producer.send(kafka_output, value=r.value,
                              key=f"{r.topic}/{r.partition}/{r.offset}".encode())
            producer.flush(timeout=60)
        tmp = out / f".{tag}-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"{tag}-{batch_id:05d}.json")

    writer = (spark.readStream.format("marshal")
              .option("bootstrap.servers", bootstrap)
              .option("coordination.topic", ctopic).option("group", group)
              .option("topics", topic).option("mode", mode)
              .option("client.id", "crash-query").option("heartbeat.interval", "1")
              .option("offset.reset", "earliest")
              .option("maxRecordsPerTrigger", max_per_batch).load()
              .writeStream.foreachBatch(sink).option("checkpointLocation", checkpoint))
    writer = (writer.trigger(processingTime="100 milliseconds") if follow
              else writer.trigger(availableNow=True))
    return writer.start(), (producer.close if producer is not None else lambda: None)


def restart_to_the_end(spark: Any, bootstrap: str, ctopic: str, group: str, topic: str,
                       out: Path, checkpoint: str, tag: str, *, timeout_s: float = 300,
                       **options: Any) -> None:
    """Run the query from its checkpoint until it has read what there is (availableNow) in
    this process's session, ``spark``: the restart of a crash test, without a driver of its
    own. Raises when the query failed or did not end within ``timeout_s``."""
    query, done = start_query(spark, bootstrap, ctopic, group, topic, out, checkpoint, tag,
                              **options)
    try:
        if not query.awaitTermination(timeout_s):
            query.stop()
            raise AssertionError(f"the restarted query did not end within {timeout_s:.0f} s")
    finally:
        done()


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "ctopic", "group", "topic", "out", "checkpoint", "tag"):
        parser.add_argument(name)
    parser.add_argument("--follow", action="store_true")
    parser.add_argument("--mode", default="alo")
    parser.add_argument("--max-per-batch", default="300")
    parser.add_argument("--kafka-output", default=None)
    args = parser.parse_args()
    spark = quick_session(f"query-{args.tag}")
    register(spark)
    query, done = start_query(spark, args.bootstrap, args.ctopic, args.group, args.topic,
                              Path(args.out), args.checkpoint, args.tag, follow=args.follow,
                              mode=args.mode, max_per_batch=args.max_per_batch,
                              kafka_output=args.kafka_output)
    query.awaitTermination()
    done()
    spark.stop()


if __name__ == "__main__":
    main()
