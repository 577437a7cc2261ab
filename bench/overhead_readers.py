"""The overhead suite's readers (:mod:`bench.suite_overhead`): the ways of reading it compares,
its shapes, and what one run of them measured."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from typing import Any, Literal

from bench.harness import BenchError

PARTITIONS = 12
HI_S = 1.0
PROGRESS_S = 0.2
PROCESS_COUNTS = (1, 3)
#: ``--quick`` (a smoke run of every reader): one shape, two processes sharing the partitions.
QUICK_PROCESS_COUNTS = (2,)
#: An at-most-once run whose readers handed nothing out for this long, with partitions short
#: of their end, asks the coordination log whether takeovers explain it (see run_python).
AMO_STALL_S = 3 * HI_S
#: ``--quick``: the Spark readers on a local session only (a standalone cluster's start is a
#: minute of a 2-core machine); ``BENCH_SPARK_MASTERS`` still chooses.
QUICK_MASTERS = "local"
#: What every poll-style reader asks for per call (kafka-python's poll, ours, consume).
POLL_TIMEOUT_S = 0.2
POLL_RECORDS = 500
#: librdkafka settings our confluent fetcher sets (marshal_py.client.confluent_fetcher)
#: that change how fast it reads; the ``ck`` anchor gets them too.
CK_TUNING: dict[str, Any] = {"fetch.queue.backoff.ms": 10, "fetch.wait.max.ms": 100,
                             "isolation.level": "read_uncommitted"}
CONFLUENT_MISSING = ("confluent-kafka, which is not installed: "
                     "pip install 'marshal_py[librdkafka]'")


@dataclass(frozen=True)
class ReaderKind:
    """One way of reading: which client fetches, ours or plain, and the reading loop."""

    name: str
    label: str
    client: Literal["kafka-python", "confluent"]
    mode: Literal["alo", "amo"] | None
    """None: a plain consumer (an anchor); else a Marshaler consumer in this mode."""
    loop: Literal["iter", "poll", "batch"]
    """``iter``: iteration; ``poll``: poll, ALO commits record by record; ``batch``: poll,
    ``commit_batch`` of what it returned."""
    anchor: str | None = None
    """The plain reader ours is compared with (None: this is an anchor)."""


READERS: tuple[ReaderKind, ...] = (
    ReaderKind("kp-iter", "kafka-python, manual assignment, for record in consumer",
               "kafka-python", None, "iter"),
    ReaderKind("alo-iter", "marshal ALO, iteration, commit(record) each",
               "kafka-python", "alo", "iter", "kp-iter"),
    ReaderKind("kp-poll", "kafka-python, manual assignment, poll(200 ms, 500)",
               "kafka-python", None, "poll"),
    ReaderKind("alo-poll", "marshal ALO, poll() + commit(record) each",
               "kafka-python", "alo", "poll", "kp-poll"),
    ReaderKind("alo-batch", "marshal ALO, poll() + commit_batch(records)",
               "kafka-python", "alo", "batch", "kp-poll"),
    ReaderKind("amo-poll", "marshal AMO, poll()", "kafka-python", "amo", "poll", "kp-poll"),
    ReaderKind("amo-iter", "marshal AMO, iteration", "kafka-python", "amo", "iter", "kp-iter"),
    ReaderKind("ck", "confluent-kafka, manual assignment, consume(500)",
               "confluent", None, "poll"),
    ReaderKind("ck-alo-poll", "marshal ALO, confluent fetcher, poll() + commit(record) each",
               "confluent", "alo", "poll", "ck"),
    ReaderKind("ck-alo-batch", "marshal ALO, confluent fetcher, poll() + commit_batch(records)",
               "confluent", "alo", "batch", "ck"),
    ReaderKind("ck-amo-poll", "marshal AMO, confluent fetcher, poll()",
               "confluent", "amo", "poll", "ck"),
)
KINDS = {kind.name: kind for kind in READERS}


def readers_wanted() -> tuple[ReaderKind, ...]:
    """The Python readers to run: ``BENCH_OVERHEAD_READERS`` (names, comma-separated; their
    anchors come along), else all. A subset writes ``overhead-readers`` results, so the full
    suite's stay as they are."""
    names = [n.strip() for n in os.environ.get("BENCH_OVERHEAD_READERS", "").split(",")
             if n.strip()]
    if not names:
        return READERS
    unknown = [n for n in names if n not in KINDS]
    if unknown:
        raise BenchError(f"BENCH_OVERHEAD_READERS: no reader {', '.join(unknown)}; the "
                         f"readers are {', '.join(KINDS)}")
    wanted = set(names) | {KINDS[n].anchor for n in names if KINDS[n].anchor}
    return tuple(k for k in READERS if k.name in wanted)
def process_counts(quick: bool) -> tuple[int, ...]:
    return QUICK_PROCESS_COUNTS if quick else PROCESS_COUNTS


def records_for(quick: bool) -> int:
    if quick:
        return 5_000
    return int(os.environ.get("BENCH_OVERHEAD_RECORDS", "1000000"))


def confluent_missing() -> bool:
    """True when confluent-kafka cannot be imported (the ``ck`` readers need it)."""
    return importlib.util.find_spec("confluent_kafka") is None


@dataclass
class Run:
    seconds: float
    delivered: int
    duplicates: int
    wall_s: float = 0.0
    """The whole run, process start-up and shut-down included (for estimating run time)."""
    first_s: float = 0.0
    """Go to the first record handed out (joining and claiming, for ours)."""
    batches: int = 0
    """Spark rows: the micro-batches that read records."""
    batch_ms: float = 0.0
    """Spark rows: the median time of a batch after the first (see spark_rows.QueryRun)."""
    lost: int = 0
    """At most once: records never handed out because their owner was starved past 2 HI and
    its claim taken over after it had confirmed them (allowed by at-most-once)."""
