"""Where a benchmark worker's CPU goes, thread by thread, without slowing it down.

cProfile multiplies a member's CPU several times over and hides what is spent in kafka-python's
network threads; reading ``/proc/self/task`` does neither. :class:`ThreadCensus` notes each
thread's CPU (user and system) at :meth:`start` and writes, at :meth:`write`, one line per
thread: its name, native id, CPU seconds since the start and of those in the kernel, and the
Kafka requests it sent by type (counted by wrapping kafka-python's connection, installed only
when a census is asked for). Linux only; elsewhere it writes nothing.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any

_requests: Counter[tuple[int, str]] = Counter()
_installed = False


def _count_requests() -> None:
    """Wrap kafka-python's ``KafkaConnection._send_request`` to count requests per thread."""
    global _installed
    if _installed:
        return
    from kafka.net.connection import KafkaConnection

    send = KafkaConnection._send_request

    def counting(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        _requests[(threading.get_native_id(), type(request).__name__)] += 1
        return send(self, request, *args, **kwargs)

    KafkaConnection._send_request = counting
    _installed = True


def _cpu_by_thread() -> dict[int, tuple[float, float]]:
    """(total, system) CPU seconds of each thread of this process."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            stat = Path(f"/proc/self/task/{tid}/stat").read_text()
        except OSError:  # the thread ended meanwhile
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        user, system = int(fields[11]) / tick, int(fields[12]) / tick
        out[int(tid)] = (user + system, system)
    return out


class ThreadCensus:
    """CPU and Kafka requests per thread between :meth:`start` and :meth:`write`, into
    ``<directory>/<name>-threads.tsv``; does nothing when ``directory`` is empty."""

    def __init__(self, directory: str, name: str) -> None:
        self.directory = directory if Path("/proc/self/task").is_dir() else ""
        self.name = name
        self._at_start: dict[int, tuple[float, float]] = {}
        if self.directory:
            _count_requests()

    def start(self) -> None:
        """Count from now."""
        if self.directory:
            self._at_start = _cpu_by_thread()
            _requests.clear()

    def write(self) -> None:
        """Write what each thread spent since :meth:`start`."""
        if not self.directory:
            return
        names = {t.native_id: t.name for t in threading.enumerate()}
        lines = ["thread\tid\tcpu_s\tsystem_s\trequests\n"]
        for tid, (cpu, system) in sorted(_cpu_by_thread().items()):
            cpu0, system0 = self._at_start.get(tid, (0.0, 0.0))
            sent = ", ".join(f"{kind} {n}" for (who, kind), n in sorted(_requests.items())
                             if who == tid)
            lines.append(f"{names.get(tid, '?')}\t{tid}\t{cpu - cpu0:.2f}\t"
                         f"{system - system0:.2f}\t{sent}\n")
        (Path(self.directory) / f"{self.name}-threads.tsv").write_text("".join(lines))
