"""Data-plane fetchers: how a consumer reads the records of the partitions it holds.

Both read on *manual assignment* (no Kafka consumer group, no offsets committed to Kafka) and
hand out one :class:`FetchedBatch` per partition per poll, its records in offset order:

* :class:`KafkaPythonFetcher` (``"kafka-python"``): a kafka-python ``KafkaConsumer``, which
  fetches in the calling thread; records are its ``ConsumerRecord`` s, decoded from the fetch
  position by :mod:`~marshal_py.client.fetch_decoding` (in C when built).
* :class:`ConfluentFetcher` (``"confluent"``, ``pip install 'marshal_py[librdkafka]'``): a
  confluent-kafka ``Consumer``: librdkafka fetches and decodes ahead in its own threads.
  Records are :class:`ConfluentRecord` s, with the attributes code reads on a
  ``ConsumerRecord`` (``topic partition offset key value headers timestamp timestamp_type``).

Measured per record (timeit over 500 fetched Messages of 100 B): a plain loop calling
``error()``, ``partition()`` and ``offset()`` of each Message 71-81 ns; building the records
(:mod:`~marshal_py.client.confluent_records`) and a loop reading ``record.partition`` and
``record.offset`` 71 ns with the C build, 395-442 ns with the Python build (which used to be
the only one). End to end, 1M records in 12 partitions, one process, broker on the same 2
cores (2026-11-27, median of 7): ours with ``poll()`` and ``commit_batch`` 0.94x a plain
confluent-kafka ``consume(500)`` loop after the first record, with ``commit(record)`` each
0.80x; the kafka-python fetcher was 4-5x slower than either while kafka-python decoded its
records (with our decoder, 2026-11-28: half the confluent fetcher's rate, 2.7x a plain
kafka-python consumer's; BENCHMARKS.md section 1).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from marshal_py.client import fetch_decoding
from marshal_py.client.fetch_types import (
    FETCHER_KINDS,
    TP,
    DataFetcher,
    FetchedBatch,
    FetcherKind,
)
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLogConfig, quick_metadata
from marshal_py.log.kafka_auth import connection_error, data_topic_error
from marshal_py.log.kafka_config import GROUPLESS, new_client

log = logging.getLogger(__name__)

__all__ = ["FETCHER_KINDS", "TP", "DataFetcher", "FetchedBatch", "FetcherKind",
           "KafkaPythonFetcher", "OpeningFetcher", "open_fetcher", "require_confluent"]


def open_fetcher(kind: FetcherKind, config: KafkaLogConfig) -> DataFetcher:
    """A fetcher of ``kind``, connected to the cluster of ``config``."""
    if kind == "kafka-python":
        return KafkaPythonFetcher(config)
    if kind == "confluent":
        from marshal_py.client.confluent_fetcher import ConfluentFetcher

        return ConfluentFetcher(config)
    raise ConfigurationError(f"unknown fetcher {kind!r}; choose one of {', '.join(FETCHER_KINDS)}")


class OpeningFetcher:
    """A fetcher connecting in a background thread, so that it connects while the member
    joins the group (the connection and the join are both round trips to the cluster; done
    one after the other they added 10 to 60 ms to the time to the first record).

    :meth:`result` waits for the fetcher (connected, and ``topics`` prepared) and re-raises
    the error that stopped it; :meth:`abandon` closes it, now or once it is connected, when
    the consumer that asked for it failed to start.
    """

    def __init__(self, kind: FetcherKind, config: KafkaLogConfig,
                 topics: Iterable[str]) -> None:
        self._kind, self._config, self._topics = kind, config, tuple(topics)
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._fetcher: DataFetcher | None = None
        self._error: BaseException | None = None
        self._abandoned = False
        threading.Thread(target=self._open, name="marshal-fetcher-open", daemon=True).start()

    def _open(self) -> None:
        try:
            fetcher = open_fetcher(self._kind, self._config)
            try:
                fetcher.prepare(self._topics)
            except BaseException:
                fetcher.close()
                raise
        except BaseException as exc:  # handed to the thread that waits in result()
            self._error = exc
        else:
            with self._lock:
                if self._abandoned:
                    fetcher.close()
                else:
                    self._fetcher = fetcher
        finally:
            self._done.set()

    def result(self) -> DataFetcher:
        """The connected fetcher (waits for it); the error that stopped it is raised here."""
        self._done.wait()
        if self._error is not None:
            raise self._error
        assert self._fetcher is not None
        return self._fetcher

    def abandon(self) -> None:
        """Nobody will take the fetcher: close it (now, or as soon as it is connected)."""
        with self._lock:
            self._abandoned = True
            fetcher, self._fetcher = self._fetcher, None
        if fetcher is not None:
            fetcher.close()


#: The smallest per-partition fetch size :meth:`KafkaPythonFetcher.expect_records` asks for:
#: below it a fetch costs the same (the round trip dominates), and it leaves room for the
#: batch holding the first offset wanted, which the broker returns whole.
MIN_EXPECTED_FETCH_BYTES = 64 * 1024
#: Bytes of a record beyond its key, value and headers in a v2 batch (length, attributes,
#: timestamp and offset deltas, the lengths: varints), plus its share of the batch header.
RECORD_OVERHEAD_BYTES = 16


class KafkaPythonFetcher:
    """A kafka-python ``KafkaConsumer`` without group; records are its ``ConsumerRecord`` s.
    ``next_position`` is the larger of the last offset + 1 and the consumer's fetch position
    (which passes a compacted tail or a transaction marker). A poll that is not full also
    reports, as a batch without records, each partition whose position passed offsets that
    hold no record (a marker fetched after the last record, an aborted transaction under
    read_committed): O(partitions), only when the consumer is not saturated."""

    kind = "kafka-python"

    def __init__(self, config: KafkaLogConfig) -> None:
        self._config, self._closed = config, False
        #: The position last reported per partition (records-less batches report growth).
        self._reported: dict[TopicPartition, int] = {}
        #: Bytes per record fetched (a moving average), for :meth:`expect_records`.
        self._record_bytes: float | None = None
        try:
            self._consumer = quick_metadata(new_client(KafkaConsumer, **config.client_config(
                KafkaConsumer, defaults={"fetch_max_wait_ms": 200},
                fixed={**GROUPLESS, "auto_offset_reset": "earliest"})))
        except (KafkaConnectionError, KafkaTimeoutError) as exc:  # refused credentials?
            raise connection_error(config, exc) from exc
        fetch_decoding.install(self._consumer)  # its fetches decoded by our reader

    def assign(self, partitions: Iterable[TP], starts: Mapping[TP, int] | None = None
               ) -> None:
        """See :meth:`DataFetcher.assign`."""
        wanted = set(partitions)
        added = wanted - self.assignment()
        self._consumer.assign([TopicPartition(t, p) for t, p in wanted])
        self._reported = {tp: end for tp, end in self._reported.items()
                          if (tp.topic, tp.partition) in wanted and tp not in added}
        for key, offset in (starts or {}).items():
            if key in added:
                self.seek(*key, offset)

    def prepare(self, topics: Iterable[str]) -> None:
        """See :meth:`DataFetcher.prepare`."""
        for topic in topics:
            try:
                self._consumer.partitions_for_topic(topic)
            except KafkaError as exc:
                raise data_topic_error(self._config, exc, f"metadata of {topic} failed: "
                                       f"{exc}", topic) from exc

    def assignment(self) -> set[TP]:
        """See :meth:`DataFetcher.assignment`."""
        return {(tp.topic, tp.partition) for tp in self._consumer.assignment()}

    def seek(self, topic: str, partition: int, offset: int) -> None:
        """See :meth:`DataFetcher.seek`."""
        tp = TopicPartition(topic, partition)
        self._consumer.seek(tp, offset)
        self._reported[tp] = offset

    def position(self, topic: str, partition: int) -> int | None:
        """See :meth:`DataFetcher.position` (does not wait for an offset lookup)."""
        tp = TopicPartition(topic, partition)
        if tp not in self._consumer.assignment():
            return None
        try:
            return self._consumer.position(tp, timeout_ms=0)  # type: ignore[no-any-return]
        except KafkaError as exc:
            raise data_topic_error(self._config, exc, f"position failed: {exc}", topic) from exc

    def expect_records(self, count: int | None) -> None:
        """See :meth:`DataFetcher.expect_records`: twice the bytes ``count`` records of the
        average size seen take, at least :data:`MIN_EXPECTED_FETCH_BYTES`, at most the
        configured ``max_partition_fetch_bytes``."""
        ceiling = int(self._consumer.config["max_partition_fetch_bytes"])
        size = ceiling
        if count is not None and self._record_bytes is not None:
            size = max(MIN_EXPECTED_FETCH_BYTES, min(ceiling, int(2 * count * self._record_bytes)))
        fetcher = getattr(self._consumer, "_fetcher", None)  # kafka-python's, read per request
        config = getattr(fetcher, "config", None)
        if isinstance(config, dict):
            config["max_partition_fetch_bytes"] = size

    def _learn_sizes(self, records: list[Any]) -> None:
        """Fold the sizes of a few of ``records`` into the average record size."""
        sample = records[:: max(1, len(records) // 4)][:4]
        seen = sum(max(0, r.serialized_key_size) + max(0, r.serialized_value_size)
                   + max(0, r.serialized_header_size) for r in sample) / len(sample) \
            + RECORD_OVERHEAD_BYTES
        self._record_bytes = seen if self._record_bytes is None \
            else 0.8 * self._record_bytes + 0.2 * seen

    def poll(self, timeout_s: float, max_records: int) -> list[FetchedBatch]:
        """See :meth:`DataFetcher.poll`."""
        try:
            polled: dict[TopicPartition, list[Any]] = self._consumer.poll(
                timeout_ms=int(timeout_s * 1000), max_records=max_records)
        except KafkaError as exc:  # a missing READ ACL names the topic and what to grant
            raise data_topic_error(self._config, exc, f"fetching records failed: {exc}") \
                from exc
        states = getattr(getattr(self._consumer, "_subscription", None), "assignment", {})
        batches = []
        reported = self._reported
        count = 0
        for tp, records in polled.items():
            if records:
                count += len(records)
                self._learn_sizes(records)
                end = records[-1].offset + 1
                fetch = getattr(states.get(tp), "position", None)  # a local read: ~0.1 us
                if fetch is not None and fetch.offset > end:
                    end = fetch.offset
                reported[tp] = end
                batches.append(FetchedBatch(tp.topic, tp.partition, records, end))
        if count < max_records:  # the fetch may have passed records-less offsets elsewhere
            for tp, state in states.items():
                fetch = getattr(state, "position", None)
                if fetch is not None and fetch.offset > reported.get(tp, fetch.offset) \
                        and tp not in polled:
                    reported[tp] = fetch.offset
                    batches.append(FetchedBatch(tp.topic, tp.partition, [], fetch.offset))
                elif tp not in reported and fetch is not None:
                    reported[tp] = fetch.offset
        return batches

    @property
    def consumer(self) -> KafkaConsumer:
        """The kafka-python consumer, for code that needs more than this interface."""
        return self._consumer

    def high_watermark(self, topic: str, partition: int) -> int | None:
        """See :meth:`DataFetcher.high_watermark`."""
        value = self._consumer.highwater(TopicPartition(topic, partition))
        return None if value is None else int(value)

    def beginning_offsets(self, partitions: Iterable[TP]) -> dict[TP, int]:
        """See :meth:`DataFetcher.beginning_offsets`."""
        wanted = [TopicPartition(t, p) for t, p in partitions]
        try:
            found = self._consumer.beginning_offsets(wanted)
        except KafkaError as exc:
            raise data_topic_error(self._config, exc, f"listing the first offsets of "
                                   f"{_names(wanted)} failed: {exc}") from exc
        return {(tp.topic, tp.partition): int(offset) for tp, offset in found.items()}

    def close(self) -> None:
        """See :meth:`DataFetcher.close`."""
        if not self._closed:
            self._closed = True
            self._consumer.close()


def _names(partitions: Iterable[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}/{tp.partition}" for tp in partitions)


def require_confluent() -> None:
    """Raise :class:`ConfigurationError` naming the pip command when confluent-kafka is not
    installed (or too old) for ``fetcher="confluent"``."""
    from marshal_py.client.confluent_fetcher import confluent_module

    confluent_module()
