"""Time travel for operators: the moments ``marshal state --at/--at-position`` and ``marshal
tail --from/--to`` name, and where in the coordination log they are.

A moment is a time (every record stamped at or before it has been read, none after: the
world a member saw then, judged at that time) or a position (``PARTITION:OFFSET``: the
records of that partition below the offset have been read, as a Kafka committed offset
says; judged at the time of the last of them unless a time is given as well). A moment
before the oldest record the coordination log still retains cannot be replayed: its
records are gone.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

import click

from marshal_py.errors import MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol.placement import coordination_partition
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.replay.checkpoints import read_range

#: How far below a position its last record is looked for (transaction markers between).
_DATING_REACH = 64


class MomentError(MarshalError):
    """A moment that cannot be shown (before the retained log, in the future, past the end);
    ``option`` is the option that named it."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Moment:
    """Where a view of the past stops: per coordination partition, the position below which
    records are read (``until``), and the time (ms) the view is judged at (``at_ms``)."""

    until: dict[int, int]
    at_ms: int


def iso(ms: int) -> str:
    """``ms`` as an ISO-8601 UTC time with milliseconds (how ``marshal`` prints times)."""
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


def parse_time(text: str) -> int:
    """An ISO-8601 time (``2026-11-24T22:05:00Z``, ``2026-11-24 22:05:00.250+01:00``,
    ``2026-11-24``) in ms since the epoch; without a zone it is UTC, like the times
    ``marshal`` prints. Raises ValueError saying what is expected."""
    try:
        parsed = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"{text!r} is not an ISO-8601 time (e.g. 2026-11-24T22:05:00Z or "
                         "2026-11-24T22:05:00.250+01:00)") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


def parse_position(text: str) -> tuple[int, int]:
    """``PARTITION:OFFSET`` (both integers >= 0) as a pair. Raises ValueError."""
    partition, sep, offset = text.strip().partition(":")
    if not sep or not partition.isdigit() or not offset.isdigit():
        raise ValueError(f"{text!r} is not PARTITION:OFFSET (two whole numbers >= 0, e.g. "
                         "0:1500: the coordination partition and the position read up to)")
    return int(partition), int(offset)


class IsoTime(click.ParamType):  # type: ignore[type-arg]
    """A click parameter: an ISO-8601 time, as ms since the epoch."""

    name = "ISO-TIME"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class PartitionOffset(click.ParamType):  # type: ignore[type-arg]
    """A click parameter: ``PARTITION:OFFSET`` of the coordination topic."""

    name = "PARTITION:OFFSET"

    def convert(self, value: object, param: click.Parameter | None,
                ctx: click.Context | None) -> tuple[int, int]:
        if isinstance(value, tuple):
            return value
        try:
            return parse_position(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _first_retained(log_: CoordinationLog, partition: int) -> CoordinationRecord | None:
    start = log_.start_position(partition)
    found = read_range(log_, partition, start, min(log_.end_position(partition),
                                                    start + _DATING_REACH))
    return found[0] if found else None


def check_retained(log_: CoordinationLog, partition: int, at_ms: int, option: str) -> None:
    """Raise :class:`MomentError` when ``at_ms`` is before the oldest record ``partition``
    retains and older ones were deleted (their records, needed to replay it, are gone)."""
    if log_.start_position(partition) == 0:
        return  # nothing deleted: before the first record, the world was empty
    first = _first_retained(log_, partition)
    if first is not None and at_ms < first.timestamp_ms:
        raise MomentError(
            f"{iso(at_ms)} is before the retained coordination log: {log_.topic} partition "
            f"{partition} keeps records from {iso(first.timestamp_ms)} (position "
            f"{first.position}) on; pick a later moment", option)


def moment_at_time(log_: CoordinationLog, partitions: tuple[int, ...], at_ms: int,
                   now_ms: int, option: str = "--at") -> Moment:
    """The moment ``at_ms`` on ``partitions``: each read below its first record stamped
    after it. Raises :class:`MomentError` for a moment in the future or before the
    retained log."""
    if at_ms > now_ms:
        raise MomentError(f"{iso(at_ms)} is in the future (it is {iso(now_ms)} now)", option)
    until = {}
    for p in partitions:
        check_retained(log_, p, at_ms, option)
        until[p] = log_.position_for_time(p, at_ms + 1)
    return Moment(until, at_ms)


def moment_at_position(log_: CoordinationLog, partition: int, offset: int,
                       at_ms: int | None, option: str = "--at-position") -> Moment:
    """The moment a reader of ``partition`` had read every record below ``offset``, judged
    at ``at_ms`` (the time of the last of those records when None). Raises
    :class:`MomentError` for a partition the topic does not have, or an offset past its
    end or at or before its oldest retained record (once older ones were deleted)."""
    count = log_.partition_count()
    if partition >= count:
        raise MomentError(f"{log_.topic} has partitions 0..{count - 1}, not {partition}",
                          option)
    start, end = log_.start_position(partition), log_.end_position(partition)
    if offset > end:
        raise MomentError(f"{partition}:{offset} is past the end of {log_.topic} partition "
                          f"{partition} (its next position is {end})", option)
    if start > 0 and offset <= start:
        raise MomentError(f"{partition}:{offset} is before the retained coordination log: "
                          f"{log_.topic} partition {partition} keeps positions {start} and "
                          f"later (and shows them from {partition}:{start + 1} on)", option)
    if at_ms is None:
        below = read_range(log_, partition, max(start, offset - _DATING_REACH), offset)
        if not below:
            raise MomentError(f"no record below {partition}:{offset} tells its time; give "
                              "--at as well", option)
        at_ms = below[-1].timestamp_ms
    return Moment({partition: offset}, at_ms)


def state_moment(log_: CoordinationLog, topic: str | None, at_ms: int | None,
                 at_position: tuple[int, int] | None, now_ms: int | None = None
                 ) -> Moment | None:
    """The moment of ``marshal state --at/--at-position`` (None: now). With ``--topic``,
    only its coordination partition is read (and ``--at-position`` must name it)."""
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if at_ms is not None and at_ms > now:
        raise MomentError(f"{iso(at_ms)} is in the future (it is {iso(now)} now)", "--at")
    count = log_.partition_count()
    home = None if topic is None else coordination_partition(topic, count)
    if at_position is not None:
        partition, offset = at_position
        if home is not None and home != partition:
            raise MomentError(f"topic {topic} is coordinated on partition {home} of "
                              f"{log_.topic}, not {partition}", "--at-position")
        return moment_at_position(log_, partition, offset, at_ms)
    if at_ms is None:
        return None
    partitions = tuple(range(count)) if home is None else (home,)
    return moment_at_time(log_, partitions, at_ms, now)
