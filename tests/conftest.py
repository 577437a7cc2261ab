"""Shared fixtures. The integration suite runs on a real Kafka broker that it starts itself.

Order, in one process: the pure tests (unit, property, simulation: no broker, no real time)
run first, then those that wait on a broker, last those that read the outcome of a background
job (:mod:`tests.background`: started when collection ends, at the lowest CPU priority).
Under pytest-xdist (``bin/test``), parts of the suite go out in :mod:`tests.scheduling`'s
order, the longest first, and a worker runs a job when its test asks for it.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from marshal_py.devbroker import DevBroker
from tests.background import BackgroundJobs, awaits_background_job
from tests.tiers import FAST

#: The suite's brokers live seconds to minutes: the JVM's quick compiler alone (C1) and the
#: serial collector cost them less CPU than the server compiler (C2) and G1, which pay back
#: only over a long run. Every dev broker the suite starts (its subprocesses' too) takes them
#: (marshal_py.devbroker: Kafka's own variable); a value already set is kept.
os.environ.setdefault("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")

# No per-example deadline: the suite shares 2 cores with brokers and background jobs, and a
# slow example is not a failure of the property (the tests that care time themselves).
settings.register_profile("marshal", deadline=None)
settings.load_profile("marshal")

#: ``bin/test --fast`` (the edit-test loop, :mod:`tests.tiers`): property tests run a tenth of
#: their examples (at least 10). The full suite (``bin/test``) always runs them all.
FAST_EXAMPLES_DIVISOR = 10

HERE = Path(__file__).resolve().parent

#: Spark's Python processes (workers, daemons, streaming source runners) load pyspark from the
#: installed package, not from the zip archives Spark puts first on their path, which Python
#: compiles anew in each process (tests/spark/worker_site/sitecustomize.py says more).
WORKER_SITE = str(HERE / "spark" / "worker_site")
_PYTHONPATH = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
if WORKER_SITE not in _PYTHONPATH:
    os.environ["PYTHONPATH"] = os.pathsep.join([WORKER_SITE, *_PYTHONPATH])

#: Directories whose tests need no broker and no real time: CPU-bound on one core, they run
#: first, while the background jobs take the other.
PURE = ("unit", "property", "simulation", "golden")

_BACKGROUND = pytest.StashKey[BackgroundJobs]()

#: The pytest-xdist worker this process is (``gw0``, ...), or None when not under xdist.
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")


def pytest_configure(config: pytest.Config) -> None:
    # Under pytest-xdist (``bin/test`` runs the suite on several workers) each worker runs
    # a job when its test asks for it: the workers themselves are the parallelism.
    config.stash[_BACKGROUND] = BackgroundJobs(inline=_XDIST_WORKER is not None or None)


def pytest_unconfigure(config: pytest.Config) -> None:
    jobs = config.stash.get(_BACKGROUND, None)
    if jobs is not None:
        jobs.stop()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``bin/test``), hand the workers whole parts of the suite, the
    longest first (see :mod:`tests.scheduling`)."""
    from tests.scheduling import PartsScheduling

    return PartsScheduling(config, log)


def _is_pure(item: pytest.Item) -> bool:
    return any(item.path.is_relative_to(HERE / name) for name in PURE)


@pytest.hookimpl(trylast=True)  # after tests/spark's reordering, which this one keeps
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The pure tests first, then those that wait on a broker, then those that read a
    background job's outcome (stable: the order within each part is kept)."""

    def rank(item: pytest.Item) -> int:
        if awaits_background_job(item.nodeid):
            return 2
        return 0 if _is_pure(item) else 1

    if _XDIST_WORKER is not None:
        # Under xdist the workers take parts of the suite up in this order (the longest
        # first); every worker sorts alike.
        from tests.scheduling import rank_of

        items.sort(key=lambda item: rank_of(item.nodeid))
    else:
        items.sort(key=rank)
    if FAST:
        for item in items:
            _fewer_examples(item)


def _fewer_examples(item: pytest.Item) -> None:
    """A tenth of a Hypothesis test's examples (its own ``@settings`` included)."""
    function = getattr(item, "function", None)
    current = getattr(function, "_hypothesis_internal_use_settings", None)
    if current is None:
        return
    fewer = max(10, current.max_examples // FAST_EXAMPLES_DIVISOR)
    if fewer < current.max_examples:
        function._hypothesis_internal_use_settings = settings(
            current, max_examples=fewer)


#: Parts of the suite the terminal summary lists, the longest first.
SLOWEST_PARTS = 10


@pytest.hookimpl(trylast=True)  # after the slowest tests (--durations)
def pytest_terminal_summary(terminalreporter: Any) -> None:
    """After ``--durations``' slowest tests, the slowest parts of the suite (the units
    tests/scheduling.py hands the workers; a test file, or a set of Spark files): setup, call
    and teardown of their tests summed, to keep the parts' order right."""
    from tests.scheduling import part_of

    totals: dict[str, float] = {}
    counts: dict[str, int] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            duration = getattr(report, "duration", None)
            nodeid = getattr(report, "nodeid", "")
            if duration is None or not nodeid or getattr(report, "when", None) is None:
                continue
            part = part_of(nodeid)
            totals[part] = totals.get(part, 0.0) + duration
            if report.when == "call":
                counts[part] = counts.get(part, 0) + 1
    if len(totals) < 2:
        return
    terminalreporter.write_sep("=", f"slowest {SLOWEST_PARTS} parts (tests/scheduling.py)")
    for part, seconds in sorted(totals.items(), key=lambda kv: -kv[1])[:SLOWEST_PARTS]:
        terminalreporter.write_line(f"{seconds:8.1f}s  {part} ({counts.get(part, 0)} tests)")


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[_BACKGROUND].start([item.nodeid for item in session.items])


@pytest.fixture(scope="session")
def background(request: pytest.FixtureRequest) -> BackgroundJobs:
    """The session's background jobs (see :mod:`tests.background`)."""
    return request.config.stash[_BACKGROUND]


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """bootstrap.servers of a real broker: the dev broker, started once per test session.

    ``MARSHAL_TEST_BOOTSTRAP_SERVERS`` points the suite at an already running broker instead;
    ``MARSHAL_TEST_BOOTSTRAP_FILE`` at one that is starting, whose first line of output (see
    :func:`announced_bootstrap`) will be in that file (``bin/test``).
    """
    external = os.environ.get("MARSHAL_TEST_BOOTSTRAP_SERVERS")
    announced = os.environ.get("MARSHAL_TEST_BOOTSTRAP_FILE")
    if external:
        yield external
        return
    if announced:
        yield announced_bootstrap(Path(announced))
        return
    broker = DevBroker()
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


#: How long a test waits for the broker ``bin/test`` starts beside the lint and the docs.
BROKER_START_TIMEOUT_S = 180.0


def announced_bootstrap(path: Path, timeout_s: float = BROKER_START_TIMEOUT_S) -> str:
    """The bootstrap.servers a starting dev broker announces in ``path``: ``bin/test`` writes
    the broker's first line of output there (``bootstrap.servers=HOST:PORT``), or
    ``failed: WHY`` when it exits first. Polled: the file appears once, renamed into place."""
    deadline = time.monotonic() + timeout_s
    while not path.is_file():
        if time.monotonic() > deadline:
            pytest.fail(f"the run's dev broker announced nothing in {timeout_s:.0f} s ({path})")
        time.sleep(0.05)
    line = path.read_text().strip()
    if not line.startswith("bootstrap.servers="):
        pytest.fail(f"the run's dev broker did not start: {line}")
    return line.removeprefix("bootstrap.servers=")


@pytest.fixture
def unique_name() -> str:
    """A topic or group name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"
