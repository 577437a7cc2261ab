"""Quick-starting Spark drivers for the tests: C1 only, and Spark's classes from a CDS archive.

Test jobs are short, so the drivers the Spark tests start (the suite's own session, and the
programs they run in processes of their own: range_stream_process.py, query_process.py, the
example pipeline) run the C1 compiler only (``-XX:TieredStopAtLevel=1``: quick to start,
slower in long hot loops) and map the classes a driver loads on its way up from a dynamic
class-data sharing archive (the JDK's AppCDS, ``-XX:SharedArchiveFile``) instead of reading,
parsing and verifying them from Spark's jars each time. On a quiet 2-core machine a local[2]
session with the Kafka connector then starts in 3.1-3.9 s instead of 5.0-7.6 s, and its first
Kafka relation loads in 0.4 s instead of 0.9-1.4 s. Not for benchmarks.

The archive is made once per machine and per Spark and Java installation (its file name is a
digest of them) by :func:`ensure_archive`, which the Spark tests call before their first
session (tests/spark/conftest.py): a driver started with ``-XX:ArchiveClassesAtExit`` runs a
small job of each kind the tests run and exits (40-50 s on a quiet machine). The JVM checks
an archive before mapping it and loads the classes from the jars as usual when it may not use
it (a driver started while another process is still making it, another Java): the archive
changes start-up time only, never what a driver does.

    python -m tests.spark.quick_jvm ARCHIVE     # what ensure_archive runs: write ARCHIVE
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shlex
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from marshal_py.devbroker.class_archive import classes_digest
from marshal_py.devbroker.jars import default_cache_dir

#: C1 only: halves a test driver's start and typical test jobs on a loaded 2-core machine.
C1_ONLY = "-XX:TieredStopAtLevel=1"

ROOT = Path(__file__).resolve().parents[2]


def archive_path() -> Path | None:
    """Where the archive of this Spark and Java goes (it may not exist yet); None when they
    cannot be found (the session's start then says why)."""
    from marshal_py.errors import MarshalError
    from marshal_py.spark.session import find_java, spark_home

    try:
        java = Path(find_java()[0]).resolve()
        home = spark_home()
    except MarshalError:
        return None
    digest = classes_digest(java, (home / "jars").glob("*.jar"))
    return default_cache_dir() / "spark" / f"classes-{digest}.jsa"


def driver_java_options() -> str:
    """``spark.driver.extraJavaOptions`` of a test driver: C1 only, and the class archive
    when it exists."""
    path = archive_path()
    if path is not None and path.is_file():
        return f"{C1_ONLY} -XX:SharedArchiveFile={path}"
    return C1_ONLY


def program_env() -> dict[str, str]:
    """The environment for a program that starts a Spark driver of its own with settings the
    test does not choose (the example pipeline): this one, with ``PYSPARK_SUBMIT_ARGS``
    giving its driver :func:`driver_java_options` as ``spark.driver.defaultJavaOptions``
    (which Spark puts before the program's own ``spark.driver.extraJavaOptions``)."""
    option = f"spark.driver.defaultJavaOptions={driver_java_options()}"
    return {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--conf {shlex.quote(option)} pyspark-shell"}


def ensure_archive() -> Path | None:
    """Make the class archive unless it exists (once per machine, Spark and Java: about 50 s
    on a quiet machine); return it, or None when it is not there (being made by another
    process, which the caller does not wait for, or not made: with a warning)."""
    path = archive_path()
    if path is None or path.is_file():
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = open(path.parent / "classes.lock", "w")  # noqa: SIM115 (closed below)
    except OSError as exc:
        warnings.warn(f"no Spark class archive (cannot write {path.parent}: {exc}); test "
                      "drivers start without one", stacklevel=2)
        return None
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # another process is making it: start without it meanwhile
        if path.is_file():
            return path
        _remove_stale(path)
        # Never write an archive in place: running JVMs map it, and one whose mapping is
        # truncated under it dies of SIGBUS. Made under another name, then renamed (and old
        # ones unlinked): a JVM keeps the file it mapped.
        made = path.with_name(f".{path.name}.{os.getpid()}")
        with tempfile.TemporaryFile() as log:
            done = subprocess.run([sys.executable, "-m", "tests.spark.quick_jvm", str(made)],
                                  cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=300,
                                  check=False)
            if done.returncode == 0 and made.is_file():
                os.replace(made, path)
                return path
            log.seek(0)
            tail = log.read()[-1500:].decode(errors="replace")
        with contextlib.suppress(OSError):
            made.unlink()
        warnings.warn(f"no Spark class archive (making it failed, status {done.returncode}): "
                      f"{tail}", stacklevel=2)
        return None


def _remove_stale(path: Path) -> None:
    """Remove the archives of other Spark or Java installations but the newest (another
    checkout's, say): each is 150-200 MB."""
    others = sorted(path.parent.glob("classes-*.jsa"), key=lambda p: p.stat().st_mtime)
    for stale in others[:-1]:
        with contextlib.suppress(OSError):
            stale.unlink()


def _make(out: Path) -> None:
    """Run a driver that writes the archive of the classes it loaded to ``out`` as it exits:
    a session with the Kafka connector, a Kafka relation, a SQL job with a shuffle, a Python
    function on Arrow batches, Parquet, and a ``foreachBatch`` stream (a driver of
    ``format("marshal")`` queries starts 2-3 s sooner with those than without)."""
    from marshal_py.spark.connector import kafka_connector_conf
    from marshal_py.spark.session import local_session

    spark = local_session("class-archive", **kafka_connector_conf(), **{
        "spark.driver.extraJavaOptions": f"{C1_ONLY} -XX:ArchiveClassesAtExit={out}"})
    gateway = spark.sparkContext._gateway
    assert gateway is not None
    jvm = gateway.proc

    def count(batch: Any, _: int) -> None:
        batch.count()

    with tempfile.TemporaryDirectory() as tmp:
        (spark.read.format("kafka").option("kafka.bootstrap.servers", "127.0.0.1:1")
         .option("assign", '{"t":[0]}').option("startingOffsets", '{"t":{"0":0}}')
         .option("endingOffsets", '{"t":{"0":1}}').load())
        frame = spark.range(1000).selectExpr("id % 7 AS k", "id")
        frame.groupBy("k").count().collect()
        frame.mapInArrow(lambda batches: batches, frame.schema).count()
        frame.write.parquet(f"{tmp}/parquet")
        spark.read.parquet(f"{tmp}/parquet").count()
        query = (spark.readStream.schema(frame.schema).parquet(f"{tmp}/parquet").writeStream
                 .foreachBatch(count)
                 .option("checkpointLocation", f"{tmp}/checkpoint")
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
    spark.stop()
    jvm.stdin.close()  # the gateway JVM exits, writing the archive
    jvm.wait(timeout=240)


if __name__ == "__main__":
    _make(Path(sys.argv[1]))
