"""MarshalerConfig: every setting of a Marshaler, checked once, in milliseconds.

The public API speaks seconds (as ``Marshaler(heartbeat_interval=10.0)`` does); everything
inside the library speaks integer milliseconds. :meth:`MarshalerConfig.from_seconds` is the
one place where the two meet, and ``__post_init__`` the one place where the settings are
checked (the group-wide rules are :func:`~marshal_py.client.member_base.check_group_settings`,
which the engines' configs share).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from marshal_py.client.fetchers import FETCHER_KINDS, FetcherKind, require_confluent
from marshal_py.client.member_base import Compat, check_group_settings, check_original_ids
from marshal_py.errors import ConfigurationError
from marshal_py.log.kafka import KafkaLogConfig
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.original import ORIGINAL_HEARTBEAT_INTERVAL_S

log = logging.getLogger(__name__)

IsolationLevel = Literal["read_committed", "read_uncommitted"]
ISOLATION_LEVELS: tuple[IsolationLevel, ...] = ("read_committed", "read_uncommitted")
#: What a consumer reads when neither its ``isolation_level`` nor ``kafka_config`` says: the
#: records of committed transactions only, as librdkafka and the confluent clients default.
DEFAULT_ISOLATION_LEVEL: IsolationLevel = "read_committed"


def seconds_to_ms(seconds: float, name: str) -> int:
    """``seconds`` of the public API as the library's milliseconds (``name`` for errors)."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ConfigurationError(f"{name} must be a number of seconds, not {seconds!r}")
    return round(seconds * 1000)


@dataclass(frozen=True)
class MarshalerConfig:
    """The settings of one :class:`~marshal_py.client.marshaler.Marshaler` (milliseconds)."""

    group_id: str
    client_id: str
    heartbeat_interval_ms: int
    replay_window_ms: int
    checkpoint_interval_ms: int
    offsets_retention_ms: int
    timeout_ms: int
    auth_keys: tuple[GroupKey, ...] = ()
    fetcher: FetcherKind = "kafka-python"
    compat: Compat | None = None

    def __post_init__(self) -> None:
        check_group_settings(self.group_id, self.client_id, self.heartbeat_interval_ms,
                             self.replay_window_ms, self.checkpoint_interval_ms)
        if self.offsets_retention_ms < 60_000:
            raise ConfigurationError("offsets_retention must be at least 60 seconds")
        if self.timeout_ms <= 0:
            raise ConfigurationError("timeout must be > 0 seconds")
        if any(not isinstance(k, GroupKey) for k in self.auth_keys):
            raise ConfigurationError("auth_keys must be GroupKey objects (see "
                                     "marshal_py.load_group_keys)")
        if len({k.key_id for k in self.auth_keys}) != len(self.auth_keys):
            raise ConfigurationError("auth_keys hold the same key id twice")
        if self.fetcher not in FETCHER_KINDS:
            raise ConfigurationError(
                f"fetcher must be one of {', '.join(map(repr, FETCHER_KINDS))}, "
                f"not {self.fetcher!r}")
        if self.fetcher == "confluent":
            require_confluent()  # a missing extra is said now, not at the first consumer
        if self.compat is not None:
            self._check_compat(self.compat)

    def _check_compat(self, compat: str) -> None:
        check_original_ids(compat, self.group_id, self.client_id)
        if self.auth_keys:
            raise ConfigurationError(f"compat={compat!r} cannot sign records: the original "
                                     "implementation reads no signed record")
        if self.heartbeat_interval_ms != ORIGINAL_HEARTBEAT_INTERVAL_S * 1000:
            log.warning(
                "compat=%r with heartbeat_interval %g s: the original implementation uses %d s "
                "(a constant of its code). Members of one group must judge claims with one "
                "interval: with a shorter one this member takes a live original member's "
                "partitions, with a longer one the originals take this member's "
                "(PROTOCOL.md 13.1)", compat, self.heartbeat_interval_ms / 1000,
                ORIGINAL_HEARTBEAT_INTERVAL_S)

    @classmethod
    def from_seconds(cls, *, group_id: str, client_id: str, heartbeat_interval: float,
                     replay_window: float, checkpoint_interval: float,
                     offsets_retention: float, timeout: float,
                     auth_keys: Sequence[GroupKey] = (),
                     fetcher: FetcherKind = "kafka-python",
                     compat: Compat | None = None) -> MarshalerConfig:
        """Build from the public API's seconds (the one conversion in the library)."""
        return cls(group_id=group_id, client_id=client_id,
                   heartbeat_interval_ms=seconds_to_ms(heartbeat_interval, "heartbeat_interval"),
                   replay_window_ms=seconds_to_ms(replay_window, "replay_window"),
                   checkpoint_interval_ms=seconds_to_ms(checkpoint_interval, "checkpoint_interval"),
                   offsets_retention_ms=seconds_to_ms(offsets_retention, "offsets_retention"),
                   timeout_ms=seconds_to_ms(timeout, "timeout"),
                   auth_keys=tuple(auth_keys), fetcher=fetcher, compat=compat)


def isolation_level_of(level: str | None, kafka_config: Mapping[str, Any]) -> IsolationLevel:
    """The isolation level a consumer reads with: ``level`` when given, else the
    ``isolation_level`` of ``kafka_config``, else :data:`DEFAULT_ISOLATION_LEVEL`."""
    chosen = level if level is not None else kafka_config.get("isolation_level",
                                                              DEFAULT_ISOLATION_LEVEL)
    if chosen not in ISOLATION_LEVELS:
        raise ConfigurationError(
            f"isolation_level must be one of {', '.join(map(repr, ISOLATION_LEVELS))}, "
            f"not {chosen!r}")
    return chosen


def data_config(config: KafkaLogConfig, level: IsolationLevel) -> KafkaLogConfig:
    """``config`` for the clients that read data topics: ``isolation_level`` set to
    ``level`` (the coordination log's clients keep ``config`` as it is)."""
    return replace(config, kafka_config={**config.kafka_config, "isolation_level": level})
