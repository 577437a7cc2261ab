"""A share-partition's stored records as runs: maximal ranges of consecutive offsets in the
same state (:data:`~marshal_py.world.share_records.State`). Pure.

:class:`ShareRuns` is the storage under :class:`~marshal_py.world.share.SharePartition`: it
cuts a range where runs begin and end, writes new states over the pieces and merges equal
neighbours, in a few operations per run touched, not per offset. It knows no rule of KIP-932.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Iterable

from marshal_py.world.share_records import InFlightRecord, Piece, Run, State


class ShareRuns:
    """Stored records as disjoint runs, ascending; an offset in no run has no stored record
    (Available, never delivered)."""

    def __init__(self) -> None:
        #: The runs, ascending; ``_firsts`` their first offsets.
        self._runs: list[Run] = []
        self._firsts: list[int] = []

    def _pieces(self, x: int, y: int) -> tuple[int, int, list[Piece]]:
        """[x, y] cut where runs begin and end: the pieces, and the slice of ``_runs`` that
        overlaps it."""
        runs, firsts = self._runs, self._firsts
        i = bisect_right(firsts, x) - 1
        if i < 0 or runs[i][1] < x:
            i += 1
        j, n = i, len(runs)
        pieces: list[Piece] = []
        at = x
        while at <= y:
            if j < n and runs[j][0] <= at:
                run = runs[j]
                end = run[1] if run[1] < y else y
                pieces.append((at, end, run[2:]))
                j += 1
            else:
                end = y if j >= n or runs[j][0] > y else runs[j][0] - 1
                pieces.append((at, end, None))
            at = end + 1
        return i, j, pieces

    def _write(self, i: int, j: int, x: int, y: int, pieces: list[Piece]) -> None:
        """Replace ``_runs[i:j]`` (the runs overlapping [x, y]) by ``pieces`` (None: nothing
        stored there), keeping what those runs held outside [x, y]; merge equal neighbours."""
        runs = self._runs
        new: list[Run] = []
        if i < j and runs[i][0] < x:
            new.append((runs[i][0], x - 1, *runs[i][2:]))
        for first, last, state in pieces:
            if state is not None:
                new.append((first, last, *state))
        if i < j and runs[j - 1][1] > y:
            new.append((y + 1, runs[j - 1][1], *runs[j - 1][2:]))
        if i > 0:
            i -= 1
            new.insert(0, runs[i])
        if j < len(runs):
            new.append(runs[j])
            j += 1
        merged: list[Run] = []
        for run in new:
            if merged and merged[-1][1] + 1 == run[0] and merged[-1][2:] == run[2:]:
                merged[-1] = (merged[-1][0], run[1], *run[2:])
            else:
                merged.append(run)
        runs[i:j] = merged
        self._firsts[i:j] = [run[0] for run in merged]

    def _change(self, x: int, y: int,
                step: Callable[[int, int, State | None], State | None]) -> None:
        """Give each piece of [x, y] the state ``step(first, last, state)`` returns."""
        i, j, pieces = self._pieces(x, y)
        self._write(i, j, x, y, [(a, b, step(a, b, s)) for a, b, s in pieces])

    def _state_at(self, offset: int) -> State | None:
        i = bisect_right(self._firsts, offset) - 1
        if i >= 0 and self._runs[i][1] >= offset:
            return self._runs[i][2:]
        return None

    def stored_records(self) -> list[InFlightRecord]:
        """The records the state machine stores (in-flight records it has seen change), in
        offset order: with SPSO, SPEO and the limits, the whole state (for checkpoints)."""
        return [InFlightRecord(offset, *run[2:])
                for run in self._runs for offset in range(run[0], run[1] + 1)]

    def _load(self, records: Iterable[InFlightRecord]) -> None:
        """Store exactly ``records`` (as :meth:`stored_records` returned them), in place of
        the runs held."""
        stored: dict[int, State] = {}
        for r in records:
            stored[r.offset] = (r.state, r.delivery_count, r.holder, r.lock_expiry_ms, r.duty,
                                r.owed_since_ms, r.duties)
        runs: list[Run] = []
        for offset in sorted(stored):
            state = stored[offset]
            if runs and runs[-1][1] + 1 == offset and runs[-1][2:] == state:
                runs[-1] = (runs[-1][0], offset, *state)
            else:
                runs.append((offset, offset, *state))
        self._runs = runs
        self._firsts = [run[0] for run in runs]
