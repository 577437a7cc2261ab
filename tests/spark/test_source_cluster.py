"""The ``marshal`` source runs unchanged on a Spark standalone cluster (master and two workers
on 127.0.0.1): the driver plans as a group member, executors in their own JVMs and Python
workers read the planned ranges."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType

from marshal_py.spark import register
from tests.integration.consumer_support import HI, Cluster

pytestmark = pytest.mark.integration


def test_a_query_on_a_standalone_cluster_reads_every_record_in_executor_processes(
        cluster_session: SparkSession, kafka_bootstrap: str, unique_name: str,
        tmp_path: Path) -> None:
    register(cluster_session)
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    try:
        produced = world.producer.send(4000)
        worker_pid = F.udf(lambda: os.getpid(), IntegerType()).asNondeterministic()
        out = tmp_path / "out"
        out.mkdir()

        def sink(batch: object, batch_id: int) -> None:
            rows = batch.select("partition", "offset", "pid").collect()  # type: ignore[attr-defined]
            (out / f"{batch_id}.json").write_text(
                json.dumps([[r.partition, r.offset, r.pid] for r in rows]))

        query = (cluster_session.readStream.format("marshal")
                 .option("bootstrap.servers", kafka_bootstrap)
                 .option("coordination.topic", world.ctopic).option("group", world.group)
                 .option("topics", world.topic).option("offset.reset", "earliest")
                 .option("heartbeat.interval", str(HI)).option("minPartitions", "4")
                 .load().withColumn("pid", worker_pid())
                 .writeStream.foreachBatch(sink)
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(timeout=180)
        assert not query.isActive
        rows = [row for path in out.glob("*.json") for row in json.loads(path.read_text())]
        assert sorted((p, o) for p, o, _ in rows) == sorted(produced)
        pids = {pid for _, _, pid in rows}
        assert os.getpid() not in pids, "records were processed in the driver's process"
        # The query released its partitions with everything committed.
        assert {r["partition"]: r["committed_offset"] for r in world.state()} == \
            world.producer.ends()
    finally:
        world.close()
