"""An index of the claimable partitions of one (group, topic) pair. Pure.

A member below its fair share looks for partitions nobody holds: never claimed, released, or
claimed by an owner that went stale (no heartbeat for 2 HI). Walking every partition of the
topic for them costs O(P) per step, and while every partition is held (members waiting for
others to release their surplus) each step of each such member walks all of them. The index
answers in time independent of P:

- ``free``: the partitions that had an owner and have none now (released, or reset by an
  administrator), sorted. Ownership changes only by a claim won or reclaimed, a release or a
  reset, and the rules tell the index at each (:meth:`ClaimIndex.owned`,
  :meth:`ClaimIndex.freed`).
- a min-heap of (deadline, partition) of the owned partitions, where the deadline is a lower
  bound of the last broker time the claim is held: its last heartbeat + 2 x the smallest
  interval a claim of the pair can be judged by (``min_interval``; in a group whose members
  all announce the same interval, the true deadline). Heartbeats only move a claim's time
  forward, so the heap is re-armed lazily: when an entry comes due, the claim's last
  heartbeat is read and the entry pushed again from there (a heartbeat costs nothing; a claim
  about once per 2 HI). A heartbeat whose broker time is earlier than the claim's last one (a
  broker clock that went back) re-arms at once (:meth:`ClaimIndex.beat`).
- ``watched``: owned partitions whose entry came due without a heartbeat since: stale, or
  judged by a longer interval than ``min_interval``; each is checked when asked.
- ``known``: every partition that ever had an owner in the pair's life. The rest below the
  topic's partition count never had one and are claimable: while some remain, they are found
  by walking the partitions that are not ``known`` (only then does a query cost up to O(P)).

:meth:`ClaimIndex.claimable` yields exactly the partitions a scan of every claim would call
unowned or not held at ``now`` (the property tests check it after every record).
"""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterator
from itertools import chain

from marshal_py.world.checkpoint import ClaimState
from marshal_py.world.state import Owner

__all__ = ["ClaimIndex"]


class ClaimIndex:
    """The claimable partitions of one pair (see the module's docstring)."""

    __slots__ = ("_armed", "_heap", "_known_max", "by_client", "free", "known", "min_interval",
                 "watched")

    def __init__(self, min_interval: int) -> None:
        self.free: list[int] = []
        #: Owned partitions whose armed deadline passed: stale, or judged by an interval
        #: longer than ``min_interval`` (a group whose members announced different ones).
        self.watched: list[int] = []
        self.known: set[int] = set()
        self._known_max = -1
        #: The partitions each client id owns (held or stale).
        self.by_client: dict[str, set[int]] = {}
        self._heap: list[tuple[int, int]] = []
        #: partition -> the deadline of its one live heap entry (other entries: left-overs).
        self._armed: dict[int, int] = {}
        #: The interval the armed deadlines assume (the smallest any claim may be judged by).
        self.min_interval = min_interval

    # -- what the rules tell ---------------------------------------------------------------

    def clear(self) -> None:
        """Forget everything (the pair's offsets expired)."""
        self.free.clear()
        self.watched.clear()
        self.known.clear()
        self._known_max = -1
        self.by_client.clear()
        self._heap.clear()
        self._armed.clear()

    def rebuild(self, claims: dict[int, ClaimState], min_interval: int) -> None:
        """Index ``claims`` from scratch (restored from a checkpoint); ``min_interval``: the
        smallest interval a claim may be judged by (the group's, or one a member announced)."""
        self.clear()
        self.min_interval = min([min_interval, *(c.heartbeat_interval_ms for c in claims.values()
                                                 if c.heartbeat_interval_ms is not None)])
        for partition, claim in claims.items():
            self._know(partition)
            if claim.owner is not None:
                self.by_client.setdefault(claim.owner.client_id, set()).add(partition)
                self._arm(partition, claim)
            else:
                self.free.append(partition)
        self.free.sort()

    def _know(self, partition: int) -> None:
        if partition not in self.known:
            self.known.add(partition)
            if partition > self._known_max:
                self._known_max = partition

    def _arm(self, partition: int, claim: ClaimState) -> None:
        """Arm ``partition`` at a lower bound of its deadline: whatever interval its claim is
        judged by later, it is at least ``min_interval``."""
        last = claim.last_heartbeat_ms
        deadline = -(2**63) if last is None else last + 2 * self.min_interval
        self._armed[partition] = deadline
        heap = self._heap
        heapq.heappush(heap, (deadline, partition))
        if len(heap) > 2 * len(self._armed) + 64:
            # Drop the left-overs (a reader that never asks would keep them all).
            self._heap = [(d, p) for p, d in self._armed.items()]
            heapq.heapify(self._heap)

    def owned(self, partition: int, claim: ClaimState, previous: Owner | None) -> None:
        """``partition`` got an owner (a claim won or reclaimed) instead of ``previous``:
        ``claim`` is its state."""
        if previous is not None:
            self._disown(partition, previous)
        assert claim.owner is not None
        self.by_client.setdefault(claim.owner.client_id, set()).add(partition)
        if partition in self.known:
            _remove(self.free, partition)
            _remove(self.watched, partition)
        else:
            self._know(partition)
        self._arm(partition, claim)

    def _disown(self, partition: int, previous: Owner) -> None:
        owned = self.by_client.get(previous.client_id)
        if owned is not None:
            owned.discard(partition)
            if not owned:
                del self.by_client[previous.client_id]

    def freed(self, partition: int, previous: Owner | None) -> None:
        """``partition`` lost its owner ``previous`` (released, or reset)."""
        if previous is not None:
            self._disown(partition, previous)
        self._know(partition)
        self._armed.pop(partition, None)
        _remove(self.watched, partition)
        at = bisect_left(self.free, partition)
        if at == len(self.free) or self.free[at] != partition:
            self.free.insert(at, partition)

    def beat(self, partition: int, claim: ClaimState) -> None:
        """The owner's claim or heartbeat at a broker time earlier than its last one: the
        deadline moved earlier, re-arm it."""
        if partition in self._armed:
            self._arm(partition, claim)

    # -- the question ----------------------------------------------------------------------

    def _due(self, claims: dict[int, ClaimState], now: int, min_interval: int) -> None:
        """Move the owned partitions whose entries came due at ``now`` to ``watched``."""
        if min_interval < self.min_interval:
            # A member announced a shorter interval than the armed deadlines assumed.
            self.min_interval = min_interval
            for partition in list(self._armed):
                self._arm(partition, claims[partition])
        heap, armed = self._heap, self._armed
        while heap and heap[0][0] < now:
            entry, partition = heapq.heappop(heap)
            if armed.get(partition) != entry:
                continue  # a left-over
            claim = claims[partition]
            last = claim.last_heartbeat_ms
            if last is not None and last + 2 * self.min_interval >= now:
                self._arm(partition, claim)  # heartbeated since it was armed
                heap = self._heap
            else:
                del armed[partition]
                insort(self.watched, partition)

    def _stale(self, claims: dict[int, ClaimState], now: int, hi: int) -> list[int]:
        """Of ``watched``, those stale at ``now``; those heartbeated since are re-armed."""
        stale, keep = [], []
        floor = 2 * self.min_interval
        for partition in self.watched:
            claim = claims[partition]
            if _stale(claim, now, hi):
                stale.append(partition)
                keep.append(partition)
            elif claim.last_heartbeat_ms is not None \
                    and claim.last_heartbeat_ms + floor >= now:
                self._arm(partition, claim)
            else:
                keep.append(partition)  # held, by an interval longer than min_interval
        self.watched = keep
        return stale

    def claimable(self, claims: dict[int, ClaimState], count: int, now: int, hi: int,
                  min_interval: int, start: int = 0) -> Iterator[int]:
        """The partitions below ``count`` with no owner or a stale one at ``now`` (judged by
        the claim's interval, else ``hi``): first the released ones, then the stale ones,
        then those that never had an owner, each in partition order from ``start`` round.
        ``claims`` is the pair's claim table, ``min_interval`` the smallest interval any of
        its members announced (or ``hi``). Lazy: take what you need, before the next record
        is applied."""
        self._due(claims, now, min(hi, min_interval))
        stale = self._stale(claims, now, hi) if self.watched else []
        return chain(_from(self.free, count, start), _from(stale, count, start),
                     self._never_owned(count, start))

    def held_counts(self, claims: dict[int, ClaimState], now: int, hi: int,
                    min_interval: int) -> dict[str, int]:
        """How many partitions each client id holds at ``now`` (owned and not stale)."""
        self._due(claims, now, min(hi, min_interval))
        counts = {client: len(owned) for client, owned in self.by_client.items()}
        for partition in self._stale(claims, now, hi) if self.watched else ():
            owner = claims[partition].owner
            assert owner is not None
            counts[owner.client_id] -= 1
        return {client: n for client, n in counts.items() if n}

    def _never_owned(self, count: int, start: int) -> Iterator[int]:
        known = self.known
        below = len(known) if self._known_max < count else sum(1 for p in known if p < count)
        if below >= count:
            return
        start = start if 0 <= start < count else 0
        for partition in chain(range(start, count), range(start)):
            if partition not in known:
                yield partition


def _remove(items: list[int], partition: int) -> None:
    at = bisect_left(items, partition)
    if at < len(items) and items[at] == partition:
        del items[at]


def _from(items: list[int], count: int, start: int) -> Iterator[int]:
    """``items`` (sorted) below ``count``, from ``start`` round to the beginning (read as
    they are taken: the list must not change meanwhile)."""
    end = bisect_left(items, count)
    at = min(bisect_left(items, start), end)
    for i in chain(range(at, end), range(at)):
        yield items[i]


def _stale(claim: ClaimState, now: int, hi: int) -> bool:
    """Not held at ``now`` (as :meth:`PartitionClaim.is_held` judges it)."""
    last = claim.last_heartbeat_ms
    if claim.owner is None or last is None:
        return True
    interval = claim.heartbeat_interval_ms if claim.heartbeat_interval_ms is not None else hi
    return now - last > 2 * interval
