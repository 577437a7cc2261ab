"""How bin/test spreads the suite over workers (tests/scheduling.py)."""

from __future__ import annotations

from pathlib import Path

from tests.scheduling import PURE, SPARK_PARTS, part_of, rank_of

SPARK_TESTS = Path(__file__).resolve().parents[1] / "spark"


def test_every_spark_test_file_belongs_to_one_spark_part() -> None:
    files = sorted(path.name for path in SPARK_TESTS.glob("test_*.py"))
    listed = sorted(name for names in SPARK_PARTS.values() for name in names)
    assert listed == files, "add new Spark test files to a part of tests/scheduling.py"


def test_parts_go_out_longest_first_and_pure_tests_last() -> None:
    spark = "tests/spark/test_range_stream.py::test_x"
    integration = "tests/integration/test_share.py::test_y"
    pure = [f"{directory}test_z.py::test_w" for directory in PURE]
    assert part_of(spark) == part_of("tests/spark/test_fetch.py::test_v") == "spark-streams"
    assert part_of(integration) == "tests/integration/test_share.py"
    assert rank_of(spark) < rank_of("tests/chaos/test_campaign.py::t") < rank_of(integration)
    assert all(rank_of(integration) < rank_of(node) for node in pure)
