"""The newcomer's main job (`bin/demo`) runs end to end on its own broker and loses nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_runs_three_consumers_kills_one_and_loses_nothing() -> None:
    result = subprocess.run([sys.executable, "-m", "marshal_py.cli.demo"], capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "Ownership settled" in out
    assert "worker-2's partitions taken over" in out
    assert "produced 6,000 orders; consumed 6,000 distinct; lost 0;" in out
    assert out.count("unclaimed") == 12  # released by the survivors at the end
