"""A Spark session in a process of its own that serves requests one after another.

pyspark allows one session per process, and the ``spark`` fixture's has no Kafka connector.
Tests that need a session with it (the JVM-reader audit, the range streams) talk to a process
holding one, started once for their module: its session (a JVM, and the connector's
resolution) then starts once, not once per request.

Server side (:func:`serve`): reads one JSON object a line on stdin, answers each with one JSON
line on stdout, ``{"ok": true, "result": ...}`` or ``{"ok": false, "error": "..."}``, after a
first ``{"ready": true}`` once the session is up; ends at the end of stdin. Everything else
written to standard output (Spark's chatter, the JVM's) goes to stderr. Client side:
:class:`SessionProcess`.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def serve(start: Callable[[], Any], handle: Callable[[Any, dict[str, Any]], Any]) -> None:
    """Start a session with ``start()``, then answer each request with ``handle(session,
    request)`` (an exception is the answer's error) until stdin ends; stop the session."""
    # The answers get standard output's pipe to themselves: whatever else writes to fd 1
    # (the JVM and the Python workers it starts inherit it) goes to stderr instead.
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    session = start()
    try:
        print(json.dumps({"ready": True}), file=answers, flush=True)
        for line in sys.stdin:
            if not line.strip():
                continue
            try:
                answer = {"ok": True, "result": handle(session, json.loads(line))}
            except Exception:  # reported to the test, which fails with it
                answer = {"ok": False, "error": traceback.format_exc()}
            print(json.dumps(answer), file=answers, flush=True)
    finally:
        session.stop()


class SessionProcess:
    """The client of a :func:`serve` process: ``python -m MODULE ARGS...`` in the repository
    root, its stderr in ``scratch``."""

    def __init__(self, module: str, args: list[str], scratch: Path, what: str) -> None:
        self._what = what
        self._stderr_path = scratch / f"{module.rsplit('.', 1)[-1]}.stderr"
        self._stderr = self._stderr_path.open("w")
        self._process = subprocess.Popen(
            [sys.executable, "-m", module, *args], cwd=ROOT,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr, text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
        self._answers: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self._ready = False

    def _read(self) -> None:
        assert self._process.stdout is not None
        try:
            for line in self._process.stdout:
                self._answers.put(json.loads(line))
        finally:
            self._answers.put(None)  # the process ended (or wrote what is not an answer)

    def _next(self, doing: str, timeout_s: float) -> dict[str, Any]:
        try:
            answer = self._answers.get(timeout=timeout_s)
        except queue.Empty:
            answer = None
            ended = f"no answer within {timeout_s:g} s"
        else:
            ended = f"the process ended (exit code {self._process.poll()})"
        if answer is None:
            pytest.fail(f"{self._what}, {doing}: {ended}\n"
                        f"{self._stderr_path.read_text()[-3000:]}")
        return answer

    def submit(self, request: dict[str, Any]) -> None:
        """Send a request; :meth:`answer` waits for its answer."""
        assert self._process.stdin is not None
        self._process.stdin.write(json.dumps(request) + "\n")
        self._process.stdin.flush()

    def answer(self, doing: str, timeout_s: float) -> dict[str, Any]:
        """The answer to the request sent first among those not answered yet:
        ``{"ok": ..., "result" or "error": ...}``."""
        if not self._ready:
            assert self._next("starting its Spark session", timeout_s) == {"ready": True}
            self._ready = True
        return self._next(doing, timeout_s)

    def close(self) -> None:
        """End stdin and wait for the process to stop its session and exit."""
        assert self._process.stdin is not None
        self._process.stdin.close()
        try:
            self._process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._stderr.close()
