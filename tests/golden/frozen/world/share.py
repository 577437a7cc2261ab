"""The share-partition state machine (KIP-932 semantics on the coordination log). Pure.

A share-partition is one partition of a topic consumed by a share group: many members
acquire ranges of its records under time-limited locks and acknowledge them one by one.
Records before the share-partition start offset (SPSO) are done; records from the
share-partition end offset (SPEO) on were never acquired. In between are the in-flight
records, each Available, Acquired (by one member, until its lock expires), Acknowledged or
Archived, with a delivery count. Time is the broker timestamp of the record being applied.
"""

from __future__ import annotations

import enum
import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from tests.golden.frozen.protocol.ranges import OffsetRange, offsets_in, ranges_of
from tests.golden.frozen.world.state import Owner


class RecordState(enum.Enum):
    """The state of one in-flight record."""

    AVAILABLE = "available"
    ACQUIRED = "acquired"
    ACKNOWLEDGED = "acknowledged"
    ARCHIVED = "archived"
    #: Reached the delivery limit in a share-partition that dead-letters: owed a dead letter,
    #: which a member acquires as a duty (never delivered to an application again).
    DEAD_LETTER = "dead_letter"


@dataclass(slots=True)
class _Record:
    state: RecordState
    delivery_count: int
    holder: Owner | None = None
    lock_expiry_ms: int | None = None
    #: Acquired to be dead-lettered, not delivered.
    duty: bool = False
    #: Dead-letter records: broker time it became owed; how often the duty was acquired.
    owed_since_ms: int | None = None
    duties: int = 0


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


@dataclass(frozen=True, slots=True)
class ShareResult:
    """What one share message did: the offsets it applied to and those it could not."""

    applied: tuple[OffsetRange, ...]
    ignored: int
    archived: tuple[OffsetRange, ...] = ()


#: What the holder may say of a delivery, and of a dead-letter duty.
_DELIVERY_ACKS = frozenset({"accept", "release", "reject", "gap"})
_DUTY_ACKS = frozenset({"dead-lettered", "gap", "release"})


def _clip(ranges: Iterable[OffsetRange], low: int, high: int) -> tuple[list[OffsetRange], int]:
    """The parts of ``ranges`` inside [low, high), and how many offsets fell outside.

    Work is then bounded by the window, however large a range a record names."""
    inside: list[OffsetRange] = []
    outside = 0
    for first, last in ranges:
        size = last - first + 1
        a, b = max(first, low), min(last, high - 1)
        if a <= b:
            inside.append((a, b))
            outside += size - (b - a + 1)
        else:
            outside += size
    return inside, outside


class SharePartition:
    """The in-flight state of one share-partition.

    Transitions (KIP-932): Available -> Acquired on acquisition (delivery count + 1);
    Acquired -> Acknowledged on accept; Acquired -> Available on release or lock expiry while
    the delivery count is below the limit, -> Archived at the limit; Acquired -> Archived on
    reject, and on gap (the offset holds no deliverable record) with the acquisition's count
    taken back. The SPSO moves over the contiguous prefix of Acknowledged and Archived records.

    With a ``dead_letter_topic``, a record whose attempt ends at the limit (release or lock
    expiry) is Dead-letter instead of Archived: acquiring it makes a *duty* (Acquired, count
    unchanged); ``dead-lettered`` or ``gap`` by the holder archives it, release or lock expiry
    makes it Dead-letter again, so exactly one member at a time is charged with writing it
    and a crashed one passes the charge on.
    """

    def __init__(self, start_offset: int, delivery_limit: int, inflight_limit: int,
                 dead_letter_topic: str = "") -> None:
        self.spso = start_offset
        self.speo = start_offset
        self.delivery_limit = delivery_limit
        self.inflight_limit = inflight_limit
        self.dead_letter_topic = dead_letter_topic
        #: Offsets whose delivery attempts ran out (archived, or owed a dead letter), in the
        #: order it happened; a diagnostic of this replay, not kept in checkpoints.
        self.exhausted: list[int] = []
        self._records: dict[int, _Record] = {}
        #: Lock deadlines as a min-heap of (expiry, first, last): one entry per range acquired
        #: or renewed at once, so :meth:`expire` costs nothing until a lock is due, however
        #: many records are in flight. Entries go stale (the records were acknowledged,
        #: released or renewed since); :meth:`expire` checks each against the record.
        self._locks: list[tuple[int, int, int]] = []

    # -- transitions -------------------------------------------------------------------------

    def reset(self, start_offset: int) -> None:
        """Start over at ``start_offset``: in-flight state and delivery counts are discarded."""
        self.spso = self.speo = start_offset
        self._records.clear()
        self._locks.clear()

    def expire(self, now_ms: int) -> tuple[OffsetRange, ...]:
        """Locks that elapsed by ``now_ms`` end their delivery attempt (in offset order);
        return them."""
        locks = self._locks
        due: set[int] = set()
        while locks and locks[0][0] <= now_ms:
            expiry, first, last = heapq.heappop(locks)
            for offset in range(first, last + 1):
                record = self._records.get(offset)
                if (record is not None and record.state is RecordState.ACQUIRED
                        and record.lock_expiry_ms == expiry):
                    due.add(offset)
        expired = sorted(due)
        for offset in expired:
            record = self._records[offset]
            assert record.lock_expiry_ms is not None
            self._end_attempt(offset, record, record.lock_expiry_ms)
        self._advance()
        return ranges_of(expired)

    def _lock(self, offsets: list[int], expiry_ms: int) -> None:
        for first, last in ranges_of(offsets):
            heapq.heappush(self._locks, (expiry_ms, first, last))

    def acquire(self, owner: Owner, ranges: Iterable[OffsetRange], lock_ms: int,
                now_ms: int) -> ShareResult:
        """Acquire the Available records of ``ranges``; the rest of the request is void."""
        granted: list[int] = []
        inside, ignored = _clip(ranges, self.spso, self.spso + self.inflight_limit)
        for offset in offsets_in(inside):
            record = self._records.get(offset)
            if record is not None and record.state is RecordState.DEAD_LETTER:
                self._records[offset] = _Record(
                    RecordState.ACQUIRED, record.delivery_count, owner, now_ms + lock_ms,
                    duty=True, owed_since_ms=record.owed_since_ms, duties=record.duties + 1)
                granted.append(offset)
                continue
            if record is not None and record.state is not RecordState.AVAILABLE:
                ignored += 1
                continue
            count = (record.delivery_count if record is not None else 0) + 1
            self._records[offset] = _Record(RecordState.ACQUIRED, count, owner, now_ms + lock_ms)
            self.speo = max(self.speo, offset + 1)
            granted.append(offset)
        self._lock(granted, now_ms + lock_ms)
        return ShareResult(ranges_of(granted), ignored)

    def acknowledge(self, owner: Owner, ranges: Iterable[OffsetRange], kind: str,
                    now_ms: int) -> ShareResult:
        """Accept, release, reject, gap or dead-letter records ``owner`` holds under a live
        lock (a dead-letter duty takes only dead-lettered, gap and release; a delivery all
        but dead-lettered)."""
        done: list[int] = []
        archived: list[int] = []
        inside, ignored = _clip(ranges, self.spso, self.speo)
        for offset in offsets_in(inside):
            record = self._held(owner, offset, now_ms)
            if record is None or kind not in (_DUTY_ACKS if record.duty else _DELIVERY_ACKS):
                ignored += 1
                continue
            done.append(offset)
            if record.duty:
                if kind == "release":
                    self._owe(offset, record, record.owed_since_ms)
                else:
                    self._records[offset] = _Record(RecordState.ARCHIVED, record.delivery_count)
                continue
            if kind == "accept":
                self._records[offset] = _Record(RecordState.ACKNOWLEDGED, record.delivery_count)
            elif kind == "gap":  # no record there: done, and the acquisition was no delivery
                self._records[offset] = _Record(RecordState.ARCHIVED, record.delivery_count - 1)
            elif kind == "reject":
                self._records[offset] = _Record(RecordState.ARCHIVED, record.delivery_count)
                archived.append(offset)
            elif self._end_attempt(offset, record, now_ms):
                archived.append(offset)
        self._advance()
        return ShareResult(ranges_of(done), ignored, ranges_of(archived))

    def renew(self, owner: Owner, ranges: Iterable[OffsetRange], lock_ms: int,
              now_ms: int) -> ShareResult:
        """Extend ``owner``'s live locks on ``ranges`` to ``now_ms + lock_ms``."""
        renewed: list[int] = []
        inside, ignored = _clip(ranges, self.spso, self.speo)
        for offset in offsets_in(inside):
            record = self._held(owner, offset, now_ms)
            if record is None:
                ignored += 1
                continue
            record.lock_expiry_ms = now_ms + lock_ms
            renewed.append(offset)
        self._lock(renewed, now_ms + lock_ms)
        return ShareResult(ranges_of(renewed), ignored)

    def _held(self, owner: Owner, offset: int, now_ms: int) -> _Record | None:
        record = self._records.get(offset)
        if (record is None or record.state is not RecordState.ACQUIRED
                or record.holder != owner or record.lock_expiry_ms is None
                or record.lock_expiry_ms <= now_ms):
            return None
        return record

    def _end_attempt(self, offset: int, record: _Record, now_ms: int) -> bool:
        """Release (at ``now_ms``) or lock expiry (``now_ms``: the lock's expiry): Available
        again; at the limit, Dead-letter (when the share-partition dead-letters) or Archived
        (True). A duty ends Dead-letter again."""
        if record.duty:
            self._owe(offset, record, record.owed_since_ms)
            return False
        if record.delivery_count >= self.delivery_limit:
            self.exhausted.append(offset)
            if self.dead_letter_topic:
                self._owe(offset, record, now_ms)
            else:
                self._records[offset] = _Record(RecordState.ARCHIVED, record.delivery_count)
            return True
        self._records[offset] = _Record(RecordState.AVAILABLE, record.delivery_count)
        return False

    def _owe(self, offset: int, record: _Record, since_ms: int | None) -> None:
        self._records[offset] = _Record(RecordState.DEAD_LETTER, record.delivery_count,
                                        owed_since_ms=since_ms, duties=record.duties)

    def _advance(self) -> None:
        while self.spso < self.speo:
            record = self._records.get(self.spso)
            if record is None or record.state not in (RecordState.ACKNOWLEDGED,
                                                      RecordState.ARCHIVED):
                break
            del self._records[self.spso]
            self.spso += 1

    # -- checkpoints -------------------------------------------------------------------------

    def stored_records(self) -> list[InFlightRecord]:
        """The records the state machine stores (in-flight records it has seen change), in
        offset order: with SPSO, SPEO and the limits, the whole state (for checkpoints)."""
        return [self._view(o, r) for o, r in sorted(self._records.items())]

    @staticmethod
    def _view(offset: int, r: _Record) -> InFlightRecord:
        return InFlightRecord(offset, r.state, r.delivery_count, r.holder, r.lock_expiry_ms,
                              r.duty, r.owed_since_ms, r.duties)

    @classmethod
    def restored(cls, spso: int, speo: int, delivery_limit: int, inflight_limit: int,
                 records: Iterable[InFlightRecord],
                 dead_letter_topic: str = "") -> SharePartition:
        """A share-partition in exactly the state :meth:`stored_records` described."""
        share = cls(spso, delivery_limit, inflight_limit, dead_letter_topic)
        share.speo = speo
        locked: dict[int, list[int]] = {}
        for r in records:
            share._records[r.offset] = _Record(r.state, r.delivery_count, r.holder,
                                               r.lock_expiry_ms, r.duty, r.owed_since_ms,
                                               r.duties)
            if r.state is RecordState.ACQUIRED and r.lock_expiry_ms is not None:
                locked.setdefault(r.lock_expiry_ms, []).append(r.offset)
        for expiry_ms, offsets in sorted(locked.items()):
            share._lock(offsets, expiry_ms)
        return share

    # -- views -------------------------------------------------------------------------------

    def in_flight(self, now_ms: int | None = None) -> list[InFlightRecord]:
        """Every record in [SPSO, SPEO), in offset order; with ``now_ms``, locks elapsed by
        then are shown as they will be once the next record applies them."""
        out = []
        for offset in range(self.spso, self.speo):
            record = self._records.get(offset) or _Record(RecordState.AVAILABLE, 0)
            view = self._view(offset, record)
            expiry = record.lock_expiry_ms
            if (now_ms is not None and record.state is RecordState.ACQUIRED
                    and expiry is not None and expiry <= now_ms):
                view = self._elapsed_view(view, now_ms)
            out.append(view)
        return out

    def _elapsed_view(self, view: InFlightRecord, now_ms: int) -> InFlightRecord:
        """What an Acquired record whose lock elapsed by ``now_ms`` becomes."""
        if view.duty:
            return InFlightRecord(view.offset, RecordState.DEAD_LETTER, view.delivery_count,
                                  None, None, False, view.owed_since_ms, view.duties)
        if view.delivery_count < self.delivery_limit:
            return InFlightRecord(view.offset, RecordState.AVAILABLE, view.delivery_count,
                                  None, None)
        if self.dead_letter_topic:
            return InFlightRecord(view.offset, RecordState.DEAD_LETTER, view.delivery_count,
                                  None, None, False, view.lock_expiry_ms, view.duties)
        return InFlightRecord(view.offset, RecordState.ARCHIVED, view.delivery_count, None,
                              None)

    def record(self, offset: int) -> InFlightRecord:
        """One record's state (Archived below the SPSO, Available from the SPEO on)."""
        if offset < self.spso:
            return InFlightRecord(offset, RecordState.ARCHIVED, 0, None, None)
        record = self._records.get(offset) or _Record(RecordState.AVAILABLE, 0)
        return self._view(offset, record)

    def counts(self, now_ms: int | None = None) -> dict[RecordState, int]:
        """How many in-flight records are in each state."""
        counts = dict.fromkeys(RecordState, 0)
        for record in self.in_flight(now_ms):
            counts[record.state] += 1
        return counts
