"""The campaign runner: ``python -m chaos --runs N --mode MODE`` (``bin/chaos``).

One campaign starts its own development broker (Kafka 4.3.1, KRaft, 127.0.0.1) on a data
directory of its own, so that the broker can be killed with SIGKILL and restarted on the same
data. Each run then uses a fresh data topic, coordination topic and group:

1. it starts ``--consumers`` consumer processes (:mod:`chaos.worker`, client ids ``c0``,
   ``c1``, ...) and waits until each has opened its consumer;
2. it starts the producer process (:mod:`chaos.producer`): ``--records`` records at about
   ``--rate`` records/s, keyed ``k0000`` .. (``--keys`` keys); in ``share`` and ``eos`` runs as
   transactions, one per batch, every fourth aborted (its records sent again), so the
   partitions hold commit and abort markers and aborted records, which the consumers
   (read_committed, the default) must never hand out and whose offsets must still be passed;
3. while the records flow it injects ``--faults-per-run`` faults, one after the other, each
   after a random pause of 0.5 to 1.5 times (production time / (faults + 1)). The plan
   repeats the chosen kinds (``--faults``) in turn -- so each kind occurs once the number
   of faults reaches the number of kinds -- shuffled by the run's random generator:

   * ``kill``: SIGKILL of a random running consumer; after 0 to 2 heartbeat intervals a
     replacement starts. With ``--restart-ids mixed`` (default) the replacement reuses the
     dead process's client id (the restart path: it takes the partitions back after 1.25 HI)
     or, with even odds, gets a new one (``c1-r3``): the survivors take over after 2 HI and
     balance with the newcomer; ``same`` and ``new`` force one of the two;
   * ``stop``: SIGSTOP of a random running consumer for 2.5 to 4 heartbeat intervals, then
     SIGCONT: a zombie, whose partitions (or slots, or share locks) move while it is frozen;
   * ``broker``: SIGKILL of the broker, 0 to 2 heartbeat intervals down, then a restart on
     the same data directory and ports (the restart itself takes some seconds); with
     ``--brokers 3`` (a three-node :class:`~marshal_py.devbroker.cluster.DevCluster`,
     replication 3) SIGKILL of the node leading the run's coordination partition, which the
     cluster replaces while it is down (:mod:`chaos.cluster`).

   A consumer that raises (e.g. while the broker is down) exits; the runner journals it and
   starts a replacement with the same client id, and the report counts it.
4. once the producer is done and every fault is over, it waits (at most ``--drain-timeout``)
   until the run is complete -- ``alo`` and ``key-shared``: every record journalled as
   processed; ``amo``: every partition's committed offset in the log at its end; ``eos``:
   every partition's committed offset past its last committed record (``eos`` workers copy
   the topic to ``<topic>-out`` in transactions, each output naming its input); ``share``:
   every share-partition's SPSO at its end -- then stops the consumers gracefully;
5. it dumps the data topic (read_committed: aborted records are not records to process),
   in ``eos`` runs the output topic (read_committed), and the coordination topic into the
   run directory and runs the
   checker (:mod:`chaos.checker`) on it.

The run's random generator is seeded with ``--seed`` + the run's number: it decides the fault
plan, the victims and the durations (not the timing of the processes), so a seed reproduces
a campaign's faults.

Exit status: 0 when no run violated a guarantee of its mode, 1 when one did, 2 on a usage
error (one line), 3 when a run could not be completed (the broker or a process failed in a
way the runner could not recover from).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from bench.consumer import BenchError
from bench.worker_process import WorkerProcess
from chaos.checker import MODES, RunResult, check
from chaos.journal import Journal, JournalTail, now, write_jsonl
from chaos.logview import group_keys
from chaos.operator import HangingOperator
from chaos.rundir import (
    COORDINATION,
    FAULTS,
    META,
    OUTPUT,
    PRODUCER,
    RESULT,
    TOPIC,
    WORKER_PREFIX,
    coordination_row,
    load_run,
)
from marshal_py.errors import MarshalError

log = logging.getLogger("chaos")

FAULT_KINDS = ("kill", "stop", "broker")
RESTART_IDS = ("mixed", "same", "new")
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
SLOW_STOP_S = 5.0
TICK_S = 0.2


class RunError(Exception):
    """A run could not be completed (not a violation: the harness or the broker failed)."""


@dataclass
class Options:
    """A campaign's settings (the command line's options)."""

    modes: list[str]
    runs: int = 1
    seed: int = 0
    consumers: int = 3
    records: int = 5000
    rate: int = 250
    partitions: int = 4
    keys: int = 64
    heartbeat_interval: float = 1.0
    faults: tuple[str, ...] = FAULT_KINDS
    faults_per_run: int = 4
    restart_ids: str = "mixed"
    lock_duration: float = 3.0
    delivery_limit: int = 10
    work_ms: float = 1.0
    drain_timeout: float = 120.0
    directory: Path | None = None
    keep: bool = False
    fsync: bool = False
    kafka_config: dict[str, Any] = field(default_factory=dict)
    #: Run authenticated groups: every coordination record signed with a per-run key.
    signed: bool = False
    #: Kafka nodes: 1 (the broker fault kills the broker) or more (a DevCluster; the broker
    #: fault kills the node leading the run's coordination partition).
    brokers: int = 1
    #: How the consumers fetch data records (Marshaler ``fetcher``).
    fetcher: str = "kafka-python"


@dataclass
class RunOutcome:
    """One run: its checker result (None when the run failed), where its files are, time."""

    index: int
    mode: str
    seed: int
    result: RunResult | None
    directory: Path | None
    seconds: float
    error: str = ""
    notes: list[str] = field(default_factory=list)


# -- processes -------------------------------------------------------------------------------


class ChaosProcess(WorkerProcess):
    """A worker or producer process (``python -m <module> --worker``) given its settings."""

    def __init__(self, name: str, module: str, settings: dict[str, Any]) -> None:
        super().__init__(name, module)
        self.expected_exit = False
        self.stopped = False
        self.send(json.dumps(settings))

    def signal(self, signum: int) -> None:
        """Send a signal to the process (ignored once it is gone)."""
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.proc.pid, signum)


@dataclass
class Slot:
    """A consumer position of the run: the process currently in it and how it got there."""

    number: int
    client_id: str
    process: ChaosProcess | None = None
    incarnation: str = ""


# -- the coordination log, followed by the runner ----------------------------------------------


class Follower:
    """Replays the run's coordination partition (the data topic's home) with a rationalizer."""

    def __init__(self, bootstrap: str, coordination_topic: str, group: str, topic: str,
                 heartbeat_interval_ms: int, auth_key: dict[str, str] | None = None) -> None:
        from marshal_py.log import KafkaLog, KafkaLogConfig
        from marshal_py.protocol import coordination_partition
        from marshal_py.world import Rationalizer, RationalizerConfig

        self.log = KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap,
                                           topic=coordination_topic))  # creates it
        self.count = self.log.partition_count()
        self.home = coordination_partition(topic, self.count)
        self.group, self.topic = group, topic
        self.rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=self.count, heartbeat_interval_ms=heartbeat_interval_ms,
            group_keys=group_keys(group, auth_key)))

    def poll(self) -> None:
        """Apply what was appended since the last call (a broker hiccup is retried later)."""
        from marshal_py.replay import catch_up

        try:
            catch_up(self.log, self.rationalizer, [self.home], fetch_timeout_s=0.5)
        except MarshalError as exc:
            log.debug("following the coordination log: %s", exc)

    def committed(self, partition: int) -> int:
        """The committed offset of a partition (exclusive modes), 0 when none."""
        return self.rationalizer.claim(self.group, self.topic, partition).committed_offset or 0

    def spso(self, partition: int) -> int:
        """The share-partition's start offset, 0 when not initialized."""
        share = self.rationalizer.share_partition(self.group, self.topic, partition)
        return 0 if share is None else share.spso

    def dump(self) -> list[dict[str, Any]]:
        """Every record of every coordination partition, as ``coordination.jsonl`` rows."""
        rows: list[dict[str, Any]] = []
        for partition in range(self.count):
            position = self.log.start_position(partition)
            end = self.log.end_position(partition)
            empty = 0
            while position < end and empty < 20:
                batch = [r for r in self.log.fetch({partition: position}, 1.0)
                         if r.partition == partition and r.position >= position]
                empty = 0 if batch else empty + 1
                for record in sorted(batch, key=lambda r: r.position):
                    if record.position >= end:
                        break
                    rows.append(coordination_row(record))
                    position = record.position + 1
                if not batch:  # passed positions without records (transaction markers)
                    reached = self.log.read_position(partition)
                    if reached is not None and reached > position:
                        position, empty = reached, 0
            if position < end:
                raise RunError(f"could not read the coordination partition {partition} to its "
                               f"end ({position} of {end})")
        return rows

    def close(self) -> None:
        """Close the coordination log's clients."""
        with contextlib.suppress(Exception):
            self.log.close()


# -- one run ---------------------------------------------------------------------------------


#: Modes whose runs produce transactional input.
TRANSACTIONAL_MODES = frozenset({"share", "eos"})


class Run:
    """One run of a campaign (see the module docstring)."""

    def __init__(self, options: Options, broker: Any, mode: str, index: int, seed: int,
                 directory: Path) -> None:
        self.options, self.broker, self.mode, self.index = options, broker, mode, index
        self.rng = random.Random(seed)
        self.directory = directory
        self.hi = options.heartbeat_interval
        #: Share-mode runs read transactional input (a quarter of the transactions aborted):
        #: consumers read read_committed, and offsets without a record become share gaps.
        self.transactional = mode in TRANSACTIONAL_MODES
        tag = uuid.uuid4().hex[:8]
        self.topic = f"chaos-{mode}-{tag}"
        self.group = f"chaos.{mode}.{tag}"
        self.coordination_topic = f"__marshal_chaos_{tag}"
        #: ``eos`` runs copy the topic here, exactly once.
        self.output = f"{self.topic}-out"
        #: The run's group key (signed runs): key id and hex secret, for workers and checker.
        self.auth_key = ({"key_id": f"chaos-{tag}"[:64], "secret": os.urandom(32).hex()}
                         if options.signed else None)
        self.slots: list[Slot] = []
        self.spawned = 0
        self.producer: ChaosProcess | None = None
        self.faults = Journal(directory / FAULTS)
        self.notes: list[str] = []
        #: Completes the hanging transactions a broker restart leaves (chaos/operator.py).
        self.operator = HangingOperator(
            str(broker.bootstrap_servers), options.kafka_config,
            [self.coordination_topic, self.topic] + ([self.output] if mode == "eos" else []),
            self.faults.write, self.notes)

    @property
    def bootstrap(self) -> str:
        return str(self.broker.bootstrap_servers)

    # -- processes ---------------------------------------------------------------------------

    def _launch(self, slot: Slot, client_id: str) -> None:
        """Start a consumer process in ``slot`` (see :meth:`_await_ready`)."""
        self.spawned += 1
        slot.client_id = client_id
        slot.incarnation = f"{client_id}-{self.spawned}"
        journal = self.directory / f"{WORKER_PREFIX}{slot.incarnation}.jsonl"
        settings = {
            "bootstrap": self.bootstrap, "group": self.group, "topic": self.topic,
            "coordination_topic": self.coordination_topic, "client": client_id,
            "inc": slot.incarnation, "mode": self.mode, "heartbeat_interval": self.hi,
            "lock_duration": self.options.lock_duration,
            "delivery_limit": self.options.delivery_limit, "work_ms": self.options.work_ms,
            "journal": str(journal), "fsync": self.options.fsync,
            "kafka_config": self.options.kafka_config, "auth_key": self.auth_key,
            "output": self.output, "fetcher": self.options.fetcher,
        }
        self.faults.write("spawn", inc=slot.incarnation, client=client_id, t=now())
        slot.process = ChaosProcess(slot.incarnation, "chaos.worker", settings)

    def _await_ready(self, slot: Slot) -> None:
        """Wait until the consumer in ``slot`` has opened its consumer."""
        assert slot.process is not None
        try:
            ready = slot.process.receive("ready", READY_TIMEOUT_S)
        except BenchError as exc:
            raise RunError(f"consumer {slot.incarnation} did not start: {exc}") from exc
        self.faults.write("ready", inc=slot.incarnation, pid=ready.get("pid"),
                          instance=ready.get("instance"), t=now())
        log.debug("consumer %s ready (pid %s)", slot.incarnation, ready.get("pid"))

    def _spawn(self, slot: Slot, client_id: str) -> None:
        self._launch(slot, client_id)
        self._await_ready(slot)

    def _tend(self) -> None:
        """Replace consumers that exited by themselves; fail if the producer did; complete
        hanging transactions after a broker fault."""
        self.operator.tend()
        for slot in self.slots:
            process = slot.process
            if process is None or process.alive() or process.expected_exit:
                continue
            tail = process.stderr_tail()
            self.faults.write("exit", inc=slot.incarnation, status=process.proc.returncode,
                              stderr=tail, t=now())
            log.warning("consumer %s exited with %s (%s); starting a replacement",
                        slot.incarnation, process.proc.returncode, tail)
            self.notes.append(f"consumer {slot.incarnation} exited with "
                              f"{process.proc.returncode}: {tail}")
            process.expected_exit = True
            self._spawn(slot, slot.client_id)
        if self.producer is not None and not self.producer.alive() \
                and self.producer.proc.returncode not in (0, None):
            raise RunError(f"the producer exited with {self.producer.proc.returncode}: "
                           f"{self.producer.stderr_tail()}")

    def _pause(self, seconds: float) -> None:
        """Let ``seconds`` pass (an injected duration or the gap before a fault), tending the
        consumers meanwhile."""
        deadline = time.monotonic() + seconds
        while True:
            self._tend()
            left = deadline - time.monotonic()
            if left <= 0:
                return
            time.sleep(min(TICK_S, left))

    def _running(self) -> list[Slot]:
        return [s for s in self.slots
                if s.process is not None and s.process.alive() and not s.process.stopped]

    # -- faults ------------------------------------------------------------------------------

    def plan(self) -> list[str]:
        """The run's faults, in order."""
        kinds = list(self.options.faults)
        plan = [kinds[i % len(kinds)] for i in range(self.options.faults_per_run)]
        self.rng.shuffle(plan)
        return plan

    def _kill(self) -> None:
        running = self._running()
        if not running:
            return
        slot = self.rng.choice(running)
        process = slot.process
        assert process is not None
        process.expected_exit = True
        process.signal(signal.SIGKILL)
        process.proc.wait(timeout=30)
        self.faults.write("kill", inc=slot.incarnation, t=now())
        delay = self.rng.uniform(0, 2) * self.hi
        same = {"same": True, "new": False}.get(self.options.restart_ids,
                                                self.rng.random() < 0.5)
        client_id = slot.client_id if same else f"c{slot.number}-r{self.spawned + 1}"
        log.info("  kill -9 %s; replacement %s in %.1f s", slot.incarnation, client_id, delay)
        self._pause(delay)
        self._spawn(slot, client_id)

    def _stop(self) -> None:
        running = self._running()
        if not running:
            return
        slot = self.rng.choice(running)
        process = slot.process
        assert process is not None
        duration = self.rng.uniform(2.5, 4.0) * self.hi
        log.info("  SIGSTOP %s for %.1f s", slot.incarnation, duration)
        process.stopped = True
        process.signal(signal.SIGSTOP)
        self.faults.write("stop", inc=slot.incarnation, seconds=duration, t=now())
        try:
            self._pause(duration)
        finally:
            process.signal(signal.SIGCONT)
            process.stopped = False
            self.faults.write("cont", inc=slot.incarnation, t=now())

    def _broker(self) -> None:
        down = self.rng.uniform(0, 2) * self.hi
        log.info("  kill -9 the broker; restart in %.1f s", down)
        self.broker.kill()
        self.faults.write("broker_kill", t=now())
        self._pause(down)
        began = time.monotonic()
        self.broker.start()
        self.faults.write("broker_up", t=now())
        self.operator.arm()
        log.info("  broker back after %.1f s of restart", time.monotonic() - began)

    def _inject(self, kind: str) -> None:
        {"kill": self._kill, "stop": self._stop, "broker": self._broker}[kind]()

    # -- completion --------------------------------------------------------------------------

    def _end_offsets(self) -> dict[int, int]:
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None)
        try:
            tps = [TopicPartition(self.topic, p) for p in range(self.options.partitions)]
            ends = consumer.end_offsets(tps)
            return {tp.partition: int(offset) for tp, offset in ends.items()}
        finally:
            consumer.close()

    def _complete(self, follower: Follower, ends: dict[int, int]) -> Callable[[], bool]:
        """The run's completion test (see the module docstring)."""
        if self.mode in ("alo", "key-shared"):
            tails: dict[Path, JournalTail] = {}
            done: set[tuple[int, int]] = set()
            total = sum(ends.values())

            def all_processed() -> bool:
                for path in self.directory.glob(f"{WORKER_PREFIX}*.jsonl"):
                    tail = tails.setdefault(path, JournalTail(path))
                    done.update((e["p"], e["o"]) for e in tail.poll() if e.get("e") == "x")
                return sum(1 for p, o in done if o < ends.get(p, 0)) >= total

            return all_processed

        if self.mode == "eos":
            # Every committed record's output is committed (the partitions may end with
            # transaction markers and aborted records, which no batch needs to pass).
            last: dict[int, int] = {}
            for row in self._dump_topic():
                last[row["p"]] = max(last.get(row["p"], -1), row["o"])
            ends = {p: o + 1 for p, o in last.items()}

        def log_at_end() -> bool:
            follower.poll()
            position = follower.spso if self.mode == "share" else follower.committed
            return all(position(p) >= end for p, end in ends.items())

        return log_at_end

    def _drain(self, follower: Follower) -> None:
        ends = self._end_offsets()
        complete = self._complete(follower, ends)
        deadline = time.monotonic() + self.options.drain_timeout
        began = time.monotonic()
        while not complete():
            self._tend()
            if time.monotonic() >= deadline:
                self.notes.append(f"not complete after {self.options.drain_timeout:.0f} s of "
                                  "draining")
                log.warning("run not complete after %.0f s; checking what there is",
                            self.options.drain_timeout)
                return
            time.sleep(TICK_S)
        log.info("  complete %.1f s after the last fault", time.monotonic() - began)

    # -- the whole run -----------------------------------------------------------------------

    def execute(self) -> RunResult:
        """Run, stop everything, dump the topics, check."""
        options = self.options
        from kafka import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=self.bootstrap)
        topics = [self.topic] + ([self.output] if self.mode == "eos" else [])
        replication = getattr(self.broker, "replication", 1)
        try:
            admin.create_topics({name: {"num_partitions": options.partitions,
                                        "replication_factor": replication}
                                 for name in topics},
                                wait_for_metadata=True)
        finally:
            admin.close()
        follower = Follower(self.bootstrap, self.coordination_topic, self.group, self.topic,
                            int(self.hi * 1000), self.auth_key)
        if hasattr(self.broker, "target"):  # a cluster: broker faults kill this leader
            self.broker.target = (self.coordination_topic, follower.home)
        meta = {"mode": self.mode, "group": self.group, "topic": self.topic,
                "coordination_topic": self.coordination_topic,
                "partitions": options.partitions, "coordination_partitions": follower.count,
                "heartbeat_interval_ms": int(self.hi * 1000),
                "delivery_limit": options.delivery_limit,
                "lock_ms": int(options.lock_duration * 1000), "records": options.records,
                "consumers": options.consumers, "keys": options.keys,
                "transactional": self.transactional, "auth_key": self.auth_key}
        (self.directory / META).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
        try:
            self.slots = [Slot(k, f"c{k}") for k in range(options.consumers)]
            for slot in self.slots:
                self._launch(slot, slot.client_id)
            for slot in self.slots:
                self._await_ready(slot)
            self.producer = ChaosProcess("producer", "chaos.producer", {
                "bootstrap": self.bootstrap, "topic": self.topic, "records": options.records,
                "rate": options.rate, "keys": options.keys,
                "transactional": self.transactional,
                "journal": str(self.directory / PRODUCER), "fsync": options.fsync})
            self.producer.receive("ready", READY_TIMEOUT_S)
            producing = options.records / options.rate
            plan = self.plan()
            log.info("run %d (%s): %d consumers, %d records in about %.0f s, faults %s",
                     self.index, self.mode, options.consumers, options.records, producing,
                     " ".join(plan) or "none")
            for kind in plan:
                self._pause(max(0.5 * self.hi, self.rng.uniform(0.5, 1.5)
                                * producing / (len(plan) + 1)))
                self._inject(kind)
            while self.producer.alive() and not self.producer.messages.qsize():
                self._pause(TICK_S)
            try:
                done = self.producer.receive("done", 300)
            except BenchError as exc:
                raise RunError(f"the producer failed: {exc}") from exc
            log.info("  producer done: %s records acknowledged", done.get("acked"))
            self._drain(follower)
            began = time.monotonic()
            self._stop_consumers()
            log.info("  consumers stopped in %.1f s", time.monotonic() - began)
            began = time.monotonic()
            write_jsonl(self.directory / TOPIC, self._dump_topic())
            if self.mode == "eos":
                write_jsonl(self.directory / OUTPUT, self._dump_output())
            write_jsonl(self.directory / COORDINATION, follower.dump())
            log.info("  topics dumped in %.1f s", time.monotonic() - began)
        finally:
            self._stop_consumers()
            if self.producer is not None:
                self.producer.stop(timeout_s=10)
            follower.close()
            self.faults.close()
        began = time.monotonic()
        result = check(load_run(self.directory))
        log.info("  checked in %.1f s", time.monotonic() - began)
        (self.directory / RESULT).write_text(json.dumps(result.to_dict(examples=50), indent=2)
                                             + "\n", encoding="utf-8")
        return result

    def _stop_consumers(self) -> None:
        processes = [s.process for s in self.slots if s.process is not None]
        for process in processes:
            process.expected_exit = True
            if process.stopped:
                process.signal(signal.SIGCONT)
                process.stopped = False
            if process.alive():
                with contextlib.suppress(BenchError):
                    process.send("stop")
        deadline = time.monotonic() + SLOW_STOP_S
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            if process.alive():
                log.warning("consumer %s has not stopped after %.0f s; its stacks go to "
                            "its .stacks file", process.name, SLOW_STOP_S)
                self.notes.append(f"consumer {process.name} took more than {SLOW_STOP_S:.0f} "
                                  "s to stop (stacks in its .stacks file)")
                process.signal(signal.SIGUSR1)
        for process in processes:
            process.stop(timeout_s=STOP_TIMEOUT_S)

    def _dump_output(self) -> list[dict[str, Any]]:
        """``eos`` runs: the input record each output record names (read_committed)."""
        return [{"p": int(p), "o": int(o)} for p, _, o in
                (dict(r.headers)["src"].decode().partition("/")
                 for r in self._read_committed(self.output))]

    def _dump_topic(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        for r in self._read_committed(self.topic):
            key = r.key.decode("utf-8", "replace") if r.key is not None else None
            rows.append({"p": r.partition, "o": r.offset, "k": key})
        return rows

    def _read_committed(self, topic: str) -> list[Any]:
        """Every record of ``topic`` up to its end now, read read_committed."""
        from kafka import KafkaConsumer, TopicPartition

        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None,
                                 enable_auto_commit=False, isolation_level="read_committed")
        found: list[Any] = []
        try:
            tps = [TopicPartition(topic, p) for p in range(self.options.partitions)]
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = consumer.end_offsets(tps)
            deadline = time.monotonic() + 120
            while any(consumer.position(tp) < ends[tp] for tp in tps):
                if time.monotonic() > deadline:
                    raise RunError(f"could not read {topic} to its end")
                for records in consumer.poll(timeout_ms=500).values():
                    found.extend(records)
        finally:
            consumer.close()
        return found


# -- the campaign ----------------------------------------------------------------------------


def run_campaign(options: Options, report: Callable[[RunOutcome], None] | None = None,
                 broker: Any = None) -> list[RunOutcome]:
    """Run the campaign: ``options.runs`` runs of every mode of ``options.modes``.

    Starts a broker of its own on a data directory inside the campaign directory unless
    ``broker`` (a started :class:`~marshal_py.devbroker.DevBroker` with an explicit data
    directory, which the campaign kills and restarts) is given. ``report`` is called after
    each run.
    """
    from marshal_py.devbroker import DevBroker

    base = options.directory or Path(tempfile.mkdtemp(prefix="chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    own_broker = broker is None
    outcomes: list[RunOutcome] = []
    if own_broker:
        if options.brokers > 1:
            from chaos.cluster import LeaderKiller

            broker = LeaderKiller(options.brokers, base / "cluster")
            log.info("starting a %d-node cluster (data in %s)", options.brokers,
                     base / "cluster")
        else:
            broker = DevBroker(data_dir=base / "broker", heap="512m")
            log.info("starting the broker (data in %s)", base / "broker")
        broker.start()
    try:
        number = 0
        for mode in options.modes:
            for _ in range(options.runs):
                number += 1
                seed = options.seed + number
                directory = base / f"run-{number:03d}-{mode}"
                directory.mkdir(parents=True, exist_ok=True)
                began = time.monotonic()
                run = Run(options, broker, mode, number, seed, directory)
                outcome = RunOutcome(number, mode, seed, None, directory, 0.0)
                try:
                    if not broker.is_running():
                        broker.start()
                    outcome.result = run.execute()
                except (RunError, BenchError, MarshalError, OSError) as exc:
                    outcome.error = str(exc)
                    log.error("run %d failed: %s", number, exc)
                except Exception as exc:  # a Kafka client error, or a bug: report, go on
                    outcome.error = f"{type(exc).__name__}: {exc}"
                    log.exception("run %d failed", number)
                if outcome.error is not None:
                    _keep_broker_logs(broker, directory)
                outcome.notes = run.notes
                outcome.seconds = time.monotonic() - began
                if (outcome.result is not None and outcome.result.ok and not outcome.notes
                        and not options.keep):
                    shutil.rmtree(directory, ignore_errors=True)
                    outcome.directory = None
                outcomes.append(outcome)
                if report is not None:
                    report(outcome)
    finally:
        if own_broker:
            broker.stop()
            shutil.rmtree(base / "broker", ignore_errors=True)
            shutil.rmtree(base / "cluster", ignore_errors=True)
            if options.directory is None and not any(base.iterdir()):
                base.rmdir()
    return outcomes


def _keep_broker_logs(broker: object, directory: Path) -> None:
    """Copy the broker's log (and the one its last restart set aside) into a failed run's
    directory: the broker's next restart would set it aside again and the evidence of why
    the run failed (say, a restart that never answered) would be gone."""
    log_path = getattr(broker, "log_path", None)
    if not isinstance(log_path, Path):
        return
    for source in (log_path, log_path.with_name(log_path.name + ".1")):
        try:
            shutil.copy(source, directory / source.name)
        except OSError:
            continue


# -- reporting -------------------------------------------------------------------------------


def _faults_text(faults: Counter[str]) -> str:
    return " ".join(f"{kind} {faults.get(kind, 0)}" for kind in FAULT_KINDS)


def run_line(outcome: RunOutcome, total_runs: int) -> str:
    """One run, as the campaign prints it."""
    head = f"run {outcome.index}/{total_runs} {outcome.mode} (seed {outcome.seed})"
    if outcome.result is None:
        return f"{head}: FAILED after {outcome.seconds:.0f} s: {outcome.error}"
    r = outcome.result
    extra = ""
    if r.mode == "amo":
        extra = f", unconsumed {r.unconsumed}"
    if r.mode == "share":
        extra = f", archived {r.archived}"
    text = (f"{head}: faults {_faults_text(r.faults)}; {r.records:,} records, lost {r.lost}, "
            f"duplicated {r.duplicated} ({r.redeliveries} re-deliveries){extra}, late "
            f"completions {r.late_completions}, consumer errors {r.consumer_errors}, "
            f"violations {len(r.violations)} ({outcome.seconds:.0f} s)")
    if r.resumed_after_broker_s:
        text += ("\n  hand-outs resumed " + ", ".join(f"{s:.1f}" for s in
                                                     r.resumed_after_broker_s)
                 + " s after the broker restarted (producer: " + ", ".join(
                     f"{s:.1f}" for s in r.producer_resumed_after_broker_s) + " s)")
    for kind, count in sorted(r.violation_counts().items()):
        example = next(v.detail for v in r.violations if v.kind == kind)
        text += f"\n  {kind}: {count}, e.g. {example}"
    for note in outcome.notes:
        text += f"\n  note: {note}"
    if outcome.directory is not None:
        text += f"\n  journals kept in {outcome.directory}"
    return text


def totals(outcomes: Sequence[RunOutcome]) -> dict[str, Any]:
    """The campaign's totals."""
    results = [o.result for o in outcomes if o.result is not None]
    faults: Counter[str] = Counter()
    for r in results:
        faults.update(r.faults)
    return {
        "runs": len(outcomes), "failed_runs": sum(1 for o in outcomes if o.result is None),
        "faults": {kind: faults.get(kind, 0) for kind in FAULT_KINDS},
        "records": sum(r.records for r in results), "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "redeliveries": sum(r.redeliveries for r in results),
        "archived": sum(r.archived for r in results),
        "unconsumed": sum(r.unconsumed for r in results),
        "late_completions": sum(r.late_completions for r in results),
        "consumer_errors": sum(r.consumer_errors for r in results),
        "violations": sum(len(r.violations) for r in results),
        "resumed_after_broker_s": sorted(round(x, 2) for r in results
                                         for x in r.resumed_after_broker_s),
        "seconds": round(sum(o.seconds for o in outcomes), 1),
    }


def total_line(total: dict[str, Any]) -> str:
    """The campaign's totals, as printed."""
    faults = total["faults"]
    resumed = total["resumed_after_broker_s"]
    return (f"total: {total['runs']} runs ({total['failed_runs']} failed), faults "
            f"{sum(faults.values())} ({' '.join(f'{k} {v}' for k, v in faults.items())}), "
            f"records {total['records']:,}, lost {total['lost']}, duplicated "
            f"{total['duplicated']} ({total['redeliveries']} re-deliveries), archived "
            f"{total['archived']}, unconsumed {total['unconsumed']}, late completions "
            f"{total['late_completions']}, consumer errors {total['consumer_errors']}, "
            f"violations {total['violations']} ({total['seconds']:.0f} s)"
            + (f"; hand-outs resumed {resumed[len(resumed) // 2]:.1f} s (median; max "
               f"{resumed[-1]:.1f} s) after a broker restart" if resumed else ""))


def exit_status(outcomes: Sequence[RunOutcome]) -> int:
    """0 clean, 1 a violation, 3 a run that could not be completed (and no violation)."""
    if any(o.result is not None and not o.result.ok for o in outcomes):
        return 1
    if any(o.result is None for o in outcomes):
        return 3
    return 0


def outcome_dict(outcome: RunOutcome) -> dict[str, Any]:
    """One run as JSON."""
    return {"run": outcome.index, "mode": outcome.mode, "seed": outcome.seed,
            "seconds": round(outcome.seconds, 1), "error": outcome.error or None,
            "notes": outcome.notes,
            "directory": None if outcome.directory is None else str(outcome.directory),
            "result": None if outcome.result is None else outcome.result.to_dict()}


# -- the command line ------------------------------------------------------------------------


class UsageError(Exception):
    """A bad argument: one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be at least 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be more than 0 seconds")
    return value


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if text.strip() == "all":
        return list(MODES)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(
            f"unknown mode {', '.join(bad) or text!r}; choose from {', '.join(MODES)} "
            "(comma-separated, or all)")
    return modes


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    bad = [k for k in kinds if k not in FAULT_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown fault kind {', '.join(bad)}; choose from {', '.join(FAULT_KINDS)}")
    return kinds


def _setting(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    parsed: Any = value
    for kind in (int, float):
        try:
            parsed = kind(value)
            break
        except ValueError:
            continue
    return key.strip(), parsed


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m chaos``."""
    p = _Parser(prog="bin/chaos", description="Fault campaigns against a real Kafka broker: "
                "consumers of one mode as separate processes, random kill -9, SIGSTOP and "
                "broker crashes, then an offline check of every guarantee of the mode. "
                "`bin/chaos check RUN_DIR` checks a kept run again.")
    p.add_argument("--mode", type=_modes, required=True,
                   help="alo, amo, eos, share, key-shared (comma-separated, or all)")
    p.add_argument("--runs", type=_positive_int, default=1, help="runs per mode (default 1)")
    p.add_argument("--seed", type=int, default=None,
                   help="campaign seed; run n uses seed + n (default: from the clock, printed)")
    p.add_argument("--consumers", type=_positive_int, default=3,
                   help="consumer processes (default 3)")
    p.add_argument("--records", type=_positive_int, default=5000,
                   help="records produced per run (default 5000)")
    p.add_argument("--rate", type=_positive_int, default=250,
                   help="records produced per second (default 250)")
    p.add_argument("--partitions", type=_positive_int, default=4,
                   help="partitions of the data topic (default 4)")
    p.add_argument("--keys", type=_positive_int, default=64, help="distinct keys (default 64)")
    p.add_argument("--heartbeat-interval", type=_seconds, default=1.0,
                   help="heartbeat interval of the group in seconds (default 1)")
    p.add_argument("--faults", type=_kinds, default=FAULT_KINDS,
                   help="fault kinds, comma-separated (default kill,stop,broker)")
    p.add_argument("--faults-per-run", type=_non_negative_int, default=4,
                   help="faults injected per run (default 4)")
    p.add_argument("--restart-ids", choices=RESTART_IDS, default="mixed",
                   help="client id of a killed consumer's replacement: the same, a new one, "
                        "or either at random (default mixed)")
    p.add_argument("--lock-duration", type=_seconds, default=3.0,
                   help="share mode: acquisition lock in seconds (default 3)")
    p.add_argument("--delivery-limit", type=int, default=10, choices=range(2, 11),
                   metavar="2..10", help="share mode: delivery limit (default 10)")
    p.add_argument("--work-ms", type=float, default=1.0,
                   help="simulated processing per record in ms (default 1)")
    p.add_argument("--drain-timeout", type=_seconds, default=120.0,
                   help="longest wait for a run to complete after its faults (default 120 s)")
    p.add_argument("--dir", type=Path, default=None,
                   help="campaign directory (default: a new one under the temp directory)")
    p.add_argument("--keep", action="store_true",
                   help="keep every run's journals (default: only runs with violations, "
                        "failures or notes)")
    p.add_argument("--fsync", action="store_true",
                   help="fsync every journal line (default: written to the OS only, which a "
                        "kill -9 of the writer cannot lose)")
    p.add_argument("--kafka-config", type=_setting, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="a kafka-python setting for the consumers' clients (Marshaler "
                        "kafka_config), e.g. reconnect_backoff_max_ms=1000; repeatable")
    p.add_argument("--brokers", type=int, default=1, choices=range(1, 6), metavar="1..5",
                   help="Kafka nodes (default 1); with 3, the broker fault kills the node "
                        "leading the run's coordination partition (a DevCluster)")
    p.add_argument("--signed", action="store_true",
                   help="authenticated groups: every coordination record signed with a key of "
                        "the run (a genuine record rejected is a violation)")
    p.add_argument("--fetcher", choices=("kafka-python", "confluent"), default="kafka-python",
                   help="how the consumers fetch data records (Marshaler fetcher; default "
                        "kafka-python)")
    p.add_argument("--json", action="store_true", help="print one JSON document at the end")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="more logging on stderr (-vv: debug)")
    return p


def check_main(argv: Sequence[str]) -> int:
    """``python -m chaos check RUN_DIR [--json]``: check a kept run directory again."""
    p = _Parser(prog="bin/chaos check", description="Check a kept run directory again.")
    p.add_argument("directory", type=Path)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        data = load_run(args.directory)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{args.directory} is not a complete run directory ({exc})") from exc
    result = check(data)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        outcome = RunOutcome(1, data.meta.mode, 0, result, None, 0.0)
        print(run_line(outcome, 1))
    return 0 if result.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list[:1] == ["check"]:
            return check_main(args_list[1:])
        args = parser().parse_args(args_list)
        if args.faults_per_run and not args.faults:
            raise UsageError("--faults names no fault kind")
        if args.work_ms < 0:
            raise UsageError("--work-ms must be at least 0")
    except UsageError as exc:
        print(f"chaos: error: {exc} (see bin/chaos --help)", file=sys.stderr)
        return 2
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose + 1, 2)]
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.verbose < 2:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        logging.getLogger("marshal_py").setLevel(logging.WARNING)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    options = Options(
        modes=args.mode, runs=args.runs, seed=seed, consumers=args.consumers,
        records=args.records, rate=args.rate, partitions=args.partitions, keys=args.keys,
        heartbeat_interval=args.heartbeat_interval, faults=args.faults,
        faults_per_run=args.faults_per_run, restart_ids=args.restart_ids,
        lock_duration=args.lock_duration, delivery_limit=args.delivery_limit,
        work_ms=args.work_ms, drain_timeout=args.drain_timeout, directory=args.dir,
        keep=args.keep, fsync=args.fsync, kafka_config=dict(args.kafka_config),
        signed=args.signed, brokers=args.brokers, fetcher=args.fetcher)
    total_runs = len(options.modes) * options.runs
    if not args.json:
        print(f"chaos: seed {seed}, {total_runs} run(s) of {', '.join(options.modes)}, "
              f"{options.consumers} consumers, {options.records:,} records at "
              f"{options.rate}/s, faults {','.join(options.faults)} x "
              f"{options.faults_per_run} per run, HI {options.heartbeat_interval:g} s, "
              f"fetcher {options.fetcher}",
              flush=True)

    def report(outcome: RunOutcome) -> None:
        if not args.json:
            print(run_line(outcome, total_runs), flush=True)

    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the processes and the broker.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        outcomes = run_campaign(options, report)
    except MarshalError as exc:
        print(f"chaos: error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("chaos: interrupted", file=sys.stderr)
        return 130
    total = totals(outcomes)
    if args.json:
        print(json.dumps({"seed": seed, "runs": [outcome_dict(o) for o in outcomes],
                          "total": total}, indent=2))
    else:
        print(total_line(total), flush=True)
    return exit_status(outcomes)
