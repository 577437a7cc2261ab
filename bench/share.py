"""Share mode on one partition: records/s with 1, 2, 4 and 8 members, on a real broker.

Usage: python -m bench.share [--quick] [--records N] [--repeat R] [--consumers 1,2,4,8]
                             [--work-ms 0,2] [--heartbeat-interval S] [--cli]

Starts its own dev broker (Kafka 4.3.1, KRaft, 127.0.0.1) and, for every configuration
(consumers x work per record), produces N records of 100 bytes once into a fresh topic of
ONE partition. Each run (R per configuration, interleaved across configurations) uses a
fresh share group and a fresh coordination topic, so everything in the coordination topic
was written by that run.

The members are separate OS processes: a pool of ``python -m bench.share_member --worker``
processes (as many as the largest configuration) started once. For a run the parent tells
the first k of them to *prepare* (open a ``Marshaler`` on the run's coordination topic, heartbeat
interval 1 s), waits until all are ready, then sends *go* to each: the clock starts. On go a
worker opens ``Marshaler.consumer([topic], "share", offset_reset="earliest",
batch_size=100, acknowledgement="explicit")`` — what ``marshal consume --mode share
--batch-size 100`` does — and for every record sleeps ``work_ms`` (the simulated work; the
CLI has no such option) and then accepts it with ``ack(record, "accept")``. Python start-up
and imports are outside the measured time; joining (replay, MemberHeartbeat, initializing
the share-partition) is inside.

The clock stops when the record that moved the SPSO to N was appended: an observer in this
process replays the run's coordination partition (polling every 0.1 s) and takes that
record's broker timestamp (LogAppendTime, the same machine clock as the go time). After the
stop each worker reports the offsets it was handed; the union must cover all N (checked)
and duplicates are counted. Coordination records per 1,000 consumed: the coordination
partition's end offset when the N-th record was accepted minus its end offset at go (0),
per 1,000 records; the observer also splits them by message type. Each worker also counts
the records its data consumer fetched (``fetched/N``: every member reads the partition from
its lowest acquired offset and drops what it does not hold), the members' CPU time (from go to
stop, per record) and how busy the machine's cores were from go to the end (/proc/stat; the
broker, this process and anything else running included).

``--cli`` adds, for the 0 ms configurations, runs whose members are ``marshal consume --mode
share --batch-size 100 --print`` processes (explicit accept of every printed record), started
fresh for each run: their Python start-up is inside the measured time, so compare them by
the rate after the first acquisition. ``--heartbeat-interval`` (default 1 s) sets the share
consumer's tick, min(1 s, HI / 5, lock / 10): how often a member heartbeats and renews, and
(two ticks) how long another member's region stays Available before it is taken.

On 2 cores 8 member processes (plus the broker and this process) share the machine: the
figures there measure the machine as much as the protocol.

``MARSHAL_BENCH_SHARE_PROFILE=<dir>`` profiles every member (cProfile of each of its threads,
by thread CPU time, from the member's start to stop): one ``member-<pid>-<thread>-<id>.prof``
per thread in ``<dir>``, for ``python -m pstats``. Profiling slows the members several times
over. ``MARSHAL_BENCH_SHARE_THREADS=<dir>`` does not: it writes ``member-<pid>-threads.tsv``,
each thread's CPU from go to stop and the Kafka requests it sent, by type
(:mod:`bench.thread_census`).

``--quick`` is a smoke run (N=1,000, R=1) that finishes in well under a minute. Every wait
is bounded and fails with one line saying what did not happen; the worker processes and the
broker are stopped whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from bench.common import (
    BenchError,
    load,
    machine_line,
    median_range,
    table,
    wait_for,
)
from bench.share_member import BATCH_SIZE, CliMember, Worker, worker_pool
from bench.share_observer import Observer, busy_between, cpu_ticks
from bench.worker_process import (
    offsets_handed_out,
)
from marshal_py.devbroker import DevBroker

HI_S = 1.0
RECORD_BYTES = 100
OBSERVE_EVERY_S = 0.1
GROUP_PREFIX = "bench.share"


# -- one run --------------------------------------------------------------------------------------


@dataclass
class Run:
    seconds: float  # go to the N-th record accepted (broker time)
    to_first_acquire_s: float  # go to the first AcquiringRecords that won records
    coordination_records: int  # in the run's coordination partition, go to the N-th accept
    close_records: int  # written after that, until every member had stopped
    by_type: dict[str, int]
    delivered: int
    duplicates: int
    redelivered: int
    void: int | None  # offsets asked for and not granted (lost races); None: not known
    fetched: int | None  # records the members' data consumers fetched; None: not known
    machine_busy: float | None  # share of all cores busy from go to the N-th accept
    per_member: list[int] = field(default_factory=list)
    #: Each member's CPU time from go to stop (None: not known).
    per_member_cpu_s: list[float | None] = field(default_factory=list)

    @property
    def members_cpu_s(self) -> float | None:
        """The members' CPU time from go to stop; None: not known for one of them."""
        cpus = self.per_member_cpu_s
        return None if not cpus or None in cpus else sum(c for c in cpus if c is not None)

    def rate(self, records: int) -> float:
        return records / self.seconds if self.seconds > 0 else float("inf")

    def steady_rate(self, records: int) -> float:
        """From the first acquisition on: without joining (and, with --cli, start-up)."""
        busy = self.seconds - self.to_first_acquire_s
        return records / busy if busy > 0 else float("inf")

    def per_1000(self, records: int) -> float:
        return self.coordination_records * 1000 / records


def run_once(bootstrap: str, workers: Sequence[Worker], consumers: int, topic: str,
             records: int, work_ms: float, heartbeat_interval_s: float,
             cli: bool = False, fetcher: str = "kafka-python") -> Run:
    """One run with ``consumers`` members: the pool's workers, or (``cli``) fresh
    ``marshal consume`` processes whose start-up is then inside the measured time.
    ``fetcher``: the members' data fetcher (``Marshaler(fetcher=...)``)."""
    tag = uuid.uuid4().hex[:8]
    group, coordination_topic = f"{GROUP_PREFIX}.{tag}", f"__marshal_bench_share_{tag}"
    observer = Observer(bootstrap, coordination_topic, group, topic, records,
                        heartbeat_interval_s)
    members: list[Worker | CliMember] = []
    summaries: list[dict[str, Any]] = []
    try:
        before = observer.end_position()
        if cli:
            go_ms = time.time() * 1000
            ticks_at_go = cpu_ticks()
            members.extend(CliMember(bootstrap, coordination_topic, group, topic,
                                     f"member-{k}", heartbeat_interval_s)
                           for k in range(consumers))
        else:
            members.extend(workers[:consumers])
            order = {"cmd": "prepare", "bootstrap": bootstrap,
                     "coordination_topic": coordination_topic, "group": group, "topic": topic,
                     "work_ms": work_ms, "heartbeat_interval": heartbeat_interval_s,
                     "fetcher": fetcher}
            for k, worker in enumerate(workers[:consumers]):
                worker.send(json.dumps({**order, "client_id": f"member-{k}"}))
            for worker in workers[:consumers]:
                worker.receive("ready", 60)
            go_ms = time.time() * 1000
            ticks_at_go = cpu_ticks()
            for worker in workers[:consumers]:
                worker.send("go")
        started = time.monotonic()
        # A member caps at about batch_size / tick records/s (see BENCHMARKS.md): be generous.
        timeout_s = 60 + records / 50 + records * work_ms / 1000

        def finished() -> bool:
            for member in members:
                if not member.alive():
                    raise BenchError(f"member {member.name} exited with "
                                     f"{member.proc.returncode}: {member.stderr_tail()}")
                if isinstance(member, Worker) and not member.messages.empty():
                    message = member.messages.get()  # a member failed before the end
                    raise BenchError(f"worker {member.name} stopped early: {message}")
            return observer.poll()

        wait_for(f"the SPSO to reach {records:,}", finished, timeout_s, OBSERVE_EVERY_S,
                 detail=lambda: f"SPSO {observer.spso()} after "
                                f"{time.monotonic() - started:.0f} s")
        machine_busy = busy_between(ticks_at_go, cpu_ticks())
        for member in members:
            if isinstance(member, Worker):
                member.send("stop")
        for member in members:
            if isinstance(member, Worker):
                summaries.append(member.receive("done", 60))
            else:
                member.stop()
                summaries.append(member.summary())
        after_close = observer.end_position()
    finally:
        for member in members:
            if isinstance(member, CliMember):
                member.stop()
        observer.close()
    assert observer.done_ms is not None and observer.done_position is not None
    seen = offsets_handed_out([m.name for m in members], summaries, records,
                              f"the SPSO reached {records:,}")
    delivered = sum(s["delivered"] for s in summaries)
    if delivered > len(seen):
        _keep_evidence(tag, [m.name for m in members], summaries, observer)
    written = observer.done_position + 1 - before
    assert observer.first_acquired_ms is not None
    voids = [s["records_void"] for s in summaries]
    fetches = [s["fetched"] for s in summaries]
    cpus = [s["cpu_s"] for s in summaries]
    return Run(
        seconds=(observer.done_ms - go_ms) / 1000,
        to_first_acquire_s=(observer.first_acquired_ms - go_ms) / 1000,
        coordination_records=written,
        close_records=after_close - (observer.done_position + 1),
        by_type=dict(observer.by_type),
        delivered=delivered,
        duplicates=delivered - len(seen),
        redelivered=sum(s["redelivered"] for s in summaries),
        void=None if None in voids else sum(voids),
        fetched=None if None in fetches else sum(fetches),
        machine_busy=machine_busy,
        per_member=[s["delivered"] for s in summaries],
        per_member_cpu_s=cpus,
    )


def _keep_evidence(tag: str, names: list[str], summaries: list[dict[str, Any]],
                   observer: Observer) -> None:
    """A run delivered a record twice: keep what each member was handed and every
    coordination record of the run in a file (named on stderr) for whoever explains it."""
    path = Path(tempfile.gettempdir()) / f"marshal-bench-share-duplicates-{tag}.json"
    path.write_text(json.dumps({
        "members": {name: {k: s.get(k) for k in ("delivered", "distinct", "redelivered",
                                                   "offsets", "repeated", "replay_starts")}
                    for name, s in zip(names, summaries, strict=True)},
        "coordination_records": observer.journal,
    }, indent=1))
    print(f"bench.share: a run delivered records twice; evidence in {path}", file=sys.stderr)


# -- data -----------------------------------------------------------------------------------------


def produce(bootstrap: str, admin: KafkaAdminClient, producer: KafkaProducer,
            records: int) -> str:
    """A fresh one-partition topic holding ``records`` records of 100 bytes."""
    topic = f"bench-share-{uuid.uuid4().hex[:8]}"
    admin.create_topics({topic: {"num_partitions": 1, "replication_factor": 1}},
                        wait_for_metadata=True)
    for i in range(records):
        producer.send(topic, value=f"{i:012d}".encode().ljust(RECORD_BYTES, b"."),
                      partition=0)
    producer.flush(timeout=120)
    check = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tp = TopicPartition(topic, 0)
        end = check.end_offsets([tp])[tp]
        begin = check.beginning_offsets([tp])[tp]
    finally:
        check.close()
    if (begin, end) != (0, records):
        raise BenchError(f"produced {records:,} records but the topic holds offsets "
                         f"{begin:,}..{end:,}")
    return topic


# -- the report -----------------------------------------------------------------------------------

Config = tuple[str, int, float]  # (members: "worker" or "cli", consumers, work_ms)


def short_type(name: str) -> str:
    return {"AcquiringRecords": "acq", "AcknowledgingRecords": "ack",
            "RenewingLocks": "renew", "MemberHeartbeat": "hb",
            "InitializingSharePartition": "init"}.get(name, name)


def label(config: Config) -> str:
    via, consumers, work_ms = config
    return f"{consumers} x {work_ms:g} ms" + (" (marshal consume)" if via == "cli" else "")


def report(results: dict[Config, list[Run]], records: int) -> None:
    base = {(via, work_ms): statistics.median(r.rate(records) for r in runs)
            for (via, consumers, work_ms), runs in results.items() if consumers == 1}
    rows = []
    for config, runs in sorted(results.items(), key=lambda kv: (kv[0][0] == "cli", kv[0][2],
                                                                 kv[0][1])):
        via, consumers, work_ms = config
        med, low, high = median_range([r.rate(records) for r in runs])
        one = base.get((via, work_ms))
        types: Counter[str] = Counter()
        for r in runs:
            types.update(r.by_type)
        split = ", ".join(f"{short_type(k)} {v * 1000 / records / len(runs):.1f}"
                          for k, v in types.most_common())
        voids = [r.void for r in runs if r.void is not None]
        fetches = [r.fetched / records for r in runs if r.fetched is not None]
        cpus = [r.members_cpu_s * 1000 / records for r in runs if r.members_cpu_s is not None]
        busy = [r.machine_busy for r in runs if r.machine_busy is not None]
        rows.append([
            str(consumers), f"{work_ms:g} ms" + (" cli" if via == "cli" else ""),
            f"{med:,.0f}", f"{low:,.0f}..{high:,.0f}", f"{med / one:.2f}" if one else "-",
            f"{statistics.median(r.seconds for r in runs):.2f} s",
            f"{statistics.median(r.to_first_acquire_s for r in runs):.2f} s",
            f"{statistics.median(r.steady_rate(records) for r in runs):,.0f}",
            f"{statistics.median(r.per_1000(records) for r in runs):.1f}", split,
            f"{sum(r.duplicates for r in runs)}/{sum(r.redelivered for r in runs)}",
            f"{statistics.median(voids):,.0f}" if voids else "-",
            f"{statistics.median(fetches):.1f}" if fetches else "-",
            f"{statistics.median(cpus):.2f} ms" if cpus else "-",
            f"{statistics.median(busy):.0%}" if busy else "-",
            "/".join(str(n) for n in runs[-1].per_member),
        ])
    print(table(["consumers", "work", "records/s", "range", "speedup", "time",
                 "to 1st acquire", "records/s after", "coord/1000", "coord by type /1000",
                 "dup/redeliv", "void", "fetched/N", "member CPU/record", "cores busy",
                 "split (last run)"], rows))
    for config, runs in sorted(results.items()):
        print(f"share {label(config)}: "
              f"{statistics.median(r.rate(records) for r in runs):,.0f} records/s, "
              f"{statistics.median(r.per_1000(records) for r in runs):.1f} coordination "
              f"records per 1,000 ({len(runs)} runs)")


def parse_list(text: str, kind: type) -> list[Any]:
    return [kind(part) for part in text.split(",") if part.strip()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=None,
                        help="Records per configuration (default 20,000; --quick 1,000).")
    parser.add_argument("--repeat", type=int, default=None,
                        help="Runs of each configuration (default 3; --quick 1).")
    parser.add_argument("--consumers", default="1,2,4,8",
                        help="Member counts, comma-separated (default 1,2,4,8).")
    parser.add_argument("--work-ms", default="0,2",
                        help="Simulated work per record in ms, comma-separated (default 0,2).")
    parser.add_argument("--heartbeat-interval", type=float, default=HI_S,
                        help=f"Heartbeat interval in seconds (default {HI_S:g}); the share "
                             "consumer's tick is min(1 s, HI / 5, lock / 10).")
    parser.add_argument("--cli", action="store_true",
                        help="Also run the 0 ms configurations with `marshal consume --mode "
                             "share --print` processes (start-up inside the measured time).")
    parser.add_argument("--quick", action="store_true", help="A smoke run: small and once.")
    args = parser.parse_args()
    records = args.records or (1_000 if args.quick else 20_000)
    repeat = args.repeat or (1 if args.quick else 3)
    hi_s = args.heartbeat_interval
    try:
        counts = parse_list(args.consumers, int)
        works = parse_list(args.work_ms, float)
    except ValueError:
        parser.error("--consumers and --work-ms take comma-separated numbers")
    if records < 1 or repeat < 1 or not counts or min(counts) < 1 or not works \
            or min(works) < 0 or hi_s < 0.01:
        parser.error("--records, --repeat and --consumers must be >= 1, --work-ms >= 0, "
                     "--heartbeat-interval >= 0.01")
    configs: list[Config] = [("worker", c, w) for w in works for c in counts]
    if args.cli:
        configs += [("cli", c, 0.0) for c in counts]

    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the workers and the broker.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print(machine_line(), flush=True)
    print(f"before: {load()} (other work on the machine skews every figure)", flush=True)
    began = time.monotonic()
    try:
        with DevBroker() as broker, worker_pool(max(counts)) as workers:
            bootstrap = broker.bootstrap_servers
            print(f"broker {bootstrap} up in {time.monotonic() - began:.1f} s; HI = {hi_s:g} s, "
                  f"1 partition, batch size {BATCH_SIZE}, {len(workers)} worker processes",
                  flush=True)
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20,
                                     batch_size=512 * 1024,
                                     max_request_size=8 * 1024 * 1024)
            try:
                topics: dict[Config, str] = {}
                produced = time.monotonic()
                for config in configs:
                    topics[config] = produce(bootstrap, admin, producer, records)
                print(f"produced {records:,} records of {RECORD_BYTES} bytes into each of "
                      f"{len(configs)} topics in {time.monotonic() - produced:.1f} s",
                      flush=True)
            finally:
                for closing in (producer.close, admin.close):
                    with contextlib.suppress(Exception):
                        closing()
            print(f"\nshare mode, one partition: {records:,} records, {repeat} run(s) of each "
                  "configuration (interleaved)", flush=True)
            results: dict[Config, list[Run]] = {config: [] for config in configs}
            for i in range(repeat):
                for config in configs:
                    via, consumers, work_ms = config
                    run = run_once(bootstrap, workers, consumers, topics[config], records,
                                   work_ms, hi_s, cli=via == "cli")
                    results[config].append(run)
                    print(f"  run {i + 1}: {label(config)}: {run.rate(records):,.0f} records/s "
                          f"({run.seconds:.2f} s, first acquire {run.to_first_acquire_s:.2f} s)"
                          f", {run.per_1000(records):.1f} coordination records per 1,000 "
                          f"(+{run.close_records} on stop), split "
                          f"{'/'.join(str(n) for n in run.per_member)}, {run.duplicates} "
                          f"duplicates"
                          + (f", fetched {run.fetched / records:.1f} x N" if run.fetched
                             else "")
                          + (f", cores {run.machine_busy:.0%} busy" if run.machine_busy
                             is not None else "")
                          + (", member CPU s " + "/".join(f"{c:.2f}" for c in
                                                          run.per_member_cpu_s)
                             if None not in run.per_member_cpu_s else "")
                          + f"; {load()}", flush=True)
            print()
            report(results, records)
    except BenchError as exc:
        print(f"bench.share: error: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"\ntotal {time.monotonic() - began:.0f} s; {load()}", flush=True)


if __name__ == "__main__":
    main()
