"""Key-shared mode on ONE partition: records/s with 1, 3 and 6 members, on a real broker.

Usage: python -m bench.key_shared [--quick] [--records N] [--repeat R] [--members 1,3,6]
                                  [--work-ms 2] [--keys K] [--heartbeat-interval S]

Starts its own dev broker (KRaft, 127.0.0.1), produces N records of 100 bytes with K keys
(``key-{i % K}``, default 1,000) into a fresh topic of ONE partition per configuration, and
runs each configuration R times (interleaved), each run with a fresh group and coordination
topic.

Members are separate OS processes (``python -m bench.key_shared --worker``), started fresh for
each run; each opens a ``Marshaler`` (heartbeat interval 1 s) and says it is ready; then the
parent sends *go* to all of them and the clock starts. On go a worker opens
``Marshaler.consumer([topic], "key-shared", offset_reset="earliest")`` (implicit commit, what
``marshal consume --mode key-shared`` does) and for every record sleeps ``work_ms`` (the
simulated work). Joining (replay, MemberHeartbeat, claims, hand-overs as the others join) is
inside the measured time; Python start-up and imports are not. The clock stops at the wall
time the last of the N records was handed out (each worker reports the time of its last
record; workers report progress every 0.2 s, so the parent knows when all N are done).

Fetch cost: every member fetches the whole partition (from the lowest cursor of its slots)
and drops the other members' records. Each worker counts the records and bytes (key + value)
its data consumer fetched and those it handed out; the report shows, per member, fetched
records / N and fetched bytes per delivered byte.

``--quick`` is a smoke run (N=1,000, members 1 and 3, once). Every wait is bounded and fails
with one line saying what did not happen; workers and the broker are stopped whatever
happens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import signal
import statistics
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from bench.common import BenchError, load, machine_line, median_range, table, wait_for
from bench.worker_process import WorkerProcess, worker_pool
from marshal_py.devbroker import DevBroker
from marshal_py.protocol import format_ranges, parse_ranges, ranges_of

HI_S = 1.0
RECORD_BYTES = 100
PROGRESS_S = 0.2


# -- the worker: one key-shared member in its own process -------------------------------------


def random_work(seed: int, records: int, max_ms: float) -> list[float]:
    """Seconds of simulated work for offsets 0..records-1: uniform in [0, max_ms] ms, drawn
    from ``random.Random(seed)`` in offset order, so every process (and any anchor) that is
    given the same seed does the same work for the same record."""
    rng = random.Random(seed)
    return [rng.uniform(0.0, max_ms) / 1000 for _ in range(records)]


def _say(**message: Any) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def worker_main() -> None:
    """One run. stdin: a JSON order, then ``go``, then ``stop``; stdout: JSON lines
    (``ready``, ``progress`` every 0.2 s, ``done`` with the summary)."""
    from marshal_py import Marshaler

    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    order = json.loads(sys.stdin.readline())
    with Marshaler(order["bootstrap"], group_id=order["group"], client_id=order["client_id"],
                   heartbeat_interval=order["heartbeat_interval"],
                   coordination_topic=order["coordination_topic"]) as marshaler:
        _say(ready=True)
        if sys.stdin.readline().strip() != "go":
            return
        consumer = marshaler.consumer([order["topic"]], "key-shared", offset_reset="earliest")
        offsets: list[int] = []
        first_ms = last_ms = None
        stopped = threading.Event()

        def watch_stdin() -> None:
            sys.stdin.readline()  # "stop" (or end of input)
            stopped.set()
            consumer.stop()

        def report() -> None:
            while not stopped.wait(PROGRESS_S):
                _say(progress=len(offsets))

        threading.Thread(target=watch_stdin, daemon=True).start()
        threading.Thread(target=report, daemon=True).start()
        work_s = order["work_ms"] / 1000
        # Optional extras (the key-shared suite): random work per record, seeded by the run so
        # it is a function of the offset, and a per-key trace of (offset, start ms).
        extra = (random_work(order["work_seed"], order["work_records"], order["work_max_ms"])
                 if order.get("work_max_ms") else [])
        trace: dict[str, list[list[float]]] | None = {} if order.get("trace") else None
        for record in consumer:
            if trace is not None:
                key = record.key.decode() if record.key is not None else ""
                trace.setdefault(key, []).append([record.offset,
                                                  round(time.time() * 1000, 2)])
            pause = work_s + (extra[record.offset] if record.offset < len(extra) else 0.0)
            if pause:
                time.sleep(pause)
            offsets.append(record.offset)
            last_ms = time.time() * 1000
            if first_ms is None:
                first_ms = last_ms
        stats = consumer.stats
        consumer.close()
        _say(done=True, offsets=format_ranges(ranges_of(offsets)) if offsets else "",
             delivered=len(offsets), first_ms=first_ms, last_ms=last_ms,
             fetched=stats.records_fetched, fetched_bytes=stats.bytes_fetched,
             delivered_bytes=stats.bytes_delivered,
             **({"trace": trace} if trace is not None else {}))


class Worker(WorkerProcess):
    """A ``python -m bench.key_shared --worker`` process, driven over stdin and stdout: it
    gets its order at once and reports progress, which is kept in :attr:`progress`."""

    def __init__(self, name: str, order: dict[str, Any]) -> None:
        self.progress = 0
        super().__init__(name, "bench.key_shared")
        self.send(json.dumps(order))

    def on_message(self, message: dict[str, Any]) -> bool:
        if "progress" in message:
            self.progress = message["progress"]
            return True
        return False


def workers(orders: list[dict[str, Any]]) -> contextlib.AbstractContextManager[list[Worker]]:
    """One worker process per order, stopped on exit."""
    return worker_pool(lambda k: Worker(orders[k]["client_id"], orders[k]), len(orders))


# -- a run ------------------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float
    to_first_s: float
    per_member: list[int]
    fetched_per_member: list[int]
    fetched_bytes: list[int]
    delivered_bytes: list[int]
    duplicates: int
    traces: list[dict[str, list[list[float]]]] = field(default_factory=list)
    """Per member, key -> [[offset, start ms], ...] in processing order (``trace=True``)."""

    def rate(self, records: int) -> float:
        return records / self.seconds


def run_once(bootstrap: str, topic: str, members: int, records: int, work_ms: float,
             hi_s: float, work_max_ms: float = 0.0, work_seed: int = 0,
             trace: bool = False) -> Run:
    """One run of ``members`` fresh worker processes over ``topic``; each record costs
    ``work_ms`` plus, with ``work_max_ms``, :func:`random_work` of ``work_seed`` for its
    offset. ``trace`` asks every worker for its per-key (offset, start ms) trace."""
    tag = uuid.uuid4().hex[:8]
    base: dict[str, Any] = {"bootstrap": bootstrap, "group": f"bench.key_shared.{tag}",
                            "coordination_topic": f"__marshal_bench_ks_{tag}", "topic": topic,
                            "work_ms": work_ms, "heartbeat_interval": hi_s}
    if work_max_ms:
        base.update(work_max_ms=work_max_ms, work_seed=work_seed, work_records=records)
    if trace:
        base["trace"] = True
    orders = [{**base, "client_id": f"member-{k}"} for k in range(members)]
    # The first member creates the coordination topic; the others wait for it.
    with workers(orders[:1]) as first:
        first[0].receive("ready", 120)
        with workers(orders[1:]) as rest:
            everyone = first + rest
            for worker in rest:
                worker.receive("ready", 120)
            go_ms = time.time() * 1000
            for worker in everyone:
                worker.send("go")
            timeout_s = 60 + records * (work_ms + work_max_ms / 2) / 1000 * 2

            def done() -> bool:
                for worker in everyone:
                    worker.check_alive()
                return sum(w.progress for w in everyone) >= records

            wait_for(f"{records:,} records to be handed out", done, timeout_s, 0.05,
                     detail=lambda: f"{sum(w.progress for w in everyone):,} so far")
            for worker in everyone:
                worker.send("stop")
            summaries = [w.receive("done", 60) for w in everyone]
    seen: set[int] = set()
    delivered = 0
    for summary in summaries:
        delivered += summary["delivered"]
        if summary["offsets"]:
            for first_offset, last_offset in parse_ranges(summary["offsets"]):
                seen.update(range(first_offset, last_offset + 1))
    missing = records - len(seen & set(range(records)))
    if missing:
        raise BenchError(f"{missing:,} of {records:,} offsets were never handed out")
    ends = [s["last_ms"] for s in summaries if s["last_ms"] is not None]
    firsts = [s["first_ms"] for s in summaries if s["first_ms"] is not None]
    return Run(seconds=(max(ends) - go_ms) / 1000, to_first_s=(min(firsts) - go_ms) / 1000,
               per_member=[s["delivered"] for s in summaries],
               fetched_per_member=[s["fetched"] for s in summaries],
               fetched_bytes=[s["fetched_bytes"] for s in summaries],
               delivered_bytes=[s["delivered_bytes"] for s in summaries],
               duplicates=delivered - len(seen),
               traces=[s.get("trace", {}) for s in summaries])


def produce(bootstrap: str, admin: KafkaAdminClient, producer: KafkaProducer, records: int,
            keys: int) -> str:
    """A fresh one-partition topic holding ``records`` keyed records of 100 bytes."""
    topic = f"bench-ks-{uuid.uuid4().hex[:8]}"
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}},
                        wait_for_metadata=True)
    for i in range(records):
        key = f"key-{i % keys}".encode()
        producer.send(topic, key=key,
                      value=f"{i:012d}".encode().ljust(RECORD_BYTES - len(key), b"."),
                      partition=0)
    producer.flush(timeout=120)
    check = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        end = check.end_offsets([tp])[tp]
    finally:
        check.close()
    if end != records:
        raise BenchError(f"produced {records:,} records but the topic ends at {end:,}")
    return topic


def report(results: dict[int, list[Run]], records: int, work_ms: float) -> None:
    one = statistics.median(r.rate(records) for r in results[min(results)])
    rows = []
    for members, runs in sorted(results.items()):
        med, low, high = median_range([r.rate(records) for r in runs])
        last = runs[-1]
        fetched = statistics.median(
            statistics.mean(f / records for f in r.fetched_per_member) for r in runs)
        byte_ratio = statistics.median(
            sum(r.fetched_bytes) / max(1, sum(r.delivered_bytes)) for r in runs)
        rows.append([str(members), f"{med:,.0f}", f"{low:,.0f}..{high:,.0f}",
                     f"{med / one:.2f}", f"{members * 1000 / work_ms:,.0f}" if work_ms else "-",
                     f"{statistics.median(r.seconds for r in runs):.2f} s",
                     f"{statistics.median(r.to_first_s for r in runs):.2f} s",
                     f"{fetched:.2f}", f"{byte_ratio:.1f}",
                     str(sum(r.duplicates for r in runs)),
                     "/".join(str(n) for n in last.per_member)])
    print(table(["members", "records/s", "range", "speedup", "ideal", "time", "to 1st record",
                 "fetched/N per member", "bytes fetched/delivered", "duplicates",
                 "split (last run)"], rows))
    for members, runs in sorted(results.items()):
        print(f"key-shared {members} member(s) x {work_ms:g} ms: "
              f"{statistics.median(r.rate(records) for r in runs):,.0f} records/s "
              f"({len(runs)} runs)")


def main() -> None:
    if "--worker" in sys.argv[1:]:
        worker_main()
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=None,
                        help="Records per configuration (default 10,000; --quick 1,000).")
    parser.add_argument("--repeat", type=int, default=None,
                        help="Runs of each configuration (default 3; --quick 1).")
    parser.add_argument("--members", default=None,
                        help="Member counts, comma-separated (default 1,3,6; --quick 1,3).")
    parser.add_argument("--work-ms", type=float, default=2.0,
                        help="Simulated work per record in ms (default 2).")
    parser.add_argument("--keys", type=int, default=1_000, help="Distinct keys (default 1,000).")
    parser.add_argument("--heartbeat-interval", type=float, default=HI_S,
                        help=f"Heartbeat interval in seconds (default {HI_S:g}).")
    parser.add_argument("--quick", action="store_true", help="A smoke run: small and once.")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    records = args.records or (1_000 if args.quick else 10_000)
    repeat = args.repeat or (1 if args.quick else 3)
    try:
        counts = [int(p) for p in (args.members or ("1,3" if args.quick else "1,3,6")).split(",")
                  if p.strip()]
    except ValueError:
        parser.error("--members takes comma-separated numbers")
    if (records < 1 or repeat < 1 or not counts or min(counts) < 1 or args.work_ms < 0
            or args.keys < 1 or args.heartbeat_interval < 0.01):
        parser.error("--records, --repeat, --members and --keys must be >= 1, --work-ms >= 0, "
                     "--heartbeat-interval >= 0.01")
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print(machine_line(), flush=True)
    print(f"before: {load()} (other work on the machine skews every figure)", flush=True)
    began = time.monotonic()
    try:
        with DevBroker() as broker:
            bootstrap = broker.bootstrap_servers
            print(f"broker {bootstrap} up in {time.monotonic() - began:.1f} s; HI = "
                  f"{args.heartbeat_interval:g} s, 1 partition, {args.keys:,} keys, "
                  f"{args.work_ms:g} ms of work per record", flush=True)
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20,
                                     batch_size=512 * 1024)
            try:
                topics = {c: produce(bootstrap, admin, producer, records, args.keys)
                          for c in counts}
            finally:
                for closing in (producer.close, admin.close):
                    with contextlib.suppress(Exception):
                        closing()
            print(f"\nkey-shared mode, one partition: {records:,} records, {repeat} run(s) of "
                  "each configuration (interleaved)", flush=True)
            results: dict[int, list[Run]] = {c: [] for c in counts}
            for i in range(repeat):
                for members in counts:
                    run = run_once(bootstrap, topics[members], members, records, args.work_ms,
                                   args.heartbeat_interval)
                    results[members].append(run)
                    print(f"  run {i + 1}: {members} member(s): {run.rate(records):,.0f} "
                          f"records/s ({run.seconds:.2f} s, first record after "
                          f"{run.to_first_s:.2f} s), split "
                          f"{'/'.join(str(n) for n in run.per_member)}, fetched "
                          f"{'/'.join(str(n) for n in run.fetched_per_member)}, "
                          f"{run.duplicates} duplicates; {load()}", flush=True)
            print()
            report(results, records, args.work_ms)
    except BenchError as exc:
        print(f"bench.key_shared: error: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"\ntotal {time.monotonic() - began:.0f} s; {load()}", flush=True)


if __name__ == "__main__":
    main()
