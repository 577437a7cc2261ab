"""The key-shared benchmark runs (a smoke test: no timing is asserted; figures live in
BENCHMARKS.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_key_shared_benchmark_quick_mode_runs() -> None:
    result = subprocess.run([sys.executable, "-m", "bench.key_shared", "--quick"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for line in ("key-shared 1 member(s) x 2 ms:", "key-shared 3 member(s) x 2 ms:",
                 "fetched/N per member"):
        assert line in result.stdout, result.stdout[-3000:]
