"""``marshal_log``: a PySpark batch data source of the raw coordination log.

.. code-block:: python

    from marshal_py.spark.log_source import MarshalLogDataSource
    spark.dataSource.register(MarshalLogDataSource)
    df = (spark.read.format("marshal_log")
          .option("bootstrap.servers", "127.0.0.1:9092")
          .load())        # coordination_partition int, offset long, timestamp_ms long, value binary

Read ``read_committed``, as every member reads it. One input partition per coordination
partition — a partition holding more than ``split.records`` records is split into offset
ranges of that size — planned on the driver from the partitions' beginning and end offsets at
planning time. Executors read their range with kafka-python (group-less, manually assigned)
and yield Arrow record batches; nothing is held between tasks. Records appended after
planning are not read.

Options: ``bootstrap.servers`` (required), ``topic`` (default ``__marshal``),
``partitions`` (comma-separated coordination partitions, default all), ``split.records``
(default 1,000,000), ``timeout.ms`` (default 30,000: planning, and how long a task waits for
records that should be there), ``kafka.<setting>`` (a kafka-python setting for every client,
e.g. ``kafka.security_protocol``; numbers and true/false are converted).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from marshal_py.errors import BrokerUnavailableError, ConfigurationError, CoordinationTopicError

FORMAT = "marshal_log"
SCHEMA = "coordination_partition int, offset long, timestamp_ms long, value binary"
DEFAULT_TOPIC = "__marshal"
DEFAULT_SPLIT_RECORDS = 1_000_000
DEFAULT_TIMEOUT_MS = 30_000
_BATCH_ROWS = 100_000
_OPTIONS = frozenset({"bootstrap.servers", "topic", "partitions", "split.records",
                      "timeout.ms"})


class LogRange(InputPartition):
    """Offsets [start, end) of one coordination partition."""

    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"LogRange({self.partition}, {self.start}, {self.end})"


def _kafka_value(text: str) -> Any:
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        return int(text)
    except ValueError:
        return text


class LogOptions:
    """The data source's options, checked."""

    def __init__(self, options: Mapping[str, str]) -> None:
        kafka: dict[str, Any] = {}
        plain: dict[str, str] = {}
        for name, value in options.items():
            lower = name.lower()
            if lower.startswith("kafka."):
                kafka[lower[len("kafka."):]] = _kafka_value(str(value))
            elif lower in _OPTIONS:
                plain[lower] = str(value)
            elif lower != "path":
                raise ConfigurationError(
                    f"unknown {FORMAT} option {name!r}; known: {', '.join(sorted(_OPTIONS))} "
                    "and kafka.<kafka-python setting>")
        bootstrap = plain.get("bootstrap.servers", "").strip()
        if not bootstrap:
            raise ConfigurationError(f"the {FORMAT} source needs option bootstrap.servers")
        from marshal_py.log.kafka_config import check_kafka_settings

        check_kafka_settings(kafka, given_as=f"the {FORMAT} source's kafka.* options")
        self.bootstrap_servers = bootstrap
        self.topic = plain.get("topic", DEFAULT_TOPIC)
        self.kafka_config = kafka
        try:
            self.split_records = int(plain.get("split.records", DEFAULT_SPLIT_RECORDS))
            self.timeout_ms = int(plain.get("timeout.ms", DEFAULT_TIMEOUT_MS))
            wanted = plain.get("partitions")
            self.partitions = (None if not wanted else
                               sorted({int(p) for p in wanted.split(",") if p.strip()}))
        except ValueError as exc:
            raise ConfigurationError(f"bad {FORMAT} option: {exc}") from exc
        if self.split_records < 1 or self.timeout_ms < 1:
            raise ConfigurationError("split.records and timeout.ms must be >= 1")

    def consumer(self) -> Any:
        """A group-less kafka-python consumer for this cluster, reading ``read_committed``
        whatever ``kafka.isolation_level`` says: a record of an aborted transaction (an
        exactly-once member's commit that did not happen) is not part of the log."""
        from kafka import KafkaConsumer

        from marshal_py.log.kafka_config import new_client

        return new_client(KafkaConsumer, **{
            "bootstrap_servers": self.bootstrap_servers, "group_id": None,
            "enable_auto_commit": False, "auto_offset_reset": "earliest",
            "request_timeout_ms": self.timeout_ms + 5_000,
            "fetch_max_bytes": 64 << 20, "max_partition_fetch_bytes": 16 << 20,
            **self.kafka_config, "isolation_level": "read_committed"})


def plan(options: LogOptions) -> list[LogRange]:
    """The input partitions: each coordination partition's [beginning, end) in ranges of at
    most ``split.records`` records. Raises one-line errors for an unreachable broker or a
    missing topic."""
    from kafka import TopicPartition
    from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

    try:
        consumer = options.consumer()
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        raise BrokerUnavailableError(
            f"cannot reach Kafka at {options.bootstrap_servers}; check that the broker runs "
            "and bootstrap.servers points at it") from exc
    try:
        deadline = time.monotonic() + options.timeout_ms / 1000
        found = consumer.partitions_for_topic(options.topic)
        while not found and time.monotonic() < deadline:
            time.sleep(0.2)
            found = consumer.partitions_for_topic(options.topic)
        if not found:
            raise CoordinationTopicError(
                f"coordination topic {options.topic!r} does not exist on "
                f"{options.bootstrap_servers}; name the right one with the topic option")
        chosen = sorted(found) if options.partitions is None else options.partitions
        missing = sorted(set(chosen) - set(found))
        if missing:
            raise ConfigurationError(f"{options.topic} has no partition(s) {missing}")
        tps = [TopicPartition(options.topic, p) for p in chosen]
        begin = consumer.beginning_offsets(tps)
        end = consumer.end_offsets(tps)
    except KafkaError as exc:
        raise BrokerUnavailableError(
            f"listing {options.topic} on {options.bootstrap_servers} failed: "
            f"{type(exc).__name__}: {exc}") from exc
    finally:
        consumer.close()
    ranges: list[LogRange] = []
    for tp in tps:
        start, stop = int(begin[tp]), int(end[tp])
        while start < stop:
            upto = min(stop, start + options.split_records)
            ranges.append(LogRange(tp.partition, start, upto))
            start = upto
    return ranges


def read_range(options: LogOptions, part: LogRange) -> Iterator[Any]:
    """Arrow record batches of one range (runs on an executor)."""
    import pyarrow as pa
    from kafka import TopicPartition

    schema = pa.schema([("coordination_partition", pa.int32()), ("offset", pa.int64()),
                        ("timestamp_ms", pa.int64()), ("value", pa.binary())])
    tp = TopicPartition(options.topic, part.partition)
    consumer = options.consumer()
    try:
        consumer.assign([tp])
        consumer.seek(tp, part.start)
        offsets: list[int] = []
        stamps: list[int] = []
        values: list[bytes | None] = []
        idle_since = time.monotonic()
        while consumer.position(tp) < part.end:
            polled = consumer.poll(timeout_ms=500, max_records=50_000)
            got = False
            for record in polled.get(tp, ()):
                if part.start <= record.offset < part.end:
                    offsets.append(record.offset)
                    stamps.append(record.timestamp)
                    values.append(record.value)
                    got = True
            if got:
                idle_since = time.monotonic()
            elif time.monotonic() - idle_since > options.timeout_ms / 1000:
                raise BrokerUnavailableError(
                    f"no records of {options.topic}[{part.partition}] arrive from offset "
                    f"{consumer.position(tp)} (reading up to {part.end})")
            if len(offsets) >= _BATCH_ROWS:
                yield _batch(schema, part.partition, offsets, stamps, values)
                offsets, stamps, values = [], [], []
        if offsets:
            yield _batch(schema, part.partition, offsets, stamps, values)
    finally:
        consumer.close()


def _batch(schema: Any, partition: int, offsets: list[int], stamps: list[int],
           values: list[bytes | None]) -> Any:
    import pyarrow as pa

    return pa.RecordBatch.from_arrays([
        pa.array([partition] * len(offsets), pa.int32()), pa.array(offsets, pa.int64()),
        pa.array(stamps, pa.int64()), pa.array(values, pa.binary())], schema=schema)


class MarshalLogReader(DataSourceReader):
    """Plans ranges on the driver; reads one range per task."""

    def __init__(self, options: Mapping[str, str]) -> None:
        self.options = LogOptions(options)

    def partitions(self) -> list[InputPartition]:
        return list(plan(self.options))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        assert isinstance(partition, LogRange)
        return read_range(self.options, partition)


class MarshalLogDataSource(DataSource):
    """The raw records of a coordination topic, read in parallel (format ``marshal_log``)."""

    @classmethod
    def name(cls) -> str:
        return FORMAT

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: Any) -> MarshalLogReader:
        return MarshalLogReader(self.options)
