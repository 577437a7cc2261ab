"""Long, self-contained checks that run in a child process beside the rest of the suite.

Some checks are whole programs with a broker of their own (the benchmark smoke run). In a run
without workers they start when collection finishes, under ``nice -n 19``, and run on the CPU
the foreground leaves idle: beside the pure tests (which run first, on one core) and while the
broker tests wait on heartbeats, without taking the CPU from a test that times them. Their own
test, run last, asserts on the outcome. Under pytest-xdist (``bin/test``) the worker that
takes a job's test runs the job then, at normal priority (``tests/conftest.py``): the workers
are the parallelism, and ``tests/scheduling.py`` sends that part out early, as a long one.

A test module declares its job at import time with :func:`background_job`; the job starts
only if one of its tests is selected, and the suite runs the tests that read an outcome last.
Jobs run one after another, in their ``order``. ``MARSHAL_TEST_BACKGROUND=0`` runs each
job inline when its test asks for it instead (for debugging one of them).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The lowest CPU priority: a job started in the background gets only what the foreground
#: leaves (its broker and Spark JVMs inherit it). A job run inline, when its test asks (under
#: pytest-xdist: a worker's part like any other), runs at the test's priority: starved at
#: nice 19 beside busy workers, its at-most-once members would lose their claims and its
#: Spark queries their deadlines.
NICE = ("nice", "-n", "19") if shutil.which("nice") else ()


@dataclass(frozen=True)
class Job:
    """One background check: ``command(scratch)`` is run from the repository root."""

    name: str
    #: Node id (or node id prefix) of the tests that read the outcome.
    test: str
    command: Callable[[Path], Sequence[str]]
    timeout_s: float
    #: Jobs start in this order (then in declaration order): a job with timings of its own
    #: goes first, while the pure tests leave a core idle.
    order: int = 0


@dataclass(frozen=True)
class Outcome:
    """How a job ended: its exit code, where it wrote, and the tail of what it printed."""

    name: str
    returncode: int | None
    seconds: float
    scratch: Path
    stdout: str
    stderr: str

    def tail(self, chars: int = 4000) -> str:
        """The end of stdout and stderr, for an assertion message."""
        return (f"{self.name}: exit {self.returncode} after {self.seconds:.0f} s\n"
                f"--- stdout\n{self.stdout[-chars:]}\n--- stderr\n{self.stderr[-chars:]}")


_DECLARED: dict[str, Job] = {}


def background_job(job: Job) -> Job:
    """Declare ``job`` (module level, at import). Declaring the same name twice is an error."""
    existing = _DECLARED.get(job.name)
    if existing is not None and existing != job:
        raise ValueError(f"background job {job.name!r} is declared twice")
    _DECLARED[job.name] = job
    return job


def _read_by(job: Job, node_id: str) -> bool:
    return node_id.startswith(job.test)


def awaits_background_job(node_id: str) -> bool:
    """Whether the test ``node_id`` reads the outcome of a declared job."""
    return any(_read_by(job, node_id) for job in _DECLARED.values())


class BackgroundJobs:
    """The session's jobs: started after collection, awaited by their tests."""

    def __init__(self, inline: bool | None = None) -> None:
        self._root = Path(tempfile.mkdtemp(prefix="marshal-test-background-"))
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="background-job")
        self._futures: dict[str, Future[Outcome]] = {}
        self._lock = threading.Lock()
        self._running: subprocess.Popen[str] | None = None
        self._stopping = False
        #: Run each job when its test asks for it (``MARSHAL_TEST_BACKGROUND=0``, or when
        #: the suite's workers are the parallelism) rather than from the end of collection.
        self.inline = inline if inline is not None \
            else os.environ.get("MARSHAL_TEST_BACKGROUND", "1") == "0"

    def start(self, selected_node_ids: Sequence[str]) -> None:
        """Queue, by ``order``, every declared job one of whose tests is selected."""
        if self.inline:
            return
        for job in sorted(_DECLARED.values(), key=lambda j: j.order):
            if any(_read_by(job, node) for node in selected_node_ids):
                self._futures[job.name] = self._pool.submit(self._run, job)

    def outcome(self, name: str) -> Outcome:
        """Wait for job ``name`` (running it now if it was not started) and say how it ended."""
        job = _DECLARED[name]
        future = self._futures.get(name)
        if future is None:
            future = self._futures[name] = self._pool.submit(self._run, job)
        # Jobs run one after another: this one may wait for every other to end first.
        return future.result(timeout=sum(j.timeout_s for j in _DECLARED.values()) + 60)

    def stop(self) -> None:
        """End the session: kill a job still running, remove the scratch directories."""
        with self._lock:
            self._stopping = True
            running = self._running
        if running is not None:
            _end(running)
        for future in self._futures.values():
            future.cancel()
        self._pool.shutdown(wait=True)
        shutil.rmtree(self._root, ignore_errors=True)

    def _run(self, job: Job) -> Outcome:
        scratch = self._root / job.name
        scratch.mkdir(parents=True, exist_ok=True)
        stdout_path, stderr_path = scratch / "stdout.txt", scratch / "stderr.txt"
        started = time.monotonic()
        with stdout_path.open("w") as out, stderr_path.open("w") as err:
            with self._lock:
                if self._stopping:
                    raise RuntimeError(f"background job {job.name!r}: the session is ending")
                nice = () if self.inline else NICE
                process = self._running = subprocess.Popen(
                    [*nice, *job.command(scratch)], cwd=ROOT, stdout=out, stderr=err,
                    text=True)
            try:
                returncode: int | None = process.wait(timeout=job.timeout_s)
            except subprocess.TimeoutExpired:
                _end(process)
                returncode = None
            finally:
                with self._lock:
                    self._running = None
        return Outcome(job.name, returncode, time.monotonic() - started, scratch,
                       stdout_path.read_text(errors="replace"),
                       stderr_path.read_text(errors="replace"))


def _end(process: subprocess.Popen[str]) -> None:
    """SIGTERM (a job cleans up its broker), then SIGKILL after 30 s."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
