"""A throwaway Spark standalone cluster on 127.0.0.1: one master and N workers.

Tests that must see executors in processes of their own (not the driver's threads, as in
``local[N]``) start a :class:`StandaloneCluster` and connect a SparkSession to its
:attr:`~StandaloneCluster.master_url` (see :func:`marshal_py.spark.session.local_session`).
The daemons are launched with the pip-installed pyspark's own ``bin/spark-class`` (the pip
package has no ``sbin/start-master.sh``), on free ports, and the cluster is ready when the
master's JSON endpoint lists every worker ALIVE.

No process outlives the cluster: each daemon JVM leads a process group of its own, which the
executors it launches join (the PySpark daemons that executors fork lead groups of their own),
and :meth:`StandaloneCluster.stop` signals those groups (SIGTERM, then SIGKILL to whatever of
the process tree is left) and returns once every process is gone. Each daemon also gets a
Linux parent-death signal (SIGKILL) and every started cluster is stopped by an ``atexit``
hook, as the development Kafka broker is (:mod:`marshal_py.devbroker.broker`); an executor
whose worker died exits by itself (Spark's worker watcher), and its PySpark daemon when the
executor's end of its stdin closes. The parent-death signal fires when
the *thread* that started the cluster exits, so call :meth:`StandaloneCluster.start` from a
thread that lives as long as the cluster (the main thread, typically).

The daemons' settings, command lines and processes are handled in
:mod:`marshal_py.spark.cluster_processes`.
"""

from __future__ import annotations

import atexit
import json
import logging
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from marshal_py.devbroker.jvm import free_port
from marshal_py.spark.cluster_log import PortInUseError, SparkClusterError, startup_failure
from marshal_py.spark.cluster_processes import (
    DAEMON_JAVA_OPTS,
    ClusterDaemons,
    check_settings,
    master_command,
    prepare_work_dir,
    worker_command,
)
from marshal_py.spark.cluster_processes import MASTER_CLASS as MASTER_CLASS
from marshal_py.spark.cluster_processes import WORKER_CLASS as WORKER_CLASS
from marshal_py.spark.process_tree import daemon_environment, launch_daemon, tree
from marshal_py.spark.session import LOOPBACK, find_java, spark_home

log = logging.getLogger(__name__)

__all__ = ["SparkClusterError", "StandaloneCluster"]

_POLL_S = 0.2
_PORT_ATTEMPTS = 3


class StandaloneCluster:
    """A Spark standalone master and ``workers`` workers on 127.0.0.1.

    Use as a context manager (``with StandaloneCluster() as cluster: ...``) or call
    :meth:`start` and :meth:`stop`. Ports are picked when None. ``work_dir=None`` uses a
    temporary directory that :meth:`stop` removes (unless the cluster failed: it keeps the
    logs); an explicit ``work_dir`` is kept. The daemons log to ``master.log`` and
    ``worker-N.log`` in it, executors to ``worker-N/app-*/EXECUTOR/std{out,err}``.
    """

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        *,
        master_port: int | None = None,
        webui_port: int | None = None,
        work_dir: Path | None = None,
        daemon_memory: str = "512m",
        python: str | None = None,
    ) -> None:
        """Prepare a cluster (nothing is launched until :meth:`start`).

        Args:
            workers: how many workers (each runs the executors of an application on it).
            cores: the cores each worker offers.
            memory: the memory each worker offers executors, e.g. ``"1g"``.
            master_port: the master's RPC port on 127.0.0.1; a free port when None.
            webui_port: the master's web UI and JSON port; a free port when None.
            work_dir: where the logs and the workers' directories go; a temporary directory
                (removed by :meth:`stop`) when None.
            daemon_memory: the master's and each worker's JVM heap.
            python: the Python executors run (``PYSPARK_PYTHON``); :data:`sys.executable`
                when None.
        """
        check_settings(workers, cores, memory, daemon_memory, master_port, webui_port)
        self.workers: int = workers
        self.cores: int = cores
        self.memory: str = memory
        self.daemon_memory: str = daemon_memory
        self.python: str = python or sys.executable
        self.master_port: int = master_port if master_port is not None else free_port()
        self.webui_port: int = (
            webui_port
            if webui_port is not None
            else free_port(exclude=frozenset({self.master_port}))
        )
        # Ports picked here may be taken by the time the master binds them: those are picked
        # again (a busy port the caller chose is an error).
        self._picked_ports = {"sparkMaster": master_port is None, "MasterUI": webui_port is None}
        self._owns_work_dir = work_dir is None
        self._work_dir: Path | None = (
            None if work_dir is None else Path(work_dir).expanduser().resolve()
        )
        self._daemons = ClusterDaemons()
        self._keep_for_inspection = False
        self._atexit_registered = False

    # -- public properties ------------------------------------------------------------------

    @property
    def master_url(self) -> str:
        """The URL applications connect to: ``spark://127.0.0.1:PORT``."""
        return f"spark://{LOOPBACK}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        """The master's web UI; ``webui_url + "/json/"`` describes the cluster."""
        return f"http://{LOOPBACK}:{self.webui_port}"

    @property
    def work_dir(self) -> Path:
        """The logs and the workers' directories (a temporary one is made on first use)."""
        if self._work_dir is None:
            self._work_dir = Path(tempfile.mkdtemp(prefix="marshal-spark-cluster-"))
        return self._work_dir

    @property
    def master_log(self) -> Path:
        """The master's stdout and stderr."""
        return self.work_dir / "master.log"

    def worker_log(self, index: int) -> Path:
        """The stdout and stderr of worker ``index`` (0-based)."""
        return self.work_dir / f"worker-{index}.log"

    @property
    def master_pid(self) -> int | None:
        """The master JVM's process id while started, else None."""
        master = self._daemons.master
        return master.pid if master is not None else None

    @property
    def worker_pids(self) -> list[int]:
        """The worker JVMs' process ids (empty before :meth:`start`)."""
        return [proc.pid for proc in self._daemons.workers]

    def process_ids(self) -> set[int]:
        """Every live process of the cluster: daemons, executors and executors' Python workers.

        On Linux, the members of the daemons' process groups and all their descendants (the
        PySpark daemons that executors fork lead process groups of their own), zombies
        excluded; elsewhere the live daemons only.
        """
        return set(tree(self._daemons.groups()))

    def is_running(self) -> bool:
        """True while the master and every worker launched by :meth:`start` are alive."""
        return self._daemons.is_running()

    def status(self, timeout: float = 5.0) -> dict[str, Any]:
        """The master's JSON description of the cluster (workers, applications, state).

        Raises:
            SparkClusterError: the master does not answer within ``timeout`` seconds.
        """
        try:
            return _get_json(self.webui_url + "/json/", timeout)
        except (OSError, ValueError) as exc:
            raise SparkClusterError(
                f"the Spark master at {self.webui_url} does not answer ({exc}); is the cluster "
                f"started? master log: {self.master_log}"
            ) from exc

    def __repr__(self) -> str:
        return (
            f"StandaloneCluster(master_url={self.master_url!r}, workers={self.workers}, "
            f"master_pid={self.master_pid}, worker_pids={self.worker_pids})"
        )

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> StandaloneCluster:
        """Launch the master, wait until it is ALIVE, launch the workers, wait until all are.

        Returns self once the master lists ``workers`` ALIVE workers. Starting a running
        cluster does nothing. Call it from a thread that outlives the cluster (see the module
        documentation).

        Raises:
            SparkUnavailableError: pyspark or Java 17+ is missing.
            SparkClusterError: a port is busy, a daemon exits during startup or the cluster is
                not ready within ``timeout`` seconds (everything started is stopped then).
        """
        if self.is_running():
            return self
        if self._daemons.master is not None:  # something died since the last start: clean up
            self._kill_all()
        deadline = time.monotonic() + timeout
        self._keep_for_inspection = False
        home = spark_home()
        java, major = find_java()
        log.debug("using %s (Java %d), SPARK_HOME %s", java, major, home)
        properties = prepare_work_dir(self.work_dir)
        env = self._environment(home)
        spark_class = str(home / "bin" / "spark-class")
        try:
            self._start_master(spark_class, properties, env, deadline, timeout)
            for index in range(self.workers):
                worker_dir = self.work_dir / f"worker-{index}"
                worker_dir.mkdir(exist_ok=True)
                self._daemons.workers.append(self._launch(
                    worker_command(spark_class, self.master_url, self.cores, self.memory,
                                   worker_dir, properties),
                    self.worker_log(index), env))
            self._await(
                lambda state: _alive_workers(state) >= self.workers,
                deadline,
                timeout,
                f"listing {self.workers} ALIVE workers",
            )
        except SparkClusterError:
            self._keep_for_inspection = True
            self._kill_all()
            raise
        except BaseException:
            self._kill_all()
            raise
        log.info(
            "Spark standalone cluster ready at %s: %d workers x %d cores (logs in %s)",
            self.master_url,
            self.workers,
            self.cores,
            self.work_dir,
        )
        return self

    def _start_master(
        self, spark_class: str, properties: Path, env: dict[str, str], deadline: float,
        timeout: float,
    ) -> None:
        """Launch the master and wait until it is ALIVE, picking new ports if ours were taken."""
        for attempt in range(1, _PORT_ATTEMPTS + 1):
            self._daemons.master = self._launch(
                master_command(spark_class, self.master_port, self.webui_port, properties),
                self.master_log, env)
            try:
                self._await(
                    lambda state: state.get("status") == "ALIVE", deadline, timeout, "ALIVE"
                )
                return
            except PortInUseError as exc:
                if attempt == _PORT_ATTEMPTS or not self._picked_ports.get(exc.service):
                    raise
                log.info("%s; picking other ports", exc)
                self._kill_all()
                taken = frozenset({self.master_port, self.webui_port})
                if self._picked_ports["sparkMaster"]:
                    self.master_port = free_port(exclude=taken)
                if self._picked_ports["MasterUI"]:
                    self.webui_port = free_port(exclude=taken | {self.master_port})

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the cluster: SIGTERM to every process group, then SIGKILL after ``timeout``.

        Returns when no process of the cluster is left (executors and their Python workers
        included). Removes the work directory if it was a temporary one, unless a daemon had
        failed (it keeps the logs). Calling it again, or on a cluster that never started, does
        nothing harmful.
        """
        dead = [p for p in self._daemons.all() if p.poll() is not None]
        if dead:
            log.warning(
                "Spark daemon(s) %s had exited by themselves; logs in %s",
                ", ".join(f"{p.pid} (status {p.returncode})" for p in dead),
                self.work_dir,
            )
            self._keep_for_inspection = True
        groups = self._daemons.groups()
        if groups:
            log.info("stopping the Spark cluster at %s", self.master_url)
        # Executors and the Python daemons they fork go when their worker goes (Spark's worker
        # watcher, stdin closing), but a SIGTERM to the whole group is quicker and surer.
        tracked = tree(groups)
        self._daemons.terminate()
        if not self._daemons.await_gone(tracked, time.monotonic() + timeout):
            log.warning(
                "Spark cluster processes ignored SIGTERM for %.0f s; killing them", timeout
            )
        self._kill_all(tracked)
        if self._owns_work_dir and self._work_dir is not None and self._work_dir.exists():
            if self._keep_for_inspection:
                log.warning(
                    "kept %s (the failed cluster's logs); remove it when done", self.work_dir
                )
            else:
                shutil.rmtree(self._work_dir, ignore_errors=True)
                self._work_dir = None  # a later start makes a new one

    def __enter__(self) -> StandaloneCluster:
        """Start the cluster (see :meth:`start`)."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the cluster (see :meth:`stop`)."""
        self.stop()

    # -- internals --------------------------------------------------------------------------

    def _environment(self, home: Path) -> dict[str, str]:
        return daemon_environment(home, self.work_dir, self.daemon_memory, self.python,
                                  DAEMON_JAVA_OPTS)

    def _launch(
        self, command: list[str], log_path: Path, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        proc = launch_daemon(command, log_path, env, self.work_dir)
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        return proc

    def _await(
        self, ready: Callable[[dict[str, Any]], bool], deadline: float, timeout: float, what: str
    ) -> None:
        """Poll the master's JSON until ``ready(state)``; fail fast when a daemon exits."""
        url = self.webui_url + "/json/"
        last_state: dict[str, Any] = {}
        while True:
            self._daemons.check_alive(self._startup_failure, self.master_log, self.worker_log)
            try:
                last_state = _get_json(url, timeout=1.0)
            except (OSError, ValueError) as exc:
                log.debug("master not answering yet: %s", exc)
            else:
                if ready(last_state):
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                alive = _alive_workers(last_state) if last_state else 0
                raise SparkClusterError(
                    f"the Spark master at {self.master_url} was not {what} within {timeout:.0f} s "
                    f"(status {last_state.get('status', 'not answering')}, {alive} of "
                    f"{self.workers} workers ALIVE); see the logs in {self.work_dir} or start it "
                    "with a longer timeout"
                )
            self._daemons.wait_for_master(min(_POLL_S, remaining))  # at once if it exits

    def _startup_failure(self, who: str, returncode: int, log_path: Path) -> SparkClusterError:
        return startup_failure(who, returncode, log_path, master_port=self.master_port,
                               webui_port=self.webui_port)

    def _kill_all(self, tracked: dict[int, int] | None = None) -> None:
        """SIGKILL every process of the cluster, wait until they are gone, forget them.

        ``tracked`` (pid to start time) adds processes known earlier, which may have left the
        daemons' process tree since (a Python daemon whose executor died).
        """
        self._daemons.kill_all(tracked or {})
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False


def _get_json(url: str, timeout: float) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=timeout) as response:
        state = json.loads(response.read().decode("utf-8"))
    if not isinstance(state, dict):
        raise ValueError(f"{url} answered {type(state).__name__}, not an object")
    return state


def _alive_workers(state: dict[str, Any]) -> int:
    workers = state.get("workers")
    if not isinstance(workers, list):
        return 0
    return sum(1 for w in workers if isinstance(w, dict) and w.get("state") == "ALIVE")
