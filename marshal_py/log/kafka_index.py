"""The coordination index on Kafka: the compacted companion topic that keeps the layout.

:func:`load_layout` is what a :class:`~marshal_py.log.kafka.KafkaLog` does on opening, after
finding the coordination topic: find (or create) the index topic, read it to its end, take
the layout in force (:func:`~marshal_py.protocol.index.choose_layout`), write one when there
is none yet and the opener may, and check it against the topic's metadata. The rules are
PROTOCOL.md, section 3.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    TopicAlreadyExistsError,
)

from marshal_py.errors import BrokerUnavailableError, CoordinationTopicError
from marshal_py.log.kafka_auth import (
    connection_error,
    index_not_authorized,
    is_authorization_failure,
)
from marshal_py.protocol.index import (
    IndexRecord,
    Layout,
    choose_layout,
    encode_layout,
    layout_key,
)

if TYPE_CHECKING:
    from marshal_py.log.kafka_config import KafkaLogConfig

log = logging.getLogger(__name__)

_UNKNOWN_TOPIC = 3
_TOPIC_AUTHORIZATION_FAILED = 29
#: Where the rule is written, as warnings and errors name it.
RULE = "PROTOCOL.md section 3"
#: The index topic's max.compaction.lag.ms: no superseded record outlives it by much.
INDEX_COMPACTION_LAG_MS = 3_600_000
#: How long after a read of the index the next read may start where it ended, instead of at
#: the index's beginning (a member reads the index when its log opens and again, moments
#: later, when it joins). Past that a read starts over, so a long-lived client never joins
#: its old records to those of an index topic deleted and created again since.
INDEX_REUSE_S = 30.0


@dataclass
class IndexSoFar:
    """What one client read of the index last: its records, up to offset ``end``, of which
    the first were read from the index's beginning at ``read_at`` (``time.monotonic()``;
    None: nothing yet).

    The next read may start at ``end`` and add what it finds to these records: the view of
    the index (:func:`~marshal_py.protocol.index.index_view`, :func:`choose_layout`) takes a
    later record of a key over an earlier one, as compaction does, so old records plus new
    ones give the same view as reading everything again."""

    records: list[IndexRecord] = field(default_factory=list)
    end: int = 0
    read_at: float | None = None

    def reusable(self, end_now: int) -> bool:
        """True when a read of the index up to ``end_now`` may start at :attr:`end`."""
        return (self.read_at is not None and self.end <= end_now
                and time.monotonic() - self.read_at < INDEX_REUSE_S)


@dataclass
class IndexClients:
    """What :func:`load_layout` works with: the KafkaLog's admin client, getters of its
    reading consumer and producer (opened on first use), and its last read of the index."""

    admin: KafkaAdminClient
    consumer: Callable[[], KafkaConsumer]
    producer: Callable[[], KafkaProducer]
    so_far: IndexSoFar | None = None


@contextmanager
def _index_errors(config: KafkaLogConfig, operation: str) -> Iterator[None]:
    """kafka-python's errors about the index as one-line marshal_py errors."""
    try:
        yield
    except (KafkaConnectionError, KafkaTimeoutError) as exc:
        raise connection_error(config, exc) from exc
    except KafkaError as exc:
        if is_authorization_failure(exc):
            raise index_not_authorized(config, operation) from exc
        raise BrokerUnavailableError(
            f"{operation} of the coordination index {config.index_name!r} failed: "
            f"{type(exc).__name__}: {exc}") from exc


def load_layout(config: KafkaLogConfig, clients: IndexClients, *, topic_id: str | None,
                metadata_count: int, replication: int, writer: str) -> int:
    """The partition count records are placed by on ``config.topic``: its layout in the
    index (written now, from ``metadata_count``, when there is none and ``config`` may
    create topics; a read-only opener then uses ``metadata_count``). Raises one-line
    errors for a missing or unreadable index and for a topic with fewer partitions than
    its layout; warns once when it has more."""
    _ensure_index_topic(config, clients.admin, replication)
    layout = choose_layout(read_index(config, clients.consumer(), clients.so_far),
                           config.topic, topic_id)
    if layout is None and config.create_topic:
        _write_layout(config, clients.producer(),
                      Layout(config.topic, topic_id or "", metadata_count), writer)
        # Read to the end again: a concurrent first opener's record may come first.
        layout = choose_layout(read_index(config, clients.consumer(), clients.so_far),
                               config.topic, topic_id)
        if layout is None:
            raise CoordinationTopicError(
                f"wrote the layout of {config.topic!r} to {config.index_name!r} but did not "
                f"read it back within {config.timeout_s:g} s; try again")
    if layout is None:
        log.info("%s has no layout for %s yet: placing by its %d partitions, as the first "
                 "member will record", config.index_name, config.topic, metadata_count)
        return metadata_count
    check_counts(config, layout.partitions, metadata_count)
    return layout.partitions


def check_counts(config: KafkaLogConfig, layout_count: int, metadata_count: int) -> None:
    """Raise when the topic has fewer partitions than its layout (Kafka cannot remove
    partitions: the topic was replaced by hand); warn when it has more."""
    if metadata_count < layout_count:
        raise CoordinationTopicError(
            f"coordination topic {config.topic!r} has {metadata_count} partitions, fewer than "
            f"the {layout_count} its layout in {config.index_name!r} places records on; Kafka "
            "cannot remove partitions, so the topic was replaced by hand: give it "
            f"{layout_count} partitions again ({RULE})")
    if metadata_count > layout_count:
        warn_more_partitions(config, layout_count, metadata_count)


def warn_more_partitions(config: KafkaLogConfig, layout_count: int,
                         metadata_count: int) -> None:
    """The one warning about partitions added to the coordination topic."""
    log.warning(
        "coordination topic %s has %d partitions, but its layout (in %s) places records on "
        "its first %d: partitions were added, which the protocol does not allow (%s); "
        "the others stay unused and every member keeps placing by %d",
        config.topic, metadata_count, config.index_name, layout_count, RULE, layout_count)


def _describe(config: KafkaLogConfig, admin: KafkaAdminClient) -> dict[str, Any] | None:
    with _index_errors(config, "read"):
        described = admin.describe_topics([config.index_name])
    for topic in described:
        if topic.get("name") != config.index_name:
            continue
        code = topic.get("error_code", 0)
        if code == _TOPIC_AUTHORIZATION_FAILED:
            raise index_not_authorized(config, "read")
        if code == _UNKNOWN_TOPIC or not topic.get("partitions"):
            return None
        return dict(topic)
    return None


def _ensure_index_topic(config: KafkaLogConfig, admin: KafkaAdminClient,
                        replication: int) -> None:
    described = _describe(config, admin)
    if described is None:
        if not config.create_topic:
            raise CoordinationTopicError(
                f"the coordination index topic {config.index_name!r} (which keeps the "
                f"placement of {config.topic!r}, {RULE}) does not exist on "
                f"{config.bootstrap_servers}; create it with `marshal init` (or let a member "
                "create it)")
        _create_index_topic(config, admin, replication)
        deadline = time.monotonic() + config.timeout_s
        while described is None and time.monotonic() < deadline:
            time.sleep(0.1)
            described = _describe(config, admin)
        if described is None:
            raise CoordinationTopicError(
                f"created {config.index_name!r} but the brokers did not describe it within "
                f"{config.timeout_s:g} s; try again")
    if len(described["partitions"]) != 1:
        raise CoordinationTopicError(
            f"the coordination index topic {config.index_name!r} has "
            f"{len(described['partitions'])} partitions; it must have exactly 1 "
            f"({RULE}): name another one with index_topic")
    _check_compacted(config, admin)


def _create_index_topic(config: KafkaLogConfig, admin: KafkaAdminClient,
                        replication: int) -> None:
    configs = {
        "cleanup.policy": "compact",
        "unclean.leader.election.enable": "false",
        "min.insync.replicas": str(min(2, replication)),
        # Members re-point their group's newest checkpoint every checkpoint interval, and a
        # joiner reads the whole index: compact within an hour (the active segment too).
        "max.compaction.lag.ms": str(INDEX_COMPACTION_LAG_MS),
    }
    log.info("creating coordination index topic %s (1 partition, compacted, replication %d)",
             config.index_name, replication)
    try:
        admin.create_topics({config.index_name: {"num_partitions": 1,
                                                 "replication_factor": replication,
                                                 "configs": configs}},
                            wait_for_metadata=True)
    except TopicAlreadyExistsError:
        return  # another client created it first
    except KafkaError as exc:
        if is_authorization_failure(exc):
            raise index_not_authorized(config, "create") from exc
        raise CoordinationTopicError(
            f"could not create the coordination index topic {config.index_name!r}: {exc}"
        ) from exc


def _check_compacted(config: KafkaLogConfig, admin: KafkaAdminClient) -> None:
    """Refuse an index that retention would empty (best effort: an answer refused by the
    ACLs, which kafka-python gives as an empty one, is not checked)."""
    resource = ConfigResource(ConfigResourceType.TOPIC, config.index_name,
                              configs=["cleanup.policy"])
    try:
        described = admin.describe_configs([resource], config_filter="all")
    except KafkaError as exc:
        log.debug("cannot read the configuration of %s: %s", config.index_name, exc)
        return
    entry = described.get("topic", {}).get(config.index_name, {})
    policy = entry.get("cleanup.policy", {}).get("value")
    if policy is not None and "compact" not in str(policy):
        raise CoordinationTopicError(
            f"the coordination index topic {config.index_name!r} has cleanup.policy={policy}: "
            "retention would delete the layout it keeps; set it with `kafka-configs --alter "
            f"--entity-type topics --entity-name {config.index_name} --add-config "
            "cleanup.policy=compact`")


def read_index(config: KafkaLogConfig, consumer: KafkaConsumer,
               so_far: IndexSoFar | None = None) -> list[IndexRecord]:
    """Every record of the index, (offset, key, value), read to its end as of now (the end
    is asked first). ``so_far``: this client's last read, continued from where it ended
    when :meth:`IndexSoFar.reusable` (one fetch of what is new instead of the whole index
    again), and updated with this one."""
    tp = TopicPartition(config.index_name, 0)
    deadline = time.monotonic() + config.timeout_s
    with _index_errors(config, "read"):
        consumer.assign([tp])
        end = int(consumer.end_offsets([tp])[tp])
        continued = so_far is not None and so_far.reusable(end)
        if so_far is not None and continued:
            records = list(so_far.records)
            consumer.seek(tp, so_far.end)
        else:
            records = []
            consumer.seek_to_beginning(tp)
        while int(consumer.position(tp)) < end:
            if time.monotonic() >= deadline:
                raise BrokerUnavailableError(
                    f"reading the coordination index {config.index_name!r} to its end "
                    f"({end}) took longer than {config.timeout_s:g} s; try again")
            polled = consumer.poll(timeout_ms=200, max_records=10_000)
            records.extend((int(r.offset), r.key, r.value) for r in polled.get(tp, ()))
        if so_far is not None:
            so_far.records, so_far.end = records, int(consumer.position(tp))
            if not continued:
                so_far.read_at = time.monotonic()
    return records


def append_index(config: KafkaLogConfig, producer: KafkaProducer, key: bytes,
                 value: bytes) -> None:
    """Write one record to the index and wait for it (acks as the producer's: all)."""
    with _index_errors(config, "write"):
        producer.send(config.index_name, key=key, value=value,
                      partition=0).get(timeout=config.timeout_s)


def _write_layout(config: KafkaLogConfig, producer: KafkaProducer, layout: Layout,
                  writer: str) -> None:
    log.info("recording the layout of %s in %s: %d partitions", config.topic,
             config.index_name, layout.partitions)
    with _index_errors(config, "write"):
        producer.send(config.index_name, key=layout_key(writer), value=encode_layout(layout),
                      partition=0).get(timeout=config.timeout_s)
