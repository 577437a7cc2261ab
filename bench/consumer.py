"""Failover time, claim latency and records/s of the consumer engine, on a real broker.

Usage: python -m bench.consumer [--quick] [--records N] [--repeat R]

Starts its own dev broker (Kafka 4.3.1, KRaft, 127.0.0.1) and measures, at a heartbeat
interval (HI) of 1 s:

1. Failover after kill -9: 3 ``marshal consume --print`` processes share a 12-partition topic;
   once every partition is held (4/4/4 when the balance gets there in time) and a warm-up
   record per partition has been printed, the member holding the most is killed with SIGKILL
   and one marker record is produced into each of its partitions. Measured from the kill:
   when the dead claims went stale and the dead member stopped counting as live by the rules
   (2 HI after its last heartbeat / last record: the floor the protocol sets), when an
   observer (a Marshaler of another group that only reads, polled every ~50 ms) sees the
   survivors own all 12 partitions, and when the survivors printed the first and the last
   marker (end to end). R runs; median and range.
2. Claim latency: members join a 12-partition topic one after the other (a new client id
   each time, the previous one closed) and claim all of it, or one partition
   (``max_claims=1``); the engine's ``stats.claim_latencies_ms`` (from proposing a claim to
   reading back the win, on a monotonic clock) of every join.
3. Records/s reading N records of 100 bytes from a 12-partition topic from the beginning: a
   plain kafka-python KafkaConsumer (manual assignment of all partitions, group_id=None, no
   commits), a Marshal ALO consumer (``commit`` after every record) and a Marshal AMO consumer
   (every fetched batch confirmed in ``__marshal`` before delivery), at its default
   ``amo_batch_size`` and at 500. Records/s is steady state, from the first record to the
   N-th; the time to the first record (joining, claiming) is shown apart. R runs of each
   (interleaved), median. ``--no-check-crcs`` turns off kafka-python's record CRC checks
   (pure Python without the crc32c extension, about half of a plain consumer's time).

``--quick`` is a smoke run (N=5,000, R=1, fewer joins) that finishes in well under a minute.
Every wait is bounded and fails with one line saying what did not happen; the consumer
processes and the broker are stopped whatever happens.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import inspect
import json
import os
import platform
import signal
import statistics
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import kafka
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition

from bench.cli_process import CliProcess
from marshal_py import Consumer, Marshaler
from marshal_py.client import BrokerClock
from marshal_py.client.engine_types import Mode
from marshal_py.devbroker import KAFKA_VERSION, DevBroker
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


# -- small helpers ------------------------------------------------------------------------------


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


# -- 1. failover after kill -9 ------------------------------------------------------------------


class Member(CliProcess):
    """One ``marshal consume --print`` process; remembers when each record value was printed."""

    def __init__(self, bootstrap: str, group: str, topic: str, client_id: str,
                 hi_s: float = HI_S) -> None:
        self.client_id = client_id
        self.joined = threading.Event()
        self._printed: dict[str, float] = {}
        self._lock = threading.Lock()
        super().__init__(client_id, [
            "consume", "--bootstrap-servers", bootstrap, "--group", group, "--topic", topic,
            "--mode", "alo", "--client-id", client_id, "--heartbeat-interval", str(hi_s),
            "--offset-reset", "earliest", "--print",
        ])

    def on_stdout(self, raw: bytes, at: float) -> None:
        try:
            value = json.loads(raw).get("value")
        except ValueError:
            return
        if isinstance(value, str):
            with self._lock:
                self._printed.setdefault(value, at)

    def on_stderr(self, line: str) -> None:
        if line.startswith(f"marshal consume: member {self.client_id} "):
            self.joined.set()

    def printed_at(self, value: str) -> float | None:
        with self._lock:
            return self._printed.get(value)


def members(bootstrap: str, group: str, topic: str, count: int,
            hi_s: float = HI_S) -> contextlib.AbstractContextManager[list[Member]]:
    """``count`` ``marshal consume --print`` members of ``group``, stopped on exit."""
    from bench.worker_process import worker_pool  # bench.worker_process imports this module

    return worker_pool(lambda k: Member(bootstrap, group, topic, f"member-{k}", hi_s), count)


class Observer:
    """Reads who holds which partition of a group, through a Marshaler of another group.

    It never opens a consumer, so it writes nothing to ``__marshal`` and is nobody's member.
    ``hi_s`` must be the observed group's heartbeat interval (claims go stale by it).
    """

    def __init__(self, bootstrap: str, hi_s: float = HI_S) -> None:
        self.hi_s = hi_s
        self.marshaler = Marshaler(bootstrap, group_id="bench.observer",
                                   client_id="bench-observer", heartbeat_interval=hi_s)

    def claims(self, group: str, topic: str) -> tuple[int, dict[int, Any]]:
        """(broker-clock now, partition -> PartitionClaim) caught up to the log's end."""
        self.marshaler.claims()  # catches the rationalizer up with every coordination partition
        now = self.marshaler.clock.now_ms()
        return now, {c.key.partition: c for c in self.marshaler.rationalizer.claims(group, topic)}

    def holders(self, group: str, topic: str) -> dict[int, str]:
        """partition -> client id of its owner, for partitions held (fresh or unknown) now."""
        now, claims = self.claims(group, topic)
        return {p: c.owner.client_id for p, c in claims.items()
                if c.owner is not None and c.is_held(now)}

    def close(self) -> None:
        self.marshaler.close()


def split(holders: dict[int, str], names: Iterable[str]) -> str:
    counts = [sum(1 for h in holders.values() if h == n) for n in names]
    return "/".join(str(c) for c in counts)


@dataclass
class FailoverRun:
    split: str
    victim_held: int
    stale_s: float  # the dead member's claims stale (2 HI after their last heartbeat)
    expired_s: float  # the dead member no longer live (2 HI after its last sign of life)
    owned_s: float  # observer sees all partitions held by survivors
    first_record_s: float  # first marker printed by a survivor
    last_record_s: float  # every marker printed


def failover_run(bootstrap: str, admin: KafkaAdminClient, producer: KafkaProducer,
                 observer: Observer, balance_timeout_s: float) -> FailoverRun:
    """One failover at the observer's heartbeat interval (``observer.hi_s``, the members'
    too); every wait after the members joined scales with it."""
    hi_s = observer.hi_s
    hi_ms = int(hi_s * 1000)
    scale = max(1.0, hi_s / HI_S)  # the waits below were sized for HI 1 s
    tag = uuid.uuid4().hex[:8]
    topic, group = f"bench-failover-{tag}", f"bench.failover.{tag}"
    create_topic(admin, topic)
    with members(bootstrap, group, topic, MEMBERS, hi_s) as procs:
        names = [m.client_id for m in procs]

        def check_alive() -> None:
            for m in procs:
                if not m.killed and not m.alive():
                    raise BenchError(f"{m.client_id} exited with {m.proc.returncode}: "
                                     f"{m.stderr_tail()}")

        def joined() -> bool:
            check_alive()
            return all(m.joined.is_set() for m in procs)

        wait_for(f"{MEMBERS} marshal consume processes to join", joined, 60,
                 detail=lambda: "; ".join(f"{m.client_id}: {m.stderr_tail()}" for m in procs))

        last: dict[int, str] = {}

        def all_held() -> dict[int, str] | None:
            nonlocal last
            check_alive()
            last = observer.holders(group, topic)
            return last if len(last) == PARTITIONS else None

        wait_for(f"the members to hold all {PARTITIONS} partitions", all_held, 60 * scale,
                 detail=lambda: f"held {len(last)}: {split(last, names)}")
        ideal = "/".join([str(PARTITIONS // MEMBERS)] * MEMBERS)
        with contextlib.suppress(BenchError):  # the ideal split is nice to have, not required
            wait_for(f"a {ideal} split", lambda: all_held() and split(last, names) == ideal,
                     balance_timeout_s)

        # Warm up: a record per partition printed by somebody, so every fetch loop is running.
        warm = [f"warm-{tag}-{p}" for p in range(PARTITIONS)]
        for p, value in enumerate(warm):
            producer.send(topic, value=value.encode(), partition=p)
        producer.flush(timeout=30)

        def warmed_up() -> bool:
            check_alive()
            return all(any(m.printed_at(v) is not None for m in procs) for v in warm)

        wait_for("the warm-up records to be printed", warmed_up, 30 * scale)

        holders = wait_for(f"all {PARTITIONS} partitions held before the kill", all_held,
                           30 * scale)
        counts = {n: sum(1 for h in holders.values() if h == n) for n in names}
        victim = next(m for m in procs if m.client_id == max(names, key=lambda n: counts[n]))
        survivors = [m for m in procs if m is not victim]
        survivor_names = {m.client_id for m in survivors}
        dead = sorted(p for p, h in holders.items() if h == victim.client_id)
        markers = {p: f"marker-{tag}-{p}" for p in dead}

        # The kill, then one marker per dead partition.
        killed_at = time.monotonic()
        killed_ms = observer.marshaler.clock.now_ms()
        victim.kill9()
        for p, value in markers.items():
            producer.send(topic, value=value.encode(), partition=p)
        producer.flush(timeout=30)

        # The dead member's last signs of life (read before a survivor takes over, 2 HI later):
        # its claims go stale 2 HI after their last heartbeat, and it stops counting as a
        # live member (so the survivors' fair share grows) 2 HI after its last record of any
        # kind. The later of the two is the floor the protocol sets at this HI.
        _, claims = observer.claims(group, topic)
        victim_claims = [claims[p] for p in dead if claims[p].owner is not None
                         and claims[p].owner.client_id == victim.client_id]
        if not victim_claims:
            raise BenchError(f"{victim.client_id}'s claims changed hands within ms of the kill")
        last_beat = max(c.last_heartbeat_ms for c in victim_claims)
        last_seen = observer.marshaler.rationalizer.member_last_seen(group, topic).get(
            victim_claims[0].owner, last_beat)
        stale_s = (last_beat + 2 * hi_ms + 1 - killed_ms) / 1000
        expired_s = (last_seen + 2 * hi_ms + 1 - killed_ms) / 1000

        owned_at: float | None = None
        patience_s = 30 * scale
        deadline = killed_at + patience_s
        while True:
            check_alive()
            if owned_at is None:
                held = observer.holders(group, topic)
                if len(held) == PARTITIONS and set(held.values()) <= survivor_names:
                    owned_at = time.monotonic()
            printed = [min((t for t in (m.printed_at(v) for m in survivors) if t is not None),
                           default=None) for v in markers.values()]
            if owned_at is not None and all(t is not None for t in printed):
                break
            if time.monotonic() >= deadline:
                raise BenchError(
                    f"{patience_s:.0f} s after kill -9 of {victim.client_id}: survivors own "
                    f"{'all' if owned_at else 'not all'} partitions, printed "
                    f"{sum(t is not None for t in printed)}/{len(printed)} markers; "
                    + "; ".join(f"{m.client_id}: {m.stderr_tail()}" for m in survivors))
            time.sleep(POLL_S)
        times = [t for t in printed if t is not None]
        return FailoverRun(
            split=split(holders, names),
            victim_held=len(dead),
            stale_s=stale_s,
            expired_s=expired_s,
            owned_s=owned_at - killed_at,
            first_record_s=min(times) - killed_at,
            last_record_s=max(times) - killed_at,
        )


# -- 2. claim latency ---------------------------------------------------------------------------


class LocalClock(BrokerClock):
    """This machine's clock, never corrected (an option of claim_latency; the engine's
    latencies are measured on a monotonic clock either way)."""

    def observe(self, broker_ms: int, sent_ms: int, acked_ms: int) -> None:
        return None


@dataclass
class ClaimLatency:
    label: str
    joins: int
    wanted: int  # partitions each join claims
    latencies_ms: list[int]
    first_of_join_ms: list[int]  # the first win of every join
    join_s: list[float]  # from m.consumer() to holding ``wanted`` partitions


def claim_latency(bootstrap: str, admin: KafkaAdminClient, joins: int,
                  max_claims: int | None = None, local_clock: bool = False) -> ClaimLatency:
    """``joins`` members, one after the other, each claiming every partition (or
    ``max_claims``) of a fresh 12-partition topic and then closing (releasing them).

    ``local_clock``: run the engine on :class:`LocalClock` so that its claim latencies are
    true milliseconds; False keeps the shipped BrokerClock.
    """
    tag = uuid.uuid4().hex[:8]
    topic, group = f"bench-claims-{tag}", f"bench.claims.{tag}"
    create_topic(admin, topic)
    wanted = max_claims or PARTITIONS
    label = (f"one member claims {wanted}" + (" (max_claims=1)" if max_claims == 1 else "")
             + (", uncorrected local clock" if local_clock else ""))
    result = ClaimLatency(label, joins, wanted, [], [], [])
    for i in range(joins):
        # A new client id each time: a member does not re-take for one HI what it released.
        with Marshaler(bootstrap, group_id=group, client_id=f"claimer-{i}",
                       heartbeat_interval=HI_S) as m:
            if local_clock:
                m.clock = LocalClock()  # read by m.consumer() when it builds the engine
            started = time.monotonic()
            consumer = m.consumer([topic], mode="alo", offset_reset="earliest",
                                  max_claims=max_claims)

            def holds_all(c: Consumer = consumer) -> bool:
                return len(c.assignment()) == wanted

            wait_for(f"join {i + 1} to hold {wanted} partitions", holds_all, 30)
            result.join_s.append(time.monotonic() - started)
            won = list(consumer.stats.claim_latencies_ms)
            if won:
                result.latencies_ms.extend(won)
                result.first_of_join_ms.append(won[0])
    if not result.latencies_ms:
        raise BenchError("no claim latencies were recorded (stats.claim_latencies_ms empty)")
    return result


# -- 3. records per second ----------------------------------------------------------------------


def produce(bootstrap: str, topic: str, count: int) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20,
                             batch_size=512 * 1024, max_request_size=8 * 1024 * 1024)
    try:
        for i in range(count):
            value = f"{i:012d}".encode().ljust(RECORD_BYTES, b".")
            producer.send(topic, value=value, partition=i % PARTITIONS)
        producer.flush(timeout=120)
    finally:
        producer.close()
    check = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        total = sum(check.end_offsets(tps).values())
    finally:
        check.close()
    if total != count:
        raise BenchError(f"produced {count:,} records but the topic holds {total:,}")


class Tally:
    """The same per-record work for every consumer: follows each partition's offsets."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.next = [0] * PARTITIONS
        self.progressed = 0  # sum of next: reaches total when every offset has been seen
        self.duplicates = 0
        self.gaps = 0
        self.first_at: float | None = None

    def see(self, partition: int, offset: int) -> bool:
        """Account one record; True once every record has been seen."""
        expected = self.next[partition]
        if offset == expected:
            self.next[partition] = offset + 1
            self.progressed += 1
        elif offset < expected:
            self.duplicates += 1
        else:
            self.gaps += offset - expected
            self.progressed += offset + 1 - expected
            self.next[partition] = offset + 1
        return self.progressed >= self.total


@dataclass
class ReadRun:
    seconds: float  # first record to the last
    to_first_s: float  # consumer creation to the first record
    duplicates: int
    gaps: int
    extra: str = ""

    def rate(self, records: int) -> float:
        return records / self.seconds if self.seconds > 0 else float("inf")


def default_amo_batch_size() -> object:
    """Marshaler.consumer's default at-most-once batch (records confirmed per round trip)."""
    parameter = inspect.signature(Marshaler.consumer).parameters.get("amo_batch_size")
    return "?" if parameter is None else parameter.default


def _deadline_s(records: int) -> float:
    return 60 + records / 1000


def read_plain(bootstrap: str, topic: str, records: int) -> ReadRun:
    tally = Tally(records)
    started = time.perf_counter()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest")
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        consumer.seek_to_beginning()
        deadline = started + _deadline_s(records)
        done = False
        while not done:
            for batch in consumer.poll(timeout_ms=500, max_records=500).values():
                for record in batch:
                    if tally.first_at is None:
                        tally.first_at = time.perf_counter()
                    if tally.see(record.partition, record.offset):
                        done = True
            if not done and time.perf_counter() > deadline:
                raise BenchError(f"plain kafka-python read {tally.progressed:,}/{records:,} "
                                 f"records in {_deadline_s(records):.0f} s")
        ended = time.perf_counter()
    finally:
        consumer.close()
    assert tally.first_at is not None
    return ReadRun(ended - tally.first_at, tally.first_at - started, tally.duplicates,
                   tally.gaps)


def read_marshal(bootstrap: str, topic: str, records: int, mode: str,
                 amo_batch_size: int | None = None) -> ReadRun:
    tally = Tally(records)
    tag = uuid.uuid4().hex[:8]
    options: dict[str, Any] = {}
    if amo_batch_size is not None:
        options["amo_batch_size"] = amo_batch_size
    started = time.perf_counter()
    with Marshaler(bootstrap, group_id=f"bench.read.{mode}.{tag}", client_id=f"reader-{mode}",
                   heartbeat_interval=HI_S) as m:
        consumer = m.consumer([topic], cast(Mode, mode), offset_reset="earliest",
                              amo_batch_size=options.get("amo_batch_size", 100))
        watchdog = threading.Timer(_deadline_s(records), consumer.stop)
        watchdog.daemon = True
        watchdog.start()
        done = False
        try:
            if mode == "alo":
                for record in consumer:
                    if tally.first_at is None:
                        tally.first_at = time.perf_counter()
                    done = tally.see(record.partition, record.offset)
                    consumer.commit(record)
                    if done:
                        break
            else:
                for record in consumer:
                    if tally.first_at is None:
                        tally.first_at = time.perf_counter()
                    if tally.see(record.partition, record.offset):
                        done = True
                        break
            ended = time.perf_counter()
        finally:
            watchdog.cancel()
        if not done:
            raise BenchError(f"marshal {mode.upper()} read {tally.progressed:,}/{records:,} "
                             f"records in {_deadline_s(records):.0f} s")
        stats = consumer.stats
        if mode == "amo":
            extra = (f"{stats.amo_batches_confirmed:,} batches confirmed "
                     f"({records / max(1, stats.amo_batches_confirmed):,.0f} records each), "
                     f"{stats.amo_batches_refused} refused")
        else:
            extra = f"{stats.heartbeats:,} heartbeats"
        if stats.lost_after_winning:
            extra += f", {stats.lost_after_winning} claims lost"
    assert tally.first_at is not None
    return ReadRun(ended - tally.first_at, tally.first_at - started, tally.duplicates,
                   tally.gaps, extra)


AMO_BIG_BATCH = 500  # the data consumer's poll size in ALO mode
READERS: dict[str, str] = {
    "plain": "kafka-python KafkaConsumer (assign, no group, no commits)",
    "alo": "marshal ALO (commit every record)",
    "amo": f"marshal AMO (confirm every batch, amo_batch_size={default_amo_batch_size()})",
    "amo500": f"marshal AMO, amo_batch_size={AMO_BIG_BATCH}",
}


def throughput(bootstrap: str, admin: KafkaAdminClient, records: int,
               repeat: int) -> dict[str, list[ReadRun]]:
    topic = f"bench-read-{uuid.uuid4().hex[:8]}"
    create_topic(admin, topic)
    produced = time.monotonic()
    produce(bootstrap, topic, records)
    print(f"  produced {records:,} records of {RECORD_BYTES} bytes in "
          f"{time.monotonic() - produced:.1f} s", flush=True)
    runs: dict[str, list[ReadRun]] = {k: [] for k in READERS}
    for _ in range(repeat):
        runs["plain"].append(read_plain(bootstrap, topic, records))
        runs["alo"].append(read_marshal(bootstrap, topic, records, "alo"))
        runs["amo"].append(read_marshal(bootstrap, topic, records, "amo"))
        runs["amo500"].append(read_marshal(bootstrap, topic, records, "amo", AMO_BIG_BATCH))
    return runs


# -- the report ---------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join("  " + line.rstrip() for line in lines)


def s(value: float) -> str:
    return f"{value:.2f} s"


def report_failover(runs: list[FailoverRun]) -> None:
    header = ["run", "split", "victim held", "claims stale", "member expired",
              "all owned again", "first marker printed", "last marker printed"]
    rows = [[str(i + 1), r.split, str(r.victim_held), s(r.stale_s), s(r.expired_s),
             s(r.owned_s), s(r.first_record_s), s(r.last_record_s)]
            for i, r in enumerate(runs)]
    if len(runs) > 1:
        for name, pick in (("median", 0), ("min", 1), ("max", 2)):
            rows.append([name, "", "", *(s(median_range(vals)[pick]) for vals in (
                [r.stale_s for r in runs], [r.expired_s for r in runs],
                [r.owned_s for r in runs],
                [r.first_record_s for r in runs], [r.last_record_s for r in runs]))])
    print(table(header, rows))
    owned = median_range([r.owned_s for r in runs])
    e2e = median_range([r.last_record_s for r in runs])
    print(f"failover: all {PARTITIONS} partitions owned again {owned[0]:.2f} s after kill -9 "
          f"(median of {len(runs)}, range {owned[1]:.2f}..{owned[2]:.2f}); end to end "
          f"{e2e[0]:.2f} s (range {e2e[1]:.2f}..{e2e[2]:.2f})")


def report_claims(results: list[ClaimLatency]) -> None:
    rows = []
    for r in results:
        lat = r.latencies_ms
        rows.append([r.label, str(r.joins), str(len(lat)),
                     f"{percentile(lat, 50):.0f} ms", f"{percentile(lat, 99):.0f} ms",
                     f"{max(lat):.0f} ms", f"{statistics.median(r.first_of_join_ms):.0f} ms",
                     s(statistics.median(r.join_s))])
    print(table(["claims made by", "joins", "claims", "p50", "p99", "max",
                 "first win of a join (median)", "join to all held (median)"], rows))
    for r in results:
        lat = r.latencies_ms
        print(f"claim latency, {r.label}: {len(lat)} claims in {r.joins} joins, "
              f"p50 {percentile(lat, 50):.0f} ms, p99 {percentile(lat, 99):.0f} ms")


def report_throughput(runs: dict[str, list[ReadRun]], records: int) -> None:
    plain = statistics.median(r.rate(records) for r in runs["plain"])
    rows = []
    for key, label in READERS.items():
        rates = [r.rate(records) for r in runs[key]]
        med, low, high = median_range(rates)
        dups = sum(r.duplicates for r in runs[key])
        gaps = sum(r.gaps for r in runs[key])
        rows.append([label, f"{med:,.0f}", f"{low:,.0f}..{high:,.0f}", f"{med / plain:.2f}",
                     s(statistics.median(r.to_first_s for r in runs[key])),
                     f"{dups}/{gaps}", runs[key][-1].extra])
    print(table(["consumer", "records/s", "range", "vs plain", "to first record",
                 "dup/gap", "last run"], rows))
    summary = ", ".join(
        f"{k} {statistics.median(r.rate(records) for r in runs[k]):,.0f}" for k in READERS)
    print(f"records/s ({records:,} records x {len(runs['plain'])} runs, median): {summary}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=None,
                        help="Records to read (default 200,000; --quick 5,000).")
    parser.add_argument("--repeat", type=int, default=None,
                        help="Failover runs and read runs of each consumer (default 3; "
                             "--quick 1).")
    parser.add_argument("--joins", type=int, default=None,
                        help="Joins claiming all 12 partitions for the claim latency (default "
                             "10; --quick 2); three times as many claim one partition each.")
    parser.add_argument("--no-check-crcs", action="store_true",
                        help="Skip record CRC checks in every kafka-python consumer of this "
                             "process (about what the crc32c C extension would give).")
    parser.add_argument("--quick", action="store_true", help="A smoke run: small and once.")
    args = parser.parse_args()
    if args.no_check_crcs:
        # Marshaler's kafka_config goes to its producer and admin client too, which reject
        # check_crcs; the class default reaches the Consumer's data consumer.
        KafkaConsumer.DEFAULT_CONFIG["check_crcs"] = False
    records = args.records or (5_000 if args.quick else 200_000)
    repeat = args.repeat or (1 if args.quick else 3)
    joins = args.joins or (2 if args.quick else 10)
    if records < 1 or repeat < 1 or joins < 1:
        parser.error("--records, --repeat and --joins must be >= 1")
    balance_timeout_s = 15.0 if args.quick else 30.0

    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the consumers and the broker.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    print(machine_line() + (", CRC checks off" if args.no_check_crcs else ""), flush=True)
    print(f"before: {load()} (other work on the machine skews every figure)", flush=True)
    began = time.monotonic()
    try:
        with DevBroker() as broker:
            bootstrap = broker.bootstrap_servers
            print(f"broker {bootstrap} up in {time.monotonic() - began:.1f} s; HI = {HI_S:g} s, "
                  f"{PARTITIONS} partitions", flush=True)
            admin = KafkaAdminClient(bootstrap_servers=bootstrap)
            producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=0)
            observer = Observer(bootstrap)  # also creates __marshal
            try:
                print(f"\n1. failover after kill -9 of one of {MEMBERS} `marshal consume` "
                      f"processes ({repeat} runs)", flush=True)
                failovers = []
                for i in range(repeat):
                    failovers.append(failover_run(bootstrap, admin, producer, observer,
                                                  balance_timeout_s))
                    r = failovers[-1]
                    print(f"  run {i + 1}: owned again {r.owned_s:.2f} s, "
                          f"last marker {r.last_record_s:.2f} s", flush=True)
                report_failover(failovers)

                print(f"\n2. claim latency (members joining a {PARTITIONS}-partition topic "
                      "one after the other)", flush=True)
                report_claims([
                    claim_latency(bootstrap, admin, joins),
                    claim_latency(bootstrap, admin, joins * 3, max_claims=1),
                ])

                print(f"\n3. records/s reading {records:,} records of {RECORD_BYTES} bytes "
                      f"from {PARTITIONS} partitions ({repeat} runs each)", flush=True)
                report_throughput(throughput(bootstrap, admin, records, repeat), records)
            finally:
                for closing in (observer.close, producer.close, admin.close):
                    with contextlib.suppress(Exception):
                        closing()
    except BenchError as exc:
        print(f"bench.consumer: error: {exc}", file=sys.stderr)
        sys.exit(1)
    print(f"\ntotal {time.monotonic() - began:.0f} s; {load()}", flush=True)


if __name__ == "__main__":
    main()
