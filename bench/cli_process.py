"""A ``marshal`` CLI process driven by a benchmark: started, read line by line, stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

from marshal_py.devbroker.jvm import die_with_parent

ROOT = Path(__file__).resolve().parent.parent


class CliProcess:
    """Runs ``python -m marshal_py.cli <args>`` (or another ``module``); subclasses handle its
    output lines.

    ``on_stdout(raw, at)`` gets every stdout line (bytes) with the monotonic time it was read;
    ``on_stderr(line)`` every stderr line. The last stderr lines are kept for error messages.
    The child gets SIGKILL if the benchmark dies.
    """

    def __init__(self, name: str, args: list[str], module: str = "marshal_py.cli") -> None:
        self.name = name
        self.killed = False
        self._stderr: deque[str] = deque(maxlen=20)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=ROOT,
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=die_with_parent(os.getpid()),
        )
        self._readers = [threading.Thread(target=t, daemon=True, name=f"{name}-reader")
                         for t in (self._read_stdout, self._read_stderr)]
        for reader in self._readers:
            reader.start()

    def on_stdout(self, raw: bytes, at: float) -> None:
        """One line the process printed on stdout."""

    def on_stderr(self, line: str) -> None:
        """One line the process printed on stderr."""

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            self.on_stdout(raw, time.monotonic())

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip()
            self._stderr.append(line)
            self.on_stderr(line)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stderr_tail(self) -> str:
        return " | ".join(list(self._stderr)[-5:]) or "no output"

    def kill9(self) -> None:
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signal.SIGKILL)

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM (commit, release and leave), then SIGKILL if it does not exit in time; then
        wait until everything it printed has been read."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for reader in self._readers:
            reader.join(timeout=10)
