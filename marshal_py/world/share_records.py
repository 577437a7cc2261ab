"""The records of a share-partition as values: their states, how one is seen, and what a
share message did to them. Pure, no rule of KIP-932 (:mod:`marshal_py.world.share` has those).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import NamedTuple

from marshal_py.protocol.ranges import OffsetRange
from marshal_py.world.state import Owner


class RecordState(enum.Enum):
    """The state of one in-flight record."""

    AVAILABLE = "available"
    ACQUIRED = "acquired"
    ACKNOWLEDGED = "acknowledged"
    ARCHIVED = "archived"
    #: Reached the delivery limit in a share-partition that dead-letters: owed a dead letter,
    #: which a member acquires as a duty (never delivered to an application again).
    DEAD_LETTER = "dead_letter"


@dataclass(frozen=True, slots=True)
class InFlightRecord:
    """An in-flight record as seen at some time."""

    offset: int
    state: RecordState
    delivery_count: int
    holder: Owner | None
    lock_expiry_ms: int | None
    #: Acquired as a dead-letter duty (write it to the dead-letter topic, do not deliver it).
    duty: bool = False
    #: Owed a dead letter since this broker time (Dead-letter records and duties).
    owed_since_ms: int | None = None
    #: How many times its dead-letter duty was acquired (more than 1: an earlier holder may
    #: have written the letter before its lock elapsed).
    duties: int = 0


class ShareResult(NamedTuple):
    """What one share message did: the offsets it applied to and those it could not."""

    applied: tuple[OffsetRange, ...]
    ignored: int
    archived: tuple[OffsetRange, ...] = ()


#: A stored record's state: (state, delivery count, holder, lock expiry, duty, owed since,
#: duties), the fields of :class:`InFlightRecord` after the offset. Runs are (first, last,
#: *state).
State = tuple[RecordState, int, "Owner | None", "int | None", bool, "int | None", int]
Run = tuple[int, int, RecordState, int, "Owner | None", "int | None", bool, "int | None", int]
#: A piece of a range: (first, last, stored state or None where nothing is stored).
Piece = tuple[int, int, "State | None"]
