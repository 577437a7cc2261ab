"""A share-group member's settings and counters (:class:`ShareConfig`, :class:`ShareStats`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from marshal_py.client.member_base import MemberConfig
from marshal_py.errors import ConfigurationError
from marshal_py.protocol.messages import (
    ALL_ACK_KINDS,
    DEFAULT_DELIVERY_LIMIT,
    DEFAULT_INFLIGHT_LIMIT,
    DEFAULT_LOCK_MS,
    MAX_DELIVERY_LIMIT,
    MAX_INFLIGHT_LIMIT,
    MAX_LOCK_MS,
    MIN_DELIVERY_LIMIT,
    MIN_LOCK_MS,
)


@dataclass(frozen=True)
class ShareConfig(MemberConfig):
    """Settings of one share-group member (on top of :class:`MemberConfig`)."""

    lock_ms: int = DEFAULT_LOCK_MS
    delivery_limit: int = DEFAULT_DELIVERY_LIMIT
    inflight_limit: int = DEFAULT_INFLIGHT_LIMIT
    #: Start a new share group at the first record at or after this time (ms), instead of
    #: ``offset_reset``.
    start_time_ms: int | None = None
    batch_size: int = 500
    #: Where records that reach the delivery limit go (PROTOCOL.md 8.2 rule 9): written into
    #: the share-partitions this member initializes; the log's topic is the one that counts.
    dead_letter_topic: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not MIN_LOCK_MS <= self.lock_ms <= MAX_LOCK_MS:
            raise ConfigurationError("lock duration must be between 1 s and 1 h")
        if not MIN_DELIVERY_LIMIT <= self.delivery_limit <= MAX_DELIVERY_LIMIT:
            raise ConfigurationError("delivery attempt limit must be between 2 and 10")
        if not 1 <= self.inflight_limit <= MAX_INFLIGHT_LIMIT:
            raise ConfigurationError(f"in-flight limit must be between 1 and {MAX_INFLIGHT_LIMIT}")
        if self.batch_size < 1:
            raise ConfigurationError("batch size must be >= 1")


@dataclass
class ShareStats:
    """Counters a caller can show or assert on."""

    acquisitions: int = 0
    records_acquired: int = 0
    records_void: int = 0
    acks: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(sorted(ALL_ACK_KINDS), 0))
    #: Dead-letter duties acquired.
    duties: int = 0
    renewals: int = 0
    coordination_records: int = 0
