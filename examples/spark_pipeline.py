"""A data pipeline on Spark that consumes through marshal_py coordination.

Reads the ``orders`` topic with the ``marshal`` source (one member of the group
``orders.revenue``), totals the revenue per customer in every micro-batch, and appends the
totals to Parquet. Run it again and it carries on from its checkpoint; run Python consumers in
the same group beside it and they share the partitions.

    .venv/bin/python examples/spark_pipeline.py                 # starts its own broker
    .venv/bin/python examples/spark_pipeline.py --bootstrap-servers 127.0.0.1:9092 \\
        --orders 0 --output out/revenue                           # an existing broker and topic

With no ``--bootstrap-servers`` it starts a local broker (``marshal dev-broker``), creates the
topic and produces ``--orders`` sample orders (JSON: customer, amount) first. It reads what is
available now and stops (``--follow`` keeps it running until Ctrl-C).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaProducer
from kafka.errors import TopicAlreadyExistsError


def produce_orders(bootstrap: str, topic: str, count: int, partitions: int = 6) -> None:
    """Create ``topic`` if needed and write ``count`` sample orders to it."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({topic: {"num_partitions": partitions, "replication_factor": 1}},
                            wait_for_metadata=True)
    except TopicAlreadyExistsError:
        pass
    finally:
        admin.close()
    rng = random.Random(7)
    producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20)
    for i in range(count):
        customer = f"customer-{rng.randrange(20):02d}"
        order = {"order": i, "customer": customer, "amount": round(rng.uniform(5, 500), 2)}
        producer.send(topic, key=customer.encode(), value=json.dumps(order).encode())
    producer.flush()
    producer.close()


def run_pipeline(bootstrap: str, topic: str, group: str, output: Path, *,
                 follow: bool = False, max_per_batch: int = 20_000,
                 coordination_topic: str = "__marshal") -> int:
    """Run the query; return how many order rows it aggregated."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import DoubleType, StringType, StructField, StructType

    from marshal_py.spark import register
    from marshal_py.spark.session import local_session

    spark = local_session("marshal-example-revenue")
    register(spark)
    order_schema = StructType([StructField("customer", StringType()),
                               StructField("amount", DoubleType())])
    orders = (spark.readStream.format("marshal")
              .option("bootstrap.servers", bootstrap)
              .option("coordination.topic", coordination_topic)
              .option("group", group)
              .option("topics", topic)
              .option("mode", "alo")
              .option("offset.reset", "earliest")
              .option("maxRecordsPerTrigger", str(max_per_batch))
              .load())
    parsed = orders.select(
        F.from_json(F.col("value").cast("string"), order_schema).alias("o"), "partition",
        "offset")
    counted = {"rows": 0}

    def write_totals(batch: Any, batch_id: int) -> None:
        totals = (batch.groupBy("o.customer")
                  .agg(F.count(F.lit(1)).alias("orders"), F.sum("o.amount").alias("revenue"))
                  .withColumn("batch_id", F.lit(batch_id)))
        totals.write.mode("append").parquet(str(output / "revenue"))
        counted["rows"] += int(totals.agg(F.sum("orders")).first()[0] or 0)

    writer = (parsed.writeStream.foreachBatch(write_totals)
              .option("checkpointLocation", str(output / "_checkpoint")))
    query = (writer.trigger(processingTime="1 second") if follow
             else writer.trigger(availableNow=True)).start()
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    result = (spark.read.parquet(str(output / "revenue")).groupBy("customer")
              .agg(F.sum("orders").alias("orders"), F.round(F.sum("revenue"), 2)
                   .alias("revenue")).orderBy(F.desc("revenue")))
    result.show(5, truncate=False)
    spark.stop()
    return counted["rows"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap-servers", help="an existing broker (default: start one)")
    parser.add_argument("--topic", default="orders")
    parser.add_argument("--group", default="orders.revenue")
    parser.add_argument("--orders", type=int, default=50_000,
                        help="sample orders to produce first (0: none)")
    parser.add_argument("--output", type=Path, help="Parquet output directory")
    parser.add_argument("--follow", action="store_true", help="keep running until Ctrl-C")
    args = parser.parse_args(argv)
    with ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from marshal_py.devbroker import DevBroker

            broker = DevBroker()
            broker.start()
            stack.callback(broker.stop)
            bootstrap = broker.bootstrap_servers
            print(f"started a local broker at {bootstrap}", file=sys.stderr)
        output = args.output or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if args.orders:
            produce_orders(bootstrap, args.topic, args.orders)
            print(f"produced {args.orders} orders to {args.topic}", file=sys.stderr)
        rows = run_pipeline(bootstrap, args.topic, args.group, output, follow=args.follow)
        print(f"aggregated {rows} orders into {output / 'revenue'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
