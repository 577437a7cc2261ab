"""tests/spark/worker_site/sitecustomize.py: Spark's zip archives of the installed pyspark leave
a Python process's path; any other archive stays."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pyspark

from tests.conftest import WORKER_SITE

LIB = Path(pyspark.__file__ or "").parent / "python" / "lib"


def _path_of_a_process_with(*entries: str) -> list[str]:
    """sys.path of a new interpreter whose PYTHONPATH is ``entries`` then the worker site."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([*entries, WORKER_SITE])}
    out = subprocess.run([sys.executable, "-c", "import sys; print('\\n'.join(sys.path))"],
                         env=env, capture_output=True, text=True, check=True, timeout=60)
    return out.stdout.splitlines()


def test_the_installed_pysparks_archives_leave_the_path() -> None:
    archives = [str(LIB / "pyspark.zip"), *map(str, LIB.glob("py4j-*-src.zip"))]
    assert len(archives) == 2, archives  # as pip installs pyspark
    path = _path_of_a_process_with(*archives)
    assert WORKER_SITE in path
    assert not set(archives) & set(path)


def test_archives_of_another_spark_stay(tmp_path: Path) -> None:
    other = [str(tmp_path / "python" / "lib" / "pyspark.zip"),
             str(tmp_path / "python" / "lib" / "py4j-0.10.9.9-src.zip")]
    assert _path_of_a_process_with(*other)[1:3] == other
