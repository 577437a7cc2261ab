"""The context every benchmark suite runs in: one broker, the repetition count, progress.

Every suite of ``python -m bench`` is a module ``bench/suite_<name>.py`` with a function
``run(ctx: BenchContext) -> SuiteReport``. All suites of one invocation share the broker in
``ctx.bootstrap`` (a dev broker the entry point started, unless ``--bootstrap-servers`` named
one), so ours and the anchor always read the same broker and the same data. A suite must:

* measure ours and its anchor(s) in the same run, interleaved, ``ctx.repeat`` times
  (>= 3 for a real run, 1 with ``--quick``), and report the median, the range and the ratio;
* keep ``--quick`` under a minute or so: small sizes, no timing asserted (``bin/test`` runs it
  as a smoke test);
* bound every wait (:func:`bench.common.wait_for`) and raise :class:`BenchError` with one
  line saying what did not happen;
* stop every process it started, whatever happens.
"""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from kafka import KafkaAdminClient, KafkaProducer

from bench.common import BenchError, create_topic, load, machine_line, percentile, wait_for

T = TypeVar("T")

__all__ = ["BROKER_PROPERTIES", "AmoTakeovers", "BenchContext", "BenchError", "amo_takeovers",
           "load", "machine_line", "percentile", "wait_for"]

#: What the benchmark broker adds to the dev broker's ``server.properties``. Broker defaults
#: everywhere else; only the KIP-848 (``group.protocol=consumer``) lower bounds are lowered to
#: the classic protocol's (``group.min.session.timeout.ms`` 6 s, heartbeat 1 s), so the
#: failover suite can measure a KIP-848 group at its defaults (session 45 s, heartbeat 5 s,
#: unchanged) and, through per-group configs, at the same 6 s minimum as a classic group.
BROKER_PROPERTIES: dict[str, str] = {
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.min.heartbeat.interval.ms": "1000",
}


@dataclass
class BenchContext:
    """What a suite gets from ``python -m bench``."""

    bootstrap: str
    """The broker every suite of this run uses."""
    quick: bool = False
    """A smoke run: small sizes, one repetition, nothing timed for real."""
    repeat: int = 3
    """Repetitions of every figure (the median is reported)."""
    machine: str = field(default_factory=machine_line)
    """One line naming the machine, the Python, Kafka and client versions."""
    command: str = "python -m bench"
    """How this run was started (quoted in the reports)."""

    def say(self, message: str) -> None:
        """Progress on stderr (long runs must show they are alive)."""
        print(f"bench: {message}", file=sys.stderr, flush=True)

    def tag(self) -> str:
        """A fresh suffix for topic and group names."""
        return uuid.uuid4().hex[:8]

    def admin(self) -> KafkaAdminClient:
        return KafkaAdminClient(bootstrap_servers=self.bootstrap, client_id="bench-admin")

    def create_topic(self, name: str, partitions: int) -> str:
        """Create ``name`` (replication 1 on the dev broker) and wait for its metadata."""
        admin = self.admin()
        try:
            create_topic(admin, name, partitions)
        finally:
            admin.close()
        return name

    def produce(self, topic: str, records: int, partitions: int, size: int = 100,
                key: Callable[[int], bytes | None] = lambda i: None) -> None:
        """Write ``records`` values of ``size`` bytes round-robin over ``partitions``
        (record i to partition i % partitions, key ``key(i)``), acknowledged by all."""
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all",
                                 linger_ms=20, batch_size=256 * 1024,
                                 compression_type=None)
        started = time.monotonic()
        try:
            payload = b"x" * size
            for i in range(records):
                producer.send(topic, value=payload, key=key(i), partition=i % partitions)
                if i and i % 200_000 == 0:
                    self.say(f"produced {i:,}/{records:,} records to {topic}")
            producer.flush(timeout=300)
        finally:
            producer.close()
        self.say(f"produced {records:,} records to {topic} in "
                 f"{time.monotonic() - started:.1f} s")

    def repeated(self, what: str, measure: Callable[[int], T]) -> list[T]:
        """Call ``measure(i)`` for i in 0..repeat-1, with progress."""
        results = []
        for i in range(self.repeat):
            self.say(f"{what}: repetition {i + 1}/{self.repeat}")
            results.append(measure(i))
        return results


@dataclass(frozen=True)
class AmoTakeovers:
    """What the coordination log says of one partition of an at-most-once group: how often
    its claim was taken over (its owner stale for 2 HI) and the last offset confirmed."""

    takeovers: int
    last_confirmed: int | None

    def covers(self, end: int) -> bool:
        """Whether a takeover happened and the confirmed windows reach ``end`` (exclusive):
        every record below ``end`` not handed out was confirmed by an owner that lost the
        partition before handing it out, which at-most-once allows."""
        return self.takeovers > 0 and self.last_confirmed is not None \
            and self.last_confirmed + 1 >= end


def amo_takeovers(bootstrap: str, group: str, topic: str, heartbeat_interval_ms: int,
                  coordination_topic: str = "__marshal") -> dict[int, AmoTakeovers]:
    """Per partition of ``topic``, the takeovers and the last confirmed offset of ``group``,
    from an audit of the coordination log (``marshal audit``'s ``partitions`` table).

    A benchmark reading at most once tells a record lost to a takeover (allowed: a member
    starved past 2 HI on a loaded machine loses its claim, and the records of the window it
    had confirmed are not read again) from a record lost otherwise (a bug) with this.
    """
    import tempfile
    from pathlib import Path

    import pyarrow.parquet as pq

    from marshal_py.audit.local import run_local_audit

    with tempfile.TemporaryDirectory(prefix="bench-amo-audit-") as scratch:
        run_local_audit(bootstrap, coordination_topic,
                        heartbeat_interval_ms=heartbeat_interval_ms, output=Path(scratch),
                        group=group, topic=topic)
        rows = pq.read_table(Path(scratch) / "partitions").to_pylist()
    return {int(row["partition"]): AmoTakeovers(int(row["takeovers"]),
                                                row["amo_last_confirmed"])
            for row in rows if row["group"] == group and row["topic"] == topic}
