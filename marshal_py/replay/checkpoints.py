"""Finding a group's newest checkpoint, so a replay can start there instead of at the window.

Live members write a :class:`~marshal_py.protocol.messages.Checkpoint` of their group on each
topic every checkpoint interval (PROTOCOL.md, checkpoints), in parts when it is too large for
one record (:mod:`~marshal_py.log.checkpoint_chunks`), and record where in the index. A
reader that joins reads the checkpoint the index points at; when there is none (or it is not
usable) it looks for the newest one by reading backwards from the end of the coordination
partition in growing ranges, so the work is about one checkpoint interval of records however
old the log is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from marshal_py.log.base import CoordinationLog
from marshal_py.log.checkpoint_chunks import ChunkAssembler
from marshal_py.protocol.auth import Signature, is_signed
from marshal_py.protocol.codec import DecodeError, decode_signed
from marshal_py.protocol.index import IndexView
from marshal_py.protocol.messages import Checkpoint, CheckpointChunk, Message
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world.checkpoint import CheckpointError
from marshal_py.world.rationalizer import Rationalizer

log = logging.getLogger(__name__)

_PREFIXES = (Checkpoint.TYPE.encode("ascii") + b"/",
             CheckpointChunk.TYPE.encode("ascii") + b"/")
#: How far past a chunked checkpoint's first part its other parts are looked for, at least
#: (and four records per part): they are written together, others' records between them.
_PARTS_REACH = 10_000
_FIRST_CHUNK = 2_000
_GROWTH = 4
_MAX_EMPTY_FETCHES = 5


@dataclass(frozen=True, slots=True)
class FoundCheckpoint:
    """A checkpoint record and where it was."""

    record_position: int
    checkpoint: Checkpoint


#: Why a record is not authentic (None when it is): Rationalizer.refusal.
Refusal = Callable[[Message, Signature | None, int], str | None]


def read_range(log_: CoordinationLog, partition: int, start: int, end: int,
               fetch_timeout_s: float = 1.0,
               keep: Callable[[bytes | None], bool] | None = None) -> list[CoordinationRecord]:
    """The records of ``partition`` in [start, end) (with ``keep``: those whose value it
    keeps; the others are read past without becoming records)."""
    out: list[CoordinationRecord] = []
    position = start
    empty = 0
    while position < end:
        fetched = log_.fetch_matching({partition: position}, fetch_timeout_s, keep)
        reached = fetched.reached.get(partition, position)
        if reached <= position:
            empty += 1
            if empty >= _MAX_EMPTY_FETCHES:
                break  # positions that never arrive (transaction markers): stop here
            continue
        empty = 0
        out.extend(r for r in fetched.records
                   if r.partition == partition and position <= r.position < end)
        position = reached
    return out


def _may_be_checkpoint(value: bytes | None) -> bool:
    if value is None:
        return False
    if is_signed(value):  # Signed/3/<key id>/<seq>/<mac>/Checkpoint/... (or version 2)
        return any(prefix in value for prefix in _PREFIXES)
    return value.startswith(_PREFIXES)


class _Finder:
    """Reads checkpoint records of ``group`` (whole, or in parts) as they are met, and says
    which ones are usable: authentic, and naming a position that is not after their (first)
    record and not before ``oldest``."""

    def __init__(self, group: str, topics: set[str], oldest: int,
                 refusal: Refusal | None) -> None:
        self.group, self.topics, self.oldest, self.refusal = group, topics, oldest, refusal
        self.parts = ChunkAssembler()

    def read(self, record: CoordinationRecord) -> FoundCheckpoint | None:
        """The checkpoint ``record`` is, or completes; None if none."""
        value = record.value
        if value is None or not _may_be_checkpoint(value):
            return None
        try:
            message, signature = decode_signed(value)
        except DecodeError:
            return None
        if (not isinstance(message, Checkpoint | CheckpointChunk)
                or message.group_id != self.group or message.topic not in self.topics):
            return None
        why = None if self.refusal is None else self.refusal(message, signature,
                                                             record.timestamp_ms)
        if why is not None:
            log.warning("ignoring a checkpoint of %s/%s at position %d: %s", self.group,
                        message.topic, record.position, why)
            return None
        if isinstance(message, CheckpointChunk):
            whole = self.parts.add(message, record.position)
            if whole is None:
                return None
            checkpoint, position = whole
        else:
            checkpoint, position = message, record.position
        if not self.oldest <= checkpoint.position <= position:
            log.debug("checkpoint of %s/%s at %d names position %d: unusable", self.group,
                      checkpoint.topic, position, checkpoint.position)
            return None
        return FoundCheckpoint(position, checkpoint)


def checkpoint_at(log_: CoordinationLog, partition: int, group: str, topic: str,
                  record_position: int, refusal: Refusal | None = None,
                  ceiling: int | None = None) -> FoundCheckpoint | None:
    """The usable checkpoint of ``group`` on ``topic`` whose (first) record is at
    ``record_position`` (what the index points at), None when there is none there: the
    record is something else, or a part of a checkpoint whose other parts are not all in
    the log (torn), or it is unusable. With ``ceiling``, only records below that position
    count (a checkpoint completed at or after it did not exist yet)."""
    oldest = log_.start_position(partition)
    end = log_.end_position(partition)
    if ceiling is not None:
        end = min(end, ceiling)
    if not oldest <= record_position < end:
        return None
    finder = _Finder(group, {topic}, oldest, refusal)
    first = read_range(log_, partition, record_position, record_position + 1)
    if not first or first[0].position != record_position:
        return None
    found = finder.read(first[0])
    if found is not None:
        return found
    try:
        message, _ = decode_signed(first[0].value or b"")
    except DecodeError:
        return None
    if not isinstance(message, CheckpointChunk) or message.part != 0:
        return None
    reach = max(_PARTS_REACH, 4 * message.parts)
    position = record_position + 1
    while position < min(end, record_position + reach):
        batch = read_range(log_, partition, position,
                           min(end, record_position + reach, position + _FIRST_CHUNK))
        if not batch:
            break
        for record in batch:
            found = finder.read(record)
            if found is not None:
                return found
        position = batch[-1].position + 1
    log.log(logging.WARNING if ceiling is None else logging.DEBUG,
            "the checkpoint of %s/%s at position %d is torn (not all of its %d parts are in "
            "the log%s): ignored", group, topic, record_position, message.parts,
            "" if ceiling is None else f" below position {ceiling}")
    return None


def newest_checkpoints(log_: CoordinationLog, partition: int, group: str,
                       topics: Iterable[str], floor: int,
                       refusal: Refusal | None = None,
                       ceiling: int | None = None) -> dict[str, FoundCheckpoint]:
    """The newest usable checkpoint of ``group`` for each of ``topics`` on ``partition``
    (with ``ceiling``: the newest whose records are all below that position, what a reader
    that had read up to it could restore).

    Reads backwards from the end (or the ceiling) in ranges that grow fourfold, never below
    ``floor`` (the replay window's start). A checkpoint is usable when its state position is
    not after its own (first) record and not before the oldest retained record, every part
    of a chunked one is there, and ``refusal`` (the rationalizer's authenticity check) finds
    nothing against it (or any of its parts). Topics with none are left out.
    """
    wanted = set(topics)
    found: dict[str, FoundCheckpoint] = {}
    high = log_.end_position(partition)
    if ceiling is not None:
        high = min(high, ceiling)
    if high <= floor:
        return found  # nothing above the floor (a new group's): no request for the start
    oldest = log_.start_position(partition)
    floor = max(floor, oldest)
    finder = _Finder(group, wanted, oldest, refusal)
    chunk = _FIRST_CHUNK
    while high > floor and wanted - set(found):
        low = max(floor, high - chunk)
        for record in reversed(read_range(log_, partition, low, high,
                                          keep=_may_be_checkpoint)):
            checkpoint = finder.read(record)
            if checkpoint is not None and checkpoint.checkpoint.topic not in found:
                found[checkpoint.checkpoint.topic] = checkpoint
        high = low
        chunk *= _GROWTH
    return found


def history_floor(index: IndexView | None, group: str, topic: str, window_start: int,
                  end: int) -> int:
    """Where the replay of (``group``, ``topic``) may begin by the index (PROTOCOL.md 6.1,
    rule 4): on a declared topic, at its history's start, or at ``end`` when the index
    shows no History of the pair (the window's start when that is later); elsewhere at
    ``window_start``.

    ``end`` must have been read *before* the index, and ``window_start`` must not lie past
    it (:func:`~marshal_py.replay.reading.replay_start` with ``end``): a peer whose History the
    index did not show yet appends its first records after the index was read, so at or
    after ``end``, never below it. Call only for a reader that trusts the index (not for
    authenticated groups nor in compatibility mode)."""
    if index is None or not index.declared:
        return window_start
    begins = index.history_start(group, topic)
    return max(window_start, end if begins is None else begins)


def start_from_checkpoints(log_: CoordinationLog, rationalizer: Rationalizer, partition: int,
                           group: str, topics: Iterable[str], window_start: int, *,
                           index: IndexView | None = None,
                           floors: Mapping[str, int] | None = None,
                           ceiling: int | None = None) -> int:
    """Prepare a fresh rationalizer to replay ``partition`` for ``group`` on ``topics``.

    Restores the newest checkpoint of each topic -- the one ``index`` points at when it is
    usable, else the newest found reading backwards -- and returns (and skips to) the
    position the replay starts at: the oldest restored checkpoint's position, or, for a
    topic without a usable checkpoint, its floor (``floors[topic]``, see
    :func:`history_floor`; ``window_start`` by default: its history is replayed from the
    window, as before checkpoints existed). With ``ceiling`` (a replay that stops there,
    ``marshal state --at``): only checkpoints whose records are all below it.
    """
    topics = tuple(topics)
    floor_of = {t: window_start if floors is None else floors.get(t, window_start)
                for t in topics}
    found: dict[str, FoundCheckpoint] = {}
    for topic in topics:
        pointer = None if index is None else index.checkpoint_position(group, topic)
        if pointer is not None and (ceiling is None or pointer < ceiling):
            entry = checkpoint_at(log_, partition, group, topic, pointer, rationalizer.refusal,
                                  ceiling)
            if entry is not None and _restored(rationalizer, partition, group, entry):
                found[topic] = entry
    rest = [t for t in topics if t not in found]
    if rest:
        scanned = newest_checkpoints(log_, partition, group, rest,
                                     min(floor_of[t] for t in rest), rationalizer.refusal,
                                     ceiling)
        for topic, entry in scanned.items():
            if _restored(rationalizer, partition, group, entry):
                found[topic] = entry
    starts = [found[t].checkpoint.position if t in found else floor_of[t] for t in topics]
    start = min(starts) if starts else window_start
    rationalizer.skip_to(partition, start)
    return start


def _restored(rationalizer: Rationalizer, partition: int, group: str,
              entry: FoundCheckpoint) -> bool:
    try:
        rationalizer.restore(partition, entry.checkpoint)
    except CheckpointError as exc:
        log.warning("ignoring the checkpoint of %s/%s at position %d: %s", group,
                    entry.checkpoint.topic, entry.record_position, exc)
        return False
    return True
