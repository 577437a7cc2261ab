"""``marshal consume --mode eos --output-topic OUT``: copy records to another topic exactly once.

Each batch of one input partition is copied (key, value, headers; the output partition chosen
by the producer's partitioner, by key) in one Kafka transaction that also commits the input
offset after the batch in the coordination topic (PROTOCOL.md 7.2): read_committed readers of
OUT see every input record once, whatever members crash or stall.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from marshal_py.cli.common import ProgressLine, serving
from marshal_py.client.eos_consumer import DEFAULT_MAX_BATCH_RECORDS, ExactlyOnceConsumer
from marshal_py.client.source import KafkaPartitionSource
from marshal_py.log.kafka_config import KafkaLogConfig


def check_topics_exist(config: KafkaLogConfig, topics: Sequence[str]) -> None:
    """Raise :class:`~marshal_py.errors.TopicNotFoundError` (one line) when one of
    ``topics`` does not exist on the cluster of ``config``."""
    KafkaPartitionSource(config, expect_topics=topics).close()


def _record_line(record: Any) -> str:
    line: dict[str, object] = {"topic": record.topic, "partition": record.partition,
                               "offset": record.offset}
    for name, raw in (("key", record.key), ("value", record.value)):
        line[name] = None if raw is None else raw.decode("utf-8", "backslashreplace")
    return json.dumps(line)


def mirror(consumer: ExactlyOnceConsumer, output_topic: str, print_records: bool,
           max_records: int | None) -> int:
    """Copy batches to ``output_topic`` until SIGTERM / Ctrl-C (or ``max_records``
    committed); close the consumer; return how many records were committed."""
    count = 0
    progress = ProgressLine("copied", enabled=not print_records)
    with serving(consumer):
        for batch in consumer.batches(max_records=DEFAULT_MAX_BATCH_RECORDS
                                      if max_records is None
                                      else min(DEFAULT_MAX_BATCH_RECORDS, max_records)):
            for record in batch:
                batch.send(output_topic, record.value, key=record.key,
                           headers=list(record.headers or ()))
            if not batch.commit():
                continue  # aborted: its records come again (here, or to the next owner)
            count += len(batch)
            if print_records:
                for record in batch:
                    sys.stdout.write(_record_line(record) + "\n")
                sys.stdout.flush()
            progress.update(count)
            if max_records is not None and count >= max_records:
                break
    return count
