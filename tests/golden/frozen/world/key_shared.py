"""The key-shared partition state machine, and the sticky assignment of key-hash slots. Pure.

In key-shared mode several members consume one partition: the 64-bit hash space of record
keys is cut into :data:`~tests.golden.frozen.protocol.messages.KEY_SLOTS` equal slots, and each slot
has at most one owner and its own committed offset (every record of the slot below it was
processed). A slot changes owner only when its owner releases it (after committing what it
handed out) or goes stale, so no key is ever processed by two members at once.

Time is the broker timestamp of the record being applied, or a query's ``now_ms``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tests.golden.frozen.protocol.messages import KEY_SLOTS
from tests.golden.frozen.protocol.ranges import OffsetRange, offsets_in, ranges_of
from tests.golden.frozen.world.state import Owner


@dataclass(frozen=True, slots=True)
class SlotRun:
    """Consecutive slots with one owner and one committed offset, as seen at some time."""

    first: int
    last: int
    owner: Owner | None
    committed: int | None


@dataclass(frozen=True, slots=True)
class KeySharedResult:
    """What one key-shared message did: the slots it applied to, and how many it could not."""

    applied: tuple[OffsetRange, ...]
    ignored: int


class KeySharedPartition:
    """Slot ownership and per-slot committed offsets of one partition in one group.

    Rules (PROTOCOL.md, key-shared mode):

    * A claim takes each named slot that is unowned, owned by a member whose last sign of life
      about this partition is more than 2 HI old, or owned by another process of the sender's
      client id (a restart); other slots of the claim are void.
    * A heartbeat from a member owning at least one slot raises the committed offset of each
      of its slots to the heartbeat's offset (never lowers it) and proves it alive.
    * A release gives the named slots the sender owns up, raising their committed offset to
      the release's offset.
    """

    def __init__(self) -> None:
        self._owner: list[Owner | None] = [None] * KEY_SLOTS
        self._committed: list[int | None] = [None] * KEY_SLOTS
        #: The slots of each owner: the index that keeps a heartbeat O(its slots), not
        #: O(KEY_SLOTS) owner comparisons. Always the inverse of ``_owner``.
        self._slots: dict[Owner, set[int]] = {}
        #: Broker time of each owner's last applied claim or heartbeat about this partition.
        self.last_seen: dict[Owner, int] = {}
        #: The heartbeat interval each owner announced (as a member of the group) when it
        #: last claimed or heartbeated; owners without one are judged by the reader's
        #: configured interval.
        self.intervals: dict[Owner, int] = {}

    # -- transitions -------------------------------------------------------------------------

    def claim(self, sender: Owner, slots: Iterable[OffsetRange], ts: int,
              heartbeat_interval_ms: int, sender_interval_ms: int | None = None,
              ) -> KeySharedResult:
        """Take the free slots of ``slots`` for ``sender``. A slot's owner is judged by the
        interval it announced, else ``heartbeat_interval_ms``; ``sender_interval_ms`` is the
        one the sender announced (None: none)."""
        granted: list[int] = []
        ignored = 0
        for slot in offsets_in(slots):
            owner = self._owner[slot]
            if (owner is None or owner == sender or owner.client_id == sender.client_id
                    or not self._live(owner, ts, heartbeat_interval_ms)):
                self._assign(slot, sender)
                granted.append(slot)
            else:
                ignored += 1
        if granted:
            self._seen(sender, ts, sender_interval_ms)
        self._forget_owners_without_slots()
        return KeySharedResult(ranges_of(granted), ignored)

    def _seen(self, sender: Owner, ts: int, interval_ms: int | None) -> None:
        self.last_seen[sender] = ts
        if interval_ms is not None:
            self.intervals[sender] = interval_ms

    def heartbeat(self, sender: Owner, offset: int, ts: int,
                  sender_interval_ms: int | None = None) -> KeySharedResult:
        """Commit ``offset`` for every slot ``sender`` owns."""
        mine = sorted(self._slots.get(sender, ()))
        if not mine:
            return KeySharedResult((), 0)
        for slot in mine:
            committed = self._committed[slot]
            if committed is None or offset > committed:
                self._committed[slot] = offset
        self._seen(sender, ts, sender_interval_ms)
        return KeySharedResult(ranges_of(mine), 0)

    def release(self, sender: Owner, slots: Iterable[OffsetRange],
                offset: int) -> KeySharedResult:
        """Give up the slots of ``slots`` that ``sender`` owns, committed up to ``offset``."""
        released: list[int] = []
        ignored = 0
        for slot in offsets_in(slots):
            if self._owner[slot] != sender:
                ignored += 1
                continue
            self._assign(slot, None)
            committed = self._committed[slot]
            if committed is None or offset > committed:
                self._committed[slot] = offset
            released.append(slot)
        self._forget_owners_without_slots()
        return KeySharedResult(ranges_of(released), ignored)

    def reset(self, offset: int) -> None:
        """An empty group's offsets were reset: every slot unowned, committed at ``offset``."""
        self._owner = [None] * KEY_SLOTS
        self._committed = [offset] * KEY_SLOTS
        self._slots.clear()
        self.last_seen.clear()
        self.intervals.clear()

    def _assign(self, slot: int, owner: Owner | None) -> None:
        previous = self._owner[slot]
        if previous is not None:
            self._slots[previous].discard(slot)
        self._owner[slot] = owner
        if owner is not None:
            self._slots.setdefault(owner, set()).add(slot)

    def _live(self, owner: Owner, now_ms: int, heartbeat_interval_ms: int) -> bool:
        seen = self.last_seen.get(owner)
        return seen is not None and now_ms - seen <= 2 * self.intervals.get(
            owner, heartbeat_interval_ms)

    def _forget_owners_without_slots(self) -> None:
        for owner in [o for o, slots in self._slots.items() if not slots]:
            del self._slots[owner]
        for owner in [o for o in self.last_seen if o not in self._slots]:
            del self.last_seen[owner]
        for owner in [o for o in self.intervals if o not in self._slots]:
            del self.intervals[owner]

    # -- views -------------------------------------------------------------------------------

    def owner(self, slot: int) -> Owner | None:
        """The slot's owner in the log (live or not)."""
        return self._owner[slot]

    def committed(self, slot: int) -> int | None:
        """The slot's committed offset (next offset to process), or None if never committed."""
        return self._committed[slot]

    def owners(self) -> list[Owner | None]:
        """Owner of every slot, indexed by slot (a copy)."""
        return list(self._owner)

    def committed_offsets(self) -> list[int | None]:
        """Committed offset of every slot, indexed by slot (a copy)."""
        return list(self._committed)

    def live_owners(self, now_ms: int, heartbeat_interval_ms: int) -> list[Owner | None]:
        """Owner of every slot, None where the owner is stale at ``now_ms`` (judged by the
        interval it announced, else ``heartbeat_interval_ms``)."""
        out = list(self._owner)
        for owner, slots in self._slots.items():
            if not self._live(owner, now_ms, heartbeat_interval_ms):
                for slot in slots:
                    out[slot] = None
        return out

    def slots_of(self, owner: Owner) -> tuple[OffsetRange, ...]:
        """The slots ``owner`` holds, as ranges."""
        return ranges_of(sorted(self._slots.get(owner, ())))

    def runs(self) -> list[SlotRun]:
        """The slots as runs of one owner and one committed offset, in slot order."""
        out: list[SlotRun] = []
        start = 0
        for slot in range(1, KEY_SLOTS + 1):
            if (slot == KEY_SLOTS or self._owner[slot] != self._owner[start]
                    or self._committed[slot] != self._committed[start]):
                out.append(SlotRun(start, slot - 1, self._owner[start], self._committed[start]))
                start = slot
        return out

    def lowest_committed(self) -> int | None:
        """The lowest committed offset over all slots (None if some slot never committed)."""
        if any(c is None for c in self._committed):
            return None
        return min(c for c in self._committed if c is not None)

    # -- checkpoints -------------------------------------------------------------------------

    def restore(self, owners: Sequence[Owner | None], committed: Sequence[int | None],
                last_seen: dict[Owner, int], intervals: dict[Owner, int] | None = None,
                ) -> None:
        """Replace the whole state (a checkpoint's content)."""
        if len(owners) != KEY_SLOTS or len(committed) != KEY_SLOTS:
            raise ValueError(f"a key-shared partition has {KEY_SLOTS} slots")
        self._owner = list(owners)
        self._committed = list(committed)
        self._slots = {}
        for slot, owner in enumerate(self._owner):
            if owner is not None:
                self._slots.setdefault(owner, set()).add(slot)
        self.last_seen = dict(last_seen)
        self.intervals = dict(intervals or {})
        self._forget_owners_without_slots()


def sticky_assignment(owners: Sequence[Owner | None], members: Sequence[Owner],
                      ) -> list[Owner | None]:
    """The target owner of every slot: a deterministic function of who owns what now and who
    is live, that moves as few slots as possible.

    ``owners``: the current owner of each slot, None where unowned or stale. ``members``: the
    live members (several processes of one client id count as the newest one only; pass them
    already reduced). Each member's quota is ``KEY_SLOTS // n``, the first ``KEY_SLOTS % n``
    members (by client id) one more. A member keeps its lowest slots up to its quota; the
    slots left over go, lowest first, to the members below quota in client-id order, so each
    newcomer gets few, long runs.
    """
    ordered = sorted(set(members), key=lambda m: (m.client_id, m.instance_id))
    if not ordered:
        return [None] * len(owners)
    by_client = {m.client_id: m for m in ordered}
    base, extra = divmod(len(owners), len(ordered))
    quota = {m: base + (1 if i < extra else 0) for i, m in enumerate(ordered)}
    target: list[Owner | None] = [None] * len(owners)
    kept = dict.fromkeys(ordered, 0)
    for slot, owner in enumerate(owners):
        member = by_client.get(owner.client_id) if owner is not None else None
        if member is not None and kept[member] < quota[member]:
            target[slot] = member
            kept[member] += 1
    needy = iter([(m, quota[m] - kept[m]) for m in ordered if kept[m] < quota[m]])
    current, room = next(needy, (None, 0))
    for slot in range(len(owners)):
        if target[slot] is not None:
            continue
        while current is not None and room == 0:
            current, room = next(needy, (None, 0))
        target[slot] = current
        room -= 1
    return target
