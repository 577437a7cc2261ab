"""KafkaPartitionSource: partition counts and offset bounds of the consumed topics."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from marshal_py.errors import TopicNotFoundError
from marshal_py.log.kafka import KafkaLogConfig, kafka_topic_id, quick_metadata
from marshal_py.log.kafka_auth import connection_error, data_topic_error, not_authorized
from marshal_py.log.kafka_config import GROUPLESS, new_client
from marshal_py.log.kafka_identity import topic_id_of

_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29


class KafkaPartitionSource:
    """Answers the engine's questions about data topics.

    Partition counts come from a metadata request, cached for ``refresh_s`` so that a
    partition-count increase is noticed within that time; offsets from a group-less consumer.
    Used only by the engine (under its lock), never by the fetching thread; the offsets
    consumer is used by one thread at a time (:meth:`offset_bounds_ahead` asks in another).
    ``background=True`` connects in a thread (a member replays the coordination log
    meanwhile); every call waits for it and raises what stopped it, e.g. a TopicNotFoundError
    for a topic of ``expect_topics`` that does not exist.
    """

    def __init__(self, config: KafkaLogConfig, refresh_s: float = 5.0, *,
                 expect_topics: Sequence[str] = (), background: bool = False) -> None:
        self._config = config
        self._refresh_s = refresh_s
        #: topic -> (when described, partition count or None when missing, topic id)
        self._described: dict[str, tuple[float, int | None, str | None]] = {}
        self._admin: Any = None
        self._consumer: Any = None
        self._failure: BaseException | None = None
        self._ready = threading.Event()
        #: Held around every use of the offsets consumer (kafka-python's is not for two
        #: threads at once).
        self._offsets_lock = threading.Lock()
        if not background:
            self._connect(expect_topics)
            self._ready.set()
            return
        threading.Thread(target=self._connect_in_background, args=(tuple(expect_topics),),
                         name="marshal-source-open", daemon=True).start()

    def _connect(self, topics: Sequence[str]) -> None:
        """Open the clients, check that ``topics`` exist (TopicNotFoundError) and warm the
        connections the first claim needs."""
        try:
            self._admin = new_client(KafkaAdminClient,
                                     **self._config.client_config(KafkaAdminClient))
            self._consumer = quick_metadata(new_client(
                KafkaConsumer, **self._config.client_config(KafkaConsumer, fixed=GROUPLESS)))
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            self._close_clients()
            raise connection_error(self._config, exc) from exc
        try:
            for topic in topics:
                if self._partition_count(topic) is None:
                    raise TopicNotFoundError(
                        f"topic {topic!r} does not exist on {self._config.bootstrap_servers}; "
                        "create it or check the name")
            for topic in topics:
                count = self._partition_count(topic)
                if count:  # the connections the first claim needs (~0.1 s the first time)
                    self._end_offsets_of([(topic, p) for p in range(count)])
        except BaseException:
            self._close_clients()
            raise

    def _connect_in_background(self, topics: Sequence[str]) -> None:
        try:
            self._connect(topics)
        except BaseException as exc:  # raised to the first caller, in its thread
            self._failure = exc
        finally:
            self._ready.set()

    def _wait(self) -> None:
        """Wait until connected; raise what stopped the connection."""
        self._ready.wait()
        if self._failure is not None:
            raise self._failure

    def partition_count(self, topic: str) -> int | None:
        """Partitions of ``topic`` (cached for ``refresh_s``), None when it does not exist."""
        self._wait()
        return self._partition_count(topic)

    def _partition_count(self, topic: str) -> int | None:
        cached = self._described.get(topic)
        if cached is not None and time.monotonic() - cached[0] < self._refresh_s:
            return cached[1]
        self._refresh((topic,))
        return self._described[topic][1]

    def topic_id(self, topic: str) -> str | None:
        """The topic's id (Kafka's base64 form) as last described; None when unknown or
        missing."""
        cached = self._described.get(topic)
        return None if cached is None else cached[2]

    def refresh(self, topics: tuple[str, ...]) -> None:
        """Describe ``topics`` now, in one request."""
        self._wait()
        self._refresh(topics)

    def _refresh(self, topics: tuple[str, ...]) -> None:
        if not topics:
            return
        try:
            described = self._admin.describe_topics(list(topics))
        except KafkaError as exc:
            raise self._error(exc, topics[0],
                              f"cannot read metadata of {', '.join(topics)}: {exc}") from exc
        found: dict[str, tuple[int | None, str | None]] = {}
        for entry in described:
            name = entry.get("name")
            if name not in topics:
                continue
            if entry.get("error_code", 0) == _TOPIC_AUTHORIZATION_FAILED:
                raise not_authorized(self._config, "read", name)
            if entry.get("error_code", 0) != _UNKNOWN_TOPIC:
                count = len(entry.get("partitions") or []) or None
                found[name] = (count, kafka_topic_id(topic_id_of(entry)) if count else None)
        now = time.monotonic()
        for topic in topics:
            self._described[topic] = (now, *found.get(topic, (None, None)))

    def offset_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        """(beginning, end) of one partition."""
        self._wait()
        tp = TopicPartition(topic, partition)
        try:
            with self._offsets_lock:
                beginning = self._consumer.beginning_offsets([tp])[tp]
                end = self._consumer.end_offsets([tp])[tp]
        except KafkaError as exc:
            raise self._error(exc, topic,
                              f"cannot list offsets of {topic}/{partition}: {exc}") from exc
        return int(beginning), int(end)

    def offset_bounds_of(self, partitions: list[tuple[str, int]]
                         ) -> dict[tuple[str, int], tuple[int, int]]:
        """(beginning, end) of ``partitions``: two requests per broker in all (a member that
        wins twelve partitions used to make 24 round trips before its first fetch)."""
        self._wait()
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        try:
            with self._offsets_lock:
                beginnings = self._consumer.beginning_offsets(tps)
                ends = self._consumer.end_offsets(tps)
        except KafkaError as exc:
            raise self._error(exc, tps[0].topic, f"cannot list offsets of {tps[0].topic}: "
                                                 f"{exc}") from exc
        return {(tp.topic, tp.partition): (int(beginnings[tp]), int(ends[tp])) for tp in tps}

    def offset_bounds_ahead(self, partitions: list[tuple[str, int]]
                            ) -> Callable[[], dict[tuple[str, int], tuple[int, int]]]:
        """:meth:`offset_bounds_of` in a thread of its own, started now; the function
        returned waits for it and answers (or raises what it raised)."""
        answer: list[dict[tuple[str, int], tuple[int, int]]] = []
        failure: list[BaseException] = []

        def ask() -> None:
            try:
                answer.append(self.offset_bounds_of(partitions))
            except BaseException as exc:  # raised to the caller, in its thread
                failure.append(exc)

        asking = threading.Thread(target=ask, name="marshal-offset-bounds", daemon=True)
        asking.start()

        def wait() -> dict[tuple[str, int], tuple[int, int]]:
            asking.join()
            if failure:
                raise failure[0]
            return answer[0]

        return wait

    def end_offsets_of(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """End offsets of ``partitions`` in one request per broker."""
        self._wait()
        return self._end_offsets_of(partitions)

    def _end_offsets_of(self, partitions: list[tuple[str, int]]
                        ) -> dict[tuple[str, int], int]:
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        try:
            with self._offsets_lock:
                ends = self._consumer.end_offsets(tps)
        except KafkaError as exc:
            raise self._error(exc, tps[0].topic, f"cannot list end offsets: {exc}") from exc
        return {(tp.topic, tp.partition): int(end) for tp, end in ends.items()}

    def end_offsets(self, topics: tuple[str, ...] | list[str]) -> dict[tuple[str, int], int]:
        """End offsets of every partition of ``topics`` (missing topics have none)."""
        wanted = [(t, p) for t in topics for p in range(self.partition_count(t) or 0)]
        return self.end_offsets_of(wanted)

    def group_committed_offset(self, group_id: str, topic: str, partition: int) -> int | None:
        """The offset ``group_id`` committed to Kafka for a partition (OffsetFetch through the
        group's coordinator: only compatibility mode asks, as the original does), or None."""
        self._wait()
        tp = TopicPartition(topic, partition)
        try:
            found = self._admin.list_group_offsets({group_id: [tp]}).get(group_id, {})
        except KafkaError as exc:
            raise self._error(exc, topic, f"cannot read the offsets group {group_id!r} "
                                          f"committed to Kafka: {exc}") from exc
        entry = found.get(tp)
        offset = None if entry is None else entry.offset
        return offset if offset is not None and offset >= 0 else None

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        """The first offset whose timestamp is >= ``timestamp_ms`` (None if none is)."""
        self._wait()
        tp = TopicPartition(topic, partition)
        try:
            with self._offsets_lock:
                found = self._consumer.offsets_for_times({tp: timestamp_ms})[tp]
        except KafkaError as exc:
            raise self._error(exc, topic, f"cannot look up offsets by time of "
                                          f"{topic}/{partition}: {exc}") from exc
        return None if found is None else int(found.offset)

    def _error(self, exc: KafkaError, topic: str, message: str) -> Exception:
        """An ACL missing on ``topic`` (or the one the error names), or the broker being
        unavailable."""
        return data_topic_error(self._config, exc, message, topic)

    def close(self) -> None:
        """Close the clients (once connected, when connecting in the background)."""
        self._ready.wait()
        self._close_clients()

    def _close_clients(self) -> None:
        for client in (self._consumer, self._admin):
            if client is not None:
                with contextlib.suppress(Exception):  # must not mask an earlier error
                    client.close()
        self._consumer = self._admin = None
