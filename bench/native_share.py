"""Kafka's native share groups (KIP-932) as the share suite's anchors, on the same broker.

Two anchors for :mod:`bench.suite_share`:

* **confluent-kafka's ShareConsumer** (librdkafka's share consumer, in "preview"): each member
  is a ``python -m bench.native_share --worker`` process (:class:`NativeWorker`, the same
  JSON-lines protocol as :mod:`bench.share`'s workers). On *prepare* a worker constructs a
  ``confluent_kafka.ShareConsumer`` (``share.acknowledgement.mode=explicit``, everything else
  librdkafka's defaults), registers an acknowledgement-commit callback and subscribes to the
  topic; librdkafka starts joining the share group in its background thread at once. On *go*
  it polls (``poll(0.1)``), sleeps ``work_ms`` per record (the simulated work), then
  ``acknowledge(message, ACCEPT)``, and after each non-empty batch ``commit_async()`` (sent
  at once as a ShareAcknowledge; left to the next poll, the confirmation would ride on a
  ShareFetch the broker may hold up to ``fetch.wait.max.ms``). Whenever the broker confirms
  acknowledgements the callback fires (on the worker's polling thread) and
  the worker reports the accepted offsets with its wall-clock time; the parent keeps, per
  offset, the first time it was confirmed accepted, and the run ends when every one of the N
  offsets has been: ``seconds`` = that last confirmation minus go (same machine clock). After
  the stop each worker reports the offsets it was handed (duplicates: deliveries minus
  distinct offsets; coverage of all N checked) and ``delivery_count > 1`` deliveries.
* **kafka-share-consumer-perf-test** (``org.apache.kafka.tools.ShareConsumerPerformance``
  from ``org.apache.kafka:kafka-tools:4.3.1``), Kafka's own share consumer in Java, as the
  ceiling: :func:`perf_test` runs it with the machine's java, ``--threads`` share consumers in
  one JVM, implicit acknowledgement (the tool's only mode), and parses its summary line. Its
  clock starts before ``subscribe`` (joining inside) and stops when N records were *received*
  (their acceptance is sent afterwards): it is a ceiling, not the same measurement. With
  ``--show-detailed-stats --reporting-interval 1`` it also prints a progress line at the first
  record each thread receives, which gives the rate after joining. The jars are resolved with
  Maven from ``bench/kafka-tools-pom.xml`` into their own cache directory
  (``<marshal cache>/kafka-tools/kafka-4.3.1/lib``, published whole by
  :func:`marshal_py.devbroker.jars.resolve_kafka_jars`), never into the broker's.

A share group starts at the latest offset unless its ``share.auto.offset.reset`` is
``earliest``: :func:`set_earliest` sets that group config (``incremental_alter_configs`` on a
GROUP resource) before any member of a fresh group starts.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import BenchError, wait_for
from bench.worker_process import (
    WorkerProcess,
    offsets_handed_out,
    prepare_orders,
    ready_then_go,
    say,
)
from bench.worker_process import worker_pool as started_workers
from marshal_py.protocol import format_ranges, parse_ranges, ranges_of

TOOLS_POM = Path(__file__).with_name("kafka-tools-pom.xml")
PERF_CLASS = "org.apache.kafka.tools.ShareConsumerPerformance"
POLL_S = 0.1
GROUP_PREFIX = "bench.native-share"


# -- the worker: one native share-group member in its own process --------------------------------


def worker_main() -> None:
    """Serve runs until "exit" or end of input. Protocol: JSON lines on stdin / stdout.

    ``{"cmd": "prepare", "bootstrap", "group", "topic", "client_id", "work_ms"}`` ->
    ``{"ready": true}``; then ``go`` (a plain line) starts polling, reporting
    ``{"acked": ranges, "at": wall time}`` as the broker confirms acceptances; ``stop`` (a plain
    line) ends it -> ``{"done": true, ...summary}``.
    """
    from confluent_kafka import ShareConsumer

    for order in prepare_orders():
        failures: list[str] = []

        def confirmed(offsets: dict[Any, set[int]], exc: Exception | None,
                      failures: list[str] = failures) -> None:
            accepted = sorted(o for offs in offsets.values() for o in offs)
            if exc is not None:
                failures.append(f"{len(accepted)} acknowledgements failed: {exc}")
                return
            if accepted:
                say(acked=format_ranges(ranges_of(accepted)), at=time.time())

        try:
            consumer = ShareConsumer({
                "bootstrap.servers": order["bootstrap"], "group.id": order["group"],
                "client.id": order["client_id"], "share.acknowledgement.mode": "explicit",
                "log_level": 3,  # not the "preview" warning on stderr
            })
            consumer.set_acknowledgement_commit_callback(confirmed)
            consumer.subscribe([order["topic"]])
        except Exception as exc:
            say(error=f"ShareConsumer: {exc}")
            continue
        try:
            if not ready_then_go():
                continue
            say(done=True, **_consume(consumer, order["work_ms"], failures))
        finally:
            with contextlib.suppress(Exception):
                consumer.close()


def _consume(consumer: Any, work_ms: float, failures: list[str]) -> dict[str, Any]:
    from confluent_kafka import AcknowledgeType

    work_s = work_ms / 1000
    cpu_at_go = time.process_time()
    delivered: list[int] = []
    redelivered = 0
    first_at: float | None = None
    error = ""
    stopping = threading.Event()

    def wait_for_stop() -> None:
        sys.stdin.readline()  # "stop" (or end of input)
        stopping.set()

    threading.Thread(target=wait_for_stop, name="stop-reader", daemon=True).start()
    try:
        while not stopping.is_set():
            batch = consumer.poll(POLL_S)
            for message in batch:
                if message.error() is not None:
                    raise RuntimeError(str(message.error()))
                if first_at is None:
                    first_at = time.time()
                if work_s:
                    time.sleep(work_s)
                consumer.acknowledge(message, AcknowledgeType.ACCEPT)
                delivered.append(message.offset())
                if (message.delivery_count() or 1) > 1:
                    redelivered += 1
            if len(batch):
                # Send the acceptances now (ShareAcknowledge) rather than with the next
                # ShareFetch, whose response the broker may hold up to fetch.wait.max.ms.
                consumer.commit_async()
        consumer.close()  # sends what is still pending and leaves the group
    except Exception as exc:  # reported to the parent, which fails the run
        error = f"{type(exc).__name__}: {exc}"
    distinct = sorted(set(delivered))
    return {
        "delivered": len(delivered),
        "distinct": len(distinct),
        "redelivered": redelivered,
        "offsets": format_ranges(ranges_of(distinct)) if distinct else "",
        "first_at": first_at,
        "cpu_s": time.process_time() - cpu_at_go,
        "ack_failures": failures,
        "error": error,
    }


class NativeWorker(WorkerProcess):
    """A ``python -m bench.native_share --worker`` process; keeps the acceptances it reports
    (``accepted_at[offset]``: the first wall time the broker confirmed it, for the current run)."""

    def __init__(self, name: str) -> None:
        self.lock = threading.Lock()
        self.accepted_at: dict[int, float] = {}
        super().__init__(name, "bench.native_share")

    def on_message(self, message: dict[str, Any]) -> bool:
        if "acked" not in message:
            return False
        at = float(message["at"])
        with self.lock:
            for first, last in parse_ranges(message["acked"]):
                for offset in range(first, last + 1):
                    self.accepted_at.setdefault(offset, at)
        return True

    def take_accepted(self) -> dict[int, float]:
        with self.lock:
            taken, self.accepted_at = self.accepted_at, {}
        return taken


def worker_pool(count: int) -> contextlib.AbstractContextManager[list[NativeWorker]]:
    """``count`` native share worker processes, stopped on exit."""
    return started_workers(lambda k: NativeWorker(f"native-{k}"), count)


# -- the group config ------------------------------------------------------------------------------


def set_earliest(bootstrap: str, group: str) -> None:
    """Make the (fresh) share group ``group`` start at the earliest offset."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest",
                    incremental_operation=AlterConfigOpType.SET)])
    try:
        for future in admin.incremental_alter_configs([resource], request_timeout=30).values():
            future.result(timeout=30)
    except Exception as exc:
        raise BenchError(f"cannot set share.auto.offset.reset=earliest on share group {group}: "
                         f"{exc}") from exc


# -- one run ---------------------------------------------------------------------------------------


@dataclass
class NativeRun:
    seconds: float  # go to the last of the N offsets confirmed accepted
    to_first_s: float  # go to the first record any member received (joining)
    delivered: int
    duplicates: int
    redelivered: int
    ack_failures: int
    members_cpu_s: float
    per_member: list[int] = field(default_factory=list)

    def rate(self, records: int) -> float:
        return records / self.seconds if self.seconds > 0 else float("inf")

    def steady_rate(self, records: int) -> float:
        """From the first record received on: without joining."""
        busy = self.seconds - self.to_first_s
        return records / busy if busy > 0 else float("inf")


def run_once(bootstrap: str, workers: Sequence[NativeWorker], consumers: int, topic: str,
             records: int, work_ms: float) -> NativeRun:
    """One run of a fresh share group with ``consumers`` of the pool's workers."""
    group = f"{GROUP_PREFIX}.{uuid.uuid4().hex[:8]}"
    set_earliest(bootstrap, group)
    members = list(workers[:consumers])
    for worker in members:
        worker.take_accepted()
    order = {"cmd": "prepare", "bootstrap": bootstrap, "group": group, "topic": topic,
             "work_ms": work_ms}
    for k, worker in enumerate(members):
        worker.send(json.dumps({**order, "client_id": f"native-member-{k}"}))
    for worker in members:
        worker.receive("ready", 60)
    go = time.time()
    for worker in members:
        worker.send("go")
    started = time.monotonic()
    accepted_at: dict[int, float] = {}
    timeout_s = 60 + records / 50 + records * work_ms / 1000

    def finished() -> bool:
        for member in members:
            member.check_alive()
            if not member.messages.empty():  # a member failed before the end
                raise BenchError(f"worker {member.name} stopped early: {member.messages.get()}")
            for offset, at in member.take_accepted().items():
                if offset not in accepted_at or at < accepted_at[offset]:
                    accepted_at[offset] = at
        return all(o in accepted_at for o in range(records))

    try:
        wait_for(f"native share consumers to accept all {records:,} records", finished,
                 timeout_s, POLL_S,
                 detail=lambda: f"{len(accepted_at):,} accepted after "
                                f"{time.monotonic() - started:.0f} s")
    finally:
        for worker in members:
            worker.send("stop")
    summaries = [worker.receive("done", 60) for worker in members]
    seen = offsets_handed_out([m.name for m in members], summaries, records,
                              f"all {records:,} offsets were accepted")
    delivered = sum(s["delivered"] for s in summaries)
    firsts = [s["first_at"] for s in summaries if s["first_at"] is not None]
    return NativeRun(
        seconds=max(accepted_at[o] for o in range(records)) - go,
        to_first_s=min(firsts) - go,
        delivered=delivered,
        duplicates=delivered - len(seen),
        redelivered=sum(s["redelivered"] for s in summaries),
        ack_failures=sum(len(s["ack_failures"]) for s in summaries),
        members_cpu_s=sum(s["cpu_s"] for s in summaries),
        per_member=[s["delivered"] for s in summaries],
    )


# -- Kafka's own perf test ------------------------------------------------------------------------


def tools_lib() -> Path:
    """The kafka-tools 4.3.1 jars with their runtime dependencies (Maven, cached once)."""
    from marshal_py.devbroker.jars import default_cache_dir, resolve_kafka_jars

    return resolve_kafka_jars(default_cache_dir() / "kafka-tools", pom_path=TOOLS_POM)


@dataclass
class PerfRun:
    records_per_s: float  # the tool's nMsg.sec: records over (subscribe .. N-th received)
    mb_per_s: float
    seconds: float
    received: int
    steady_per_s: float | None  # after the first record received (None: not printed)


_DATE = "%Y-%m-%d %H:%M:%S:%f"


def _when(text: str) -> float:
    """A time as the tool prints it (``yyyy-MM-dd HH:mm:ss:SSS``), in seconds."""
    return datetime.strptime(text.strip(), _DATE).timestamp()


def perf_test(bootstrap: str, topic: str, records: int, threads: int = 1,
              timeout_s: float = 300) -> PerfRun:
    """Run ``kafka-share-consumer-perf-test`` once on a fresh share group (set to earliest)."""
    from marshal_py.devbroker.broker import find_java

    java, _ = find_java()
    lib = tools_lib()
    group = f"{GROUP_PREFIX}.perf.{uuid.uuid4().hex[:8]}"
    set_earliest(bootstrap, group)
    command = [java, "-Xmx512m", "-cp", f"{lib}/*", PERF_CLASS, "--bootstrap-server", bootstrap,
               "--topic", topic, "--group", group, "--num-records", str(records),
               "--threads", str(threads), "--timeout", "60000", "--show-detailed-stats",
               "--reporting-interval", "1"]
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s,
                                stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"kafka-share-consumer-perf-test did not finish in {timeout_s:.0f} s") \
            from exc
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    if result.returncode != 0 or not lines:
        tail = " | ".join((result.stderr.strip().splitlines() or ["no output"])[-3:])
        raise BenchError(f"kafka-share-consumer-perf-test exited with {result.returncode}: {tail}")
    if any(line.startswith("WARNING") for line in lines):
        raise BenchError(f"kafka-share-consumer-perf-test: "
                         f"{next(li for li in lines if li.startswith('WARNING'))}")
    summary = [line for line in lines if "," in line and "for share consumer" not in line
               and not line.startswith("start.time")]
    if not summary:
        raise BenchError(f"kafka-share-consumer-perf-test printed no summary: {lines[-1]}")
    _, end, _, mb_s, rate, received, fetch_ms = (f.strip() for f in summary[-1].split(","))
    if int(received) < records:
        raise BenchError(f"kafka-share-consumer-perf-test received {received} of {records:,}")
    # A thread prints a detailed line at most every reporting interval (1 ms), the first at
    # its first record (with the records it had then).
    firsts = []
    for line in lines:
        if line.endswith(tuple(f"for share consumer {i}" for i in range(1, threads + 1))):
            fields = [f.strip() for f in line.split(",")]
            firsts.append((_when(fields[1]), int(fields[5])))
    steady = None
    if firsts:
        at, already = min(firsts)
        busy = _when(end) - at
        steady = (int(received) - already) / busy if busy > 0 else None
    return PerfRun(records_per_s=float(rate), mb_per_s=float(mb_s),
                   seconds=int(fetch_ms) / 1000, received=int(received), steady_per_s=steady)


def main() -> None:
    if "--worker" in sys.argv[1:]:
        worker_main()
        return
    sys.exit("bench.native_share is used by `python -m bench share` (and --worker)")


if __name__ == "__main__":
    main()
