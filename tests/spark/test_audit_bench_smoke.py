"""The audit benchmark runs (a smoke test: no timing is asserted; figures in the README).

In this process, on the test session (``run_spark_audit`` uses an active session), so that it
does not start a JVM of its own."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

from bench import audit as bench_audit

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.integration


def test_audit_benchmark_quick_mode_runs(kafka_bootstrap: str, spark: SparkSession,
                                         monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(sys, "argv", ["bench.audit", "--quick",
                                      "--bootstrap-servers", kafka_bootstrap])
    bench_audit.main()
    out = capsys.readouterr().out
    assert "5,000 records: generated and produced" in out, out
    assert "local: " in out and "spark on local[1]: " in out, out
    assert "DIFFER" not in out
