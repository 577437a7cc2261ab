"""Local SparkSessions fit for a development machine and CI.

:func:`local_session` starts a SparkSession whose driver listens on 127.0.0.1 only, with the
web UI off, few shuffle partitions, Arrow on for pandas conversions, Python workers running the
very interpreter (and so the very ``marshal_py``) of the caller, and quiet logs: WARN and above
on stderr, the known-harmless startup warnings muted. ``master`` may be ``local[N]`` or the URL
of a standalone cluster (see :class:`marshal_py.spark.cluster.StandaloneCluster`).

pyspark is imported only when a function needs it, so importing this module never fails; a
missing pyspark (``pip install marshal_py[spark]``) or Java raises a one-line
:class:`SparkUnavailableError` instead of pyspark's "Java gateway process exited".

The Spark these helpers run is always the pip-installed pyspark package (its directory is
``SPARK_HOME``), so the driver, a standalone cluster and its executors are one Spark version.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from marshal_py.devbroker import jvm
from marshal_py.devbroker.jars import default_cache_dir
from marshal_py.devbroker.jvm import LOOPBACK, MIN_JAVA_VERSION
from marshal_py.errors import MarshalError

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "LOOPBACK",
    "MIN_JAVA_VERSION",
    "SparkError",
    "SparkUnavailableError",
    "find_java",
    "local_session",
    "log4j2_config",
    "require_pyspark",
    "spark_home",
]


INSTALL_HINT = "pip install marshal_py[spark]"

LOG_LEVELS = frozenset({"ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF"})
"""The levels :func:`local_session` accepts (log4j's)."""

DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "4",
    "spark.sql.execution.arrow.pyspark.enabled": "true",
    "spark.driver.host": LOOPBACK,
    "spark.driver.bindAddress": LOOPBACK,
    "spark.log.level": "WARN",
}
"""Settings :func:`local_session` applies unless its caller passes others."""

_LOG4J2_TEMPLATE = """\
# Written by marshal_py.spark.session: {level} and above on stderr, harmless noise muted.
status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{HH:mm:ss}} %p %c{{1}}: %m%n%ex
rootLogger.level = {level}
rootLogger.appenderRef.console.ref = console
logger.nativecode.name = org.apache.hadoop.util.NativeCodeLoader
logger.nativecode.level = error
"""

_JAVA_OPTIONS_KEYS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


class SparkError(MarshalError):
    """Spark could not be set up, started or stopped."""


class SparkUnavailableError(SparkError):
    """pyspark or the Java it runs on is missing or unusable."""


def require_pyspark() -> ModuleType:
    """Import and return the ``pyspark`` package.

    Raises:
        SparkUnavailableError: pyspark is not installed (or does not import).
    """
    try:
        import pyspark
    except ImportError as exc:
        raise SparkUnavailableError(
            f"pyspark is not installed ({exc}); the Spark features need the spark extra: "
            f"{INSTALL_HINT}"
        ) from exc
    return pyspark


def spark_home() -> Path:
    """The pip-installed pyspark package directory, which is a complete ``SPARK_HOME``.

    Raises:
        SparkUnavailableError: pyspark is missing, or its directory lacks ``bin/spark-class``
            or ``jars`` (a pyspark installed without its jars).
    """
    pyspark = require_pyspark()
    home = Path(pyspark.__file__ or "").resolve().parent
    if not (home / "bin" / "spark-class").is_file() or not (home / "jars").is_dir():
        raise SparkUnavailableError(
            f"{home} is not a complete Spark (no bin/spark-class or jars); reinstall pyspark "
            f"from PyPI: {INSTALL_HINT}"
        )
    return home


def find_java() -> tuple[str, int]:
    """The ``java`` Spark will run and its major version (see
    :func:`marshal_py.devbroker.jvm.find_java`); raises :class:`SparkUnavailableError`."""
    return jvm.find_java("Spark", SparkUnavailableError)


@functools.cache
def _warehouse_dir() -> Path:
    """Where this process's SQL warehouse goes: a fresh temporary path, removed at exit.

    Nothing is created here; Spark makes the directory when a table is first saved.
    """
    name = f"marshal-spark-warehouse-{os.getpid()}-{os.urandom(6).hex()}"
    path = Path(tempfile.gettempdir()) / name
    atexit.register(shutil.rmtree, path, True)
    return path


def log4j2_config(level: str = "WARN") -> Path:
    """Return a log4j2 configuration file that logs ``level`` and above to stderr.

    JVMs read it when they start (``-Dlog4j2.configurationFile=PATH``). The file is written
    once into the project cache (``spark/`` in
    :func:`~marshal_py.devbroker.jars.default_cache_dir`), or into a temporary directory
    removed at exit when the cache is not writable.
    """
    level = level.upper()
    if level not in LOG_LEVELS:
        raise SparkError(f"log level {level!r} is not one of {', '.join(sorted(LOG_LEVELS))}")
    content = _LOG4J2_TEMPLATE.format(level=level)
    name = f"log4j2-{level.lower()}.properties"
    try:
        return _write_once(default_cache_dir() / "spark" / name, content)
    except OSError:
        return _write_once(_private_dir() / name, content)


def _write_once(path: Path, content: str) -> Path:
    """Make ``path`` hold ``content`` (atomically: readers never see a partial file)."""
    try:
        if path.read_text(encoding="utf-8") == content:
            return path
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return path


@functools.cache
def _private_dir() -> Path:
    path = Path(tempfile.mkdtemp(prefix="marshal-spark-"))
    atexit.register(shutil.rmtree, path, True)
    return path


def local_session(
    app_name: str,
    master: str = "local[2]",
    **conf: str | int | float | bool,
) -> SparkSession:
    """Start a SparkSession for this machine: loopback only, no UI, quiet, same Python.

    Settings (see :data:`DEFAULT_CONF`): UI and console progress bars off,
    ``spark.sql.shuffle.partitions`` 4, Arrow for pandas conversions, driver host and bind
    address 127.0.0.1, the SQL warehouse in a private temporary directory removed at exit (not
    ``./spark-warehouse``), and driver and executors logging ``spark.log.level`` (WARN) and above to
    stderr, from the start (no banner, no native-library warning).

    The process environment gets ``PYSPARK_PYTHON`` and ``PYSPARK_DRIVER_PYTHON`` set to
    :data:`sys.executable` (Python workers run this interpreter, so ``marshal_py`` imports in
    them), ``SPARK_LOCAL_IP`` 127.0.0.1 and ``SPARK_HOME`` the pyspark package directory.

    Args:
        app_name: the application name (``spark.app.name``).
        master: ``local[N]``, or a standalone cluster's ``spark://127.0.0.1:PORT``.
        **conf: further Spark settings, overriding the defaults; pass dotted names with
            ``**{"spark.executor.memory": "512m"}``; ``spark.log.level`` is the least severe
            log level shown (``INFO``, ``DEBUG``...). ``spark.driver.extraJavaOptions`` and
            ``spark.executor.extraJavaOptions`` are appended to the logging option.

    Returns:
        The new SparkSession; stop it with ``session.stop()``.

    Raises:
        SparkUnavailableError: pyspark or Java 17+ is missing.
        SparkError: a SparkSession is already running in this process (pyspark allows one),
            or the session cannot start.
    """
    settings = dict(DEFAULT_CONF)
    settings["spark.sql.warehouse.dir"] = str(_warehouse_dir())
    for key, value in conf.items():
        settings[key] = _conf_value(value)
    settings["spark.log.level"] = settings["spark.log.level"].upper()
    log_config = log4j2_config(settings["spark.log.level"])  # checks the level first
    home = spark_home()
    find_java()
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    active = SparkContext._active_spark_context
    if active is not None:
        raise SparkError(
            f"a SparkSession is already running in this process (master {active.master}, app "
            f"{active.appName!r}) and pyspark allows only one: use it, or stop it first "
            "(session.stop())"
        )

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    os.environ["SPARK_HOME"] = str(home)

    log_option = f"-Dlog4j2.configurationFile={log_config}"
    for key in _JAVA_OPTIONS_KEYS:
        settings[key] = f"{log_option} {settings.get(key, '')}".strip()

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        reason = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else repr(exc)
        raise SparkError(
            f"cannot start a SparkSession on {master}: {reason}; check the settings passed "
            "and that Java runs"
        ) from exc
    return session


def _conf_value(value: str | int | float | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
