"""The world state the rationalizer derives: who owns what, and what is committed."""

from __future__ import annotations

import enum
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, order=True)
class Owner:
    """A claimant: one process (``instance_id``) of one logical consumer (``client_id``)."""

    instance_id: str
    client_id: str


@dataclass(frozen=True, slots=True, order=True)
class PartitionKey:
    """A partition of a topic as consumed by one group."""

    group: str
    topic: str
    partition: int


class ClaimStatus(enum.Enum):
    """How a claim looks at a given moment.

    ``fresh``: last heartbeat less than one heartbeat interval (HI) ago. ``unknown``: between
    one and two HI ago, inclusive. ``stale``: more than two HI ago. ``unclaimed``: no owner
    (never claimed, or released).
    """

    FRESH = "fresh"
    UNKNOWN = "unknown"
    STALE = "stale"
    UNCLAIMED = "unclaimed"


def status_for_age(age_ms: int, heartbeat_interval_ms: int) -> ClaimStatus:
    """Status of a claim whose last heartbeat is ``age_ms`` old (negative ages are fresh)."""
    if age_ms < heartbeat_interval_ms:
        return ClaimStatus.FRESH
    if age_ms <= 2 * heartbeat_interval_ms:
        return ClaimStatus.UNKNOWN
    return ClaimStatus.STALE


@dataclass(frozen=True, slots=True)
class PartitionClaim:
    """An immutable view of one partition's coordination state.

    Times are broker timestamps in milliseconds. ``committed_offset`` is the next offset to
    consume (the owner's last heartbeat or release); ``amo_claimed_offset`` the highest offset
    an at-most-once owner confirmed it would process.
    """

    key: PartitionKey
    owner: Owner | None
    claimed_at_ms: int | None
    last_heartbeat_ms: int | None
    committed_offset: int | None
    last_release_ms: int | None
    released_by: Owner | None
    amo_claimed_offset: int | None
    heartbeat_interval_ms: int
    #: Exactly-once: the committed offset moves by transactions only (PROTOCOL.md 7.2).
    transactional: bool = False

    def heartbeat_age_ms(self, now_ms: int) -> int | None:
        """Milliseconds since the owner's last sign of life, or None without an owner."""
        if self.owner is None or self.last_heartbeat_ms is None:
            return None
        return now_ms - self.last_heartbeat_ms

    def status(self, now_ms: int) -> ClaimStatus:
        """The claim's status as of ``now_ms`` (a broker-clock time in milliseconds)."""
        age = self.heartbeat_age_ms(now_ms)
        if age is None:
            return ClaimStatus.UNCLAIMED
        return status_for_age(age, self.heartbeat_interval_ms)

    def is_held(self, now_ms: int) -> bool:
        """True when an owner exists and is not stale, so nobody else may claim."""
        return self.status(now_ms) in (ClaimStatus.FRESH, ClaimStatus.UNKNOWN)
