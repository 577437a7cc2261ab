"""examples/spark_pipeline.py runs as documented, against the suite's broker (its driver
with the test drivers' JVM options: tests/spark/quick_jvm.py)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.quick_jvm import program_env

pytestmark = pytest.mark.integration

EXAMPLE = Path(__file__).parents[2] / "examples" / "spark_pipeline.py"


def test_example_pipeline_aggregates_every_order(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    def run(orders: int) -> str:
        result = subprocess.run(
            [sys.executable, str(EXAMPLE), "--bootstrap-servers", kafka_bootstrap,
             "--topic", unique_name, "--group", f"g-{unique_name}", "--orders", str(orders),
             "--output", str(tmp_path / "out")],
            capture_output=True, text=True, timeout=300, env=program_env())
        assert result.returncode == 0, result.stderr[-3000:]
        return result.stdout

    # (Resuming from a checkpoint is tested on the source itself, in
    # test_source_integration.py; one run keeps this test to one Spark start.)
    output = run(3000)
    assert re.search(r"aggregated 3000 orders into ", output), output
    from pyarrow import parquet

    table = parquet.read_table(tmp_path / "out" / "revenue")
    assert sum(table.column("orders").to_pylist()) == 3000
