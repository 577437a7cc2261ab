"""Marshaler: one per process; the member's connection to the coordination log."""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, overload

from marshal_py.client.batch_member import BatchMember
from marshal_py.client.channel import DEFAULT_CHECKPOINT_INTERVAL_MS
from marshal_py.client.clock import BrokerClock
from marshal_py.client.consumer import Consumer
from marshal_py.client.consumer_factory import CONSUMER_MODES as CONSUMER_MODES
from marshal_py.client.consumer_factory import AnyConsumer, ConsumerFactory
from marshal_py.client.coordination_log import open_coordination_log
from marshal_py.client.engine_types import Balance, Mode, OffsetReset
from marshal_py.client.engines import EngineFactory
from marshal_py.client.eos_consumer import DEFAULT_TRANSACTION_TIMEOUT_MS, ExactlyOnceConsumer
from marshal_py.client.fetchers import FetcherKind
from marshal_py.client.holdings import DEFAULT_AMO_WINDOW_MS, DEFAULT_AMO_WINDOW_RECORDS
from marshal_py.client.host import MemberHost
from marshal_py.client.key_shared_consumer import CommitMode, KeySharedConsumer
from marshal_py.client.member_base import DEFAULT_MAX_POLL_INTERVAL_MS, Compat
from marshal_py.client.settings import IsolationLevel, MarshalerConfig
from marshal_py.client.share_consumer import AckMode, ShareConsumer
from marshal_py.client.source import KafkaPartitionSource
from marshal_py.errors import ConfigurationError
from marshal_py.identity import new_instance_id
from marshal_py.log.kafka import DEFAULT_COORDINATION_TOPIC
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.messages import (
    DEFAULT_DELIVERY_LIMIT,
    DEFAULT_INFLIGHT_LIMIT,
    DEFAULT_LOCK_MS,
)
from marshal_py.replay.reading import DEFAULT_REPLAY_WINDOW_MS, catch_up
from marshal_py.world import (
    DEFAULT_OFFSETS_RETENTION_MS,
    Owner,
    PartitionClaim,
    Rationalizer,
    RationalizerConfig,
)

log = logging.getLogger(__name__)


def default_client_id() -> str:
    """``<hostname>-<pid>``: unique per process. Pass a stable id to resume after restarts."""
    return f"{socket.gethostname()}-{os.getpid()}"


class Marshaler:
    """A process's member of one consumer group, coordinated through ``__marshal``.

    ::

        with Marshaler(bootstrap_servers="127.0.0.1:9092", group_id="team.job",
                       client_id="worker-1", heartbeat_interval=10.0) as m:
            consumer = m.consumer(["events"], mode="alo")
            for record in consumer:
                handle(record)
                consumer.commit(record)

    ``client_id`` names the logical consumer: give each process of a group its own, and the
    same one again after a restart to take its partitions back without waiting for them to
    go stale. ``heartbeat_interval`` (seconds) must be the same for every member of the group:
    a member whose interval differs from the group's stops with a ConfigurationError.
    ``kafka_config`` passes kafka-python settings (security, SASL, SSL) to every client.
    ``checkpoint_interval`` (seconds): how often the group's checkpoint is re-written, which
    bounds how much of the log a joining member replays. ``offsets_retention`` (seconds): how
    long the group's offsets outlive its last member (KIP-211; every member must agree).
    ``auth_keys``: makes the group authenticated (PROTOCOL.md, authenticated groups): every
    record this member writes is signed with the first key, and records about the group
    that no key signed are ignored (counted in ``rationalizer.rejected_count()``). Give
    every member the same keys; while rotating, two (new first once all members know it).
    ``fetcher``: how consumers (every mode) fetch records: ``"kafka-python"`` (default) or
    ``"confluent"`` (librdkafka through confluent-kafka, several times faster; install
    ``marshal_py[librdkafka]``). Coordination always goes through kafka-python.
    ``compat="v1"``: the group is shared with members of the original (Go) implementation
    (PROTOCOL.md 13.1): this member writes only the original's four record types in its
    text form (no membership heartbeats, checkpoints or signatures), consumes in ``"alo"`` or
    ``"amo"`` only, and starts a partition whose Marshal offset is 0 where the original would
    (the offset the group committed to Kafka, if any). Use the original's heartbeat interval
    (60 s) in such a group.
    ``index_topic``: the compacted topic that keeps the coordination topic's layout
    (default ``<coordination_topic>-index``; PROTOCOL.md section 3); every member and tool
    of the coordination topic must name the same one.
    """

    def __init__(
        self,
        bootstrap_servers: str = "127.0.0.1:9092",
        group_id: str = "",
        client_id: str | None = None,
        heartbeat_interval: float = 10.0,
        *,
        coordination_topic: str = DEFAULT_COORDINATION_TOPIC,
        replay_window: float = DEFAULT_REPLAY_WINDOW_MS / 1000,
        timeout: float = 15.0,
        kafka_config: Mapping[str, Any] | None = None,
        checkpoint_interval: float = DEFAULT_CHECKPOINT_INTERVAL_MS / 1000,
        offsets_retention: float = DEFAULT_OFFSETS_RETENTION_MS / 1000,
        auth_keys: Sequence[GroupKey] = (),
        fetcher: FetcherKind = "kafka-python",
        compat: Compat | None = None,
        index_topic: str | None = None,
    ) -> None:
        self.config = MarshalerConfig.from_seconds(
            group_id=group_id, client_id=client_id or default_client_id(),
            heartbeat_interval=heartbeat_interval, replay_window=replay_window,
            checkpoint_interval=checkpoint_interval, offsets_retention=offsets_retention,
            timeout=timeout, auth_keys=auth_keys, fetcher=fetcher, compat=compat)
        self.group_id = group_id
        self.client_id = self.config.client_id
        self.instance_id = new_instance_id()
        self._log_config, self._log = open_coordination_log(
            self.config, bootstrap_servers=bootstrap_servers,
            coordination_topic=coordination_topic, timeout=timeout,
            kafka_config=kafka_config, index_topic=index_topic)
        self._lock = threading.RLock()
        self._host = MemberHost(self._lock, self._member_closed)
        keys = self.config.auth_keys
        self.rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=self._log.partition_count(),
            heartbeat_interval_ms=self._hi_ms,
            offsets_retention_ms=self.config.offsets_retention_ms,
            group_keys={group_id: keys} if keys else {},
        ))
        self._warn_if_retention_too_short()
        try:
            self._log.warm_up()  # joining a group then waits for no connection
        except BaseException:
            self._log.close()
            raise
        self.clock = BrokerClock()
        self._engines = EngineFactory(self.config, group_id, self.client_id, self.instance_id,
                                      self._log, self._log_config, self.rationalizer,
                                      self.clock, self._lock)
        self._factory = ConsumerFactory(self._engines, self._host)
        self._consumer: AnyConsumer | BatchMember | None = None
        self._source: KafkaPartitionSource | None = None
        self._closed = False

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between heartbeats (the same for every member of the group)."""
        return self.config.heartbeat_interval_ms / 1000

    @property
    def replay_window(self) -> float:
        """Seconds of the coordination log replayed on start (0: all of it)."""
        return self.config.replay_window_ms / 1000

    @property
    def checkpoint_interval(self) -> float:
        """Seconds between re-writes of the group's checkpoint."""
        return self.config.checkpoint_interval_ms / 1000

    @property
    def offsets_retention(self) -> float:
        """Seconds the group's offsets outlive its last member (KIP-211)."""
        return self.config.offsets_retention_ms / 1000

    def _warn_if_retention_too_short(self) -> None:
        retention = getattr(self._log, "retention_ms", None)
        needed = (self.config.offsets_retention_ms + self.config.checkpoint_interval_ms) / 1000
        if retention is not None and retention >= 0 and retention / 1000 < needed:
            log.warning(
                "coordination topic %s keeps records for %.0f s, less than the offset "
                "retention plus one checkpoint interval (%.0f s): an empty group's offsets "
                "could be deleted before they expire; raise its retention.ms to at least %d",
                self._log_config.topic, retention / 1000, needed, int(needed * 1000))

    @property
    def _hi_ms(self) -> int:
        return self.config.heartbeat_interval_ms

    @property
    def _checkpoint_ms(self) -> int:
        return self.config.checkpoint_interval_ms

    @property
    def me(self) -> Owner:
        """This process as the log knows it."""
        return Owner(self.instance_id, self.client_id)

    @overload
    def consumer(self, topics: Iterable[str], mode: Literal["share"], *,
                 offset_reset: OffsetReset = ..., lock_duration: float = ...,
                 delivery_limit: int = ..., inflight_limit: int = ...,
                 acknowledgement: AckMode = ..., batch_size: int = ...,
                 dead_letter_topic: str | None = ...,
                 start_time: datetime | None = ...,
                 isolation_level: IsolationLevel | None = ...,
                 max_poll_interval: float = ...) -> ShareConsumer: ...

    @overload
    def consumer(self, topics: Iterable[str], mode: Literal["key-shared"], *,
                 offset_reset: OffsetReset = ...,
                 commit_mode: CommitMode = ...,
                 isolation_level: IsolationLevel | None = ...,
                 max_poll_interval: float = ...) -> KeySharedConsumer: ...

    @overload
    def consumer(self, topics: Iterable[str], mode: Literal["eos"], *,
                 offset_reset: OffsetReset = ..., balance: Balance = ...,
                 max_claims: int | None = ..., release_lag: int | None = ...,
                 transaction_timeout: float = ...,
                 isolation_level: IsolationLevel | None = ...,
                 max_poll_interval: float = ...) -> ExactlyOnceConsumer: ...

    @overload
    def consumer(self, topics: Iterable[str], mode: Mode = ..., *,
                 offset_reset: OffsetReset = ..., balance: Balance = ...,
                 max_claims: int | None = ..., release_lag: int | None = ...,
                 amo_batch_size: int = ..., amo_window: float = ...,
                 isolation_level: IsolationLevel | None = ...,
                 max_poll_interval: float = ...) -> Consumer: ...

    def consumer(
        self,
        topics: Iterable[str],
        mode: Mode | Literal["eos", "share", "key-shared"] = "alo",
        *,
        offset_reset: OffsetReset = "latest",
        balance: Balance = "fair",
        max_claims: int | None = None,
        release_lag: int | None = None,
        amo_batch_size: int = DEFAULT_AMO_WINDOW_RECORDS,
        amo_window: float = DEFAULT_AMO_WINDOW_MS / 1000,
        commit_mode: CommitMode = "implicit",
        lock_duration: float = DEFAULT_LOCK_MS / 1000,
        delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
        inflight_limit: int = DEFAULT_INFLIGHT_LIMIT,
        acknowledgement: AckMode = "implicit",
        batch_size: int = 100,
        dead_letter_topic: str | None = None,
        start_time: datetime | None = None,
        isolation_level: IsolationLevel | None = None,
        max_poll_interval: float = DEFAULT_MAX_POLL_INTERVAL_MS / 1000,
        transaction_timeout: float = DEFAULT_TRANSACTION_TIMEOUT_MS / 1000,
    ) -> Consumer | ShareConsumer | KeySharedConsumer:
        """Join the group on ``topics`` and return the consumer of the partitions it wins.

        ``mode``: ``"alo"`` (at-least-once), ``"amo"`` (at-most-once) or ``"eos"``
        (exactly-once consume-transform-produce: see :class:`ExactlyOnceConsumer`; a batch
        must be committed within ``transaction_timeout`` seconds, default 10). ``offset_reset``:
        where a partition with no committed offset starts, ``"latest"`` (default, as Kafka)
        or ``"earliest"``. ``balance``: ``"fair"`` holds about partitions / live members and
        hands partitions over to members that join; ``"greedy"`` takes every free partition.
        ``max_claims`` caps how many partitions this member holds per topic. ``release_lag``
        (records): a member behind by more than that on a partition hands it to a live member
        that holds at least two fewer partitions (useful with ``"greedy"``); never when alone.
        At-most-once confirms records in windows, the next one while the current one is
        handed out: a window holds at most ``amo_batch_size`` records and about
        ``amo_window`` seconds of consumption (sized by the measured rate); a crash loses at
        most the records of two windows that were confirmed but not handed out.
        ``max_poll_interval`` (seconds, default 300 as Kafka's ``max.poll.interval.ms``; every
        mode): an application that asks for no records (``poll()``, ``next()``) for longer
        gives its work up and leaves the group — partitions released with their committed
        offsets, share records released with their delivery counts (so a record that hangs
        every handler reaches the delivery limit), key slots released at their cursors — so
        others take over at once; its late commit or acknowledgement raises
        :class:`~marshal_py.CommitFailedError` (exactly-once: the late batch's ``commit()``
        returns False, its transaction aborted), and its next ``poll()``, ``next()`` or
        ``poll_batch()`` joins again.
        ``mode="share"`` joins a **share group** (queue semantics, KIP-932): every member
        consumes every partition, acquiring ``batch_size`` records at a time under locks of
        ``lock_duration`` seconds (1..3600), delivered at most ``delivery_limit`` times (2..10)
        with at most ``inflight_limit`` records in flight per partition; see
        :class:`ShareConsumer` for ``acknowledgement`` and ``dead_letter_topic`` (records
        archived at the delivery limit are copied there). A new share group starts at
        ``offset_reset`` (latest by default), or at the first record at or after
        ``start_time`` (an aware datetime) when given.
        ``mode="key-shared"`` shares each partition among any number of members by record
        key (per-key order kept, see :class:`KeySharedConsumer`): ``offset_reset`` applies to
        key slots never committed; ``commit_mode`` is ``"implicit"`` (what one call handed
        out is committed by the next) or ``"explicit"`` (``commit(record)``).
        One consumer per Marshaler at a time.
        """
        self._check_no_consumer()
        consumer, source = self._factory.consumer(
            topics, mode, offset_reset=offset_reset, balance=balance, max_claims=max_claims,
            release_lag=release_lag, amo_batch_size=amo_batch_size, amo_window=amo_window,
            commit_mode=commit_mode, lock_duration=lock_duration,
            delivery_limit=delivery_limit, inflight_limit=inflight_limit,
            acknowledgement=acknowledgement, batch_size=batch_size,
            dead_letter_topic=dead_letter_topic, start_time=start_time,
            isolation_level=isolation_level, max_poll_interval=max_poll_interval,
            transaction_timeout=transaction_timeout)
        self._consumer = consumer
        self._source = source
        return consumer

    def batch_member(
        self,
        topics: Iterable[str],
        mode: Mode | Literal["share", "key-shared"] = "alo",
        *,
        offset_reset: OffsetReset = "latest",
        balance: Balance = "fair",
        max_claims: int | None = None,
        lock_duration: float = DEFAULT_LOCK_MS / 1000,
        delivery_limit: int = DEFAULT_DELIVERY_LIMIT,
        inflight_limit: int = DEFAULT_INFLIGHT_LIMIT,
        start_time: datetime | None = None,
        isolation_level: IsolationLevel | None = None,
        max_poll_interval: float | None = None,
    ) -> BatchMember:
        """Join the group on ``topics`` as the planner of a micro-batch engine.

        The member claims partitions (or acquires share records) like a consumer, but instead
        of fetching records it plans offset ranges (:meth:`ExclusiveBatchMember.plan`) that
        the engine's workers read themselves, and commits or accepts them when told the batch
        is done. The Spark source is built on it. Settings as for :meth:`consumer`;
        ``isolation_level`` decides where planned ranges may end (the last stable offset
        under ``"read_committed"``) and :attr:`BatchMember.isolation_level` tells the
        workers how to read them. ``max_poll_interval`` (share mode; seconds, default None:
        no bound): a batch not completed that long after it was planned gives its records
        back to the group, with their delivery counts. ``"key-shared"``: the member owns key
        slots and plans whole ranges whose workers keep the records of its slots
        (:class:`KeySharedBatchMember`).
        """
        self._check_no_consumer()
        member, source = self._factory.batch_member(
            topics, mode, offset_reset=offset_reset, balance=balance, max_claims=max_claims,
            lock_duration=lock_duration, delivery_limit=delivery_limit,
            inflight_limit=inflight_limit, start_time=start_time,
            isolation_level=isolation_level, max_poll_interval=max_poll_interval)
        self._consumer = member
        self._source = source
        return member

    def _check_no_consumer(self) -> None:
        if self._closed:
            raise ConfigurationError("this Marshaler is closed")
        if self._consumer is not None:
            raise ConfigurationError("this Marshaler already has an open consumer; close it "
                                     "first or use another Marshaler")

    def _member_closed(self, member: object) -> None:
        if self._consumer is member:
            self._consumer = None
            if self._source is not None:
                self._source.close()
                self._source = None

    def claims(self, topic: str | None = None) -> list[PartitionClaim]:
        """The group's partitions as every member sees them, caught up to the log's end."""
        with self._lock:
            catch_up(self._log, self.rationalizer, range(self._log.partition_count()))
            return self.rationalizer.claims(self.group_id, topic)

    def members(self, topic: str) -> list[Owner]:
        """Live members of the group on ``topic``."""
        with self._lock:
            catch_up(self._log, self.rationalizer, range(self._log.partition_count()))
            return self.rationalizer.members(self.group_id, topic, self.clock.now_ms())

    def close(self) -> None:
        """Close the consumer (commit and release) and the coordination connections."""
        if self._closed:
            return
        try:
            if self._consumer is not None:
                self._consumer.close()
        finally:
            self._closed = True
            self._log.close()

    def __enter__(self) -> Marshaler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
