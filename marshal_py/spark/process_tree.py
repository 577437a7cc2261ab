"""The processes of a throwaway Spark cluster: launching its daemons, finding every process
they started
(process groups and their descendants, by pid and start time so that a reused pid does not
count), killing them all, and waiting until none is left. Linux reads /proc; elsewhere the
daemons' process groups are all that is known."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from marshal_py.devbroker.jvm import LOOPBACK, die_with_parent
from marshal_py.spark.cluster_log import SparkClusterError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ProcInfo:
    ppid: int
    pgid: int
    start: int  # clock ticks after boot: with the pid, identifies a process


def process_table() -> dict[int, ProcInfo]:
    """Every live (non-zombie) process on this machine (Linux: /proc), by pid."""
    table: dict[int, ProcInfo] = {}
    proc = Path("/proc")
    if not proc.is_dir():
        return table
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        # utime stime cutime cstime priority nice threads itrealvalue starttime ..."; comm may
        # hold spaces and parentheses.
        fields = stat[stat.rfind(")") + 2 :].split()
        if len(fields) < 20 or fields[0] in ("Z", "X"):
            continue
        table[int(entry.name)] = ProcInfo(int(fields[1]), int(fields[2]), int(fields[19]))
    return table


def tree(groups: list[int]) -> dict[int, int]:
    """Members of the process ``groups`` and all their descendants: pid to start time.

    Without /proc (not Linux): the group leaders that are alive, with start time 0.
    """
    if not groups:
        return {}
    table = process_table()
    if not table:
        return {pgid: 0 for pgid in groups if group_members(pgid)}
    found = {pid for pid, info in table.items() if info.pgid in groups}
    children: dict[int, list[int]] = {}
    for pid, info in table.items():
        children.setdefault(info.ppid, []).append(pid)
    stack = list(found)
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return {pid: table[pid].start for pid in found}


def group_members(pgid: int) -> list[int]:
    """The live (non-zombie) processes of process group ``pgid``."""
    if not Path("/proc").is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return []
        except PermissionError:
            pass
        return [pgid]
    return [pid for pid, info in process_table().items() if info.pgid == pgid]


def await_gone(daemons: Sequence[subprocess.Popen[bytes]], groups: list[int],
               tracked: dict[int, int], deadline: float) -> bool:
    """Wait until no process of the cluster is left; False at the deadline.

    Waits for the ``tracked`` processes (pid to start time, so a reused pid does not count)
    and whatever is in the daemons' process ``groups``.
    """
    while True:
        for daemon in daemons:
            daemon.poll()  # reap our own children, or they would linger as zombies
        table = process_table()
        if table:
            left = {pid for pid, info in table.items()
                    if info.pgid in groups or tracked.get(pid) == info.start}
        else:  # no /proc
            left = {pgid for pgid in groups if group_members(pgid)}
        if not left:
            return True
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(0.05, remaining))


def kill_tree(daemons: Sequence[subprocess.Popen[bytes]], groups: list[int],
              tracked: dict[int, int]) -> None:
    """SIGKILL the daemons' process ``groups``, their descendants and the ``tracked``
    processes (pid to start time: known earlier, they may have left the tree since), then
    wait until they are gone and reap the daemons."""
    tracked = {**tracked, **tree(groups)}
    for pgid in groups:
        if group_members(pgid):  # an emptied group's id may be reused by then
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
    table = process_table()
    for pid, start in tracked.items():
        info = table.get(pid)
        if info is not None and info.start == start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
    if not await_gone(daemons, groups, tracked, time.monotonic() + 30.0):
        log.error("Spark cluster processes %s survived SIGKILL for 30 s", sorted(tree(groups)))
    for daemon in daemons:
        with contextlib.suppress(subprocess.TimeoutExpired):
            daemon.wait(timeout=5)


def daemon_environment(home: Path, work_dir: Path, daemon_memory: str, python: str,
                       java_opts: str) -> dict[str, str]:
    """The environment of a cluster daemon: this process's, without what belongs to a Spark
    driver or ``spark-submit``, with the cluster's own Spark home, configuration directory
    (empty: no user ``spark-env.sh``), loopback addresses, scratch directories and Python."""
    env = {key: value for key, value in os.environ.items()
           # Set when this process runs under spark-submit or has a SparkContext: not the
           # daemons' business.
           if not key.startswith(("PYSPARK_GATEWAY_", "_PYSPARK_", "SPARK_"))}
    env.update(
        SPARK_HOME=str(home),
        SPARK_CONF_DIR=str(work_dir / "conf"),
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_LOCAL_HOSTNAME=LOOPBACK,
        # Executors' shuffle and block files: inside the work directory, not in /tmp, so
        # that they go with it even when an executor is killed.
        SPARK_LOCAL_DIRS=str(work_dir / "local"),
        SPARK_DAEMON_MEMORY=daemon_memory,
        SPARK_DAEMON_JAVA_OPTS=java_opts,
        PYSPARK_PYTHON=python,
        PYSPARK_DRIVER_PYTHON=python,
    )
    return env


def launch_daemon(command: list[str], log_path: Path, env: dict[str, str],
                  work_dir: Path) -> subprocess.Popen[bytes]:
    """Start a daemon in a process group of its own (which its executors join), its output
    in ``log_path``, killed with its parent (the thread that launched it)."""
    log.debug("running %s", " ".join(command))
    try:
        # The child keeps its own descriptor of the log; the parent's closes right away.
        with open(log_path, "wb") as log_file:
            return subprocess.Popen(command, cwd=work_dir, env=env, stdin=subprocess.DEVNULL,
                                    stdout=log_file, stderr=subprocess.STDOUT,
                                    start_new_session=True,
                                    preexec_fn=die_with_parent(os.getpid()))
    except OSError as exc:
        raise SparkClusterError(
            f"cannot launch {command[0]} ({exc}); reinstall pyspark (pip install "
            "marshal_py[spark])") from exc
