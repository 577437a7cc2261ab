"""A benchmark worker process (``python -m <module> --worker``) driven over JSON lines.

The parent writes orders to the worker's stdin and reads JSON messages from its stdout; the
worker's stderr is kept for error messages. The child gets SIGKILL if the benchmark dies.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar

from bench.cli_process import ROOT
from bench.common import BenchError
from marshal_py.devbroker.jvm import die_with_parent
from marshal_py.protocol import parse_ranges


class WorkerProcess:
    """Runs ``python -m <module> --worker``; :meth:`receive` waits for a message with a key.

    Subclasses may override :meth:`on_message` to consume some messages (progress reports)
    instead of queueing them.
    """

    def __init__(self, name: str, module: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, "--worker"], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"}, preexec_fn=die_with_parent(os.getpid()),
        )
        self.messages: queue.Queue[dict[str, Any]] = queue.Queue()
        self._stderr: deque[str] = deque(maxlen=20)
        for target in (self._read_stdout, self._read_stderr):
            threading.Thread(target=target, daemon=True, name=f"{name}-reader").start()

    def on_message(self, message: dict[str, Any]) -> bool:
        """Handle a message as it arrives; True when handled (it is then not queued)."""
        return False

    def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            try:
                message = json.loads(raw)
            except ValueError:
                self._stderr.append(f"stdout: {raw.rstrip()}")
                continue
            if not self.on_message(message):
                self.messages.put(message)

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in self.proc.stderr:
            self._stderr.append(raw.rstrip())

    def send(self, line: str) -> None:
        """Write one line to the worker's stdin."""
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise BenchError(f"worker {self.name} is gone ({exc}): {self.stderr_tail()}") \
                from exc

    def receive(self, key: str, timeout_s: float) -> dict[str, Any]:
        """The next message holding ``key``; a message with only an ``error`` raises it."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                message = self.messages.get(timeout=0.1)
            except queue.Empty:
                self.check_alive()
                if time.monotonic() >= deadline:
                    raise BenchError(f"timed out after {timeout_s:.0f} s waiting for worker "
                                     f"{self.name} ({key}): {self.stderr_tail()}") from None
                continue
            if message.get("error") and key not in message:
                raise BenchError(f"worker {self.name}: {message['error']}")
            if key in message:
                return message

    def alive(self) -> bool:
        return self.proc.poll() is None

    def check_alive(self) -> None:
        """Raise if the worker exited."""
        if self.proc.poll() is not None:
            raise BenchError(f"worker {self.name} exited with {self.proc.returncode}: "
                             f"{self.stderr_tail()}")

    def stderr_tail(self) -> str:
        return " | ".join(list(self._stderr)[-5:]) or "no output"

    def stop(self, timeout_s: float = 20.0) -> None:
        """Ask the worker to stop and exit, then terminate or kill it if it does not."""
        if self.proc.poll() is None:
            with contextlib.suppress(BenchError):
                self.send("stop")  # harmless when idle; ends a run in progress
            with contextlib.suppress(BenchError):
                self.send("exit")
            with contextlib.suppress(OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)


class ChildProcess(Protocol):
    """A benchmark's child process: its ``Popen`` and a polite ``stop``."""

    proc: subprocess.Popen[Any]

    def stop(self) -> None: ...


W = TypeVar("W", bound=ChildProcess)


@contextlib.contextmanager
def worker_pool(make: Callable[[int], W], count: int) -> Iterator[list[W]]:
    """Start ``count`` workers (``make(k)`` for k = 0, 1, ...); stop and reap every one on exit."""
    started: list[W] = []
    try:
        for k in range(count):
            started.append(make(k))
        yield started
    finally:
        for worker in started:  # every child is stopped (and reaped) whatever happened
            try:
                worker.stop()
            except BaseException:
                worker.proc.kill()
                raise


# -- the worker's side of the protocol ----------------------------------------------------------


def say(**message: Any) -> None:
    """Send one JSON message to the driving process (the worker's stdout)."""
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def prepare_orders() -> Iterator[dict[str, Any]]:
    """The ``{"cmd": "prepare", ...}`` orders read from stdin until ``exit`` or end of input.

    Exits with 128 + signal on SIGTERM; any other line is answered with an error message.
    """
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        if line == "exit":
            return
        order = json.loads(line)
        if order.get("cmd") != "prepare":
            say(error=f"unexpected command {line!r}")
            continue
        yield order


def ready_then_go() -> bool:
    """Tell the driver this worker is ready and wait for ``go`` (False: something else came)."""
    say(ready=True)
    go = sys.stdin.readline().strip()
    if go != "go":
        say(error=f"expected go, got {go!r}")
        return False
    return True


def offsets_handed_out(names: list[str], summaries: list[dict[str, Any]], records: int,
                       done: str) -> set[int]:
    """The offsets the workers' summaries say they were handed (``"offsets"``: ranges).

    Raises :class:`BenchError` if a summary carries an error, or if an offset below
    ``records`` was handed to no worker although ``done`` (what marked the run finished).
    """
    errors = [f"{name}: {s['error']}" for name, s in zip(names, summaries, strict=True)
              if s.get("error")]
    if errors:
        raise BenchError("; ".join(errors))
    seen: set[int] = set()
    for summary in summaries:
        for first, last in (parse_ranges(summary["offsets"]) if summary["offsets"] else ()):
            seen.update(range(first, last + 1))
    missing = records - len(seen & set(range(records)))
    if missing:
        raise BenchError(f"{done} but {missing:,} offsets were never handed out to a worker")
    return seen
