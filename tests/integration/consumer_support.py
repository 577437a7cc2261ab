"""Helpers for the consumer integration tests: `marshal consume` processes, data topics, and a
watcher that follows the coordination log in the test process.

The watcher replays the coordination topic with its own rationalizer (the same pure function
every member runs), so tests can wait for ownership changes without sleeping and measure
take-over times with the broker's own timestamps.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kafka import KafkaAdminClient, KafkaProducer

from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.protocol import (
    ClaimingMessages,
    Heartbeat,
    PartitionMessage,
    ReleasingPartition,
    coordination_partition,
)
from marshal_py.replay import catch_up
from marshal_py.world import Outcome, Owner, Rationalizer, RationalizerConfig

HI = 1.0  # heartbeat interval of every group in these tests, seconds
PARTITIONS = 12
TP = tuple[int, int]  # (partition, offset) of a data record

T = TypeVar("T")

#: The brokers a test marked :data:`ON_EVERY_BROKER` runs on, by test id: the session's default
#: broker (the dev broker, Kafka 4.x) and a Kafka 3.9 dev broker (the fixture giving each one's
#: bootstrap.servers).
BROKERS = {"default": "kafka_bootstrap", "kafka-3.9": "kafka39_bootstrap"}

#: Runs a test once per broker of :data:`BROKERS`: its module's ``cluster`` fixture is
#: parametrized with the broker and builds on :func:`broker_bootstrap`.
ON_EVERY_BROKER = pytest.mark.parametrize("cluster", list(BROKERS), indirect=True)

#: :data:`ON_EVERY_BROKER` for tests that need only the broker's bootstrap.servers, not a
#: :class:`Cluster`: their module's ``bootstrap`` fixture returns :func:`broker_bootstrap`.
ON_EVERY_BROKER_BOOTSTRAP = pytest.mark.parametrize("bootstrap", list(BROKERS), indirect=True)


def broker_bootstrap(request: pytest.FixtureRequest) -> str:
    """bootstrap.servers of the broker a ``cluster`` (or ``bootstrap``) fixture is
    parametrized with (see :data:`ON_EVERY_BROKER`); the default broker's when it is not."""
    bootstrap: str = request.getfixturevalue(BROKERS[getattr(request, "param", "default")])
    return bootstrap


def now_ms() -> int:
    return int(time.time() * 1000)


def marshal_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "marshal_py.cli", *args]


def run_marshal(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run one `marshal` command to completion."""
    return subprocess.run(marshal_argv(*args), capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy())


def state_json(bootstrap: str, ctopic: str, group: str, topic: str,
               hi: float = HI) -> list[dict[str, Any]]:
    """`marshal state --json` for one group and topic."""
    result = run_marshal("state", "--json", "--heartbeat-interval", str(hi),
                         "--bootstrap-servers", bootstrap, "--coordination-topic", ctopic,
                         "--group", group, "--topic", topic)
    assert result.returncode == 0, result.stderr
    rows: list[dict[str, Any]] = json.loads(result.stdout)
    return rows


def tail_json(bootstrap: str, ctopic: str, hi: float = HI) -> list[dict[str, Any]]:
    """Every record of the coordination topic as `marshal tail --json` shows it."""
    result = run_marshal("tail", "--json", "-n", "100000", "--heartbeat-interval", str(hi),
                         "--bootstrap-servers", bootstrap, "--coordination-topic", ctopic)
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def create_topic(bootstrap: str, name: str, partitions: int = PARTITIONS) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics({name: {"num_partitions": partitions, "replication_factor": 1}},
                            wait_for_metadata=True)
    finally:
        admin.close()


def wait_for(condition: Callable[[], T | None], timeout: float, what: str,
             interval: float = 0.05, describe: Callable[[], str] | None = None) -> T:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            detail = f": {describe()}" if describe is not None else ""
            raise AssertionError(f"timed out after {timeout:.1f} s waiting for {what}{detail}")
        time.sleep(interval)


class Producer:
    """Produces values f"{i}" to partition i % partitions and remembers what it wrote."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = PARTITIONS, *,
                 whole_sends: bool = False) -> None:
        """``whole_sends``: each :meth:`send` reaches a partition as one append (its records
        batched until its flush), not in the pieces the sender thread takes meanwhile."""
        self.topic = topic
        self.partitions = partitions
        batching = {"linger_ms": 60_000, "batch_size": 1 << 20} if whole_sends else \
            {"linger_ms": 5}
        # Never re-creates a topic a test deleted (brokers may create topics on request).
        self._producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all",
                                       allow_auto_create_topics=False, **batching)
        self._next = 0
        self._lock = threading.Lock()
        self.produced: list[TP] = []

    def send(self, count: int) -> list[TP]:
        """Produce ``count`` records and wait for all of them; return their (partition, offset)."""
        with self._lock:
            first, self._next = self._next, self._next + count
        futures = [self._producer.send(self.topic, value=f"{i}".encode(),
                                       partition=i % self.partitions)
                   for i in range(first, first + count)]
        self._producer.flush()
        written = [(m.partition, m.offset) for m in (f.get(timeout=30) for f in futures)]
        with self._lock:
            self.produced.extend(written)
        return written

    def send_raw(self, records: Iterable[tuple[bytes | None, bytes | None]],
                 partition: int) -> list[int]:
        """Produce (key, value) pairs to one partition, in order; return their offsets."""
        futures = [self._producer.send(self.topic, key=k, value=v, partition=partition)
                   for k, v in records]
        self._producer.flush()
        offsets = [f.get(timeout=30).offset for f in futures]
        with self._lock:
            self.produced.extend((partition, o) for o in offsets)
        return offsets

    def ends(self) -> dict[int, int]:
        """Next offset of every partition this producer wrote to (all writes come from it)."""
        with self._lock:
            out = {p: 0 for p in range(self.partitions)}
            for p, o in self.produced:
                out[p] = max(out[p], o + 1)
            return out

    def close(self) -> None:
        self._producer.close()


class BackgroundProducer:
    """Keeps producing small batches (about ``rate`` records a second) until stopped."""

    def __init__(self, producer: Producer, rate: int = 100) -> None:
        self.producer = producer
        self.rate = rate
        self.written: list[TP] = []
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="background-producer",
                                        daemon=True)

    def __enter__(self) -> BackgroundProducer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        batch = max(1, self.rate // 10)
        try:
            while not self._stop.is_set():
                self.written.extend(self.producer.send(batch))
                self._stop.wait(0.1)
        except BaseException as exc:  # reported by stop()
            self._error = exc

    def wait_written(self, count: int, timeout: float = 30) -> None:
        """Wait until at least ``count`` records have been written in the background."""

        def written() -> bool:
            if self._error is not None or not self._thread.is_alive():
                raise AssertionError(f"background producer stopped: {self._error!r}")
            return len(self.written) >= count

        wait_for(written, timeout, f"{count} records to be produced")

    def stop(self) -> list[TP]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)
        if self._error is not None:
            raise AssertionError(f"background producer failed: {self._error!r}")
        return self.written


class ConsumerProcess:
    """One `marshal consume --print` process; stdout and stderr go to files.

    Files (not pipes) keep the process from ever blocking on output and keep everything it
    printed readable after a kill -9.
    """

    def __init__(self, bootstrap: str, ctopic: str, group: str, topic: str, client_id: str,
                 workdir: Path, *, mode: str = "alo", hi: float = HI,
                 extra: Sequence[str] = ()) -> None:
        self._launch(client_id, workdir, marshal_argv(
            "consume", "--bootstrap-servers", bootstrap, "--coordination-topic", ctopic,
            "--group", group, "--topic", topic, "--mode", mode, "--client-id", client_id,
            "--heartbeat-interval", str(hi), "--offset-reset", "earliest", "--print", *extra,
        ))

    def _launch(self, client_id: str, workdir: Path, argv: list[str]) -> None:
        """Start ``argv`` with its stdout and stderr in files of ``workdir``."""
        self.client_id = client_id
        tag = f"{client_id}-{time.monotonic_ns()}"
        self.stdout_path = workdir / f"{tag}.out"
        self.stderr_path = workdir / f"{tag}.err"
        self.argv = argv
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.started_at = time.time()
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, env=os.environ.copy())
        self._instance_id: str | None = None
        self.joined_at: float | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def instance_id(self) -> str:
        assert self._instance_id is not None, f"{self.client_id} has not joined yet"
        return self._instance_id

    @property
    def owner(self) -> Owner:
        return Owner(self.instance_id, self.client_id)

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(errors="replace")

    def _joined_line(self) -> str | None:
        for line in self.stderr_text().splitlines():
            if line.startswith("marshal consume: member ") and "(instance " in line:
                return line
        return None

    def wait_joined(self, timeout: float = 30) -> str:
        """Wait for the 'member C (instance X) of G on T' line; return the instance id."""

        def joined() -> str | None:
            line = self._joined_line()
            if line is None and self.proc.poll() is not None:
                raise AssertionError(f"{self.client_id} exited with {self.proc.returncode} "
                                     f"before joining: {self.stderr_text()!r}")
            return line

        line = wait_for(joined, timeout, f"{self.client_id} to join",
                        describe=self.stderr_text)
        self.joined_at = time.time()
        self._instance_id = line.split("(instance ", 1)[1].split(")", 1)[0]
        return self._instance_id

    def lines(self) -> list[dict[str, Any]]:
        """Every complete JSON line printed so far."""
        data = self.stdout_path.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        return [json.loads(line) for line in complete.splitlines() if line.strip()]

    def printed(self) -> list[TP]:
        return [(r["partition"], r["offset"]) for r in self.lines()]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, sig: signal.Signals) -> None:
        if self.alive():
            os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        """kill -9, and reap it."""
        self.send(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def terminate(self) -> None:
        self.send(signal.SIGTERM)

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise AssertionError(f"{self.client_id} did not exit within {timeout} s: "
                                 f"{self.stderr_text()[-2000:]!r}") from exc

    def cleanup(self) -> None:
        """Make sure the process is gone (used by the fixture at teardown)."""
        if self.alive():
            os.kill(self.proc.pid, signal.SIGCONT)
            os.kill(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=30)


@dataclass(frozen=True)
class Event:
    """One partition or membership record of the watched group and topic, as rationalized."""

    ts_ms: int  # broker time (LogAppendTime)
    partition: int | None  # None for membership records
    kind: str  # message type name
    verdict: str
    sender: Owner
    offset: int | None  # heartbeat / release offset, or the proposed last offset
    committed_after: int | None  # the partition's committed offset once applied


class Watcher:
    """Follows one group's claims on one topic in the coordination log.

    Creating it creates the coordination topic (before any consumer starts, so the
    consumers never race to create it).
    """

    def __init__(self, bootstrap: str, ctopic: str, group: str, topic: str,
                 hi: float = HI) -> None:
        self.group = group
        self.topic = topic
        self.hi_ms = int(hi * 1000)
        self.log = KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, topic=ctopic))
        count = self.log.partition_count()
        self.home = coordination_partition(topic, count)
        self.rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=count, heartbeat_interval_ms=self.hi_ms))
        self.events: list[Event] = []
        self.rationalizer.observe(self._observe)

    def _observe(self, outcome: Outcome) -> None:
        message = outcome.message
        if message is None or message.group_id != self.group or message.topic != self.topic:
            return
        sender = Owner(message.instance_id, message.client_id)
        ts = outcome.record.timestamp_ms
        verdict = outcome.verdict.value
        if not isinstance(message, PartitionMessage):  # MemberHeartbeat, Checkpoint
            self.events.append(Event(ts, None, type(message).__name__, verdict, sender, None,
                                     None))
            return
        offset: int | None = None
        if isinstance(message, Heartbeat | ReleasingPartition):
            offset = message.offset
        elif isinstance(message, ClaimingMessages):
            offset = message.proposed_last_offset
        claim = self.rationalizer.claim(self.group, self.topic, message.partition)
        self.events.append(Event(ts, message.partition, type(message).__name__, verdict,
                                 sender, offset, claim.committed_offset))

    def refresh(self) -> None:
        catch_up(self.log, self.rationalizer, [self.home])

    def owners(self, partitions: int = PARTITIONS, at_ms: int | None = None
               ) -> dict[int, Owner | None]:
        """The holder (fresh or unknown claim) of every partition now, after catching up."""
        self.refresh()
        now = now_ms() if at_ms is None else at_ms
        out: dict[int, Owner | None] = {}
        for p in range(partitions):
            claim = self.rationalizer.claim(self.group, self.topic, p)
            out[p] = claim.owner if claim.is_held(now) else None
        return out

    def counts(self, partitions: int = PARTITIONS) -> dict[str, int]:
        """How many partitions each instance holds now (unheld ones under '-')."""
        out: dict[str, int] = {}
        for owner in self.owners(partitions).values():
            name = "-" if owner is None else owner.instance_id
            out[name] = out.get(name, 0) + 1
        return out

    def describe(self, partitions: int = PARTITIONS) -> str:
        return ", ".join(
            f"{p}:{'-' if o is None else o.client_id + '/' + o.instance_id}"
            for p, o in self.owners(partitions).items()
        )

    def wait_owned(self, predicate: Callable[[dict[int, Owner | None]], bool], timeout: float,
                   what: str, partitions: int = PARTITIONS) -> dict[int, Owner | None]:
        """Wait until ``predicate(owners)`` holds; return those owners."""

        def check() -> dict[int, Owner | None] | None:
            owners = self.owners(partitions)
            return owners if predicate(owners) else None

        return wait_for(check, timeout, what, describe=lambda: self.describe(partitions))

    def wait_balanced(self, instances: Iterable[str], per_member: int, timeout: float = 30,
                      partitions: int = PARTITIONS) -> dict[int, Owner | None]:
        wanted = set(instances)

        def balanced(owners: dict[int, Owner | None]) -> bool:
            held: dict[str, int] = {}
            for owner in owners.values():
                if owner is None:
                    return False
                held[owner.instance_id] = held.get(owner.instance_id, 0) + 1
            return set(held) == wanted and all(n == per_member for n in held.values())

        return self.wait_owned(balanced, timeout, f"{per_member} partitions for each of "
                               f"{sorted(wanted)}", partitions)

    def partition_events(self, partition: int, since_ms: int = 0) -> list[Event]:
        return [e for e in self.events if e.partition == partition and e.ts_ms >= since_ms]

    def ownership_changes(self, since_ms: int = 0) -> list[Event]:
        """Claims won or reclaimed and releases, in log order."""
        return [e for e in self.events if e.ts_ms >= since_ms and e.verdict in
                ("claim_won", "claim_reclaimed", "released")]

    def close(self) -> None:
        self.log.close()


class Cluster:
    """One test's world: a coordination topic, a 12-partition data topic, a producer, a
    watcher, and the `marshal consume` processes started (all killed at teardown)."""

    def __init__(self, bootstrap: str, name: str, workdir: Path,
                 partitions: int = PARTITIONS, hi: float = HI) -> None:
        self.bootstrap = bootstrap
        self.ctopic = f"__marshal-{name}"
        self.group = f"group-{name}"
        self.topic = name
        self.partitions = partitions
        self.hi = hi
        self.workdir = workdir
        self.processes: list[ConsumerProcess] = []
        create_topic(bootstrap, self.topic, partitions)
        self.watcher = Watcher(bootstrap, self.ctopic, self.group, self.topic, hi)
        self.producer = Producer(bootstrap, self.topic, partitions)

    def spawn(self, client_id: str, mode: str = "alo", extra: Sequence[str] = (),
              topic: str | None = None, hi: float | None = None) -> ConsumerProcess:
        """Start a `marshal consume` process (``hi``: its --heartbeat-interval, by default
        the cluster's)."""
        proc = ConsumerProcess(self.bootstrap, self.ctopic, self.group, topic or self.topic,
                               client_id, self.workdir, mode=mode,
                               hi=self.hi if hi is None else hi, extra=extra)
        self.processes.append(proc)
        return proc

    def printed(self, procs: Iterable[ConsumerProcess] | None = None) -> list[TP]:
        out: list[TP] = []
        for proc in self.processes if procs is None else procs:
            out.extend(proc.printed())
        return out

    def wait_consumed(self, wanted: Iterable[TP], timeout: float = 30,
                      procs: Iterable[ConsumerProcess] | None = None) -> None:
        """Wait until every (partition, offset) of ``wanted`` has been printed by someone."""
        wanted_set = set(wanted)
        chosen = list(self.processes if procs is None else procs)

        def missing() -> set[TP]:
            return wanted_set - set(self.printed(chosen))

        wait_for(lambda: not missing(), timeout, f"{len(wanted_set)} records to be printed",
                 interval=0.2, describe=lambda: f"{len(missing())} missing, e.g. "
                 f"{sorted(missing())[:5]}; owners {self.watcher.describe(self.partitions)}")

    def state(self) -> list[dict[str, Any]]:
        return state_json(self.bootstrap, self.ctopic, self.group, self.topic, self.hi)

    def tail(self) -> list[dict[str, Any]]:
        return tail_json(self.bootstrap, self.ctopic, self.hi)

    def close(self) -> None:
        for proc in self.processes:
            proc.cleanup()
        self.watcher.close()
        self.producer.close()
