"""Building and starting a member's engine: what :class:`~marshal_py.Marshaler` does for each
kind of consumer and batch member, apart from checking the arguments.

An engine needs the group's identity and settings, the coordination log, the rationalizer,
the clock, a random source and a data source (the data topics' partitions and offsets); it
is started under the member's lock, and its source closed again if it fails to start.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from datetime import datetime

from marshal_py.client.clock import BrokerClock
from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.client.engine_types import Balance, EngineMode, OffsetReset
from marshal_py.client.key_shared_engine import KeySharedConfig, KeySharedEngine
from marshal_py.client.member_base import DEFAULT_MAX_POLL_INTERVAL_MS
from marshal_py.client.settings import (
    IsolationLevel,
    MarshalerConfig,
    data_config,
    isolation_level_of,
)
from marshal_py.client.share_engine import ShareConfig, ShareEngine
from marshal_py.client.source import KafkaPartitionSource
from marshal_py.client.transactions import KafkaFencing
from marshal_py.log.kafka import KafkaLog, KafkaLogConfig
from marshal_py.world import Rationalizer


@dataclass
class EngineFactory:
    """Builds and starts the engines of one process's member of ``group_id``."""

    config: MarshalerConfig
    group_id: str
    client_id: str
    instance_id: str
    log: KafkaLog
    log_config: KafkaLogConfig
    rationalizer: Rationalizer
    clock: BrokerClock
    lock: threading.RLock

    @property
    def heartbeat_interval(self) -> float:
        return self.config.heartbeat_interval_ms / 1000

    @property
    def tick_s(self) -> float:
        """How often a member's coordinator steps its engine (exclusive, key-shared)."""
        return max(0.05, min(1.0, self.heartbeat_interval / 5))

    def share_tick_s(self, lock_duration: float) -> float:
        """How often a share member steps: also often enough to renew its locks in time."""
        return max(0.05, min(1.0, self.heartbeat_interval / 5, lock_duration / 10))

    def data_config(self, isolation_level: IsolationLevel | None) -> KafkaLogConfig:
        """The cluster settings of the clients that read data topics."""
        return data_config(self.log_config, isolation_level_of(
            isolation_level, self.log_config.kafka_config))

    def exclusive(self, topics: tuple[str, ...], mode: EngineMode, offset_reset: OffsetReset,
                  balance: Balance, max_claims: int | None, release_lag: int | None,
                  data: KafkaLogConfig, fencing: KafkaFencing | None = None,
                  **extra: int) -> tuple[MemberEngine, KafkaPartitionSource]:
        """An exclusive (ALO, AMO or EOS) member's engine, started, with its data source."""
        config = EngineConfig(
            group_id=self.group_id,
            client_id=self.client_id,
            instance_id=self.instance_id,
            topics=topics,
            mode=mode,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            offset_reset=offset_reset,
            balance=balance,
            max_claims=max_claims,
            release_lag=release_lag,
            replay_window_ms=self.config.replay_window_ms,
            **extra,
            checkpoint_interval_ms=self.config.checkpoint_interval_ms,
            compat=self.config.compat,
        )
        source = self.open_source(topics, data)
        engine = MemberEngine(config, self.log, self.rationalizer, source, self.clock,
                              random.Random(), fencing)
        self._start(engine, source)
        return engine, source

    def share(self, topics: tuple[str, ...], offset_reset: OffsetReset,
              lock_duration: float, delivery_limit: int, inflight_limit: int,
              batch_size: int, start_time: datetime | None,
              dead_letter_topic: str | None, data: KafkaLogConfig,
              max_poll_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
              ) -> tuple[ShareEngine, KafkaPartitionSource]:
        """A share member's engine, started, with its data source (the dead-letter topic
        included)."""
        config = ShareConfig(
            group_id=self.group_id, client_id=self.client_id, instance_id=self.instance_id,
            topics=topics, heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            lock_ms=int(lock_duration * 1000), delivery_limit=delivery_limit,
            inflight_limit=inflight_limit, offset_reset=offset_reset, batch_size=batch_size,
            start_time_ms=None if start_time is None else int(start_time.timestamp() * 1000),
            replay_window_ms=self.config.replay_window_ms,
            checkpoint_interval_ms=self.config.checkpoint_interval_ms,
            max_poll_interval_ms=max_poll_ms, dead_letter_topic=dead_letter_topic or "",
        )
        source = self.open_source(
            topics + ((dead_letter_topic,) if dead_letter_topic else ()), data)
        engine = ShareEngine(config, self.log, self.rationalizer, source, self.clock,
                             random.Random())
        self._start(engine, source)
        return engine, source

    def key_shared(self, topics: tuple[str, ...], offset_reset: OffsetReset,
                   data: KafkaLogConfig, max_poll_ms: int,
                   ) -> tuple[KeySharedEngine, KafkaPartitionSource]:
        """A key-shared member's engine, started, with its data source."""
        config = KeySharedConfig(
            group_id=self.group_id, client_id=self.client_id, instance_id=self.instance_id,
            topics=topics, heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            offset_reset=offset_reset, replay_window_ms=self.config.replay_window_ms,
            checkpoint_interval_ms=self.config.checkpoint_interval_ms,
            max_poll_interval_ms=max_poll_ms,
        )
        source = self.open_source(topics, data)
        engine = KeySharedEngine(config, self.log, self.rationalizer, source, self.clock,
                                 random.Random())
        self._start(engine, source)
        return engine, source

    def open_source(self, topics: tuple[str, ...], data: KafkaLogConfig
                    ) -> KafkaPartitionSource:
        """The data topics' source, connecting (and checking that ``topics`` exist) in the
        background while the member replays the coordination log."""
        return KafkaPartitionSource(data, refresh_s=min(5.0, self.heartbeat_interval),
                                    expect_topics=topics, background=True)

    def _start(self, engine: MemberEngine | ShareEngine | KeySharedEngine,
               source: KafkaPartitionSource) -> None:
        try:
            with self.lock:
                engine.start()
        except BaseException:
            source.close()
            raise
