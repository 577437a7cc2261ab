"""A streaming query in its own process, for crash tests: reads the test topic through the
``marshal`` source and writes every batch's (partition, offset) pairs to
``<out>/<tag>-<batch id>.json`` (written to a temporary name, then renamed, so a kill -9 never
leaves half a file).

    python -m tests.spark.query_process BOOTSTRAP CTOPIC GROUP TOPIC OUT CHECKPOINT TAG \\
        [--follow] [--mode alo]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from marshal_py.spark import register
from marshal_py.spark.session import local_session


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("bootstrap", "ctopic", "group", "topic", "out", "checkpoint", "tag"):
        parser.add_argument(name)
    parser.add_argument("--follow", action="store_true")
    parser.add_argument("--mode", default="alo")
    parser.add_argument("--max-per-batch", default="300")
    args = parser.parse_args()
    spark = local_session(f"query-{args.tag}")
    register(spark)
    out = Path(args.out)

    def sink(batch: Any, batch_id: int) -> None:
        rows = [[r.partition, r.offset] for r in batch.select("partition", "offset").collect()]
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
