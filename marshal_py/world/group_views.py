"""What a (group, topic) pair's membership looks like from outside: its lifecycle state and a
client id's rank among the live members (the views :class:`~marshal_py.world.lifecycle.
GroupLife` answers with). Pure value types."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from marshal_py.world.state import Owner

__all__ = ["GroupLifecycle", "GroupState", "MemberRank"]


class GroupState(enum.Enum):
    """Where a (group, topic) pair is in its lifecycle at some time."""

    STABLE = "stable"
    EMPTY = "empty"
    DEAD = "dead"


@dataclass(frozen=True, slots=True)
class GroupLifecycle:
    """A view of a (group, topic) pair at ``now_ms``.

    ``since_ms``: when the pair entered its state (Stable: the first sign of life after it
    was Empty; Empty and Dead: when it turned Empty). ``expires_at_ms``: when an Empty pair
    turns (or turned) Dead; None while Stable. ``intervals``: the heartbeat interval each
    live member announced, aligned with ``members`` (None: it announced none).
    """

    group: str
    topic: str
    state: GroupState
    members: tuple[Owner, ...]
    since_ms: int | None
    expires_at_ms: int | None
    intervals: tuple[int | None, ...] = ()


class MemberRank(NamedTuple):
    """Where one client id stands in a (group, topic) pair at some time.

    ``members``: how many client ids have a live member, counting this one among them;
    ``place``: its position (from 0) in their sorted order; ``live``: whether it has a live
    member itself. A fair share is ``partitions // members``, one more for the first
    ``partitions % members`` places.
    """

    members: int
    place: int
    live: bool
