"""What every benchmark driver shares: the consumer benchmarks' settings, bounded waits that
fail with one line (:class:`BenchError`), small statistics, and the machine line every result
starts with."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import kafka
from kafka import KafkaAdminClient

from marshal_py.devbroker import KAFKA_VERSION
from marshal_py.devbroker.broker_config import JVM_PERFORMANCE_OPTS

HI_S = 1.0
HI_MS = int(HI_S * 1000)
PARTITIONS = 12
MEMBERS = 3
POLL_S = 0.05
RECORD_BYTES = 100

T = TypeVar("T")


class BenchError(Exception):
    """A measurement could not be taken; the message says what did not happen."""


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float,
             interval_s: float = POLL_S, detail: Callable[[], str] = lambda: "") -> T:
    """Call ``probe`` every ``interval_s`` until it returns something truthy; bounded."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            extra = detail()
            raise BenchError(f"timed out after {timeout_s:.0f} s waiting for {what}"
                             + (f" ({extra})" if extra else ""))
        time.sleep(interval_s)


def median_range(values: Sequence[float]) -> tuple[float, float, float]:
    return statistics.median(values), min(values), max(values)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))  # ceil
    return ordered[int(rank) - 1]


def create_topic(admin: KafkaAdminClient, name: str, partitions: int = PARTITIONS) -> None:
    admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}},
                        wait_for_metadata=True)


def machine_line() -> str:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    memory = ""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = f", {int(line.split()[1]) / 2**20:.0f} GiB"
                break
    # Options the dev broker's JVM takes from the environment change its figures: say so.
    jvm = os.environ.get(JVM_PERFORMANCE_OPTS, "").strip()
    return (f"machine: {cpu}, {os.cpu_count()} cores{memory}, {platform.system()}, "
            f"Python {platform.python_version()}, Kafka {KAFKA_VERSION} (dev broker"
            f"{f', JVM {jvm}' if jvm else ''}), "
            f"kafka-python {kafka.__version__} (CRC32C in {crc32c_kind()})")


def load() -> str:
    with contextlib.suppress(OSError, AttributeError):
        one, five, fifteen = os.getloadavg()
        return f"load average {one:.2f} {five:.2f} {fifteen:.2f}"
    return "load average unknown"


def crc32c_kind() -> str:
    """kafka-python checks record CRCs with the crc32c C extension when it is installed."""
    if importlib.util.find_spec("crc32c") is None:
        return "pure Python: no crc32c extension"
    return "C: crc32c extension"


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join("  " + line.rstrip() for line in lines)


def s(value: float) -> str:
    return f"{value:.2f} s"
