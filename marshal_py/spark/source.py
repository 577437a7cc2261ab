"""The ``marshal`` Spark data source: consume a topic through marshal_py coordination.

::

    from marshal_py.spark import register
    register(spark)
    events = (spark.readStream.format("marshal")
              .option("bootstrap.servers", "127.0.0.1:9092")
              .option("group", "orders.etl").option("topics", "orders")
              .option("mode", "alo")            # or "amo", "share", "key-shared"
              .load())

The query is one member of the group, side by side with Python consumers of the same group:
it holds its fair share of the partitions (or, in share mode, acquires records from every
partition). See :mod:`marshal_py.spark.reader` for how a micro-batch is planned, read and
committed, and docs/spark.md for the guarantee of each mode across restarts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from marshal_py.spark.options import parse_options

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

#: The rows a ``marshal`` stream produces.
SCHEMA = StructType([
    StructField("key", BinaryType(), True),
    StructField("value", BinaryType(), True),
    StructField("topic", StringType(), False),
    StructField("partition", IntegerType(), False),
    StructField("offset", LongType(), False),
    StructField("timestamp", TimestampType(), False),
    StructField("headers", ArrayType(StructType([
        StructField("key", StringType(), False),
        StructField("value", BinaryType(), True),
    ]), False), False),
    StructField("delivery_count", IntegerType(), False),
])


class MarshalDataSource(DataSource):
    """Format ``marshal``: a streaming source over marshal_py coordination."""

    @classmethod
    def name(cls) -> str:
        return "marshal"

    def schema(self) -> StructType:
        parse_options(self.options)  # bad options fail at load(), not when the query starts
        return SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from marshal_py.spark.reader import MarshalStreamReader

        return MarshalStreamReader(parse_options(self.options), schema)


def register(spark: SparkSession) -> None:
    """Make ``spark.readStream.format("marshal")`` available in this session."""
    spark.dataSource.register(MarshalDataSource)
