"""The suite's background jobs (:mod:`tests.background`), declared here rather than in their
test modules so that the pytest-xdist controller, which collects nothing, knows them."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.background import Job, background_job

ROOT = Path(__file__).resolve().parent.parent
QUICK_RESULTS = ROOT / "bench" / "results" / "quick"
QUICK_PLOTS = ROOT / "docs" / "bench" / "quick"


def _fresh_quick_run(scratch: Path) -> list[str]:
    """The smoke run's command, after removing what an earlier one wrote."""
    del scratch
    for stale in [*QUICK_RESULTS.glob("*"), *QUICK_PLOTS.glob("*")]:
        stale.unlink()
    return [sys.executable, "-m", "bench", "--quick"]


#: ``python -m bench --quick``: every benchmark suite at its smallest size
#: (tests/test_bench_quick.py reads its outcome).
BENCH_QUICK = background_job(Job(
    name="bench-quick",
    test="tests/test_bench_quick.py::test_every_suite_runs_quick_against_one_broker",
    command=_fresh_quick_run,
    timeout_s=900,
))
