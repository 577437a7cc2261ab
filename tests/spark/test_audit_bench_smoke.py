"""The audit benchmark runs (a smoke test: no timing is asserted; figures in BENCHMARKS.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def test_audit_benchmark_quick_mode_runs(kafka_bootstrap: str) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.audit", "--quick", "--bootstrap-servers", kafka_bootstrap],
        cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "5,000 records: generated and produced" in result.stdout, result.stdout
    assert "local: " in result.stdout and "spark on local[1]: " in result.stdout, result.stdout
    assert "DIFFER" not in result.stdout
