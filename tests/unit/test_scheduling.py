"""How bin/test spreads the suite over workers (tests/scheduling.py)."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

from tests.scheduling import KAFKA39_PART, MIXED, PURE, SPARK_PARTS, part_of, rank_of

TESTS = Path(__file__).resolve().parents[1]
SPARK_TESTS = TESTS / "spark"
#: A test or a module marked serial (pytest.mark.serial on a test, or in a module's pytestmark).
SERIAL_MARK = re.compile(r"^\s*(@pytest\.mark\.serial|pytestmark\b.*\bserial\b)", re.MULTILINE)


def test_every_spark_test_file_belongs_to_one_spark_part() -> None:
    files = sorted(path.name for path in SPARK_TESTS.glob("test_*.py"))
    listed = sorted(name for names in SPARK_PARTS.values() for name in names)
    assert listed == files, "add new Spark test files to a part of tests/scheduling.py"


def test_every_file_on_the_kafka39_broker_is_in_its_part() -> None:
    users = sorted(str(path.relative_to(TESTS.parent))
                   for path in (TESTS / "integration").rglob("test_*.py")
                   if "ON_EVERY_BROKER" in path.read_text()
                   or "kafka39_bootstrap" in path.read_text())
    assert users == sorted(KAFKA39_PART[1])
    assert {part_of(f"{path}::t") for path in users} == {KAFKA39_PART[0]}


def test_parts_go_out_longest_first_and_pure_tests_last() -> None:
    spark = "tests/spark/test_range_stream.py::test_x"
    integration = "tests/integration/test_edges.py::test_y"
    pure = [f"{directory}test_z.py::test_w" for directory in PURE]
    assert part_of(spark) == part_of("tests/spark/test_fetch.py::test_v") == "spark-streams"
    assert part_of(integration) == "tests/integration/test_edges.py"
    kafka39 = "tests/integration/test_share.py::test_t[kafka-3.9]"
    # The longest Spark part, then the 3.9 part (brokers, waits), then another Spark part.
    assert rank_of(spark) < rank_of(kafka39) < rank_of("tests/spark/test_audit_engines.py::t")
    assert rank_of(spark) < rank_of("tests/chaos/test_campaign.py::t") < rank_of(integration)
    assert all(rank_of(integration) < rank_of(node) for node in pure)


def test_the_mixed_parts_alternate_computing_and_waiting() -> None:
    computing = [part.startswith(PURE) for part in MIXED]
    assert computing[0] and all(a != b for a, b in itertools.pairwise(computing))
    for part in MIXED:
        assert (TESTS.parent / part).exists(), part
    chaos, golden = "tests/chaos/test_campaign.py::t", "tests/golden/test_golden_corpus.py::t"
    assert rank_of("tests/spark/test_cluster.py::t") < rank_of(golden) < rank_of(chaos)
    assert rank_of(chaos) < rank_of("tests/integration/test_edges.py::t")


def test_the_tests_on_the_standalone_cluster_go_with_the_cluster_part() -> None:
    for test in ("tests/spark/test_audit_engines.py::test_engines_agree_on_a_standalone_cluster",
                 "tests/spark/test_range_stream.py::"
                 "test_on_a_standalone_cluster_executor_jvms_read_every_record"):
        assert part_of(test) == "spark-cluster"
    assert part_of("tests/spark/test_audit_engines.py::test_a_large_generated_log_agrees_"
                   "between_engines") == "spark-audit"


def test_every_serial_test_is_under_tests_integration() -> None:
    """bin/test collects the timing-sensitive tests (marked serial) from tests/integration only:
    a serial test elsewhere would never run."""
    marked = sorted(str(path.relative_to(TESTS)) for path in TESTS.rglob("test_*.py")
                    if SERIAL_MARK.search(path.read_text()))
    assert marked, "no serial test found: the search is wrong"
    assert [path for path in marked if not path.startswith("integration/")] == []
