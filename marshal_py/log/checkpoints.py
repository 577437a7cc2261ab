"""Finding a group's newest checkpoint, so a replay can start there instead of at the window.

Live members write a :class:`~marshal_py.protocol.messages.Checkpoint` of their group on each
topic every checkpoint interval (PROTOCOL.md, checkpoints). A reader that joins looks for the
newest one by reading backwards from the end of the coordination partition in growing
chunks, so the work is about one checkpoint interval of records however old the log is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from marshal_py.log.base import CoordinationLog
from marshal_py.protocol.auth import Signature, is_signed
from marshal_py.protocol.codec import DecodeError, decode_signed
from marshal_py.protocol.messages import Checkpoint, Message
from marshal_py.world.checkpoint import CheckpointError
from marshal_py.world.rationalizer import Rationalizer
from marshal_py.world.records import CoordinationRecord

log = logging.getLogger(__name__)

_PREFIX = Checkpoint.TYPE.encode("ascii") + b"/"
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
               fetch_timeout_s: float = 1.0) -> list[CoordinationRecord]:
    """The records of ``partition`` in [start, end)."""
    out: list[CoordinationRecord] = []
    position = start
    empty = 0
    while position < end:
        batch = [r for r in log_.fetch({partition: position}, fetch_timeout_s)
                 if r.partition == partition and position <= r.position < end]
        if not batch:
            empty += 1
            if empty >= _MAX_EMPTY_FETCHES:
                break  # positions that never arrive (transaction markers): stop here
            continue
        empty = 0
        out.extend(batch)
        position = batch[-1].position + 1
    return out


def _may_be_checkpoint(value: bytes | None) -> bool:
    if value is None:
        return False
    if is_signed(value):  # Signed/3/<key id>/<seq>/<mac>/Checkpoint/... (or version 2)
        return _PREFIX in value
    return value.startswith(_PREFIX)


def newest_checkpoints(log_: CoordinationLog, partition: int, group: str,
                       topics: Iterable[str], floor: int,
                       refusal: Refusal | None = None) -> dict[str, FoundCheckpoint]:
    """The newest usable checkpoint of ``group`` for each of ``topics`` on ``partition``.

    Reads backwards from the end in chunks that grow fourfold, never below ``floor`` (the
    replay window's start). A checkpoint is usable when its state position is not after its
    own record and not before the oldest retained record, and ``refusal`` (the
    rationalizer's authenticity check) finds nothing against it. Topics with none are left
    out.
    """
    wanted = set(topics)
    found: dict[str, FoundCheckpoint] = {}
    oldest = log_.start_position(partition)
    floor = max(floor, oldest)
    high = log_.end_position(partition)
    chunk = _FIRST_CHUNK
    while high > floor and wanted - set(found):
        low = max(floor, high - chunk)
        for record in reversed(read_range(log_, partition, low, high)):
            position, value = record.position, record.value
            if value is None or not _may_be_checkpoint(value):
                continue
            try:
                message, signature = decode_signed(value)
            except DecodeError:
                continue
            if (not isinstance(message, Checkpoint) or message.group_id != group
                    or message.topic not in wanted or message.topic in found):
                continue
            why = None if refusal is None else refusal(message, signature, record.timestamp_ms)
            if why is not None:
                log.warning("ignoring a checkpoint of %s/%s at position %d: %s", group,
                            message.topic, position, why)
                continue
            if not oldest <= message.position <= position:
                log.debug("checkpoint of %s/%s at %d names position %d: unusable", group,
                          message.topic, position, message.position)
                continue
            found[message.topic] = FoundCheckpoint(position, message)
        high = low
        chunk *= _GROWTH
    return found


def start_from_checkpoints(log_: CoordinationLog, rationalizer: Rationalizer, partition: int,
                           group: str, topics: Iterable[str], window_start: int) -> int:
    """Prepare a fresh rationalizer to replay ``partition`` for ``group`` on ``topics``.

    Restores the newest checkpoint of each topic, and returns (and skips to) the position
    the replay starts at: the oldest restored checkpoint's position, or ``window_start`` when
    some topic has no usable checkpoint (its history is replayed from the window, as before
    checkpoints existed).
    """
    topics = tuple(topics)
    found = newest_checkpoints(log_, partition, group, topics, window_start,
                               rationalizer.refusal)
    starts = []
    for topic in topics:
        entry = found.get(topic)
        if entry is not None:
            try:
                rationalizer.restore(partition, entry.checkpoint)
            except CheckpointError as exc:
                log.warning("ignoring the checkpoint of %s/%s at position %d: %s", group,
                            topic, entry.record_position, exc)
                entry = None
        starts.append(window_start if entry is None else entry.checkpoint.position)
    start = min(starts) if starts else window_start
    rationalizer.skip_to(partition, start)
    return start
