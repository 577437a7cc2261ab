"""The benchmark harness runs end to end: ``python -m bench --quick`` (a smoke test: a job of
tests/background.py, which the worker that takes this file runs under ``bin/test``, and which
starts in the background when collection ends in a run without workers).

Every suite runs at its smallest size against one dev broker, ours and every anchor once. It
runs beside the rest of the suite: a member starved past 2 HI there loses its claims, and the
at-most-once records it had confirmed are counted as lost to takeovers, which the bench tells
from a loss with the coordination log's audit (``bench.harness.amo_takeovers``).
No timing is asserted here: the figures live in BENCHMARKS.md, measured full-size on a quiet
machine. What is asserted is that each suite measured something for every reader it names and
wrote its JSON, Markdown and plots.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.__main__ import SUITES
from tests.background import BackgroundJobs, Job, background_job

ROOT = Path(__file__).resolve().parent.parent
QUICK_RESULTS = ROOT / "bench" / "results" / "quick"
QUICK_PLOTS = ROOT / "docs" / "bench" / "quick"


def _fresh_quick_run(scratch: Path) -> list[str]:
    """The smoke run's command, after removing what an earlier one wrote."""
    for stale in [*QUICK_RESULTS.glob("*"), *QUICK_PLOTS.glob("*")]:
        stale.unlink()
    return [sys.executable, "-m", "bench", "--quick"]


BENCH_QUICK = background_job(Job(
    name="bench-quick",
    test="tests/test_bench_quick.py::test_every_suite_runs_quick_against_one_broker",
    command=_fresh_quick_run,
    timeout_s=900,
))


@pytest.mark.integration
@pytest.mark.timeout(2700)
def test_every_suite_runs_quick_against_one_broker(background: BackgroundJobs) -> None:
    """The smoke run's outcome (tests/background.py: run by this worker, or in the background
    since collection ended)."""
    done = background.outcome(BENCH_QUICK.name)
    assert done.returncode == 0, done.tail()
    for suite in SUITES:
        data = json.loads((QUICK_RESULTS / f"{suite}.json").read_text())
        assert data["quick"] is True
        assert data["tables"], f"{suite}: no table"
        for table in data["tables"]:
            assert table["rows"], f"{suite}: table {table['title']!r} has no rows"
            for row in table["rows"]:
                measured = [cell for cell in row[1:] if any(c.isdigit() for c in cell)]
                assert measured, f"{suite}: {table['title']!r} row {row} holds no figure"
        assert (QUICK_RESULTS / f"{suite}.md").read_text().startswith(f"### {suite}")
        for i in range(len(data["plots"])):
            png = QUICK_PLOTS / f"{suite}-{i + 1}.png"
            assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"### {suite}" in done.stdout


def test_an_unknown_suite_is_one_line_and_exit_2() -> None:
    result = subprocess.run([sys.executable, "-m", "bench", "no-such-suite"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "unknown suite 'no-such-suite'" in result.stderr
    assert "Traceback" not in result.stderr


def test_list_names_every_suite() -> None:
    result = subprocess.run([sys.executable, "-m", "bench", "--list"], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0
    assert [line.split()[0] for line in result.stdout.splitlines()] == list(SUITES)
