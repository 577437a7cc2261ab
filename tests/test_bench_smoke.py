"""The benchmarks run (a smoke test: no timing is asserted here; figures live in BENCHMARKS.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_rationalizer_benchmark_quick_mode_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "bench.rationalizer", "--quick"], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "records/s" in result.stdout
    assert "5,000 records x 1 runs" in result.stdout


def test_consumer_benchmark_quick_mode_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "bench.consumer", "--quick"], cwd=ROOT,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    for line in ("failover:", "claim latency", "records/s (5,000 records x 1 runs"):
        assert line in result.stdout, result.stdout[-3000:]


def test_share_benchmark_quick_mode_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "bench.share", "--quick"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "records/s" in result.stdout, result.stdout[-3000:]


def test_replay_benchmark_quick_mode_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "bench.replay", "--quick"], cwd=ROOT,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "without checkpoints:" in result.stdout, result.stdout[-3000:]
    assert "with checkpoints:" in result.stdout, result.stdout[-3000:]
