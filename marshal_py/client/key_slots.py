"""A key-shared member's slots of one partition: what it owns, hands out, and has handed out
and not yet seen committed (:class:`SlotHolding`), and the member's counters. The rules are
in :mod:`marshal_py.client.key_shared_engine`'s docstring; the engine decides claims and
releases, a holding keeps the cursors."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from marshal_py.world import Owner

TP = tuple[str, int]


@dataclass
class KeySharedStats:
    """Counters a caller can show or assert on."""

    claims: int = 0
    slots_proposed: int = 0
    slots_won: int = 0
    slots_released: int = 0
    slots_lost: int = 0
    heartbeats: int = 0
    heartbeat_failures: int = 0
    delivered: int = 0
    #: Records offered by the caller that were not this member's to hand out (other slots,
    #: or already past the slot's cursor): the price of every member reading the partition.
    skipped: int = 0
    seeks: int = 0


@dataclass
class SlotHolding:
    """This member's slots of one partition and its delivery cursors there."""

    topic: str
    partition: int
    #: Slots this member owns in the log (as last read), including those being released.
    owned: set[int] = field(default_factory=set)
    #: Owned slots whose records are handed out (not being released).
    active: set[int] = field(default_factory=set)
    #: n[s]: the next offset of slot s to hand out, for every owned slot. For an active slot
    #: the effective cursor is max(n[s], scan): the scan passed every record below it.
    cursor: dict[int, int] = field(default_factory=dict)
    #: Next offset the caller will offer in this fetch epoch (None while nothing is active).
    scan: int | None = None
    epoch: int = 0
    #: Handed out, not yet committed: offset -> slot.
    outstanding: dict[int, int] = field(default_factory=dict)
    #: Micro-batch members: ranges handed out at once, not yet committed: start offset ->
    #: the slots whose records they deliver (each counted once in ``per_slot``).
    batches: dict[int, set[int]] = field(default_factory=dict)
    per_slot: Counter[int] = field(default_factory=Counter)
    #: Broker time of our last claim or heartbeat seen applied in the log, plus one HI.
    lease_until_ms: int = 0
    next_heartbeat_ms: int = 0
    last_renewal_ms: int = 0
    #: The last sticky assignment and its inputs (live owners, members).
    target_inputs: tuple[list[Owner | None], list[Owner]] | None = None
    target: list[Owner | None] = field(default_factory=list)

    def effective(self, slot: int) -> int:
        """The slot's next offset to hand out, counting what the scan passed over."""
        n = self.cursor[slot]
        if slot in self.active and self.scan is not None and self.scan > n:
            return self.scan
        return n

    def materialize(self, upto: int | None = None) -> None:
        """Fold the scan position (or ``upto``) into the cursors of the active slots."""
        position = self.scan if upto is None else upto
        if position is None:
            return
        for slot in self.active:
            if self.cursor[slot] < position:
                self.cursor[slot] = position

    def commit_floor(self) -> int | None:
        """W: the offset a heartbeat commits for every owned slot (None when none owned).

        The lowest of the uncommitted handed-out offsets and of the slots' cursors: a slot
        won while records of other slots are in processing may start below all of them.
        """
        if not self.owned:
            return None
        floor = min(self.effective(s) for s in self.owned)
        if self.outstanding:
            floor = min(floor, min(self.outstanding))
        if self.batches:
            floor = min(floor, min(self.batches))
        return floor

    def drop(self, slots: Iterable[int]) -> None:
        """Forget slots no longer owned (released or lost) and their uncommitted records."""
        gone = set(slots)
        if not gone:
            return
        self.owned -= gone
        self.active -= gone
        for slot in gone:
            self.cursor.pop(slot, None)
            self.per_slot.pop(slot, None)
        for offset in [o for o, s in self.outstanding.items() if s in gone]:
            del self.outstanding[offset]
        for start, slots in list(self.batches.items()):
            slots -= gone
            if not slots:
                del self.batches[start]

    # -- handing out (the engine calls these with the time and its counters) ---------------

    def deliver(self, epoch: int, offset: int, slot: int, now_ms: int,
                stats: KeySharedStats) -> bool:
        """Offer a fetched record (in offset order) right before handing it out; True hands
        it out and advances its slot's cursor past it.

        False when it is not ours to hand out (another slot, a slot being released, already
        handed out), when it was fetched under an older epoch, or when the lease lapsed —
        then the epoch moves on and the partition is fetched again from this record.
        """
        if self.epoch != epoch or self.scan is None or offset < self.scan:
            return False
        if now_ms >= self.lease_until_ms:
            self.materialize(offset)
            self.scan = offset
            self.epoch += 1
            stats.seeks += 1
            return False
        self.scan = offset + 1
        if slot not in self.active or offset < self.cursor[slot]:
            stats.skipped += 1
            return False
        self.cursor[slot] = offset + 1
        self.outstanding[offset] = slot
        self.per_slot[slot] += 1
        stats.delivered += 1
        return True

    def passed(self, epoch: int, position: int, now_ms: int) -> None:
        """The fetch of ``epoch`` passed every offset below ``position`` after the records
        offered so far: those hold no record (transaction markers, aborted or compacted-away
        records), so the scan, and with it the committed offset, moves past them."""
        if (self.epoch != epoch or self.scan is None or position <= self.scan
                or now_ms >= self.lease_until_ms):
            return
        self.scan = position

    def commit(self, offset: int) -> bool:
        """Mark a handed-out record processed. False if it was not outstanding."""
        slot = self.outstanding.pop(offset, None)
        if slot is None:
            return False
        left = self.per_slot[slot] - 1
        if left:
            self.per_slot[slot] = left
        else:
            del self.per_slot[slot]
        return True

    def hand_out_range(self, end: int, now_ms: int
                       ) -> tuple[int, frozenset[int], dict[int, int]] | None:
        """Hand out at once every record of the active slots from the scan position up to
        ``end`` (exclusive), for a micro-batch whose workers read the range and keep the
        records of these slots. Returns (start, slots, starts): a slot in ``starts``
        delivers only from that offset on (records below it were handed out before). None
        when nothing may be handed out: no active slot, the lease lapsed, or nothing below
        ``end``. Until :meth:`commit_range`, the batch's slots are not released and the
        heartbeats commit no further than its start."""
        if (not self.active or self.scan is None or self.scan >= end
                or now_ms >= self.lease_until_ms):
            return None
        start = self.scan
        slots = frozenset(self.active)
        starts = {s: self.cursor[s] for s in slots if self.cursor[s] > start}
        for slot in slots:
            self.cursor[slot] = max(self.cursor[slot], end)
            self.per_slot[slot] += 1
        self.scan = end
        self.batches.setdefault(start, set()).update(slots)
        return start, slots, starts

    def commit_range(self, start: int) -> bool:
        """The micro-batch range handed out from ``start`` is processed. False if no such
        range is outstanding (its slots were lost meanwhile)."""
        slots = self.batches.pop(start, None)
        if slots is None:
            return False
        for slot in slots:
            left = self.per_slot[slot] - 1
            if left > 0:
                self.per_slot[slot] = left
            else:
                self.per_slot.pop(slot, None)
        return True
