"""The share history: what happened to each share offset (acquisitions, accepts, releases,
rejects, its final state), kept as runs of offsets with equal values (:class:`RangeMap`) so
memory grows with the share records, not with the offsets they cover."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from typing import NamedTuple

from marshal_py.audit.tables import ShareStateRow
from marshal_py.world.state import PartitionKey


class ShareStats(NamedTuple):
    """What happened to one offset (or a run of offsets) of a share-partition."""

    acquisitions: int
    accepts: int
    releases: int
    rejects: int
    last_grant_epoch: int
    grants_in_epoch: int
    last_grant_position: int
    last_accept_position: int


_EMPTY_STATS = ShareStats(0, 0, 0, 0, -1, 0, -1, -1)


class RangeMap:
    """Per-offset values stored as runs of equal values: memory grows with the number of
    distinct updates, not with the number of offsets they cover."""

    def __init__(self) -> None:
        self._starts: list[int] = []  # run i covers [starts[i], starts[i+1])
        self._values: list[ShareStats | None] = []

    def _split(self, at: int) -> int:
        i = bisect.bisect_right(self._starts, at) - 1
        if i >= 0 and self._starts[i] == at:
            return i
        value = self._values[i] if i >= 0 else None
        self._starts.insert(i + 1, at)
        self._values.insert(i + 1, value)
        return i + 1

    def update(self, first: int, last: int,
               change: Callable[[ShareStats], ShareStats]) -> list[tuple[int, int, ShareStats]]:
        """Apply ``change`` to every offset of [first, last]; return the runs as they were."""
        lo = self._split(first)
        hi = self._split(last + 1)
        before: list[tuple[int, int, ShareStats]] = []
        for i in range(lo, hi):
            old = self._values[i] or _EMPTY_STATS
            before.append((self._starts[i], self._starts[i + 1] - 1, old))
            self._values[i] = change(old)
        return before

    def runs(self) -> Iterator[tuple[int, int, ShareStats]]:
        """The runs holding values, ascending: (first, last, value)."""
        for i, value in enumerate(self._values):
            if value is not None and i + 1 < len(self._starts):
                yield self._starts[i], self._starts[i + 1] - 1, value

    def __len__(self) -> int:
        return len(self._starts)


def grant_change(position: int, epoch: int) -> Callable[[ShareStats], ShareStats]:
    """The change a grant at ``position`` in reset epoch ``epoch`` makes to an offset."""
    def change(s: ShareStats) -> ShareStats:
        grants = s.grants_in_epoch + 1 if s.last_grant_epoch == epoch else 1
        return s._replace(acquisitions=s.acquisitions + 1, last_grant_epoch=epoch,
                          grants_in_epoch=grants, last_grant_position=position)
    return change


def ack_change(action: str, position: int) -> Callable[[ShareStats], ShareStats]:
    """The change an acknowledgement (``accept``/``release``/``reject``) makes."""
    def change(s: ShareStats) -> ShareStats:
        if action == "accept":
            return s._replace(accepts=s.accepts + 1, last_accept_position=position)
        if action == "release":
            return s._replace(releases=s.releases + 1)
        if action == "reject":
            return s._replace(rejects=s.rejects + 1)
        return s  # gap, dead-lettered: no delivery to count (as the Spark engine)
    return change


def final_share_state(offset: int, stats_last_grant: int, stats_last_accept: int,
                      spso: int, speo: int, in_flight_state: str | None) -> str:
    """An offset's state at the end of its share-partition's records.

    From the SPEO on it is ``available`` (a reset moved the SPSO back over it); in the
    in-flight window it is the rationalizer's state; below the SPSO it is ``acknowledged``
    when its last delivery was accepted, else ``archived`` (rejected, at the delivery limit,
    or skipped by a reset).
    """
    if offset >= speo:
        return "available"
    if offset >= spso:
        return in_flight_state or "available"
    return "acknowledged" if stats_last_accept > stats_last_grant else "archived"


def share_runs(shares: Mapping[PartitionKey, RangeMap],
               share_states: Mapping[PartitionKey, list[ShareStateRow]],
               ) -> Iterator[tuple[PartitionKey, int, int, ShareStats, str]]:
    """Share history as runs of offsets with the same row but the offset: (key, first,
    last, stats, final state); each offset of a run gives one ``share_history`` row."""
    for key in sorted(shares):
        states = share_states.get(key, [])
        spso = states[0].spso if states else 0
        speo = states[0].speo if states else 0
        windows = [(s.first, s.last, s.state) for s in states
                   if s.first is not None and s.last is not None and s.state is not None]
        w = 0
        for first, last, stats in shares[key].runs():
            if stats.acquisitions == 0:
                continue
            offset = first
            while offset <= last:
                # The longest stretch from offset on whose final state is the same.
                state: str | None = None
                end = last
                if offset >= speo:
                    pass
                elif offset >= spso:
                    end = min(end, speo - 1)
                    while w < len(windows) and windows[w][1] < offset:
                        w += 1
                    if w < len(windows) and windows[w][0] <= offset:
                        state = windows[w][2]
                        end = min(end, windows[w][1])
                    elif w < len(windows):
                        end = min(end, windows[w][0] - 1)
                else:
                    end = min(end, spso - 1)
                yield key, offset, end, stats, final_share_state(
                    offset, stats.last_grant_position, stats.last_accept_position, spso,
                    speo, state)
                offset = end + 1
