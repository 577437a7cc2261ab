"""The test drivers' class archive (tests/spark/quick_jvm.py) on a real JVM: one archive
serves every checkout of the machine."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from marshal_py.spark.session import find_java, spark_home
from tests.spark.quick_jvm import ensure_archive


def test_the_spark_of_another_checkout_maps_the_class_archive(tmp_path: Path) -> None:
    """A fresh clone's Spark: its jars are hard links to the same files at other paths (what
    ensure_archive makes of a new ``.venv``). Its driver JVM, started by Spark's own
    launcher, maps the archive: the JVM takes the same files at other paths."""
    archive = ensure_archive(wait=True)
    assert archive is not None and archive.is_file()
    home = spark_home()
    other = tmp_path / "clone" / "pyspark"
    (other / "jars").mkdir(parents=True)
    for jar in sorted((home / "jars").glob("*.jar")):
        os.link(jar, other / "jars" / jar.name)
    shutil.copytree(home / "bin", other / "bin", symlinks=True)
    log = tmp_path / "cds.log"
    java = Path(find_java()[0]).resolve()
    done = subprocess.run(
        [str(other / "bin" / "spark-submit"), "--driver-java-options",
         f"-XX:SharedArchiveFile={archive} -Xlog:cds=info,class+path=info:file={log}",
         "--version"],
        env={**os.environ, "SPARK_HOME": str(other), "JAVA_HOME": str(java.parents[1])},
        capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    text = log.read_text()
    assert "mismatch" not in text, text[-3000:]
    assert f"Opened archive {archive}" in text
    assert "Mapped dynamic region #1" in text
