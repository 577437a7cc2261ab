"""The share-partition state machine (KIP-932 semantics on the coordination log). Pure.

A share-partition is one partition of a topic consumed by a share group: many members
acquire ranges of its records under time-limited locks and acknowledge them one by one.
Records before the share-partition start offset (SPSO) are done; records from the
share-partition end offset (SPEO) on were never acquired. In between are the in-flight
records, each Available, Acquired (by one member, until its lock expires), Acknowledged or
Archived, with a delivery count. Time is the broker timestamp of the record being applied.

Members acquire and acknowledge records in ranges, so the state is kept as *runs*: maximal
ranges of consecutive stored records in the same state (same delivery count, holder, lock,
...). A message costs a few operations per run it touches, not per offset: a share record
applies in microseconds whether it names one offset or ten thousand, and however many records
are in flight. The views still show one :class:`InFlightRecord` per offset.

The record values (:class:`RecordState`, :class:`InFlightRecord`, :class:`ShareResult`) live in
:mod:`marshal_py.world.share_records` and the run storage in :mod:`marshal_py.world.share_runs`;
this module holds the rules and re-exports those names.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Iterable

from marshal_py.protocol.ranges import OffsetRange
from marshal_py.world.share_records import (
    InFlightRecord,
    Piece,
    RecordState,
    Run,
    ShareResult,
    State,
)
from marshal_py.world.share_runs import ShareRuns
from marshal_py.world.state import Owner

__all__ = ["InFlightRecord", "Piece", "RecordState", "Run", "SharePartition", "ShareResult",
           "State"]


_AVAILABLE = RecordState.AVAILABLE
_ACQUIRED = RecordState.ACQUIRED
_ACKNOWLEDGED = RecordState.ACKNOWLEDGED
_ARCHIVED = RecordState.ARCHIVED
_DEAD_LETTER = RecordState.DEAD_LETTER


#: What the holder may say of a delivery, and of a dead-letter duty.
_DELIVERY_ACKS = frozenset({"accept", "release", "reject", "gap"})
_DUTY_ACKS = frozenset({"dead-lettered", "gap", "release"})
_DONE = (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED)


def _clip(ranges: Iterable[OffsetRange], low: int, high: int) -> tuple[list[OffsetRange], int]:
    """The parts of ``ranges`` inside [low, high), and how many offsets fell outside."""
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


def _join(ranges: list[OffsetRange], first: int, last: int) -> None:
    """Append [first, last] to ascending ``ranges``, merging with the last one if adjacent."""
    if ranges and ranges[-1][1] + 1 == first:
        ranges[-1] = (ranges[-1][0], last)
    else:
        ranges.append((first, last))


class SharePartition(ShareRuns):
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
        super().__init__()  # the stored records, as runs (an offset in none: never delivered)
        #: Lock deadlines as a min-heap of (expiry, first, last): one entry per range locked at
        #: once, so :meth:`expire` costs nothing until a lock is due. Entries go stale (the
        #: records were acknowledged, released or renewed since): each is checked.
        self._locks: list[tuple[int, int, int]] = []

    # -- transitions -------------------------------------------------------------------------

    def reset(self, start_offset: int) -> None:
        """Start over at ``start_offset``: in-flight state and delivery counts are discarded."""
        self.spso = self.speo = start_offset
        self._runs.clear()
        self._firsts.clear()
        self._locks.clear()

    def expire(self, now_ms: int) -> tuple[OffsetRange, ...]:
        """Locks that elapsed by ``now_ms`` end their delivery attempt (in offset order);
        return them."""
        locks = self._locks
        if not locks or locks[0][0] > now_ms:
            self._advance()
            return ()
        due: list[OffsetRange] = []
        while locks and locks[0][0] <= now_ms:
            expiry, first, last = heapq.heappop(locks)
            for a, b, state in self._pieces(first, last)[2]:
                if state is not None and state[0] is _ACQUIRED and state[3] == expiry:
                    due.append((a, b))
        due.sort()
        expired: list[OffsetRange] = []
        for a, b in due:
            if expired and a <= expired[-1][1]:  # the same records under two entries
                if b <= expired[-1][1]:
                    continue
                a = expired[-1][1] + 1
            _join(expired, a, b)
            self._change(a, b, self._elapse)
        self._advance()
        return tuple(expired)

    def _elapse(self, first: int, last: int, state: State | None) -> State | None:
        assert state is not None and state[3] is not None
        return self._end_attempt(first, last, state, state[3])[0]

    def acquire(self, owner: Owner, ranges: Iterable[OffsetRange], lock_ms: int,
                now_ms: int) -> ShareResult:
        """Acquire the Available records of ``ranges``; the rest of the request is void."""
        granted: list[OffsetRange] = []
        inside, ignored = _clip(ranges, self.spso, self.spso + self.inflight_limit)
        expiry = now_ms + lock_ms
        for x, y in inside:
            i, j, pieces = self._pieces(x, y)
            out: list[Piece] = []
            for a, b, state in pieces:
                if state is not None and state[0] is _DEAD_LETTER:
                    out.append((a, b, (_ACQUIRED, state[1], owner, expiry, True, state[5],
                                       state[6] + 1)))
                elif state is not None and state[0] is not _AVAILABLE:
                    ignored += b - a + 1
                    out.append((a, b, state))
                    continue
                else:
                    count = (state[1] if state is not None else 0) + 1
                    out.append((a, b, (_ACQUIRED, count, owner, expiry, False, None, 0)))
                    if b + 1 > self.speo:
                        self.speo = b + 1
                _join(granted, a, b)
            self._write(i, j, x, y, out)
        for first, last in granted:
            heapq.heappush(self._locks, (expiry, first, last))
        return ShareResult(tuple(granted), ignored)

    def acknowledge(self, owner: Owner, ranges: Iterable[OffsetRange], kind: str,
                    now_ms: int) -> ShareResult:
        """Accept, release, reject, gap or dead-letter records ``owner`` holds under a live
        lock (a dead-letter duty takes only dead-lettered, gap and release; a delivery all
        but dead-lettered)."""
        done: list[OffsetRange] = []
        archived: list[OffsetRange] = []
        inside, ignored = _clip(ranges, self.spso, self.speo)
        for x, y in inside:
            i, j, pieces = self._pieces(x, y)
            out: list[Piece] = []
            for a, b, state in pieces:
                if not self._holds(owner, state, now_ms) or \
                        kind not in (_DUTY_ACKS if state[4] else _DELIVERY_ACKS):  # type: ignore[index]
                    ignored += b - a + 1
                    out.append((a, b, state))
                    continue
                assert state is not None
                _join(done, a, b)
                count = state[1]
                if state[4]:  # a duty
                    if kind == "release":
                        out.append((a, b, (_DEAD_LETTER, count, None, None, False, state[5],
                                           state[6])))
                    else:
                        out.append((a, b, (_ARCHIVED, count, None, None, False, None, 0)))
                elif kind == "accept":
                    out.append((a, b, (_ACKNOWLEDGED, count, None, None, False, None, 0)))
                elif kind == "gap":  # no record there: done, and the acquisition was no delivery
                    out.append((a, b, (_ARCHIVED, count - 1, None, None, False, None, 0)))
                elif kind == "reject":
                    out.append((a, b, (_ARCHIVED, count, None, None, False, None, 0)))
                    _join(archived, a, b)
                else:
                    new, exhausted = self._end_attempt(a, b, state, now_ms)
                    out.append((a, b, new))
                    if exhausted:
                        _join(archived, a, b)
            self._write(i, j, x, y, out)
        self._advance()
        return ShareResult(tuple(done), ignored, tuple(archived))

    def renew(self, owner: Owner, ranges: Iterable[OffsetRange], lock_ms: int,
              now_ms: int) -> ShareResult:
        """Extend ``owner``'s live locks on ``ranges`` to ``now_ms + lock_ms``."""
        renewed: list[OffsetRange] = []
        inside, ignored = _clip(ranges, self.spso, self.speo)
        expiry = now_ms + lock_ms
        for x, y in inside:
            i, j, pieces = self._pieces(x, y)
            out: list[Piece] = []
            for a, b, state in pieces:
                if not self._holds(owner, state, now_ms):
                    ignored += b - a + 1
                    out.append((a, b, state))
                    continue
                assert state is not None
                out.append((a, b, (state[0], state[1], state[2], expiry, *state[4:])))
                _join(renewed, a, b)
            self._write(i, j, x, y, out)
        for first, last in renewed:
            heapq.heappush(self._locks, (expiry, first, last))
        return ShareResult(tuple(renewed), ignored)

    @staticmethod
    def _holds(owner: Owner, state: State | None, now_ms: int) -> bool:
        """Does ``owner`` hold records in ``state`` under a live lock at ``now_ms``?"""
        return (state is not None and state[0] is _ACQUIRED and state[2] == owner
                and state[3] is not None and state[3] > now_ms)

    def _end_attempt(self, first: int, last: int, state: State,
                     now_ms: int) -> tuple[State, bool]:
        """Release (at ``now_ms``) or lock expiry (``now_ms``: the lock's expiry) of records
        [first, last] in ``state``: Available again; at the limit, Dead-letter (when the
        share-partition dead-letters) or Archived (True). A duty ends Dead-letter again."""
        count = state[1]
        if state[4]:
            return (_DEAD_LETTER, count, None, None, False, state[5], state[6]), False
        if count >= self.delivery_limit:
            self.exhausted.extend(range(first, last + 1))
            if self.dead_letter_topic:
                return (_DEAD_LETTER, count, None, None, False, now_ms, state[6]), True
            return (_ARCHIVED, count, None, None, False, None, 0), True
        return (_AVAILABLE, count, None, None, False, None, 0), False

    def _advance(self) -> None:
        runs = self._runs
        while self.spso < self.speo:
            i = bisect_right(self._firsts, self.spso) - 1
            if i < 0 or runs[i][1] < self.spso or runs[i][2] not in _DONE:
                break
            end = min(runs[i][1], self.speo - 1)
            self._write(i, i + 1, self.spso, end, [(self.spso, end, None)])
            self.spso = end + 1

    # -- checkpoints -------------------------------------------------------------------------
    # (what to store comes from ShareRuns.stored_records)

    @classmethod
    def restored(cls, spso: int, speo: int, delivery_limit: int, inflight_limit: int,
                 records: Iterable[InFlightRecord],
                 dead_letter_topic: str = "") -> SharePartition:
        """A share-partition in exactly the state :meth:`stored_records` described."""
        share = cls(spso, delivery_limit, inflight_limit, dead_letter_topic)
        share.speo = speo
        share._load(records)
        locked: dict[int, list[OffsetRange]] = {}
        for run in share._runs:
            if run[2] is _ACQUIRED and run[5] is not None:
                _join(locked.setdefault(run[5], []), run[0], run[1])
        for expiry_ms, ranges in sorted(locked.items()):
            for first, last in ranges:
                heapq.heappush(share._locks, (expiry_ms, first, last))
        return share

    # -- views -------------------------------------------------------------------------------

    def _window(self, now_ms: int | None) -> list[tuple[int, int, InFlightRecord]]:
        """[SPSO, SPEO) as runs of one view each: (first, last, view of ``first``)."""
        return self.runs_between(self.spso, self.speo - 1, now_ms)

    def runs_between(self, first: int, last: int,
                     now_ms: int | None = None) -> list[tuple[int, int, InFlightRecord]]:
        """The records of [first, last] from the SPSO on, as runs of one view each: (first,
        last, view of the run's first offset), in offset order. Offsets at or past the SPEO
        are Available, never delivered. With ``now_ms``, locks elapsed by then are shown as
        in :meth:`in_flight`. Costs a few operations per run, not per offset."""
        out: list[tuple[int, int, InFlightRecord]] = []
        first = max(first, self.spso)
        if first > last:
            return out
        for a, b, state in self._pieces(first, last)[2]:
            view = (InFlightRecord(a, _AVAILABLE, 0, None, None) if state is None
                    else InFlightRecord(a, *state))
            if (now_ms is not None and view.state is _ACQUIRED
                    and view.lock_expiry_ms is not None and view.lock_expiry_ms <= now_ms):
                view = self._elapsed_view(view)
            out.append((a, b, view))
        return out

    def in_flight(self, now_ms: int | None = None) -> list[InFlightRecord]:
        """Every record in [SPSO, SPEO), in offset order; with ``now_ms``, locks elapsed by
        then are shown as they will be once the next record applies them."""
        out: list[InFlightRecord] = []
        for a, b, view in self._window(now_ms):
            rest = (view.state, view.delivery_count, view.holder, view.lock_expiry_ms, view.duty,
                    view.owed_since_ms, view.duties)
            out += [InFlightRecord(offset, *rest) for offset in range(a, b + 1)]
        return out

    def _elapsed_view(self, view: InFlightRecord) -> InFlightRecord:
        """What an Acquired record whose lock elapsed becomes."""
        if view.duty:
            return InFlightRecord(view.offset, _DEAD_LETTER, view.delivery_count, None, None,
                                  False, view.owed_since_ms, view.duties)
        if view.delivery_count < self.delivery_limit:
            return InFlightRecord(view.offset, _AVAILABLE, view.delivery_count, None, None)
        if self.dead_letter_topic:
            return InFlightRecord(view.offset, _DEAD_LETTER, view.delivery_count, None, None,
                                  False, view.lock_expiry_ms, view.duties)
        return InFlightRecord(view.offset, _ARCHIVED, view.delivery_count, None, None)

    def record(self, offset: int) -> InFlightRecord:
        """One record's state (Archived below the SPSO, Available from the SPEO on)."""
        if offset < self.spso:
            return InFlightRecord(offset, _ARCHIVED, 0, None, None)
        state = self._state_at(offset)
        if state is None:
            return InFlightRecord(offset, _AVAILABLE, 0, None, None)
        return InFlightRecord(offset, *state)

    def counts(self, now_ms: int | None = None) -> dict[RecordState, int]:
        """How many in-flight records are in each state."""
        counts = dict.fromkeys(RecordState, 0)
        for a, b, view in self._window(now_ms):
            counts[view.state] += b - a + 1
        return counts
