"""Which records a share member asks for: disjoint regions of the in-flight window. Pure.

The log decides who gets what (PROTOCOL.md 8.2): two members asking for the same Available
records in the same instant both write an ``AcquiringRecords``, and the later one wins
nothing — one coordination round trip lost, a read-back, and the records fetched for
nothing. With many members asking for the newest records at once that race is the rule, not
the exception. So members split the partition's offsets among themselves by a rule every
one of them computes alike from the log: fixed *regions* of ``size`` consecutive offsets
(``size`` = the in-flight limit / (2 x the members sharing the partition), so each of them
has about two regions in the window: one being handed out, the next acquired ahead), region
``k`` of partition ``p`` preferred by the live member of rank ``(p + k mod sharing) mod
members`` (live members, one per client id, in the order they joined: the rationalizer's
``members_by_join``; a newcomer takes the last rank, and the ranks before it stay).
``sharing`` is every live member when records cost the application time, one when they cost
it next to nothing (:mod:`marshal_py.client.share_window`): each partition is then read by
one member, a different one for each partition. Regions are absolute offsets, not relative
to the SPSO or SPEO, so they do not move when someone acquires ahead.

Preferences are only preferences: any member may acquire any Available record, and the
rules of the log (delivery counts, locks, the in-flight limit, one holder per offset) are
unchanged. A region that another member's rank prefers and that has stayed Available for
``steal_after_ms`` (its member is slow, busy, gone but not yet judged dead, or has no room)
is taken by whoever has room: work goes to idle members, and the SPSO keeps moving.
"""

from __future__ import annotations

from collections.abc import Iterable

from marshal_py.world.share import InFlightRecord, RecordState

#: A run of one view: (first, last, view), as SharePartition.runs_between returns them.
ViewRun = tuple[int, int, InFlightRecord]


def region_size(inflight_limit: int, sharing: int) -> int:
    """Offsets per region: two regions per member sharing the partition fit in the in-flight
    window."""
    return max(1, inflight_limit // (2 * max(1, sharing)))


def preferred_rank(region: int, partition: int, sharing: int, members: int) -> int:
    """The rank of the live member that prefers ``region`` of ``partition``: ``sharing`` of
    the ``members`` take the partition's regions in turn, starting at rank ``partition mod
    members``."""
    members = max(1, members)
    return (partition + region % max(1, min(sharing, members))) % members


def _take(ranges: Iterable[tuple[int, int]], room: int, mine: dict[int, int] | set[int],
          out: list[int]) -> None:
    """Append offsets of ascending ``ranges`` not in ``mine`` to ``out`` until it has
    ``room`` more."""
    goal = len(out) + room
    for a, b in ranges:
        for offset in range(a, b + 1):
            if len(out) >= goal:
                return
            if offset not in mine:
                out.append(offset)


class RegionPicker:
    """Chooses the offsets one member asks for in one share-partition (``partition``, its
    number). Remembers since when (broker ms) it has seen each region it does not prefer with
    Available records."""

    def __init__(self, partition: int = 0) -> None:
        self.partition = partition
        self._free_since: dict[int, int] = {}

    def pick(self, runs: Iterable[ViewRun], wanted: int, rank: int, members: int,
             size: int, mine: dict[int, int] | set[int], now_ms: int,
             steal_after_ms: int, *, sharing: int | None = None) -> list[int]:
        """Up to ``wanted`` Available offsets of ``runs`` (the window up to the acquisition
        limit), not in ``mine``: those of this member's regions first (of the ``sharing``
        members, all by default, that take the partition's regions in turn), lowest first;
        then, if that is short, those of other regions seen Available for ``steal_after_ms``
        or longer, lowest region first. Ascending within each part."""
        members = max(1, members)
        shared_by = members if sharing is None else sharing  # preferred_rank bounds it
        own: list[tuple[int, int]] = []
        others: dict[int, list[tuple[int, int]]] = {}
        for a, b, view in runs:
            if view.state is not RecordState.AVAILABLE:
                continue
            x = a
            while x <= b:
                k = x // size
                end = min(b, (k + 1) * size - 1)
                if preferred_rank(k, self.partition, shared_by, members) == rank:
                    own.append((x, end))
                else:
                    others.setdefault(k, []).append((x, end))
                x = end + 1
        self._free_since = {k: self._free_since.get(k, now_ms) for k in others}
        out: list[int] = []
        _take(own, wanted, mine, out)
        if len(out) < wanted:
            for k in sorted(others):
                if now_ms - self._free_since[k] >= steal_after_ms:
                    _take(others[k], wanted - len(out), mine, out)
                if len(out) >= wanted:
                    break
        return out
