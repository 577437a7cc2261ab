"""What the coordination side and the delivering side of an exclusive consumer share.

The engine (the coordination thread) and the thread that hands records to the application
meet in two small objects per held partition, so the delivering thread takes no lock on its
at-least-once path and does no coordination work per record:

* :class:`PartitionLease` — written by the engine, read by the delivering thread: the claim's
  epoch, where fetching starts, until when records may be handed out (``deadline``, on the
  engine's monotonic clock), and in at-most-once mode how far the log has confirmed the
  records (``amo_confirmed``). The delivering thread writes one field back,
  ``amo_wanted``: how far it would like the next confirmation to reach.
* :class:`CommitCursor` — written by the delivering thread, read by the engine: which records
  were handed out and which of them the application has committed. ``committed`` is one
  integer, always valid, that a heartbeat carries.

Each field has one writer and is replaced whole, so a reader on another thread sees either
the old or the new value (CPython's attribute stores are atomic), never a torn one.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from collections.abc import Sequence
from typing import Any

from marshal_py.client.fastpath import CursorCore

#: ``deadline`` of a lease that was taken away: no time is before it.
REVOKED = float("-inf")


def offset_of(item: Any) -> int:
    """The offset of a handed-out item: a record (``.offset``) or a bare offset (the
    engine's interface for simulations and micro-batch members passes offsets)."""
    return item if type(item) is int else int(item.offset)


class CommitCursor(CursorCore):
    """Handed-out and committed records of one held partition.

    Single writer: the thread that hands records out (it also takes the application's
    commits, as Kafka's consumers do). ``committed`` — the next offset to consume, Kafka's
    convention — is the oldest handed-out record not yet committed, or the fetch position
    when every handed-out record is committed; the engine reads it for heartbeats.

    Commits in order cost O(1) (two comparisons and two stores); commits out of order, and
    offsets that hold no record (compaction, transaction markers), take the slow path, which
    looks the handed-out batches up by binary search. The fields and the commit in order
    are :class:`~marshal_py.client.fastpath.CursorCore`'s (in C where it was built).
    """

    __slots__ = ("_batches",)

    def __init__(self, start: int) -> None:
        #: The oldest handed-out offset not committed yet (== ``end`` when all are).
        self.expect = start
        #: One past the last handed-out offset.
        self.end = start
        #: Where fetching continues after the last handed-out batch.
        self.position = start
        #: What a heartbeat carries.
        self.committed = start
        self._batches: deque[Sequence[Any]] = deque()
        self._done: set[int] = set()
        #: The lease is gone: commits take the slow path (the consumer's check).
        self.revoked = False

    # -- handing out ----------------------------------------------------------------------------

    def handed(self, batch: Sequence[Any], next_position: int) -> None:
        """``batch`` (records or offsets, in offset order) goes to the application; fetching
        continues at ``next_position``."""
        if not batch:
            self.position = max(self.position, next_position)
            if self.expect >= self.end:
                self.committed = self.position
            return
        batches = self._batches
        if self.expect >= self.end:
            batches.clear()
            self._done.clear()
            self.expect = offset_of(batch[0])
        else:
            while batches and offset_of(batches[0][-1]) < self.expect:
                batches.popleft()
        batches.append(batch)
        self.end = offset_of(batch[-1]) + 1
        self.position = max(self.end, next_position)
        self.committed = self.expect

    def handed_done(self, batch: Sequence[Any], next_position: int) -> None:
        """At-most-once: ``batch`` goes out and counts as done at once."""
        self.handed(batch, next_position)
        self.commit_through(self.end - 1)

    def rewind(self, offset: int) -> None:
        """Records from ``offset`` on were taken for handing out but never reached the
        application (the lease lapsed): forget them; fetching restarts at ``offset``."""
        offset = max(offset, min(self.expect, self.end))
        batches = self._batches
        while batches and offset_of(batches[-1][0]) >= offset:
            batches.pop()
        if batches and offset_of(batches[-1][-1]) >= offset:
            last = batches.pop()
            batches.append(last[:bisect_left(last, offset, key=offset_of)])
        self._done = {o for o in self._done if o < offset}
        self.end = min(self.end, offset)
        if batches and batches[-1]:
            self.end = min(self.end, offset_of(batches[-1][-1]) + 1)
        self.position = offset
        self.expect = min(self.expect, self.end)
        self._advance()  # ``expect`` may now stand on offsets that hold no record

    # -- committing -----------------------------------------------------------------------------

    # commit(offset), the application is done with the handed-out record at ``offset``: O(1)
    # in order (CursorCore), else the slow path below.

    def _commit_slow(self, offset: int) -> None:
        if offset < self.expect or offset >= self.end:
            return  # done already, or never handed out under this claim
        self._done.add(offset)
        self._advance()

    def commit_through(self, offset: int) -> None:
        """Everything handed out up to and including ``offset`` is done."""
        if offset < self.expect:
            return
        nxt = min(offset + 1, self.end)
        self.expect = nxt
        if self._done:
            self._done = {o for o in self._done if o >= nxt}
            self._advance()
        else:
            self.committed = nxt if nxt < self.end else self.position

    def _advance(self) -> None:
        """Move ``expect`` over committed records and offsets that hold no record."""
        done = self._done
        while True:
            nxt = self._next_handed(self.expect)
            if nxt is None:
                self.expect = self.end
                done.clear()
                break
            if nxt in done:
                done.discard(nxt)
                self.expect = nxt + 1
                continue
            self.expect = nxt
            break
        self.committed = self.expect if self.expect < self.end else self.position

    def _next_handed(self, offset: int) -> int | None:
        """The first handed-out offset at or after ``offset`` (None: none before ``end``)."""
        for batch in self._batches:
            if offset_of(batch[-1]) < offset:
                continue
            return offset_of(batch[bisect_left(batch, offset, key=offset_of)])
        return None

    @property
    def outstanding(self) -> bool:
        """True while some handed-out record is not committed."""
        return self.expect < self.end


class PartitionLease:
    """A held partition, as the engine grants it to the delivering thread.

    Written by the engine: ``deadline`` (monotonic milliseconds; records are handed out only
    before it; :data:`REVOKED` once the claim is gone), ``amo_confirmed`` (at-most-once:
    records up to this offset are confirmed in the log). Written by the delivering thread:
    ``amo_wanted`` (the offset it asks the next confirmation to reach) and the cursor.
    """

    __slots__ = (
        "amo_confirmed",
        "amo_wanted",
        "cursor",
        "deadline",
        "epoch",
        "partition",
        "start",
        "topic",
    )

    def __init__(self, topic: str, partition: int, epoch: int, start: int,
                 deadline: float) -> None:
        self.topic = topic
        self.partition = partition
        self.epoch = epoch
        #: Where fetching starts under this claim.
        self.start = start
        self.deadline = deadline
        self.amo_confirmed = start - 1
        self.amo_wanted = start - 1
        self.cursor = CommitCursor(start)

    @property
    def revoked(self) -> bool:
        """True once the claim is gone for good (lost, released, expired, closed)."""
        return self.deadline == REVOKED

    def revoke(self) -> None:
        """Nothing more may be handed out under this lease."""
        self.deadline = REVOKED
        self.cursor.revoked = True

    def __repr__(self) -> str:
        return (f"PartitionLease({self.topic}/{self.partition} epoch {self.epoch}, "
                f"start {self.start}, committed {self.cursor.committed})")
