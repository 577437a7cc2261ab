"""The daemons of a throwaway Spark cluster (:mod:`marshal_py.spark.cluster`): their settings
and command lines, and :class:`ClusterDaemons`, the master and workers one start launched.

The daemons are run with the pip-installed pyspark's ``bin/spark-class`` (see
:func:`master_command` and :func:`worker_command`); each leads a process group of its own,
which the executors it launches join. Finding, signalling and killing those processes is
:mod:`marshal_py.spark.process_tree`'s work; :class:`ClusterDaemons` applies it to one
cluster.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from marshal_py.devbroker.jvm import LOOPBACK
from marshal_py.spark.cluster_log import SparkClusterError
from marshal_py.spark.process_tree import await_gone, group_members, kill_tree

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"

# Daemon settings (a properties file rather than spark-defaults.conf, which the user's
# SPARK_CONF_DIR might also hold): no REST submission server (it would take port 6066), and
# no port hopping, so a busy port fails the start instead of moving the master elsewhere.
_DAEMON_PROPERTIES = """\
# Written by marshal_py.spark.cluster on every start.
spark.master.rest.enabled false
spark.port.maxRetries 0
"""

# Daemons do little work: with the C1 compiler alone and the serial GC they start in about
# half the time on a busy 2-core machine (13 s instead of 20-28 s for a master and 2 workers).
DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""The daemons' ``SPARK_DAEMON_JAVA_OPTS``."""

_MEMORY_RE = re.compile(r"\d+[kKmMgGtT]?")


def check_settings(
    workers: int, cores: int, memory: str, daemon_memory: str, master_port: int | None,
    webui_port: int | None,
) -> None:
    """Raise SparkClusterError for a cluster setting the daemons cannot run with (see
    :class:`~marshal_py.spark.cluster.StandaloneCluster` for what they mean)."""
    if workers < 1 or cores < 1:
        raise SparkClusterError(
            f"a cluster needs at least one worker with one core (got workers={workers}, "
            f"cores={cores})"
        )
    for name, value in (("memory", memory), ("daemon_memory", daemon_memory)):
        if not _MEMORY_RE.fullmatch(value):
            raise SparkClusterError(
                f"{name} {value!r} is not a memory size; use e.g. '1g' or '512m'"
            )
    for name, port in (("master_port", master_port), ("webui_port", webui_port)):
        if port is not None and not 1 <= port <= 65535:
            raise SparkClusterError(f"{name} {port} is out of range; choose one in 1..65535")


def prepare_work_dir(work_dir: Path) -> Path:
    """Make ``work_dir`` and its (empty) ``conf`` directory and write the daemons' properties
    file into it; returns that file.

    Raises:
        SparkClusterError: ``work_dir`` is not writable.
    """
    try:
        work_dir.mkdir(parents=True, exist_ok=True)
        properties = work_dir / "spark-daemon.properties"
        properties.write_text(_DAEMON_PROPERTIES, encoding="utf-8")
        (work_dir / "conf").mkdir(exist_ok=True)
    except OSError as exc:
        raise SparkClusterError(
            f"cannot prepare {work_dir} ({exc}); choose a writable work directory"
        ) from exc
    return properties


def master_command(spark_class: str, port: int, webui_port: int, properties: Path) -> list[str]:
    """The command line of a master on ``port`` (RPC) and ``webui_port`` of 127.0.0.1."""
    return [
        spark_class,
        MASTER_CLASS,
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--webui-port",
        str(webui_port),
        "--properties-file",
        str(properties),
    ]


def worker_command(
    spark_class: str, master_url: str, cores: int, memory: str, worker_dir: Path,
    properties: Path,
) -> list[str]:
    """The command line of a worker of the master at ``master_url`` (on ports it picks)."""
    return [
        spark_class,
        WORKER_CLASS,
        master_url,
        "--host",
        LOOPBACK,
        "--port",
        "0",
        "--webui-port",
        "0",
        "--cores",
        str(cores),
        "--memory",
        memory,
        "--work-dir",
        str(worker_dir),
        "--properties-file",
        str(properties),
    ]


class ClusterDaemons:
    """The master and worker JVMs of a started cluster, each leading a process group of its
    own (which the executors it launches join)."""

    def __init__(self) -> None:
        #: The master, once launched.
        self.master: subprocess.Popen[bytes] | None = None
        #: The workers launched so far, worker 0 first.
        self.workers: list[subprocess.Popen[bytes]] = []

    def all(self) -> list[subprocess.Popen[bytes]]:
        """Every daemon launched: the workers, then the master."""
        return [p for p in (*self.workers, self.master) if p is not None]

    def groups(self) -> list[int]:
        """The process groups of the daemons (each daemon leads its own)."""
        return [p.pid for p in self.all()]

    def is_running(self) -> bool:
        """True while the master and every worker launched are alive."""
        procs = [self.master, *self.workers]
        return self.master is not None and all(p is not None and p.poll() is None for p in procs)

    def check_alive(
        self, failure: Callable[[str, int, Path], SparkClusterError], master_log: Path,
        worker_log: Callable[[int], Path],
    ) -> None:
        """Raise ``failure(who, returncode, log path)`` for the first daemon that exited."""
        master = self.master
        assert master is not None
        if master.poll() is not None:
            raise failure("master", master.returncode, master_log)
        for index, worker in enumerate(self.workers):
            if worker.poll() is not None:
                raise failure(f"worker {index}", worker.returncode, worker_log(index))

    def wait_for_master(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds, returning at once if the master exits."""
        master = self.master
        assert master is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            master.wait(timeout=timeout)

    def terminate(self) -> None:
        """SIGTERM the daemons' process groups that still have members."""
        for pgid in self.groups():
            if group_members(pgid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGTERM)

    def await_gone(self, tracked: dict[int, int], deadline: float) -> bool:
        """Wait until no process of the cluster is left; False at the deadline."""
        return await_gone(self.all(), self.groups(), tracked, deadline)

    def kill_all(self, tracked: dict[int, int]) -> None:
        """SIGKILL every process of the cluster, wait until they are gone, forget them.

        ``tracked`` (pid to start time) adds processes known earlier, which may have left the
        daemons' process tree since (a Python daemon whose executor died).
        """
        kill_tree(self.all(), self.groups(), tracked)
        for proc in (*self.workers, self.master):
            if proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        self.master = None
        self.workers = []
