"""Replaying a coordination log into a rationalizer: where to start, and reading to the end."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from marshal_py.log.base import CoordinationLog
from marshal_py.world.rationalizer import Rationalizer

log = logging.getLogger(__name__)

#: Default replay window: a week, the retention marshal_py gives ``__marshal``. Owners renew
#: their claims well inside it, so every live claim has a claiming record in the window.
DEFAULT_REPLAY_WINDOW_MS = 7 * 24 * 3600 * 1000


def replay_start(log_: CoordinationLog, partition: int, now_ms: int, window_ms: int) -> int:
    """Where a replay of ``partition`` begins: the first record not older than the window,
    or the oldest retained record if that is later."""
    start = log_.start_position(partition)
    if window_ms <= 0:
        return start
    return max(start, log_.position_for_time(partition, now_ms - window_ms))


def catch_up(
    log_: CoordinationLog,
    rationalizer: Rationalizer,
    partitions: Iterable[int],
    *,
    fetch_timeout_s: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> int:
    """Apply every record up to the log's current end on ``partitions``; return how many.

    Reads from each partition's :meth:`Rationalizer.next_position` (or the start of the
    log when that record has been deleted) to the end position read at the call.
    ``progress(done, total)`` is called after each fetched batch.
    """
    targets = {p: log_.end_position(p) for p in partitions}
    starts = {p: max(rationalizer.next_position(p), log_.start_position(p)) for p in targets}
    pending = {p: s for p, s in starts.items() if s < targets[p]}
    total = sum(targets[p] - s for p, s in pending.items())
    applied = 0
    while pending:
        batch = log_.fetch(pending, fetch_timeout_s)
        for record in batch:
            if record.position >= targets[record.partition]:
                continue
            rationalizer.apply(record)
            applied += 1
        for p in list(pending):
            nxt = rationalizer.next_position(p)
            if nxt >= targets[p]:
                del pending[p]
            elif nxt > pending[p]:
                pending[p] = nxt
        if progress is not None:
            progress(applied, total)
    return applied


def seek_to_window(
    log_: CoordinationLog,
    rationalizer: Rationalizer,
    partitions: Iterable[int],
    now_ms: int,
    window_ms: int,
) -> None:
    """Make a fresh rationalizer start its replay at each partition's :func:`replay_start`."""
    for p in partitions:
        rationalizer.skip_to(p, replay_start(log_, p, now_ms, window_ms))
