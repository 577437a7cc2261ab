"""Why a throwaway Spark cluster's daemon failed, in one line, from its log."""

from __future__ import annotations

import re
from pathlib import Path

from marshal_py.devbroker.jvm import LOOPBACK
from marshal_py.devbroker.jvm_log import describe_last_error, read_log_tail
from marshal_py.spark.session import SparkError

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
    text = read_log_tail(log_path, 256 * 1024)
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
        f"{describe_last_error(text, _LOG_LINE_RE)}; see its log {log_path}"
    )
