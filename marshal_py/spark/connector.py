"""Spark's own Kafka connector (``spark-sql-kafka-0-10``), for :mod:`marshal_py.spark.range_stream`.

The connector is not part of pyspark: Spark resolves it with Ivy when a session starts with
``spark.jars.packages``. :func:`kafka_connector_conf` gives the settings that resolve the
pinned version once, from Maven Central only, into the project cache (``ivy/`` in
:func:`~marshal_py.devbroker.jars.default_cache_dir`, next to the broker jars); later sessions
find it there and need no network: ``local_session("app", **kafka_connector_conf())``.

Nothing here imports pyspark at import time.
"""

from __future__ import annotations

import os
from pathlib import Path

from marshal_py.devbroker.jars import default_cache_dir
from marshal_py.spark.session import SparkUnavailableError, _write_once, require_pyspark

__all__ = ["CONNECTOR_VERSIONS", "KafkaConnectorMissingError", "connector_coordinates",
           "connector_version", "kafka_connector_conf"]

#: pyspark major.minor -> the spark-sql-kafka-0-10 release it runs. A Spark minor release's
#: connector reaches Maven Central after pyspark itself does: pyspark 4.3 runs the 4.2
#: connector (the Kafka source's API is unchanged between them). Other versions use the
#: connector of their own version; ``MARSHAL_SPARK_KAFKA_VERSION`` overrides both.
CONNECTOR_VERSIONS: dict[str, str] = {"4.2": "4.2.0", "4.3": "4.2.0"}

_IVY_SETTINGS = """\
<!-- Written by marshal_py.spark.connector: resolve Spark's Kafka connector from Maven Central
     only, so a machine that reaches only Maven Central tries no other host. -->
<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true" root="https://repo1.maven.org/maven2/"/>
  </resolvers>
</ivysettings>
"""


class KafkaConnectorMissingError(SparkUnavailableError):
    """Spark's Kafka connector is not on the session's classpath."""


def connector_version(pyspark_version: str | None = None) -> str:
    """The spark-sql-kafka-0-10 version for ``pyspark_version`` (default: the installed one)."""
    explicit = os.environ.get("MARSHAL_SPARK_KAFKA_VERSION")
    if explicit:
        return explicit
    if pyspark_version is None:
        pyspark_version = str(require_pyspark().__version__)
    major_minor = ".".join(pyspark_version.split(".")[:2])
    return CONNECTOR_VERSIONS.get(major_minor, pyspark_version)


def connector_coordinates(version: str | None = None) -> str:
    """Maven coordinates of the connector (Scala 2.13, as pyspark 4 is built)."""
    return f"org.apache.spark:spark-sql-kafka-0-10_2.13:{version or connector_version()}"


def kafka_connector_conf(cache_dir: Path | None = None) -> dict[str, str]:
    """Session settings that put the pinned connector on the classpath (resolved once).

    ``spark.jars.packages`` names the connector; ``spark.jars.ivy`` is the project cache and
    ``spark.jars.ivySettings`` a settings file (written there) that asks Maven Central only.
    Pass them to ``SparkSession.builder.config`` (or ``spark-submit --conf``) before the
    session's JVM starts: they have no effect on a running session.
    """
    ivy = (cache_dir or default_cache_dir()) / "ivy"
    ivy.mkdir(parents=True, exist_ok=True)
    settings = _write_once(ivy / "ivysettings.xml", _IVY_SETTINGS)
    return {"spark.jars.packages": connector_coordinates(), "spark.jars.ivy": str(ivy),
            "spark.jars.ivySettings": str(settings)}


def missing_connector_hint() -> str:
    """What to do when the connector is missing, in one sentence."""
    return ("start the session with the settings of marshal_py.spark.connector."
            "kafka_connector_conf() (local_session(name, **kafka_connector_conf())), or give it "
            f"spark.jars.packages={connector_coordinates()} (spark-submit --packages)")
