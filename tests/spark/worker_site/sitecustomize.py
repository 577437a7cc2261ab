"""Imported at start-up by every Python process of a test run: ``tests/conftest.py`` puts this
directory on ``PYTHONPATH``, which Spark passes on to the Python processes it starts.

Spark starts its Python processes -- the workers, their daemons, a streaming query's Python
source runner -- with ``$SPARK_HOME/python/lib/pyspark.zip`` and py4j's zip first on their
path. Python never caches what it compiles from a zip archive, so each of those processes
compiled pyspark's modules from source again: about 0.45 CPU-seconds each on a quiet 2-core
machine (the runner's imports 0.35 -> 0.8-0.97 CPU-s, ``pyspark.worker``'s 0.15 -> 0.6),
and a test run starts a few hundred of them. Where the archives are those of the very
pyspark installed for this interpreter (``SPARK_HOME`` is the pip-installed package: see
:func:`marshal_py.spark.session.spark_home`), this drops them from ``sys.path``, and the same
modules load from the installed package and its cached bytecode. Other archives, and the
rest of the path, stay as they are; so does everything when the check fails.
"""

from __future__ import annotations

import os.path
import sys


def _is_spark_archive(entry: str) -> bool:
    name = os.path.basename(entry)
    return name == "pyspark.zip" or (name.startswith("py4j-") and name.endswith("-src.zip"))


def _drop_installed_spark_archives() -> None:
    archives = [entry for entry in sys.path if _is_spark_archive(entry)]
    if not archives:
        return
    from importlib.machinery import PathFinder

    rest = [entry for entry in sys.path if entry not in archives]
    try:
        pyspark = PathFinder.find_spec("pyspark", rest)
        py4j = PathFinder.find_spec("py4j", rest)
    except (ImportError, OSError, ValueError):
        return
    if pyspark is None or py4j is None or not pyspark.submodule_search_locations:
        return
    lib = os.path.realpath(os.path.join(next(iter(pyspark.submodule_search_locations)),
                                        "python", "lib"))
    if all(os.path.realpath(os.path.dirname(entry)) == lib for entry in archives):
        sys.path[:] = rest


_drop_installed_spark_archives()
