"""Replaying a coordination log into a rationalizer: where to start, and reading to the end."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from marshal_py.errors import BrokerUnavailableError, CoordinationLogLostError
from marshal_py.log.base import HANGING_HINT, CoordinationLog, Fetched, Keep
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world.rationalizer import Rationalizer, Verdict

log = logging.getLogger(__name__)

#: Default replay window: a week, the retention marshal_py gives ``__marshal``. Owners renew
#: their claims well inside it, so every live claim has a claiming record in the window.
DEFAULT_REPLAY_WINDOW_MS = 7 * 24 * 3600 * 1000
_MAX_EMPTY_FETCHES = 5


def replay_start(log_: CoordinationLog, partition: int, now_ms: int, window_ms: int, *,
                 end: int | None = None) -> int:
    """Where a replay of ``partition`` begins: the first record not older than the window,
    or the oldest retained record if that is later.

    ``end``: an end of the partition read earlier; the replay then begins at or before it
    (records appended since are not older than the window). A joining member passes the
    end it read before the index (PROTOCOL.md 6.1): with no record in the window, the
    lookup answers an end read later, which can lie past the first records of a peer whose
    ``History`` that index did not show."""
    if window_ms > 0:
        # A retained record, or the end: never before the log's start (one lookup, not two).
        start = log_.position_for_time(partition, now_ms - window_ms)
    else:
        start = log_.start_position(partition)
    return start if end is None else min(start, end)


def catch_up(
    log_: CoordinationLog,
    rationalizer: Rationalizer,
    partitions: Iterable[int],
    *,
    fetch_timeout_s: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
    keep: Keep | None = None,
    until: Mapping[int, int] | None = None,
) -> int:
    """Apply every record up to the log's current end on ``partitions``; return how many.
    With ``keep``, only the records it wants are applied (a member: those of its group),
    the others are read past without being decoded. With ``until``, a partition it names
    is read only below that position (or its end, when that comes first): the world as a
    reader that had read that far saw it.

    Raises :class:`~marshal_py.errors.CoordinationLogLostError` when a partition now ends
    before what was already read, or the log's :meth:`verify_identity` finds another topic
    under the name (the topic was deleted, recreated or truncated).

    Reads from each partition's :meth:`Rationalizer.next_position` (or the start of the
    log when that record has been deleted) to the end position read at the call.
    ``progress(done, total)`` is called after each fetched batch.
    """
    try:
        targets = {p: log_.end_position(p) for p in partitions}
    except BrokerUnavailableError:
        log_.verify_identity()  # a deleted topic fails every read: not a broker away
        raise
    for p, end in targets.items():
        read = rationalizer.next_position(p)
        if end < read:
            raise CoordinationLogLostError(
                f"coordination topic {log_.topic!r} went back on partition {p}: it ends at "
                f"{end}, but {read} records had been read; it was deleted and recreated (or "
                f"truncated), {CoordinationLogLostError.ADVICE}")
    # A recreated topic that already holds more records than were read passes the check
    # above: only its identity tells it apart (asked after the ends, so the broker answers).
    log_.verify_identity()
    if until is not None:
        targets = {p: min(end, until.get(p, end)) for p, end in targets.items()}
    starts: dict[int, int] = {}
    for p, end in targets.items():
        read = rationalizer.next_position(p)
        # The log's start (a request) matters only where there is something to read:
        # records below it were deleted, and the replay moves past them.
        starts[p] = max(read, log_.start_position(p)) if read < end else read
    return _read_to(log_, rationalizer, targets, starts, fetch_timeout_s, progress, keep)


def read_through(
    log_: CoordinationLog,
    rationalizer: Rationalizer,
    targets: Mapping[int, int],
    *,
    fetch_timeout_s: float = 1.0,
    keep: Keep | None = None,
    appended: Sequence[CoordinationRecord] = (),
) -> int:
    """Apply every record below ``targets[partition]`` (typically one past a record this
    member has just appended): the read-back after a write, with no request for the log's
    ends or starts -- one fetch when the records are there. Returns how many were applied
    (with ``keep``, of those it wants).

    ``appended``: the records this reader has just appended, as the log answered the
    append, *outside any transaction* (a transactional record may yet be aborted). On a
    partition where they directly follow what was read, they are applied as answered and
    not fetched: no round trip (PROTOCOL.md, "Reading back one's own records")."""
    for p, end in targets.items():
        if end <= rationalizer.next_position(p):
            # A record just appended landed below what this reader has already read: the
            # log is not the one read (deleted and recreated, or truncated).
            raise CoordinationLogLostError(
                f"coordination topic {log_.topic!r} went back on partition {p}: a record "
                f"appended now got position {end - 1}, but {rationalizer.next_position(p)} "
                "records had been read; it was deleted and recreated (or truncated), "
                f"{CoordinationLogLostError.ADVICE}")
    applied = apply_appended(rationalizer, appended, keep) if appended else 0
    wanted = {p: end for p, end in targets.items() if rationalizer.next_position(p) < end}
    if not wanted:
        return applied
    starts = {p: rationalizer.next_position(p) for p in wanted}
    return applied + _read_to(log_, rationalizer, wanted, starts, fetch_timeout_s, None, keep)


def apply_appended(rationalizer: Rationalizer, appended: Sequence[CoordinationRecord],
                   keep: Keep | None) -> int:
    """Apply, without reading them back, the records this reader has just appended to the
    partitions where they directly follow what it has read: the broker placed them at
    consecutive positions beginning at the reader's next one, so no other record lies
    between, and a fetch would return exactly these (value, position and timestamp are
    those the broker stored: the append's answer). Returns how many were applied."""
    by_partition: dict[int, list[CoordinationRecord]] = {}
    for record in appended:
        by_partition.setdefault(record.partition, []).append(record)
    applied = 0
    for p, records in by_partition.items():
        records.sort(key=lambda r: r.position)
        first = records[0].position
        if first != rationalizer.next_position(p) or \
                any(r.position != first + i for i, r in enumerate(records)):
            continue  # others' records (or markers) may lie between: read them
        kept = records if keep is None else [r for r in records if keep(r.value)]
        rationalizer.apply_all(kept)
        rationalizer.skip_to(p, records[-1].position + 1)
        applied += len(kept)
    return applied


def _apply_fetched(rationalizer: Rationalizer, fetched: Fetched,
                   targets: Mapping[int, int] | None = None) -> int:
    """Apply what a fetch kept (below ``targets``, when given) and move each partition's
    replay past what it read and did not keep; return how many were applied."""
    # One apply_all over the batch (no outcome made per record unless an observer wants
    # it), of the records below the targets and not yet read.
    batch = []
    reading: dict[int, int] = {}
    for record in fetched.records:
        p = record.partition
        if targets is not None and record.position >= targets[p]:
            continue
        start = reading.get(p)
        if start is None:
            start = reading[p] = rationalizer.next_position(p)
        if record.position >= start:
            batch.append(record)
            reading[p] = record.position + 1
    rationalizer.apply_all(batch)
    applied = len(batch)
    for p, reached in fetched.reached.items():
        limit = reached if targets is None else min(reached, targets.get(p, reached))
        rationalizer.skip_to(p, limit)
    return applied


def follow_once(log_: CoordinationLog, rationalizer: Rationalizer, partitions: Iterable[int],
                timeout_s: float, keep: Keep | None = None) -> int:
    """Wait up to ``timeout_s`` for records after what was read on ``partitions`` and apply
    those that arrive (a long poll: it returns as soon as any does). Returns how many were
    applied (with ``keep``, of those it wants; the others are read past). Positions the
    reader has read past without records (transaction markers) are skipped. Raises
    :class:`~marshal_py.errors.CoordinationLogLostError` when the topic is no longer the one
    the log opened."""
    chosen = sorted(set(partitions))
    log_.verify_identity()
    starts = {p: rationalizer.next_position(p) for p in chosen}
    fetched = log_.fetch_matching(starts, timeout_s, keep)
    applied = _apply_fetched(rationalizer, fetched)
    if not fetched.reached:
        for p in chosen:
            reached = log_.read_position(p)
            if reached is not None and reached < rationalizer.next_position(p):
                # The reader was sent back (an out-of-range position reset to the start):
                # the log now ends before what was read.
                raise CoordinationLogLostError(
                    f"coordination topic {log_.topic!r} went back on partition {p}: it now "
                    f"reads from {reached}, but {rationalizer.next_position(p)} records had "
                    "been read; it was deleted and recreated (or truncated), "
                    f"{CoordinationLogLostError.ADVICE}")
            if reached is not None and reached > rationalizer.next_position(p):
                rationalizer.skip_to(p, reached)
    return applied


def _read_to(log_: CoordinationLog, rationalizer: Rationalizer, targets: Mapping[int, int],
             starts: Mapping[int, int], fetch_timeout_s: float,
             progress: Callable[[int, int], None] | None, keep: Keep | None) -> int:
    """Fetch and apply from ``starts`` until every partition reached its target."""
    pending = {p: s for p, s in starts.items() if s < targets[p]}
    total = sum(targets[p] - s for p, s in pending.items())
    applied = 0
    read = 0
    empty_fetches = 0
    while pending:
        fetched = log_.fetch_matching(pending, fetch_timeout_s, keep)
        empty_fetches = 0 if fetched.reached else empty_fetches + 1
        if empty_fetches >= _MAX_EMPTY_FETCHES:
            # Nothing arrives. Either the positions below the end hold no records (markers of
            # a foreign transactional producer): the reader has read past them, and only
            # those may be skipped. Or the broker is away: then nothing may be skipped — a
            # record skipped here would make this reader disagree with every other.
            moved = False
            for p in list(pending):
                reached = log_.read_position(p)
                if reached is not None and reached > pending[p]:
                    log.debug("positions %d..%d of %s partition %d hold no records "
                              "(transaction markers); skipping them", pending[p],
                              min(reached, targets[p]) - 1, log_.topic, p)
                    rationalizer.skip_to(p, min(reached, targets[p]))
                    moved = True
            if not moved:
                raise BrokerUnavailableError(
                    f"no coordination records arrive from {log_.topic} partitions "
                    f"{sorted(pending)} (read up to {dict(sorted(pending.items()))}, ends "
                    f"{ {p: targets[p] for p in sorted(pending)} }): the broker may be "
                    f"restarting, or {HANGING_HINT}; this reader will try again")
            empty_fetches = 0
            for p in list(pending):
                nxt = rationalizer.next_position(p)
                if nxt >= targets[p]:
                    del pending[p]
                elif nxt > pending[p]:
                    pending[p] = nxt
            continue
        applied += _apply_fetched(rationalizer, fetched, targets)
        for p in list(pending):
            nxt = rationalizer.next_position(p)
            read += min(nxt, targets[p]) - pending[p]
            if nxt >= targets[p]:
                del pending[p]
            elif nxt > pending[p]:
                pending[p] = nxt
        if progress is not None:
            progress(read, total)
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


def follow(
    log_: CoordinationLog,
    rationalizer: Rationalizer,
    partitions: Iterable[int],
    stop: threading.Event,
    *,
    fetch_timeout_s: float = 0.5,
) -> Iterator[int]:
    """Keep applying new records of ``partitions`` until ``stop`` is set.

    Yields the number of records applied after each fetch (0 when none arrived), so a caller
    can react to changes of the world between fetches.
    """
    chosen = tuple(partitions)
    while not stop.is_set():
        starts = {p: rationalizer.next_position(p) for p in chosen}
        applied = 0
        for record in log_.fetch(starts, fetch_timeout_s):
            if rationalizer.apply(record).verdict is not Verdict.DUPLICATE:
                applied += 1
        yield applied
