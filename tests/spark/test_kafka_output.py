"""A ``format("marshal")`` query writing to Kafka: what it gets (docs/spark.md).

Spark commits a batch's input offsets after its sink ran, outside any Kafka transaction the
sink could open, so output to Kafka is at-least-once: a query killed after its sink wrote a
batch and before the batch's offsets were committed writes that batch again when it restarts.
The recipe docs/spark.md gives -- key each output record by its input record's coordinates -- makes
the copies identical, so a compacted output topic, or a reader that keeps the last record per
key, sees every input record exactly once. (Exactly-once Kafka-to-Kafka without that is
``mode="eos"`` outside Spark: tests/integration/test_exactly_once.py.)
"""

from __future__ import annotations

import signal
import subprocess
import sys
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from kafka import KafkaConsumer, TopicPartition
from pyspark.sql import SparkSession

from marshal_py.spark.source import register
from tests.integration.consumer_support import Cluster, create_topic, wait_for
from tests.spark.query_process import restart_to_the_end

pytestmark = pytest.mark.integration


def read_all(bootstrap: str, topic: str, partitions: int) -> list[tuple[bytes, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             isolation_level="read_committed")
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[tuple[bytes, bytes]] = []
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            for batch in consumer.poll(timeout_ms=200).values():
                out.extend((r.key, r.value) for r in batch)
        return out
    finally:
        consumer.close()


def test_kafka_output_keyed_by_input_survives_a_kill_with_identical_copies_only(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path, spark: SparkSession) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=4)
    output = f"{unique_name}-out-{uuid.uuid4().hex[:6]}"
    create_topic(kafka_bootstrap, output, 4)
    try:
        produced = world.producer.send(2000)
        out = tmp_path / "out"
        out.mkdir()
        argv = [sys.executable, "-m", "tests.spark.query_process", world.bootstrap,
                world.ctopic, world.group, world.topic, str(out), str(tmp_path / "checkpoint")]
        root = Path(__file__).parents[2]
        with open(tmp_path / "run1.err", "wb") as err:
            first = subprocess.Popen([*argv, "run1", "--follow", "--max-per-batch", "100",
                                      "--kafka-output", output],
                                     cwd=root, stdout=subprocess.DEVNULL, stderr=err)
        try:
            wait_for(lambda: len(list(out.glob("run1-*.json"))) >= 3, 120,
                     "the first run to write 3 batches",
                     describe=lambda: (tmp_path / "run1.err").read_text()[-2000:])
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
        finally:
            if first.poll() is None:
                first.kill()
        # The restart, in this process's session: the same query from the same checkpoint.
        register(spark)
        restart_to_the_end(spark, world.bootstrap, world.ctopic, world.group, world.topic,
                           out, str(tmp_path / "checkpoint"), "run2", max_per_batch="5000",
                           kafka_output=output)
        copies: dict[bytes, set[bytes]] = defaultdict(set)
        count: dict[bytes, int] = defaultdict(int)
        for key, value in read_all(kafka_bootstrap, output, 4):
            copies[key].add(value)
            count[key] += 1
        wanted = {f"{world.topic}/{p}/{o}".encode() for p, o in produced}
        assert set(copies) == wanted  # nothing lost, nothing foreign
        assert all(len(values) == 1 for values in copies.values())  # copies are identical
        duplicated = sum(1 for n in count.values() if n > 1)
        print(f"{duplicated} of {len(wanted)} input records were written more than once")
    finally:
        world.close()
