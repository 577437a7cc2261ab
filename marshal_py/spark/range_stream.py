"""A driver loop that coordinates in Python and reads with Spark's own Kafka reader (the JVM).

``format("marshal")`` reads records in Python workers. :func:`read_stream` keeps the
coordination on the driver, exactly as that source does (a batch member of the group:
claims, heartbeats, at-most-once confirmations, commits), but reads each micro-batch's
claimed offset ranges with Spark's batch Kafka reader::

    spark.read.format("kafka").option("assign", ...)
         .option("startingOffsets", ...).option("endingOffsets", ...).load()

and hands the DataFrame to the caller's function, as ``foreachBatch`` does::

    from marshal_py.spark.connector import kafka_connector_conf
    from marshal_py.spark.range_stream import read_stream
    from marshal_py.spark.session import local_session

    spark = local_session("orders-etl", **kafka_connector_conf())
    def process(batch, batch_id):
        batch.write.mode("append").parquet("/data/orders")

    with read_stream(spark, {"bootstrap.servers": "127.0.0.1:9092", "group": "orders.etl",
                             "topics": "orders", "mode": "alo"}, process) as stream:
        stream.run(available_now=True)     # or run() until stream.stop()

One batch at a time: plan (at-most-once: each range is confirmed delivered first), read,
``process(df, batch_id)``, then (at-least-once) commit the ranges — only after ``process``
returned, so ``process`` must finish its work on the DataFrame (write it, collect it) before
returning. There is no Spark checkpoint: the group's committed offsets are the only state, so
a restarted driver continues from them (at-least-once: the batches not yet committed are read
again; at-most-once: an interrupted batch is lost).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from marshal_py.client.batch_member import ExclusiveBatchMember, PlannedRange
from marshal_py.client.marshaler import Marshaler
from marshal_py.errors import ConfigurationError
from marshal_py.spark.connector import KafkaConnectorMissingError, missing_connector_hint
from marshal_py.spark.options import SourceOptions, parse_options
from marshal_py.spark.planning import TP

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["RangeStream", "read_stream"]

log = logging.getLogger(__name__)

#: format("marshal") options that mean nothing here: Python executors' settings, share mode's.
NOT_HERE = ("fetcher", "fetch.timeout", "maxRecordsPerPartition", "start.datetime",
            "lock.duration", "delivery.limit", "inflight.limit", "max.poll.interval")
#: Options of Spark's Kafka reader that the stream sets itself.
OWN_READER_OPTIONS = ("assign", "subscribe", "subscribepattern", "startingoffsets",
                      "endingoffsets", "startingtimestamp", "endingtimestamp",
                      "startingoffsetsbytimestamp", "endingoffsetsbytimestamp",
                      "kafka.bootstrap.servers", "kafka.isolation.level", "failondataloss",
                      "kafka.group.id", "groupidprefix")

Process = Callable[["DataFrame", int], object]


def stream_options(raw: Mapping[str, str]) -> SourceOptions:
    """The options of a :func:`read_stream`: those of ``format("marshal")`` that apply
    (modes alo and amo only). Raises ConfigurationError naming the option."""
    given = {str(k).lower() for k in raw}
    for name in NOT_HERE:
        if name.lower() in given:
            raise ConfigurationError(
                f"option {name!r} applies to format(\"marshal\") only, not to read_stream "
                "(Spark's Kafka reader reads the records: pass its own options as "
                "reader_options)")
    options = parse_options(raw)
    if options.mode not in ("alo", "amo"):
        raise ConfigurationError(
            f"read_stream supports mode alo or amo, not {options.mode!r}; use "
            "spark.readStream.format(\"marshal\") for share and key-shared")
    return options


def checked_reader_options(given: Mapping[str, str]) -> dict[str, str]:
    """``given`` (options of Spark's Kafka reader) as strings; ConfigurationError for one
    the stream sets itself."""
    for key in given:
        if str(key).lower() in OWN_READER_OPTIONS:
            raise ConfigurationError(
                f"reader option {key!r} is set by read_stream itself; pass the marshal option "
                "instead (bootstrap.servers, isolation.level, failOnDataLoss) or leave it out")
    return {str(k): str(v) for k, v in given.items()}


def kafka_ranges_options(ranges: list[PlannedRange]) -> dict[str, str]:
    """Spark Kafka reader options that read exactly ``ranges`` (end offsets exclusive)."""
    assign: dict[str, list[int]] = {}
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        assign.setdefault(r.topic, []).append(r.partition)
        starting.setdefault(r.topic, {})[str(r.partition)] = r.start
        ending.setdefault(r.topic, {})[str(r.partition)] = r.end
    return {"assign": json.dumps(assign), "startingOffsets": json.dumps(starting),
            "endingOffsets": json.dumps(ending)}


class RangeStream:
    """A group member whose batches Spark's Kafka reader reads; see the module docstring.

    :meth:`run` runs the loop in the calling thread; :meth:`stop` (any thread, a signal
    handler) ends it after the batch running now; :meth:`close` leaves the group, releasing
    the partitions with their committed offsets.
    """

    def __init__(self, spark: SparkSession, options: SourceOptions, process: Process,
                 reader_options: Mapping[str, str] | None = None) -> None:
        self.spark = spark
        self.options = options
        self.process = process
        self.reader_options = checked_reader_options(reader_options or {})
        self._stop = threading.Event()
        self._closed = False
        self.batches = 0
        """Batches processed by this stream (the next batch id)."""
        self.records = 0
        """Offsets read by this stream's batches (records, plus any transaction markers)."""
        self._check_connector()
        self._marshaler, self._member = self._join()

    def _join(self) -> tuple[Marshaler, ExclusiveBatchMember]:
        o = self.options
        marshaler = o.marshaler()
        try:
            member = marshaler.batch_member(
                o.topics, o.mode, offset_reset=o.offset_reset, balance=o.balance,
                max_claims=o.max_claims, isolation_level=o.isolation_level)
            if not isinstance(member, ExclusiveBatchMember):  # alo and amo only
                raise ConfigurationError(f"read_stream cannot run mode {o.mode!r}")
            member.wait_settled(o.settle_timeout)
        except BaseException:
            marshaler.close()
            raise
        log.info("read_stream joined group %s as %s (instance %s, mode %s)", o.group,
                 o.client_id, member.instance_id, o.mode)
        return marshaler, member

    def _reader(self, ranges: list[PlannedRange]) -> Any:
        o = self.options
        reader = (self.spark.read.format("kafka")
                  .option("kafka.bootstrap.servers", o.bootstrap_servers)
                  .option("kafka.isolation.level", o.isolation_level)
                  .option("failOnDataLoss", "true" if o.fail_on_data_loss else "false"))
        if o.min_partitions is not None:
            reader = reader.option("minPartitions", str(o.min_partitions))
        for key, value in {**self.reader_options, **kafka_ranges_options(ranges)}.items():
            reader = reader.option(key, value)
        return reader

    def _check_connector(self) -> None:
        """Fail now, in one line, when the session has no Kafka connector (loading a batch
        relation contacts no broker)."""
        probe = [PlannedRange(self.options.topics[0], 0, 0, 1)]
        try:
            self._reader(probe).load()
        except Exception as exc:
            text = str(exc)
            if "DATA_SOURCE_NOT_FOUND" in text or "Failed to find data source" in text:
                raise KafkaConnectorMissingError(
                    "Spark's Kafka connector (spark-sql-kafka-0-10) is not on this session's "
                    f"classpath: {missing_connector_hint()}") from None
            raise

    # -- the loop ------------------------------------------------------------------------------

    def run(self, *, available_now: bool = False, max_batches: int | None = None,
            trigger_interval: float = 1.0) -> int:
        """Run batches until :meth:`stop`, ``max_batches`` batches, or (``available_now``)
        once everything the partitions held at the start of the call is read. Returns the
        number of batches run. ``trigger_interval``: seconds to wait, when there is nothing
        to read, before planning again. An exception of ``process`` (or of reading) closes
        the stream and propagates: an at-least-once batch that failed is not committed."""
        if self._closed:
            raise ConfigurationError("this read_stream is closed")
        if max_batches is not None and max_batches < 1:
            raise ConfigurationError(f"max_batches must be at least 1, not {max_batches}")
        targets: dict[TP, int] | None = (self._member.end_offsets() if available_now
                                         else None)
        ran = 0
        while not self._stop.is_set() and (max_batches is None or ran < max_batches):
            ranges = self._member.plan(self.options.max_records_per_trigger, targets)
            if not ranges:
                if available_now:
                    break
                self._stop.wait(trigger_interval)
                continue
            try:
                self._run_batch(ranges)
            except BaseException:
                self.close()
                raise
            ran += 1
        return ran

    def _run_batch(self, ranges: list[PlannedRange]) -> None:
        batch_id = self.batches
        frame = self._reader(ranges).load()
        self.process(frame, batch_id)
        self._member.complete(ranges)  # at-least-once: commit; at-most-once: nothing left
        self.batches += 1
        self.records += sum(r.size for r in ranges)
        log.debug("batch %d done: %d ranges, %d offsets", batch_id, len(ranges),
                  sum(r.size for r in ranges))

    def stop(self) -> None:
        """End :meth:`run` after the batch running now (safe from any thread)."""
        self._stop.set()

    def close(self) -> None:
        """Leave the group: release the partitions with their committed offsets."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._marshaler.close()

    def __enter__(self) -> RangeStream:
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def read_stream(spark: SparkSession, options: Mapping[str, str], process: Process, *,
                reader_options: Mapping[str, str] | None = None) -> RangeStream:
    """Join the group as the planner of micro-batches that Spark's Kafka reader reads.

    Args:
        spark: a session with Spark's Kafka connector (``local_session(name,
            **kafka_connector_conf())``, or ``spark.jars.packages``).
        options: the options of ``format("marshal")`` that apply (docs/spark.md): mode
            ``alo`` or ``amo``; ``maxRecordsPerTrigger``, ``failOnDataLoss``,
            ``isolation.level`` and ``minPartitions`` go to the reader; ``kafka.<setting>``
            are kafka-python settings of the driver's coordination clients.
        process: called as ``process(df, batch_id)`` for every batch, ``df`` a DataFrame of
            Spark's Kafka source (``key``, ``value``, ``topic``, ``partition``, ``offset``,
            ``timestamp``, ``timestampType``); ``batch_id`` counts this stream's batches
            from 0 (not across restarts).
        reader_options: further options of Spark's Kafka reader, verbatim (the JVM clients'
            security: ``kafka.security.protocol``, ``kafka.sasl.jaas.config``...;
            ``includeHeaders``).

    Returns:
        The joined :class:`RangeStream`; call :meth:`RangeStream.run`, then
        :meth:`RangeStream.close` (or use it as a context manager).

    Raises:
        ConfigurationError: a bad option (one line naming it).
        KafkaConnectorMissingError: the session has no Kafka connector.
    """
    return RangeStream(spark, stream_options(options), process, reader_options)
