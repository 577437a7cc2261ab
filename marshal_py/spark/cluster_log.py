"""Why a throwaway Spark cluster's daemon failed, in one line, from its log."""

from __future__ import annotations

import os
import re
from pathlib import Path

from marshal_py.devbroker.jvm import LOOPBACK
from marshal_py.spark.session import SparkError

_MAX_QUOTE = 300
_BIND_RE = re.compile(r"Service '(\w+)' failed after \d+ retries")
_LOG_LINE_RE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?P<level>[A-Z]+) (?P<message>.*)$")


class SparkClusterError(SparkError):
    """A standalone cluster could not be started or stopped."""


class PortInUseError(SparkClusterError):
    """The master could not bind one of its ports."""

    def __init__(self, message: str, service: str) -> None:
        super().__init__(message)
        self.service = service  # "sparkMaster", "MasterUI" or "" (unknown)


def startup_failure(who: str, returncode: int, log_path: Path, *, master_port: int | None,
                    webui_port: int | None) -> SparkClusterError:
    """The error of a daemon that exited during startup, from the tail of its log."""
    text = _read_tail(log_path)
    bind = _BIND_RE.search(text)
    if bind is not None or "Address already in use" in text:
        service = bind.group(1) if bind is not None else ""
        if service == "sparkMaster":
            port, what = master_port, "master port"
        elif service == "MasterUI":
            port, what = webui_port, "master web UI port"
        else:
            port, what = None, f"a port of the {who}"
        where = f" {LOOPBACK}:{port}" if port is not None else ""
        hint = f" (see `ss -ltnp 'sport = :{port}'`)" if port is not None else ""
        return PortInUseError(
            f"the Spark {who} cannot start: {what}{where} is already in use; stop whatever "
            f"listens there{hint} or choose another port; log: {log_path}",
            service,
        )
    return SparkClusterError(
        f"the Spark {who} exited during startup (status {returncode}): "
        f"{_describe_last_error(text)}; see its log {log_path}"
    )


def _read_tail(path: Path, limit: int = 256 * 1024) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - limit))
            return handle.read().decode("utf-8", errors="replace")
    except OSError:
        return ""


def _describe_last_error(text: str) -> str:
    """Quote the last ERROR line of a daemon log, or its last line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for index in range(len(lines) - 1, -1, -1):
        match = _LOG_LINE_RE.match(lines[index])
        if match is not None and match.group("level") in ("ERROR", "FATAL"):
            quote = f"last ERROR: {match.group('message')[:_MAX_QUOTE]!r}"
            following = lines[index + 1 : index + 2]
            if following and not _LOG_LINE_RE.match(following[0]):
                quote += f" ({following[0][:_MAX_QUOTE]!r})"
            return quote
    return f"last log line: {lines[-1][:_MAX_QUOTE]!r}" if lines else "the log is empty"
