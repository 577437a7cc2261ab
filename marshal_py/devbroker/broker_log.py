"""Reading a development broker's log when it failed: one line that says why."""

from __future__ import annotations

import re
from pathlib import Path

from marshal_py.devbroker.jvm_log import describe_last_error as _describe_last_error
from marshal_py.devbroker.jvm_log import read_log_tail
from marshal_py.errors import DevBrokerError

__all__ = ["describe_last_error", "read_log_tail", "startup_failure"]

_BIND_FAILURE_RE = re.compile(r"failed to bind to ([^\s:]+):(\d+): Address already in use")
_LOG_LINE_RE = re.compile(r"^\[\d{4}-\d\d-\d\d [^\]]*\] (?P<level>[A-Z]+) (?P<message>.*)$")


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
    return _describe_last_error(text, _LOG_LINE_RE)
