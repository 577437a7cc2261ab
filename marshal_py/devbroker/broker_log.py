"""Reading a development broker's log when it failed: one line that says why."""

from __future__ import annotations

import os
import re
from pathlib import Path

from marshal_py.errors import DevBrokerError

_BIND_FAILURE_RE = re.compile(r"failed to bind to ([^\s:]+):(\d+): Address already in use")
_LOG_LINE_RE = re.compile(r"^\[\d{4}-\d\d-\d\d [^\]]*\] (?P<level>[A-Z]+) (?P<message>.*)$")
_MAX_QUOTE = 300


def read_log_tail(path: Path, limit: int = 512 * 1024) -> str:
    """The last ``limit`` bytes of the log at ``path`` ("" when it cannot be read)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - limit))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def startup_failure(text: str, returncode: int, *, name: str, host: str, port: int,
                    controller_port: int | None, log_path: Path) -> DevBrokerError:
    """The error of a broker that exited during startup, from the tail of its log."""
    bind = _BIND_FAILURE_RE.search(text)
    if bind is not None or "Address already in use" in text:
        busy = int(bind.group(2)) if bind is not None else port
        if busy == controller_port:
            return DevBrokerError(
                f"controller port {host}:{busy} (picked automatically) was taken by another "
                f"process while {name} started; start it again; broker log: {log_path}")
        return DevBrokerError(
            f"port {host}:{busy} is already in use ({name} exited at startup); stop "
            f"whatever listens there (see `ss -ltnp 'sport = :{busy}'`) or choose "
            f"another port; broker log: {log_path}")
    return DevBrokerError(
        f"{name} exited during startup (status {returncode}): "
        f"{describe_last_error(text)}; see its log {log_path}")


def describe_last_error(text: str) -> str:
    """Quote the last ERROR line of a broker log, with the root cause that follows it."""
    lines = text.splitlines()
    last_error: int | None = None
    for index, line in enumerate(lines):
        match = _LOG_LINE_RE.match(line)
        if match is not None and match.group("level") in ("ERROR", "FATAL"):
            last_error = index
    if last_error is None:
        tail = [line.strip() for line in lines if line.strip()]
        return f"last log line: {tail[-1][:_MAX_QUOTE]!r}" if tail else "the log is empty"
    match = _LOG_LINE_RE.match(lines[last_error])
    assert match is not None
    quote = f"last ERROR: {match.group('message').strip()[:_MAX_QUOTE]!r}"
    cause: str | None = None
    for line in lines[last_error + 1:]:
        if _LOG_LINE_RE.match(line):
            break
        stripped = line.strip()
        if stripped.startswith("Caused by: "):
            cause = stripped[len("Caused by: "):]
        elif cause is None and stripped and not stripped.startswith("at "):
            cause = stripped
    if cause:
        quote += f" (cause: {cause[:_MAX_QUOTE]!r})"
    return quote
