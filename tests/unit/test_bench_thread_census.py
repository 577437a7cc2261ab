"""bench.thread_census: each thread's CPU between start and write, by name."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from bench.thread_census import ThreadCensus


def test_a_busy_thread_is_written_with_the_cpu_it_spent_since_start(tmp_path: Path) -> None:
    census = ThreadCensus(str(tmp_path), "member-1")
    census.start()
    burnt, done = threading.Event(), threading.Event()

    def burn() -> None:
        begin = time.thread_time()
        while time.thread_time() - begin < 0.3:  # CPU, not wall time
            pass
        burnt.set()
        done.wait(10)

    busy = threading.Thread(target=burn, name="busy-thread")
    busy.start()
    try:
        assert burnt.wait(30)
        census.write()
    finally:
        done.set()
        busy.join()
    header, *rows = (tmp_path / "member-1-threads.tsv").read_text().splitlines()
    assert header.split("\t") == ["thread", "id", "cpu_s", "system_s", "requests"]
    by_name = {row.split("\t")[0]: row.split("\t") for row in rows}
    assert float(by_name["busy-thread"][2]) >= 0.2  # clock ticks: 10 ms granularity
    assert "MainThread" in by_name


def test_without_a_directory_nothing_is_written(tmp_path: Path) -> None:
    census = ThreadCensus("", "member-1")
    census.start()
    census.write()
    assert list(tmp_path.iterdir()) == []
