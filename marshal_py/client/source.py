"""KafkaPartitionSource: partition counts and offset bounds of the consumed topics."""

from __future__ import annotations

import contextlib
import time

from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

from marshal_py.log.kafka import KafkaLogConfig, kafka_topic_id, quick_metadata
from marshal_py.log.kafka_auth import connection_error, data_topic_error, not_authorized
from marshal_py.log.kafka_identity import topic_id_of

_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29


class KafkaPartitionSource:
    """Answers the engine's questions about data topics.

    Partition counts come from a metadata request, cached for ``refresh_s`` so that a
    partition-count increase is noticed within that time; offsets from a group-less consumer.
    Used only by the engine (under its lock), never by the fetching thread.
    """

    def __init__(self, config: KafkaLogConfig, refresh_s: float = 5.0) -> None:
        self._config = config
        try:
            self._admin = KafkaAdminClient(**config.client_config(KafkaAdminClient))
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            raise connection_error(config, exc) from exc
        try:
            self._consumer = quick_metadata(KafkaConsumer(
                group_id=None, enable_auto_commit=False, **config.client_config(KafkaConsumer)))
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            self._admin.close()
            raise connection_error(config, exc) from exc
        self._refresh_s = refresh_s
        #: topic -> (when described, partition count or None when missing, topic id)
        self._described: dict[str, tuple[float, int | None, str | None]] = {}

    def partition_count(self, topic: str) -> int | None:
        cached = self._described.get(topic)
        if cached is not None and time.monotonic() - cached[0] < self._refresh_s:
            return cached[1]
        self.refresh((topic,))
        return self._described[topic][1]

    def topic_id(self, topic: str) -> str | None:
        """The topic's id (Kafka's base64 form) as last described; None when unknown or
        missing."""
        cached = self._described.get(topic)
        return None if cached is None else cached[2]

    def refresh(self, topics: tuple[str, ...]) -> None:
        """Describe ``topics`` now, in one request."""
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

    def warm_up(self, topic: str) -> None:
        """Ask for the ends of ``topic`` once now: the connections the first claim needs
        (about 0.1 s the first time) are then open."""
        count = self.partition_count(topic)
        if count:
            self.end_offsets_of([(topic, p) for p in range(count)])

    def offset_bounds(self, topic: str, partition: int) -> tuple[int, int]:
        tp = TopicPartition(topic, partition)
        try:
            beginning = self._consumer.beginning_offsets([tp])[tp]
            end = self._consumer.end_offsets([tp])[tp]
        except KafkaError as exc:
            raise self._error(exc, topic,
                              f"cannot list offsets of {topic}/{partition}: {exc}") from exc
        return int(beginning), int(end)

    def end_offsets_of(self, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """End offsets of ``partitions`` in one request per broker."""
        tps = [TopicPartition(t, p) for t, p in partitions]
        if not tps:
            return {}
        try:
            ends = self._consumer.end_offsets(tps)
        except KafkaError as exc:
            raise self._error(exc, tps[0].topic, f"cannot list end offsets: {exc}") from exc
        return {(tp.topic, tp.partition): int(end) for tp, end in ends.items()}

    def end_offsets(self, topics: tuple[str, ...] | list[str]) -> dict[tuple[str, int], int]:
        """End offsets of every partition of ``topics`` (missing topics have none)."""
        wanted = [(t, p) for t in topics for p in range(self.partition_count(t) or 0)]
        return self.end_offsets_of(wanted)

    def offset_for_time(self, topic: str, partition: int, timestamp_ms: int) -> int | None:
        tp = TopicPartition(topic, partition)
        try:
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
        for client in (self._consumer, self._admin):
            with contextlib.suppress(Exception):  # closing must not mask an earlier error
                client.close()
