"""The settings of a rationalizer, which every member of a group must share. Pure.

Apart from :mod:`marshal_py.world.rationalizer` so that the record loop
(:mod:`marshal_py.world.engine`) can name the type without importing the rationalizer built on
it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from marshal_py.protocol.auth import GroupKey
from marshal_py.world.lifecycle import DEFAULT_OFFSETS_RETENTION_MS

__all__ = ["DEFAULT_AUTH_MAX_SKEW_MS", "DEFAULT_HEARTBEAT_INTERVAL_MS", "RationalizerConfig"]

DEFAULT_HEARTBEAT_INTERVAL_MS = 10_000
#: How far a signed record's own time may be from the broker's append time (replay guard).
DEFAULT_AUTH_MAX_SKEW_MS = 120_000


@dataclass(frozen=True, slots=True)
class RationalizerConfig:
    """Settings every member of a group must share, or they will disagree on the world.

    ``coordination_partitions``: partition count of the coordination topic (records about a
    topic are honoured only on that topic's coordination partition). ``heartbeat_interval_ms``:
    the heartbeat interval (HI); ``group_heartbeat_intervals`` overrides it per group.
    ``offsets_retention_ms``: how long an Empty group's offsets outlive it (KIP-211).
    ``group_keys``: the authenticated groups and their keys (two while a key rotates): every
    record about such a group must be signed with one of them, its own time (``sent_at``)
    be within ``auth_max_skew_ms`` of the broker's append time, and its writer's sequence
    number be above the last one accepted from the same sender; other records about it are
    rejected (PROTOCOL.md, authenticated groups).
    """

    coordination_partitions: int
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    group_heartbeat_intervals: Mapping[str, int] = field(default_factory=dict)
    offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS
    group_keys: Mapping[str, tuple[GroupKey, ...]] = field(default_factory=dict)
    auth_max_skew_ms: int = DEFAULT_AUTH_MAX_SKEW_MS

    def __post_init__(self) -> None:
        if self.coordination_partitions < 1:
            raise ValueError("coordination_partitions must be >= 1")
        if self.offsets_retention_ms < 1:
            raise ValueError("offsets_retention_ms must be >= 1 ms")
        for hi in (self.heartbeat_interval_ms, *self.group_heartbeat_intervals.values()):
            if hi < 1:
                raise ValueError(f"heartbeat intervals must be >= 1 ms, got {hi}")
        for group, keys in self.group_keys.items():
            if not keys:
                raise ValueError(f"authenticated group {group!r} has no key")
        if self.auth_max_skew_ms < 1000:
            raise ValueError("auth_max_skew_ms must be >= 1000 ms (senders write whole seconds)")

    def heartbeat_interval_for(self, group: str) -> int:
        """The HI of ``group`` in milliseconds."""
        return self.group_heartbeat_intervals.get(group, self.heartbeat_interval_ms)
