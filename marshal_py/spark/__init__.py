"""marshal_py on Apache Spark (needs the ``spark`` extra: ``pip install marshal_py[spark]``).

:mod:`marshal_py.spark.session` builds a local SparkSession fit for development machines and
CI; :mod:`marshal_py.spark.cluster` runs a throwaway Spark standalone cluster on 127.0.0.1 for
tests that need executors in separate processes. Nothing here imports pyspark at import time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register"]


def register(spark: SparkSession) -> None:
    """Make ``spark.readStream.format("marshal")`` available in ``spark``'s session."""
    from marshal_py.spark.source import register as register_source

    register_source(spark)
