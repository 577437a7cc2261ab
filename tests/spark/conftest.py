"""Spark fixtures for the tests under tests/spark.

``spark``
    A ``local[2]`` SparkSession from :func:`marshal_py.spark.session.local_session` (driver on
    127.0.0.1, no UI, 4 shuffle partitions, Arrow on, quiet logs, Python workers on this
    interpreter). Started on first use, shared by every test, stopped when the cluster session
    starts or when the process leaves tests/spark.
``spark_cluster``
    A :class:`marshal_py.spark.cluster.StandaloneCluster`: a master and 2 workers (1 core, 1g
    each) on 127.0.0.1, started on first use and stopped when the process leaves tests/spark.
``cluster_session``
    A SparkSession on ``spark_cluster``: 2 executors (1 core, 512m each), one per worker, each
    a JVM of its own with its own Python workers; the fixture returns once both executors are
    registered.

Usage::

    def test_counts(spark):
        assert spark.range(10).count() == 10

    def test_on_executors(cluster_session):
        rdd = cluster_session.sparkContext.parallelize(range(8), 8)
        ...

pyspark allows one SparkSession per process, so ``spark`` and ``cluster_session`` share one
slot (:class:`SparkSessions`): the first test that needs the cluster session stops the local
one. To do that once per run, the tests under tests/spark are reordered at collection: every
test that uses ``spark_cluster`` or ``cluster_session`` runs after all the others, those on
``spark_cluster`` alone first (an application they start, in a subprocess, gets the cluster's
cores: the cluster session holds them all while it lives); each group keeps its order.
Consequently:

* a test may use ``spark`` or ``cluster_session``, not both (it fails at setup);
* the sessions and the cluster are package fixtures: under ``bin/test`` each worker runs its
  Spark parts one after another (``tests/scheduling.py``) and stops them when it moves on to
  other tests, instead of leaving JVMs idle to the end of the run;
* fixtures of module or function scope may depend on ``spark``; a fixture that depends on
  ``cluster_session`` must not be used by local tests;
* do not stop either session in a test (every later test using it would fail); settings
  changed with ``spark.conf.set`` are visible to later tests, so ``unset`` them (or use
  ``local_session`` in a subprocess for a differently configured session);
* pytest-timeout counts fixture setup: the first test of each kind spends its first seconds
  starting Spark (see ``--durations``);
* functions a job ships to executors may live in test modules: the repository root is on the
  executors' Python path;
* the sessions' JVMs run the C1 compiler only (quick to start, slower in long hot loops):
  measure performance in bench/, not here.

The fixtures are visible to tests under tests/spark only. They need the spark extra
(``pip install marshal_py[spark]``, which bin/setup installs) and Java 17+.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from marshal_py.spark.cluster import StandaloneCluster
from tests.spark.quick_jvm import QUICK_OPTIONS, ensure_archive, quick_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
"""The directory holding the ``tests`` package (the repository root)."""

LOCAL_MASTER = "local[2]"
CLUSTER_WORKERS = 2

# Test jobs are short: the C1 compiler alone (no C2) halves session start and typical test
# jobs on a loaded 2-core machine (local session 7-9 s instead of 13-15 s, a mixed SQL and
# Python UDF workload 11-20 s instead of 22-33 s), the serial collector spends less CPU, and
# drivers map Spark's classes from a class-data sharing archive (tests/spark/quick_jvm.py).
# Not for benchmarks.

LOCAL_SESSION_CONF: dict[str, str | int] = {}
"""Settings of the ``spark`` session on top of local_session's (and of the drivers' JVM
options, :func:`tests.spark.quick_jvm.driver_java_options`)."""

CLUSTER_SESSION_CONF: dict[str, str | int] = {
    "spark.executor.extraJavaOptions": QUICK_OPTIONS,
    "spark.executor.cores": 1,
    "spark.cores.max": CLUSTER_WORKERS,
    "spark.executor.memory": "512m",
    # Scheduling starts once every executor has registered (getOrCreate blocks until then),
    # so the first job already spreads over both.
    "spark.scheduler.minRegisteredResourcesRatio": "1.0",
    "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
    # cloudpickle ships functions defined in importable modules by reference: put the
    # repository root on the executors' Python path, so that a function defined in a test
    # module imports there as it does in local mode (whose Python workers start in the
    # driver's working directory, not in an executor's).
    "spark.executorEnv.PYTHONPATH": str(ROOT),
}
"""Settings of the ``cluster_session`` on top of local_session's (and of the driver's JVM
options)."""

_CLUSTER_FIXTURES = frozenset({"spark_cluster", "cluster_session"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the tests under tests/spark that use the cluster after all the others there: first
    those that use ``spark_cluster`` alone (an application of their own, e.g. in a
    subprocess, may then take the cluster's cores), then those on ``cluster_session``.

    The local SparkSession is then stopped once, when the cluster session starts, and never
    needed again. The order within each group is kept; items outside tests/spark stay put.
    """
    positions = [i for i, item in enumerate(items) if item.path.is_relative_to(HERE)]
    ours = [items[i] for i in positions]
    local = [item for item in ours if not _uses_cluster(item)]
    cluster_only = [item for item in ours
                    if _uses_cluster(item) and not _uses_cluster_session(item)]
    on_session = [item for item in ours if _uses_cluster_session(item)]
    for position, item in zip(positions, local + cluster_only + on_session, strict=True):
        items[position] = item


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Fail a test that asks for both sessions before either is set up (one would stop the
    other)."""
    names = getattr(item, "fixturenames", ())
    if "spark" in names and "cluster_session" in names:
        pytest.fail(
            "a test cannot use both `spark` and `cluster_session`: pyspark allows one "
            "SparkSession per process"
        )


def _uses_cluster(item: pytest.Item) -> bool:
    names = getattr(item, "fixturenames", ())
    return any(name in _CLUSTER_FIXTURES for name in names)


def _uses_cluster_session(item: pytest.Item) -> bool:
    return "cluster_session" in getattr(item, "fixturenames", ())


class SparkSessions:
    """The process's one SparkSession slot, holding the local or the cluster session."""

    def __init__(self) -> None:
        self.kind: str | None = None
        self.session: SparkSession | None = None

    def local(self) -> SparkSession:
        """The ``local[2]`` session, started (after stopping the cluster one) if needed."""
        return self._get("local", LOCAL_MASTER, LOCAL_SESSION_CONF)

    def on_cluster(self, cluster: StandaloneCluster) -> SparkSession:
        """A session on ``cluster``, started (after stopping the local one) if needed."""
        session = self._get("cluster", cluster.master_url, CLUSTER_SESSION_CONF)
        _await_executors(session, CLUSTER_WORKERS)
        return session

    def stop(self) -> None:
        """Stop the current session, if any."""
        session, self.session, self.kind = self.session, None, None
        if session is not None:
            session.stop()

    def _get(self, kind: str, master: str, conf: dict[str, str | int]) -> SparkSession:
        if self.kind == kind and self.session is not None and not _stopped(self.session):
            return self.session
        self.stop()
        self.session = quick_session(f"marshal-tests-{kind}", master, **conf)
        self.kind = kind
        return self.session


def _stopped(session: SparkSession) -> bool:
    return session.sparkContext._jsc is None


def _await_executors(session: SparkSession, count: int) -> None:
    """Fail unless ``count`` executors are registered (getOrCreate waited for them)."""
    jsc = session.sparkContext._jsc
    assert jsc is not None
    registered = jsc.sc().getExecutorIds().size()
    if registered < count:
        pytest.fail(
            f"the cluster session has {registered} executors registered, not {count}; see the "
            "executor logs in the cluster's work directory"
        )


@pytest.fixture(scope="session", autouse=True)
def _class_archive() -> None:
    """Make the drivers' class archive (tests/spark/quick_jvm.py) before the first Spark test
    of the run, once per machine: about 50 s, while any other process making it is not
    waited for (its drivers start without it meanwhile)."""
    ensure_archive()


@pytest.fixture(scope="package")
def _spark_sessions(_class_archive: None) -> Iterator[SparkSessions]:
    sessions = SparkSessions()
    try:
        yield sessions
    finally:
        sessions.stop()


@pytest.fixture(scope="package")
def spark(_spark_sessions: SparkSessions) -> SparkSession:
    """A ``local[2]`` SparkSession shared by the whole run (see the module documentation)."""
    return _spark_sessions.local()


@pytest.fixture(scope="package")
def spark_cluster(_spark_sessions: SparkSessions) -> Iterator[StandaloneCluster]:
    """A standalone cluster: master and 2 workers x 1 core, 1g, on 127.0.0.1."""
    cluster = StandaloneCluster(workers=CLUSTER_WORKERS, cores=1, memory="1g")
    cluster.start()
    try:
        yield cluster
    finally:
        if _spark_sessions.kind == "cluster":
            _spark_sessions.stop()  # the application first, then its cluster
        cluster.stop()


@pytest.fixture(scope="package")
def cluster_session(
    _spark_sessions: SparkSessions, spark_cluster: StandaloneCluster
) -> SparkSession:
    """A SparkSession on ``spark_cluster`` with one 1-core executor per worker."""
    return _spark_sessions.on_cluster(spark_cluster)


@pytest.fixture(autouse=True)
def _one_live_spark_session(request: pytest.FixtureRequest) -> None:
    """Fail clearly when a test would get a stopped SparkSession."""
    names = request.fixturenames
    for name in ("spark", "cluster_session"):
        if name in names and _stopped(request.getfixturevalue(name)):
            pytest.fail(
                f"the `{name}` SparkSession was stopped before this test: a test stopped it, "
                "or the tests were reordered so that a local test ran after a cluster test "
                "(see tests/spark/conftest.py)"
            )
