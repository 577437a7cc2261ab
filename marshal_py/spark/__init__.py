"""marshal_py on Apache Spark (needs the ``spark`` extra: ``pip install marshal_py[spark]``).

:mod:`marshal_py.spark.session` builds a local SparkSession fit for development machines and
CI; :mod:`marshal_py.spark.cluster` runs a throwaway Spark standalone cluster on 127.0.0.1 for
tests that need executors in separate processes. Nothing here imports pyspark at import time.
"""
