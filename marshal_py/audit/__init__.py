"""Auditing a whole coordination log: the pure observer and its tables (``observer``), what
it reads of a record cheaply (``fields``), the local engine (``local``: one rationalizer over
the log in this process), and a seeded generator of realistic traffic (``generate``). The
Spark engine (:mod:`marshal_py.spark.audit`) is built on this room, never the reverse."""
