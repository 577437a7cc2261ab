"""marshal_py on Apache Spark (needs the ``spark`` extra: ``pip install marshal_py[spark]``).

:mod:`marshal_py.spark.session` builds a local SparkSession fit for development machines and
CI; :mod:`marshal_py.spark.cluster` runs a throwaway Spark standalone cluster on 127.0.0.1 for
tests that need executors in separate processes. :func:`register` makes the ``marshal``
streaming source available; :func:`read_stream` (:mod:`marshal_py.spark.range_stream`) runs
micro-batches whose records Spark's own Kafka reader reads. Nothing here imports pyspark at
import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from marshal_py.spark.range_stream import Process, RangeStream

__all__ = ["read_stream", "register"]


def register(spark: SparkSession) -> None:
    """Make ``spark.readStream.format("marshal")`` available in ``spark``'s session."""
    from marshal_py.spark.source import register as register_source

    register_source(spark)


def read_stream(spark: SparkSession, options: Mapping[str, str], process: Process, *,
                reader_options: Mapping[str, str] | None = None) -> RangeStream:
    """Join the group as the planner of micro-batches that Spark's Kafka reader reads: see
    :func:`marshal_py.spark.range_stream.read_stream`."""
    from marshal_py.spark.range_stream import read_stream as start

    return start(spark, options, process, reader_options=reader_options)
