"""The Spark runtime: local sessions, the standalone cluster, and no process left behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

import marshal_py
from marshal_py.spark import session as spark_session
from marshal_py.spark.cluster import SparkClusterError, StandaloneCluster
from marshal_py.spark.session import (
    SparkError,
    SparkUnavailableError,
    find_java,
    local_session,
    require_pyspark,
)
from tests.spark.quick_jvm import QUICK_OPTIONS, driver_java_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _ppid(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[1])


def _start_time(pid: int) -> int | None:
    """The process's start time (with the pid, its identity), None when it is gone or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _processes_mentioning(path: Path) -> list[int]:
    """Live processes whose command line names ``path`` (a cluster's JVMs name its work dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if str(path).encode() in cmdline and _start_time(int(entry.name)) is not None:
                found.append(int(entry.name))
    return found


def _task_identity(_: int) -> tuple[int, int, str, str]:
    """Runs in a Python worker: its pid, its executor JVM's pid, its Python and marshal_py."""
    import os
    import sys
    import time
    from pathlib import Path

    import marshal_py

    time.sleep(0.3)  # keep the executor busy so the next task goes to the other one
    pid = os.getpid()
    executor = pid
    while executor > 1:
        cmdline = Path(f"/proc/{executor}/cmdline").read_bytes()
        if b"CoarseGrainedExecutorBackend" in cmdline:
            break
        stat = Path(f"/proc/{executor}/stat").read_text()
        executor = int(stat[stat.rfind(")") + 2 :].split()[1])
    return pid, executor, sys.executable, marshal_py.__file__ or ""


# -- local sessions -------------------------------------------------------------------------


def test_local_session_is_set_up_for_this_machine(spark: SparkSession) -> None:
    conf = spark.sparkContext.getConf()
    assert spark.sparkContext.master == "local[2]"
    assert spark.sparkContext.uiWebUrl is None
    assert spark.conf.get("spark.sql.shuffle.partitions") == "4"
    assert spark.conf.get("spark.sql.execution.arrow.pyspark.enabled") == "true"
    assert conf.get("spark.driver.host") == "127.0.0.1"
    assert conf.get("spark.driver.bindAddress") == "127.0.0.1"
    assert "-Dlog4j2.configurationFile=" in (conf.get("spark.driver.extraJavaOptions") or "")
    assert not Path("spark-warehouse").exists()

    rows = spark.sparkContext.parallelize(range(4), 2).map(_task_identity).collect()
    assert {python for _, _, python, _ in rows} == {sys.executable}
    assert {module for _, _, _, module in rows} == {marshal_py.__file__}
    frame: Any = spark.range(100).selectExpr("sum(id) AS s").toPandas()  # through Arrow
    assert frame["s"].tolist() == [4950]


def _pyspark_of_worker(_: int) -> tuple[str, list[str]]:
    import pyspark

    return pyspark.__file__ or "", [entry for entry in sys.path if entry.endswith(".zip")]


def test_python_workers_load_pyspark_from_the_installed_package(spark: SparkSession) -> None:
    """Not from the zip archives Spark puts first on their path (tests/spark/worker_site)."""
    import pyspark

    rows = spark.sparkContext.parallelize(range(2), 2).map(_pyspark_of_worker).collect()
    assert {module for module, _ in rows} == {pyspark.__file__}
    assert not [entry for _, archives in rows for entry in archives
                if Path(entry).name == "pyspark.zip" or Path(entry).name.startswith("py4j-")]


def test_local_session_refuses_a_second_session(spark: SparkSession) -> None:
    with pytest.raises(SparkError, match="already running in this process"):
        local_session("second")


def test_missing_pyspark_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pyspark", None)  # import pyspark raises ImportError
    with pytest.raises(SparkUnavailableError, match=r"pip install marshal_py\[spark\]"):
        require_pyspark()
    with pytest.raises(SparkUnavailableError, match=r"pip install marshal_py\[spark\]"):
        local_session("no-pyspark")
    with pytest.raises(SparkUnavailableError, match=r"pip install marshal_py\[spark\]"):
        StandaloneCluster(workers=1).start()


def test_missing_or_old_java_is_a_one_line_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(SparkUnavailableError, match="Java is not installed"):
        find_java()
    with pytest.raises(SparkUnavailableError, match="Java is not installed"):
        local_session("no-java")
    cluster = StandaloneCluster(workers=1)
    with pytest.raises(SparkUnavailableError, match="Java is not installed"):
        cluster.start()
    assert cluster.master_pid is None

    monkeypatch.setenv("JAVA_HOME", str(tmp_path))
    with pytest.raises(SparkUnavailableError, match="has no bin/java"):
        find_java()

    (tmp_path / "bin").mkdir()
    old_java = tmp_path / "bin" / "java"
    old_java.write_text('#!/bin/sh\necho \'openjdk version "11.0.2" 2019-01-15\' >&2\n')
    old_java.chmod(0o755)
    with pytest.raises(SparkUnavailableError, match="is Java 11, but Spark needs Java 17"):
        find_java()


def test_log_level_is_checked_before_anything_starts() -> None:
    with pytest.raises(SparkError, match="log level 'LOUD'"):
        spark_session.log4j2_config("loud")
    with pytest.raises(SparkError, match="log level 'LOUD'"):
        local_session("loud", **{"spark.log.level": "loud"})


# -- the standalone cluster -----------------------------------------------------------------


def test_cluster_lists_its_workers(spark_cluster: StandaloneCluster) -> None:
    assert spark_cluster.master_url == f"spark://127.0.0.1:{spark_cluster.master_port}"
    assert spark_cluster.is_running()
    state = spark_cluster.status()
    assert state["status"] == "ALIVE"
    workers = [w for w in state["workers"] if w["state"] == "ALIVE"]
    assert len(workers) == 2
    assert {w["cores"] for w in workers} == {1}
    assert {w["host"] for w in workers} == {"127.0.0.1"}
    assert {spark_cluster.master_pid, *spark_cluster.worker_pids} <= spark_cluster.process_ids()


def test_job_runs_in_one_executor_process_per_worker(
    cluster_session: SparkSession, spark_cluster: StandaloneCluster
) -> None:
    sc = cluster_session.sparkContext
    assert sc.master == spark_cluster.master_url
    jvm = sc._jvm
    assert jvm is not None
    driver_pids = {os.getpid(), jvm.java.lang.ProcessHandle.current().pid()}

    rows = sc.parallelize(range(8), 8).map(_task_identity).collect()

    python_pids = {pid for pid, _, _, _ in rows}
    executor_pids = {executor for _, executor, _, _ in rows}
    assert len(executor_pids) == 2, rows  # two workers, one executor each, both used
    assert not executor_pids & driver_pids
    assert not python_pids & driver_pids
    # Each executor is a JVM launched by a different worker of this cluster.
    assert {_ppid(pid) for pid in executor_pids} == set(spark_cluster.worker_pids)
    assert executor_pids <= spark_cluster.process_ids()
    assert python_pids <= spark_cluster.process_ids()
    # ... and its Python workers run this interpreter and import this marshal_py.
    assert {python for _, _, python, _ in rows} == {sys.executable}
    assert {module for _, _, _, module in rows} == {marshal_py.__file__}


def test_busy_master_port_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cluster = StandaloneCluster(workers=1, master_port=port, work_dir=tmp_path)
        started = time.monotonic()
        with pytest.raises(SparkClusterError, match=rf"master port 127\.0\.0\.1:{port} is already"):
            cluster.start(timeout=60)
    assert time.monotonic() - started < 30  # noticed the exit, did not wait out the timeout
    assert cluster.master_pid is None
    assert _processes_mentioning(tmp_path) == []
    assert (tmp_path / "master.log").is_file()  # kept for inspection


def test_picked_ports_taken_meanwhile_are_picked_again(tmp_path: Path) -> None:
    cluster = StandaloneCluster(workers=1, work_dir=tmp_path)
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", cluster.webui_port))  # taken between picking and binding
        thief.listen()
        taken = cluster.webui_port
        try:
            cluster.start(timeout=120)
            assert cluster.webui_port != taken
            assert cluster.status()["status"] == "ALIVE"
            assert len(_processes_mentioning(tmp_path)) == 2  # master and worker
        finally:
            cluster.stop()
    assert _processes_mentioning(tmp_path) == []


# The same script plays two parts: `stop` stops the cluster while the application still runs
# on it and reports what is left; `kill` waits to be killed with SIGKILL.
_OWNER_SCRIPT = textwrap.dedent(
    """
    import json, os, sys, tempfile, time
    from marshal_py.spark.cluster import StandaloneCluster
    from marshal_py.spark.session import local_session

    cluster = StandaloneCluster(workers=1).start()
    spark = local_session(
        "owner", cluster.master_url,
        **{
            "spark.local.dir": tempfile.gettempdir(),
            "spark.executor.memory": "512m",
            "spark.scheduler.minRegisteredResourcesRatio": "1",
            "spark.driver.extraJavaOptions": os.environ["OWNER_DRIVER_OPTIONS"],
            "spark.executor.extraJavaOptions": os.environ["OWNER_EXECUTOR_OPTIONS"],
        },
    )
    assert spark.sparkContext.parallelize(range(4), 2).map(lambda x: x * 2).sum() == 12
    jvm = spark.sparkContext._jvm
    print(json.dumps({
        "cluster": sorted(cluster.process_ids()),
        "daemons": [cluster.master_pid, *cluster.worker_pids],
        "driver_jvm": jvm.java.lang.ProcessHandle.current().pid(),
    }), flush=True)
    if sys.argv[1] == "stop":
        began = time.monotonic()
        cluster.stop()
        print(json.dumps({"left": sorted(cluster.process_ids()),
                          "seconds": time.monotonic() - began}), flush=True)
        spark.stop()
    else:
        time.sleep(600)
    """
)


@dataclass
class _Owner:
    """A process running _OWNER_SCRIPT; its temporary files (the cluster's too) go to tmp."""

    process: subprocess.Popen[str]
    tmp: Path

    def report(self) -> dict[str, Any]:
        """The next JSON line the owner prints."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            self.process.wait(timeout=60)
            pytest.fail(f"the cluster owner exited with status {self.process.returncode}")
        report: dict[str, Any] = json.loads(line)
        return report


@pytest.fixture(scope="module")
def owners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, _Owner]]:
    """Both owners, started together (their start-up overlaps); killed at the end if alive."""
    started = {}
    for mode in ("stop", "kill"):
        tmp = tmp_path_factory.mktemp(f"owner-{mode}")
        process = subprocess.Popen(
            [sys.executable, "-c", _OWNER_SCRIPT, mode],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
            # The tests' quick JVM options; the driver maps the class archive.
            env={**os.environ, "TMPDIR": str(tmp),
                 "OWNER_DRIVER_OPTIONS": driver_java_options(),
                 "OWNER_EXECUTOR_OPTIONS": QUICK_OPTIONS},
        )
        started[mode] = _Owner(process, tmp)
    try:
        yield started
    finally:
        for owner in started.values():
            if owner.process.poll() is None:
                os.killpg(owner.process.pid, signal.SIGKILL)
            owner.process.wait()
            if owner.process.stdout is not None:
                owner.process.stdout.close()


def _await_gone(processes: dict[int, int | None], timeout: float) -> dict[int, int | None]:
    """Wait until none of ``processes`` (pid to start time) is alive; return the survivors."""
    deadline = time.monotonic() + timeout
    while True:
        alive: dict[int, int | None] = {
            pid: t for pid, t in processes.items() if t is not None and _start_time(pid) == t
        }
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def test_stop_leaves_no_process_behind(owners: dict[str, _Owner]) -> None:
    owner = owners["stop"]
    report = owner.report()
    # master, worker, executor JVM, its PySpark daemon (and perhaps a forked worker)
    assert len(report["cluster"]) >= 4, report
    processes = {pid: _start_time(pid) for pid in report["cluster"]}
    after = owner.report()
    assert after["left"] == []
    assert _await_gone(processes, timeout=0) == {}  # gone when stop() returned
    assert owner.process.wait(timeout=60) == 0
    assert not list(owner.tmp.glob("marshal-spark-cluster-*"))  # its work dir went too


def test_killed_owner_leaves_no_process_behind(owners: dict[str, _Owner]) -> None:
    owner = owners["kill"]
    report = owner.report()
    processes = {pid: _start_time(pid) for pid in [*report["cluster"], report["driver_jvm"]]}
    assert all(processes.values()), report
    owner.process.kill()  # SIGKILL: no atexit, no stop(); only the parent-death signal and Spark
    owner.process.wait()
    # The daemons die at once (parent-death signal); the executor when it loses its worker,
    # its PySpark daemon when the executor goes, the driver JVM when its stdin closes.
    assert _await_gone(processes, timeout=30) == {}
