"""The key-shared partition state machine, and the sticky assignment of key-hash slots. Pure.

In key-shared mode several members consume one partition: the 64-bit hash space of record
keys is cut into :data:`~marshal_py.protocol.messages.KEY_SLOTS` equal slots, and each slot
has at most one owner and its own committed offset (every record of the slot below it was
processed). A slot changes owner only when its owner releases it (after committing what it
handed out) or goes stale, so no key is ever processed by two members at once.

Time is the broker timestamp of the record being applied, or a query's ``now_ms``.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from marshal_py.protocol.messages import KEY_SLOTS
from marshal_py.protocol.ranges import OffsetRange
from marshal_py.world.state import Owner


@dataclass(frozen=True, slots=True)
class SlotRun:
    """Consecutive slots with one owner and one committed offset, as seen at some time."""

    first: int
    last: int
    owner: Owner | None
    committed: int | None


class KeySharedResult(NamedTuple):
    """What one key-shared message did: the slots it applied to, and how many it could not."""

    applied: tuple[OffsetRange, ...]
    ignored: int


#: Heartbeats kept in an owner's stack before they are written into its runs.
_MAX_STACK = 64

#: A run of slots: (first, last, owner, committed offset as stored, heartbeats applied when
#: it was stored); see :class:`KeySharedPartition` for how the offset is read.
_Run = tuple[int, int, "Owner | None", "int | None", int]


def _join(ranges: list[OffsetRange], first: int, last: int) -> None:
    if ranges and ranges[-1][1] + 1 == first:
        ranges[-1] = (ranges[-1][0], last)
    else:
        ranges.append((first, last))


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

    The slots are kept as runs of one owner and one committed offset (what :meth:`runs`
    shows), indexed by owner, so a claim or release costs a few operations per run it
    touches, whatever the number of slots and members.

    A heartbeat touches no run: it is recorded as the owner's (number, offset) in a stack
    whose offsets fall from bottom to top (a new heartbeat first pops those at or below its
    offset), and each run carries the number of heartbeats applied when its committed offset
    was last written. A run's committed offset is the stored one raised to the highest offset
    its owner heartbeated since then: the first stack entry numbered above the run's (the
    stack keeps, for every suffix of the owner's heartbeats, its highest offset). So a
    heartbeat costs O(1) amortised and reading a run O(log) in its owner's stack (one entry
    while offsets only grow).
    """

    def __init__(self) -> None:
        self._runs: list[_Run] = [(0, KEY_SLOTS - 1, None, None, 0)]
        self._firsts: list[int] = [0]
        #: Each owner's slot count and the first slots of its runs (the inverse of ``_runs``).
        self._count: dict[Owner, int] = {}
        self._runs_of: dict[Owner, set[int]] = {}
        #: Heartbeats applied so far (numbers them), and each owner's stack of heartbeats
        #: (numbers rising, offsets falling) since it held slots.
        self._beats = 0
        self._stack: dict[Owner, tuple[list[int], list[int]]] = {}
        #: Broker time of each owner's last applied claim or heartbeat about this partition.
        self.last_seen: dict[Owner, int] = {}
        #: The heartbeat interval each owner announced (as a member of the group) when it
        #: last claimed or heartbeated; owners without one are judged by the reader's
        #: configured interval.
        self.intervals: dict[Owner, int] = {}

    # -- runs -----------------------------------------------------------------------------------

    def _index(self, slot: int) -> int:
        return bisect_right(self._firsts, slot) - 1

    def _committed(self, run: _Run) -> int | None:
        """The run's committed offset: the stored one raised by its owner's later beats."""
        committed, owner = run[3], run[2]
        if owner is None:
            return committed
        stack = self._stack.get(owner)
        if stack is None:
            return committed
        numbers, offsets = stack
        k = bisect_right(numbers, run[4])
        if k == len(numbers):
            return committed
        beat = offsets[k]
        return beat if committed is None or beat > committed else committed

    def _pieces(self, x: int, y: int) -> tuple[int, int, list[_Run]]:
        """[x, y] cut where runs begin and end (committed offsets read), and the slice of
        ``_runs`` overlapping it."""
        runs = self._runs
        i = j = self._index(x)
        pieces: list[_Run] = []
        at, now = x, self._beats
        while at <= y:
            run = runs[j]
            end = run[1] if run[1] < y else y
            pieces.append((at, end, run[2], self._committed(run), now))
            at = end + 1
            j += 1
        return i, j, pieces

    def _write(self, i: int, j: int, pieces: list[_Run]) -> list[Owner]:
        """Replace ``_runs[i:j]`` by the runs that keep what they held outside ``pieces`` and
        ``pieces``; merge equal neighbours; return the owners left without slots."""
        runs = self._runs
        x, y = pieces[0][0], pieces[-1][1]
        new: list[_Run] = []
        if runs[i][0] < x:
            new.append((runs[i][0], x - 1, *runs[i][2:]))
        new += pieces
        if runs[j - 1][1] > y:
            new.append((y + 1, *runs[j - 1][1:]))
        if i > 0:
            i -= 1
            new.insert(0, runs[i])
        if j < len(runs):
            new.append(runs[j])
            j += 1
        merged: list[_Run] = []
        now = self._beats
        last_committed: int | None = None
        for run in new:
            committed = self._committed(run)
            if merged and merged[-1][2] == run[2] and last_committed == committed:
                merged[-1] = (merged[-1][0], run[1], run[2], committed, now)
            else:
                merged.append(run)
            last_committed = committed
        count, runs_of = self._count, self._runs_of
        touched: set[Owner] = set()
        for first, last, owner, _, _ in runs[i:j]:
            if owner is not None:
                count[owner] -= last - first + 1
                runs_of[owner].discard(first)
                touched.add(owner)
        for first, last, owner, _, _ in merged:
            if owner is not None:
                count[owner] = count.get(owner, 0) + last - first + 1
                runs_of.setdefault(owner, set()).add(first)
        runs[i:j] = merged
        self._firsts[i:j] = [run[0] for run in merged]
        gone = [owner for owner in touched if not count[owner]]
        for owner in gone:
            del count[owner], runs_of[owner]
        return gone

    def _forget(self, owners: list[Owner]) -> None:
        """Owners left without slots are forgotten (their times, intervals and beats)."""
        for owner in owners:
            self.last_seen.pop(owner, None)
            self.intervals.pop(owner, None)
            self._stack.pop(owner, None)

    # -- transitions -------------------------------------------------------------------------

    def claim(self, sender: Owner, slots: Iterable[OffsetRange], ts: int,
              heartbeat_interval_ms: int, sender_interval_ms: int | None = None,
              ) -> KeySharedResult:
        """Take the free slots of ``slots`` for ``sender``. A slot's owner is judged by the
        interval it announced, else ``heartbeat_interval_ms``; ``sender_interval_ms`` is the
        one the sender announced (None: none)."""
        granted: list[OffsetRange] = []
        ignored = 0
        gone: list[Owner] = []
        for x, y in slots:
            i, j, pieces = self._pieces(x, y)
            out: list[_Run] = []
            for a, b, owner, committed, now in pieces:
                if (owner is None or owner == sender or owner.client_id == sender.client_id
                        or not self._live(owner, ts, heartbeat_interval_ms)):
                    out.append((a, b, sender, committed, now))
                    _join(granted, a, b)
                else:
                    out.append((a, b, owner, committed, now))
                    ignored += b - a + 1
            gone += self._write(i, j, out)
        if granted:
            self._seen(sender, ts, sender_interval_ms)
        self._forget(gone)
        return KeySharedResult(tuple(granted), ignored)

    def _seen(self, sender: Owner, ts: int, interval_ms: int | None) -> None:
        self.last_seen[sender] = ts
        if interval_ms is not None:
            self.intervals[sender] = interval_ms

    def beat(self, sender: Owner, offset: int, ts: int,
             sender_interval_ms: int | None = None) -> bool:
        """Commit ``offset`` for every slot ``sender`` owns; False (and nothing changes) when
        it owns none. O(1) amortised, whatever the number of runs the sender owns."""
        if sender not in self._count:
            return False
        self._beats += 1
        stack = self._stack.get(sender)
        if stack is None:
            stack = self._stack[sender] = ([], [])
        numbers, offsets = stack
        while offsets and offsets[-1] <= offset:
            numbers.pop()
            offsets.pop()
        numbers.append(self._beats)
        offsets.append(offset)
        if len(numbers) > _MAX_STACK:
            self._settle(sender)
        self._seen(sender, ts, sender_interval_ms)
        return True

    def _settle(self, owner: Owner) -> None:
        """Write the owner's committed offsets into its runs and empty its stack (which only
        grows while its heartbeats' offsets fall)."""
        runs, now = self._runs, self._beats
        for first in self._runs_of[owner]:
            i = self._index(first)
            run = runs[i]
            runs[i] = (run[0], run[1], owner, self._committed(run), now)
        del self._stack[owner]

    def heartbeat(self, sender: Owner, offset: int, ts: int,
                  sender_interval_ms: int | None = None) -> KeySharedResult:
        """Commit ``offset`` for every slot ``sender`` owns (:meth:`beat`), with the slots it
        applied to."""
        if not self.beat(sender, offset, ts, sender_interval_ms):
            return KeySharedResult((), 0)
        return KeySharedResult(self.slots_of(sender), 0)

    def release(self, sender: Owner, slots: Iterable[OffsetRange],
                offset: int) -> KeySharedResult:
        """Give up the slots of ``slots`` that ``sender`` owns, committed up to ``offset``."""
        released: list[OffsetRange] = []
        ignored = 0
        gone: list[Owner] = []
        for x, y in slots:
            i, j, pieces = self._pieces(x, y)
            out: list[_Run] = []
            for a, b, owner, committed, now in pieces:
                if owner != sender:
                    out.append((a, b, owner, committed, now))
                    ignored += b - a + 1
                    continue
                out.append((a, b, None,
                            offset if committed is None or offset > committed else committed,
                            now))
                _join(released, a, b)
            gone += self._write(i, j, out)
        self._forget(gone)
        return KeySharedResult(tuple(released), ignored)

    def reset(self, offset: int) -> None:
        """An empty group's offsets were reset: every slot unowned, committed at ``offset``."""
        self._runs = [(0, KEY_SLOTS - 1, None, offset, self._beats)]
        self._firsts = [0]
        self._count.clear()
        self._runs_of.clear()
        self._stack.clear()
        self.last_seen.clear()
        self.intervals.clear()

    def _live(self, owner: Owner, now_ms: int, heartbeat_interval_ms: int) -> bool:
        seen = self.last_seen.get(owner)
        return seen is not None and now_ms - seen <= 2 * self.intervals.get(
            owner, heartbeat_interval_ms)

    # -- views -------------------------------------------------------------------------------

    def _slot_runs(self) -> list[tuple[int, int, Owner | None, int | None]]:
        """The runs with their committed offsets read, equal neighbours merged."""
        out: list[tuple[int, int, Owner | None, int | None]] = []
        for run in self._runs:
            committed = self._committed(run)
            if out and out[-1][2] == run[2] and out[-1][3] == committed:
                out[-1] = (out[-1][0], run[1], run[2], committed)
            else:
                out.append((run[0], run[1], run[2], committed))
        return out

    def owner(self, slot: int) -> Owner | None:
        """The slot's owner in the log (live or not)."""
        return self._runs[self._index(slot)][2]

    def committed(self, slot: int) -> int | None:
        """The slot's committed offset (next offset to process), or None if never committed."""
        return self._committed(self._runs[self._index(slot)])

    def owners(self) -> list[Owner | None]:
        """Owner of every slot, indexed by slot (a copy)."""
        out: list[Owner | None] = []
        for first, last, owner, _, _ in self._runs:
            out += [owner] * (last - first + 1)
        return out

    def committed_offsets(self) -> list[int | None]:
        """Committed offset of every slot, indexed by slot (a copy)."""
        out: list[int | None] = []
        for first, last, _, committed in self._slot_runs():
            out += [committed] * (last - first + 1)
        return out

    def live_owners(self, now_ms: int, heartbeat_interval_ms: int) -> list[Owner | None]:
        """Owner of every slot, None where the owner is stale at ``now_ms`` (judged by the
        interval it announced, else ``heartbeat_interval_ms``)."""
        live = {o: self._live(o, now_ms, heartbeat_interval_ms) for o in self._count}
        out: list[Owner | None] = []
        for first, last, owner, _, _ in self._runs:
            out += [owner if owner is not None and live[owner] else None] * (last - first + 1)
        return out

    def slots_of(self, owner: Owner) -> tuple[OffsetRange, ...]:
        """The slots ``owner`` holds, as ranges."""
        out: list[OffsetRange] = []
        for first in sorted(self._runs_of.get(owner, ())):
            run = self._runs[self._index(first)]
            _join(out, run[0], run[1])
        return tuple(out)

    def runs(self) -> list[SlotRun]:
        """The slots as runs of one owner and one committed offset, in slot order."""
        return [SlotRun(*run) for run in self._slot_runs()]

    def lowest_committed(self) -> int | None:
        """The lowest committed offset over all slots (None if some slot never committed)."""
        offsets = [self._committed(run) for run in self._runs]
        if any(c is None for c in offsets):
            return None
        return min(c for c in offsets if c is not None)

    # -- checkpoints -------------------------------------------------------------------------

    def restore(self, owners: Sequence[Owner | None], committed: Sequence[int | None],
                last_seen: dict[Owner, int], intervals: dict[Owner, int] | None = None,
                ) -> None:
        """Replace the whole state (a checkpoint's content)."""
        if len(owners) != KEY_SLOTS or len(committed) != KEY_SLOTS:
            raise ValueError(f"a key-shared partition has {KEY_SLOTS} slots")
        runs: list[_Run] = []
        now = self._beats
        for slot, (owner, offset) in enumerate(zip(owners, committed, strict=True)):
            if runs and runs[-1][2] == owner and runs[-1][3] == offset:
                runs[-1] = (runs[-1][0], slot, owner, offset, now)
            else:
                runs.append((slot, slot, owner, offset, now))
        self._runs = runs
        self._firsts = [run[0] for run in runs]
        self._count, self._runs_of = {}, {}
        self._stack.clear()
        for first, last, owner, _, _ in runs:
            if owner is not None:
                self._count[owner] = self._count.get(owner, 0) + last - first + 1
                self._runs_of.setdefault(owner, set()).add(first)
        self.last_seen = {o: ts for o, ts in last_seen.items() if o in self._count}
        self.intervals = {o: iv for o, iv in (intervals or {}).items() if o in self._count}


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
