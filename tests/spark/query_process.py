"""A streaming query in its own process, for crash tests: reads the test topic through the
``marshal`` source and writes every batch's (partition, offset) pairs to
``<out>/<tag>-<batch id>.json`` (written to a temporary name, then renamed, so a kill -9 never
leaves half a file).

    python -m tests.spark.query_process BOOTSTRAP CTOPIC GROUP TOPIC OUT CHECKPOINT TAG \\
        [--follow] [--mode alo] [--kafka-output TOPIC]

With ``--kafka-output`` the sink also produces every row to that topic (acks=all), keyed by
the input record's coordinates ``<topic>/<partition>/<offset>``, before it writes the file:
the recipe docs/spark.md gives for Kafka output.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from marshal_py.spark import register
from marshal_py.spark.session import local_session
from tests.spark.quick_jvm import driver_java_options


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "ctopic", "group", "topic", "out", "checkpoint", "tag"):
        parser.add_argument(name)
    parser.add_argument("--follow", action="store_true")
    parser.add_argument("--mode", default="alo")
    parser.add_argument("--max-per-batch", default="300")
    parser.add_argument("--kafka-output", default=None)
    args = parser.parse_args()
    spark = local_session(f"query-{args.tag}",
                          **{"spark.driver.extraJavaOptions": driver_java_options()})
    register(spark)
    out = Path(args.out)

    producer = None
    if args.kafka_output:
        from kafka import KafkaProducer

        producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all",
                                 enable_idempotence=True)

    def sink(batch: Any, batch_id: int) -> None:
        rows = [[r.partition, r.offset] for r in batch.select("partition", "offset").collect()]
        if producer is not None:
            for r in batch.select("topic", "partition", "offset", "value").collect():
                producer.send(args.kafka_output, value=r.value,
                              key=f"{r.topic}/{r.partition}/{r.offset}".encode())
            producer.flush(timeout=60)
        tmp = out / f".{args.tag}-{batch_id}.tmp"
        tmp.write_text(json.dumps(rows))
        os.replace(tmp, out / f"{args.tag}-{batch_id:05d}.json")

    writer = (spark.readStream.format("marshal")
              .option("bootstrap.servers", args.bootstrap)
              .option("coordination.topic", args.ctopic).option("group", args.group)
              .option("topics", args.topic).option("mode", args.mode)
              .option("client.id", "crash-query").option("heartbeat.interval", "1")
              .option("offset.reset", "earliest")
              .option("maxRecordsPerTrigger", args.max_per_batch).load()
              .writeStream.foreachBatch(sink).option("checkpointLocation", args.checkpoint))
    writer = (writer.trigger(processingTime="100 milliseconds") if args.follow
              else writer.trigger(availableNow=True))
    writer.start().awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main()
