"""Building a Marshaler's consumers and micro-batch members, one mode at a time.

:meth:`~marshal_py.Marshaler.consumer` and :meth:`~marshal_py.Marshaler.batch_member` are
the public face (their overloads, defaults and documentation); :class:`ConsumerFactory`
does their work: it checks the arguments against the mode, starts the member's engine
(:class:`~marshal_py.client.engines.EngineFactory`) while the data fetcher connects, wraps
the engine in the mode's consumer, and undoes what it built when a step fails. The
Marshaler keeps what it returns: the member and its data topics' source.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from marshal_py.client.batch_member import (
    BatchMember,
    ExclusiveBatchMember,
    KeySharedBatchMember,
    ShareBatchMember,
)
from marshal_py.client.consumer import Consumer
from marshal_py.client.engine_types import Balance, Mode, OffsetReset
from marshal_py.client.engines import EngineFactory
from marshal_py.client.eos_consumer import ExactlyOnceConsumer
from marshal_py.client.fetchers import OpeningFetcher
from marshal_py.client.host import MemberHost
from marshal_py.client.key_shared_consumer import CommitMode, KeySharedConsumer
from marshal_py.client.member_base import DEFAULT_MAX_POLL_INTERVAL_MS
from marshal_py.client.settings import IsolationLevel, seconds_to_ms
from marshal_py.client.share_consumer import AckMode, ShareConsumer
from marshal_py.client.source import KafkaPartitionSource
from marshal_py.client.transactions import KafkaFencing
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLogConfig

#: The consumption modes :meth:`Marshaler.consumer` knows.
CONSUMER_MODES = ("alo", "amo", "eos", "share", "key-shared")

#: What :meth:`Marshaler.consumer` returns, by mode.
AnyConsumer = Consumer | ShareConsumer | KeySharedConsumer


@dataclass(frozen=True)
class ConsumerFactory:
    """Builds the consumers and batch members of one Marshaler's member of a group.

    ``engines`` starts their engines (and holds the group's settings, the coordination
    log, the rationalizer and the lock); ``host`` is what the built member may use of the
    Marshaler. Each method returns the member with its data topics' source, for the
    Marshaler to close once the member closes.
    """

    engines: EngineFactory
    host: MemberHost

    def consumer(
        self,
        topics: Iterable[str],
        mode: Mode | Literal["eos", "share", "key-shared"],
        *,
        offset_reset: OffsetReset,
        balance: Balance,
        max_claims: int | None,
        release_lag: int | None,
        amo_batch_size: int,
        amo_window: float,
        commit_mode: CommitMode,
        lock_duration: float,
        delivery_limit: int,
        inflight_limit: int,
        acknowledgement: AckMode,
        batch_size: int,
        dead_letter_topic: str | None,
        start_time: datetime | None,
        isolation_level: IsolationLevel | None,
        max_poll_interval: float,
        transaction_timeout: float,
    ) -> tuple[AnyConsumer, KafkaPartitionSource]:
        """The consumer of :meth:`Marshaler.consumer` (arguments as there), joined."""
        self._check_consumer_mode(mode, commit_mode)
        engines = self.engines
        wanted = tuple(dict.fromkeys(topics))
        data = engines.data_config(isolation_level)
        max_poll_ms = seconds_to_ms(max_poll_interval, "max_poll_interval")
        consumer: AnyConsumer
        if mode == "key-shared" or mode == "share":
            # The data fetcher connects while the member joins (both are round trips).
            opening = OpeningFetcher(engines.config.fetcher, data, wanted)
            try:
                if mode == "key-shared":
                    keyed, source = engines.key_shared(wanted, offset_reset, data, max_poll_ms)
                    consumer = KeySharedConsumer(self.host, keyed, data, engines.tick_s,
                                                 commit_mode, fetcher=opening)
                else:
                    share, source = engines.share(
                        wanted, offset_reset, lock_duration, delivery_limit, inflight_limit,
                        batch_size, start_time, dead_letter_topic, data, max_poll_ms)
                    consumer = ShareConsumer(
                        self.host, share, data, engines.share_tick_s(lock_duration),
                        acknowledgement, dead_letter_topic, fetcher=opening)
            except BaseException:
                opening.abandon()
                raise
            return consumer, source
        return self._exclusive(wanted, mode, data, offset_reset, balance, max_claims,
                               release_lag, amo_batch_size, amo_window, max_poll_ms,
                               transaction_timeout)

    def _check_consumer_mode(self, mode: str, commit_mode: str) -> None:
        if commit_mode not in ("implicit", "explicit"):
            raise ConfigurationError(
                f"commit_mode must be 'implicit' or 'explicit', not {commit_mode!r}")
        if mode not in CONSUMER_MODES:
            raise ConfigurationError(
                f"mode must be one of {', '.join(map(repr, CONSUMER_MODES))}, not {mode!r}")
        compat = self.engines.config.compat
        if compat is not None and mode not in ("alo", "amo"):
            raise ConfigurationError(
                f"compat={compat!r} consumes in 'alo' or 'amo' only (the original "
                f"implementation has no {mode} mode)")

    def _exclusive(self, wanted: tuple[str, ...], mode: Mode | Literal["eos"],
                   data: KafkaLogConfig, offset_reset: OffsetReset, balance: Balance,
                   max_claims: int | None, release_lag: int | None, amo_batch_size: int,
                   amo_window: float, max_poll_ms: int, transaction_timeout: float,
                   ) -> tuple[Consumer, KafkaPartitionSource]:
        """An at-least-once, at-most-once or exactly-once consumer, joined."""
        engines = self.engines
        fencing = None if mode != "eos" else KafkaFencing(
            engines.log_config, engines.group_id, timeout_s=engines.config.timeout_ms / 1000,
            transaction_timeout_ms=seconds_to_ms(transaction_timeout, "transaction_timeout"))
        # The data fetcher connects while the member joins (both are round trips).
        opening = OpeningFetcher(engines.config.fetcher, data, wanted)
        try:
            engine, source = engines.exclusive(
                wanted, mode, offset_reset, balance, max_claims, release_lag, data,
                fencing, amo_window_records=amo_batch_size,
                amo_window_ms=round(amo_window * 1000), max_poll_interval_ms=max_poll_ms)
        except BaseException:
            opening.abandon()
            raise
        try:
            consumer: Consumer
            if fencing is None:
                consumer = Consumer(self.host, engine, wanted, data, fetcher=opening)
            else:
                consumer = ExactlyOnceConsumer(
                    self.host, engine, wanted, data, fencing=fencing,
                    coordination_topic=engines.log_config.topic,
                    coordination_partitions=engines.log.partition_count(),
                    group_keys=engines.rationalizer.config.group_keys, fetcher=opening)
        except BaseException:
            with engines.lock:
                engine.close()
            source.close()
            raise
        return consumer, source

    def batch_member(
        self,
        topics: Iterable[str],
        mode: Mode | Literal["share", "key-shared"],
        *,
        offset_reset: OffsetReset,
        balance: Balance,
        max_claims: int | None,
        lock_duration: float,
        delivery_limit: int,
        inflight_limit: int,
        start_time: datetime | None,
        isolation_level: IsolationLevel | None,
        max_poll_interval: float | None,
    ) -> tuple[BatchMember, KafkaPartitionSource]:
        """The member of :meth:`Marshaler.batch_member` (arguments as there), joined."""
        if mode not in ("alo", "amo", "share", "key-shared"):
            raise ConfigurationError(
                "mode must be one of 'alo', 'amo', 'share', 'key-shared' for a batch member, "
                f"not {mode!r}")
        engines = self.engines
        if engines.config.compat is not None:
            raise ConfigurationError(f"compat={engines.config.compat!r} has no batch members "
                                     "(use a consumer)")
        wanted = tuple(dict.fromkeys(topics))
        data = engines.data_config(isolation_level)
        max_batch_ms = (None if max_poll_interval is None
                        else seconds_to_ms(max_poll_interval, "max_poll_interval"))
        if max_batch_ms is not None and max_batch_ms < 1:
            raise ConfigurationError("max_poll_interval must be > 0 seconds (or None)")
        if max_batch_ms is not None and mode != "share":
            raise ConfigurationError("max_poll_interval of a batch member applies to share mode "
                                     "only (docs/spark.md)")
        member: BatchMember
        if mode == "key-shared":
            keyed, source = engines.key_shared(wanted, offset_reset, data,
                                               DEFAULT_MAX_POLL_INTERVAL_MS)
            member = KeySharedBatchMember(self.host, keyed, source, engines.tick_s)
        elif mode == "share":
            share, source = engines.share(wanted, offset_reset, lock_duration, delivery_limit,
                                          inflight_limit, 500, start_time, None, data)
            member = ShareBatchMember(self.host, share, source,
                                      engines.share_tick_s(lock_duration), max_batch_ms)
        else:
            engine, source = engines.exclusive(wanted, mode, offset_reset, balance,
                                               max_claims, None, data)
            member = ExclusiveBatchMember(self.host, engine, source, engines.tick_s)
        return member, source
