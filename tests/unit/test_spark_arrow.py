"""The Spark source's Arrow columns (marshal_py.spark.arrow), made from buffers."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

from pyspark.sql.pandas.types import to_arrow_schema

from marshal_py.spark.arrow import KAFKA_PYTHON_SHAPE, ColumnBuffer
from marshal_py.spark.source import SCHEMA

ROOT = Path(__file__).resolve().parents[2]
UTC = dt.UTC


def record(offset: int, key: bytes | None, value: bytes | None, headers: object
           ) -> SimpleNamespace:
    return SimpleNamespace(offset=offset, key=key, value=value, headers=headers,
                           timestamp=1_700_000_000_000 + offset)


def test_a_batch_holds_every_field_with_nulls_headers_and_two_slices() -> None:
    schema = to_arrow_schema(SCHEMA, timezone="UTC")
    columns = ColumnBuffer(KAFKA_PYTHON_SHAPE)
    first = [record(10, b"k", None, None), record(11, None, b"", [("a", b"1"), ("b", None)])]
    second = [record(3, b"", b"v", [])]
    columns.add("orders", 2, first, [10, 11], 1)
    columns.add("tö", 0, second, [3], 4)
    batch = columns.batch(schema)
    batch.validate(full=True)
    assert len(columns) == 0
    assert batch.to_pylist() == [
        {"key": b"k", "value": None, "topic": "orders", "partition": 2, "offset": 10,
         "timestamp": dt.datetime(2023, 11, 14, 22, 13, 20, 10_000, tzinfo=UTC),
         "headers": [], "delivery_count": 1},
        {"key": None, "value": b"", "topic": "orders", "partition": 2, "offset": 11,
         "timestamp": dt.datetime(2023, 11, 14, 22, 13, 20, 11_000, tzinfo=UTC),
         "headers": [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
         "delivery_count": 1},
        {"key": b"", "value": b"v", "topic": "tö", "partition": 0, "offset": 3,
         "timestamp": dt.datetime(2023, 11, 14, 22, 13, 20, 3_000, tzinfo=UTC),
         "headers": [], "delivery_count": 4},
    ]


def test_building_a_batch_does_not_import_pandas() -> None:
    # pyarrow imports pandas to convert Python objects; a fresh Python worker would pay it.
    script = (
        "import sys\n"
        "from types import SimpleNamespace as R\n"
        "from pyspark.sql.pandas.types import to_arrow_schema\n"
        "from marshal_py.spark.arrow import KAFKA_PYTHON_SHAPE, ColumnBuffer\n"
        "from marshal_py.spark.source import SCHEMA\n"
        "c = ColumnBuffer(KAFKA_PYTHON_SHAPE)\n"
        "rs = [R(offset=i, key=None if i else b'k', value=b'v', timestamp=i,\n"
        "        headers=[('h', b'x')] if i == 1 else None) for i in range(3)]\n"
        "c.add('t', 0, rs, [0, 1, 2], 1)\n"
        "c.batch(to_arrow_schema(SCHEMA, timezone='UTC'))\n"
        "print('pandas' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            cwd=ROOT, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
