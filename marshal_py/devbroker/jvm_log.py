"""Reading the log of a JVM daemon that failed (a Kafka broker, a Spark master or worker):
its tail, and its last ERROR quoted in one line. Each daemon passes the pattern of its own
log lines; ``devbroker/broker_log.py`` and ``spark/cluster_log.py`` build their errors on
this."""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["describe_last_error", "read_log_tail"]

_MAX_QUOTE = 300


def read_log_tail(path: Path, limit: int = 512 * 1024) -> str:
    """The last ``limit`` bytes of the log at ``path`` ("" when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def describe_last_error(text: str, line_pattern: re.Pattern[str]) -> str:
    """Quote the last ERROR (or FATAL) line of a daemon log, with the root cause that
    follows it (the last ``Caused by:`` of its stack trace, else its first line that is not
    a frame); the last line of the log when it has no ERROR.

    ``line_pattern`` matches the first line of one log entry, with the groups ``level`` and
    ``message``; lines it does not match continue the entry before them.
    """
    lines = text.splitlines()
    last_error: int | None = None
    for index, line in enumerate(lines):
        match = line_pattern.match(line)
        if match is not None and match.group("level") in ("ERROR", "FATAL"):
            last_error = index
    if last_error is None:
        tail = [line.strip() for line in lines if line.strip()]
        return f"last log line: {tail[-1][:_MAX_QUOTE]!r}" if tail else "the log is empty"
    match = line_pattern.match(lines[last_error])
    assert match is not None
    quote = f"last ERROR: {match.group('message').strip()[:_MAX_QUOTE]!r}"
    cause: str | None = None
    for line in lines[last_error + 1:]:
        if line_pattern.match(line):
            break
        stripped = line.strip()
        if stripped.startswith("Caused by: "):
            cause = stripped[len("Caused by: "):]
        elif cause is None and stripped and not stripped.startswith("at "):
            cause = stripped
    if cause:
        quote += f" (cause: {cause[:_MAX_QUOTE]!r})"
    return quote
