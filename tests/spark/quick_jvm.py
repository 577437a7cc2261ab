"""Quick-starting Spark drivers for the tests: C1 only, the serial collector, and Spark's
classes from a CDS archive.

Test jobs are short, so the drivers the Spark tests start (the suite's own session, and the
programs they run in processes of their own: range_stream_process.py, query_process.py,
audit_process.py, the example pipeline) run the C1 compiler only (``-XX:TieredStopAtLevel=1``:
quick to start, slower in long hot loops) and the serial garbage collector
(``-XX:+UseSerialGC``: none of G1's concurrent threads; a local session and two small jobs took
5.8-6.0 CPU-s with it against 6.1-6.3 without, four runs each, 2026-11-28), and they map the
classes a driver loads on its way up from a dynamic class-data sharing archive (the JDK's
AppCDS, ``-XX:SharedArchiveFile``) instead of reading, parsing and verifying them from Spark's
jars each time. On a quiet 2-core machine a local[2] session with the Kafka connector then
starts in 3.1-3.9 s instead of 5.0-7.6 s, and its first Kafka relation loads in 0.4 s instead
of 0.9-1.4 s. Not for benchmarks.

The archive is made once per machine and per Spark and Java (its file name is a digest of
them) by :func:`ensure_archive`, which the Spark tests call before their first session
(tests/spark/conftest.py): a driver started with ``-XX:ArchiveClassesAtExit`` runs a small job
of each kind the tests run and exits (25-50 s). The JVM checks an archive before mapping it
and loads the classes from the jars as usual when it may not use it (a driver started while
another process is still making it, another Java): the archive changes start-up time only,
never what a driver does.

One archive serves every checkout of the machine (CI's fresh clones too). The JVM accepts an
archive only for the class path it was made with, the same files at the same times, but it
takes another path to the *same file* (a hard link) as that file. So Spark's jars get a home
outside the checkout, ``~/.cache/marshal_py/spark/home-<digest>/jars`` (named by the pyspark
version and the jars' names and sizes): hard links to the files pip installed, made by the
first checkout, and the jars of every checkout's ``.venv`` become hard links to those files
(the same bytes: pip's record of them still holds). The archive is made by a driver run from
that home. Where hard links cannot be made (the cache on another file system), the archive is
made from the checkout's own jars, as before, and holds for that checkout only.

    python -m tests.spark.quick_jvm ARCHIVE HOME    # what ensure_archive runs: write ARCHIVE
                                                    # with the Spark in HOME
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

from marshal_py.devbroker.class_archive import classes_digest
from marshal_py.devbroker.jars import default_cache_dir

#: The JVM options of the tests' Spark drivers and executors: C1 only (it halves a test
#: driver's start and typical test jobs on a loaded 2-core machine) and the serial collector.
QUICK_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"

ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def _java_and_home() -> tuple[Path, Path] | None:
    """The Java Spark runs and the checkout's Spark (pyspark's directory); None when they
    cannot be found (the session's start then says why). Looked up once per process: it
    runs ``java -version``."""
    from marshal_py.errors import MarshalError
    from marshal_py.spark.session import find_java, spark_home

    try:
        return Path(find_java()[0]).resolve(), spark_home()
    except MarshalError:
        return None


def _jars(home: Path) -> list[Path]:
    """The jars of a Spark's class path (``jars/*``: the directories below are not on it)."""
    return sorted((home / "jars").glob("*.jar"))


def shared_home(home: Path) -> Path:
    """Where the jars of the checkout's Spark (``home``) have their home outside it: named by
    the pyspark version and the jars' names and sizes."""
    from pyspark.version import __version__

    digest = hashlib.sha256(__version__.encode())
    for jar in _jars(home):
        digest.update(f"\0{jar.name}\0{jar.stat().st_size}".encode())
    return default_cache_dir() / "spark" / f"home-{digest.hexdigest()[:16]}"


def _shares_jars(home: Path, shared: Path) -> bool:
    """Are the checkout's jars the very files (hard links) of the shared home's?"""
    jars = _jars(home)
    try:
        return bool(jars) and all(jar.samefile(shared / "jars" / jar.name) for jar in jars)
    except OSError:
        return False


def _class_path_home() -> tuple[Path, Path] | None:
    """The Java, and the Spark home whose jars' paths the archive is made with: the shared
    home when the checkout's jars are its files, else the checkout's own."""
    found = _java_and_home()
    if found is None:
        return None
    java, home = found
    shared = shared_home(home)
    return java, shared if _shares_jars(home, shared) else home


def archive_path() -> Path | None:
    """Where the archive of this Spark and Java goes (it may not exist yet); None when they
    cannot be found (the session's start then says why)."""
    found = _class_path_home()
    if found is None:
        return None
    java, home = found
    digest = classes_digest(java, _jars(home))
    return default_cache_dir() / "spark" / f"classes-{digest}.jsa"


def _link_shared_home(home: Path) -> None:
    """Make the shared home of the checkout's Spark unless it exists (hard links to its jars
    and a copy of its ``bin``; the homes of other pyspark versions go), then make the
    checkout's jars hard links to the shared home's files (each renamed into place: a JVM
    that has one open keeps it). Call it holding the archive's lock. Raises OSError where hard
    links cannot be made."""
    shared = shared_home(home)
    if not shared.is_dir():
        for left in shared.parent.glob(".home-*"):
            shutil.rmtree(left, ignore_errors=True)  # left by a process killed making one
        made = shared.with_name(f".{shared.name}.{os.getpid()}")
        (made / "jars").mkdir(parents=True)
        for jar in _jars(home):
            os.link(jar, made / "jars" / jar.name)
        shutil.copytree(home / "bin", made / "bin", symlinks=True)
        for other in shared.parent.glob("home-*"):
            shutil.rmtree(other, ignore_errors=True)  # another pyspark's: 460 MB
        os.replace(made, shared)
    for jar in _jars(home):
        target = shared / "jars" / jar.name
        if not jar.samefile(target):
            link = jar.with_name(f".{jar.name}.{os.getpid()}")
            os.link(target, link)
            os.replace(link, jar)


def driver_java_options() -> str:
    """``spark.driver.extraJavaOptions`` of a test driver: :data:`QUICK_OPTIONS`, and the
    class archive when it exists."""
    path = archive_path()
    if path is not None and path.is_file():
        return f"{QUICK_OPTIONS} -XX:SharedArchiveFile={path}"
    return QUICK_OPTIONS


def quick_session(app_name: str, master: str = "local[2]", **conf: str | int) -> Any:
    """A test driver's session: :func:`marshal_py.spark.session.local_session` with
    :func:`driver_java_options` as ``spark.driver.extraJavaOptions``."""
    from marshal_py.spark.session import local_session

    return local_session(app_name, master,
                         **{"spark.driver.extraJavaOptions": driver_java_options(), **conf})


def program_env() -> dict[str, str]:
    """The environment for a program that starts a Spark driver of its own with settings the
    test does not choose (the example pipeline): this one, with ``PYSPARK_SUBMIT_ARGS``
    giving its driver :func:`driver_java_options` as ``spark.driver.defaultJavaOptions``
    (which Spark puts before the program's own ``spark.driver.extraJavaOptions``)."""
    option = f"spark.driver.defaultJavaOptions={driver_java_options()}"
    return {**os.environ, "PYSPARK_SUBMIT_ARGS": f"--conf {shlex.quote(option)} pyspark-shell"}


def ensure_archive(*, wait: bool = False) -> Path | None:
    """Make the class archive unless it exists (once per machine, Spark and Java: 25-50 s);
    return it, or None when it is not there (being made by another process, which the
    caller waits for only with ``wait``, or not made: with a warning)."""
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
            fcntl.flock(lock, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return None  # another process is making it: start without it meanwhile
        found = _java_and_home()
        if found is not None:
            try:
                _link_shared_home(found[1])
            except OSError as exc:
                warnings.warn(f"Spark's jars have no home outside this checkout ({exc}): the "
                              "class archive made holds for this checkout only", stacklevel=2)
            path = archive_path() or path
        if path.is_file():
            return path
        found = _class_path_home()
        if found is None:
            return None
        _remove_stale(path)
        # Never write an archive in place: running JVMs map it, and one whose mapping is
        # truncated under it dies of SIGBUS. Made under another name, then renamed (and old
        # ones unlinked): a JVM keeps the file it mapped.
        made = path.with_name(f".{path.name}.{os.getpid()}")
        with tempfile.TemporaryFile() as log:
            done = subprocess.run([sys.executable, "-m", "tests.spark.quick_jvm", str(made),
                                   str(found[1])],
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


def _make(out: Path, home: Path) -> None:
    """Run a driver of the Spark in ``home`` that writes the archive of the classes it loaded
    to ``out`` as it exits:
    a session with the Kafka connector, a Kafka relation, a SQL job with a shuffle, a Python
    function on Arrow batches, Parquet, and a ``foreachBatch`` stream (a driver of
    ``format("marshal")`` queries starts 2-3 s sooner with those than without)."""
    from marshal_py.spark import session
    from marshal_py.spark.connector import kafka_connector_conf

    session.spark_home = lambda: home  # the class path's paths are the archive's
    spark = session.local_session("class-archive", **kafka_connector_conf(), **{
        "spark.driver.extraJavaOptions": f"{QUICK_OPTIONS} -XX:ArchiveClassesAtExit={out}"})
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
    _make(Path(sys.argv[1]), Path(sys.argv[2]))
