"""One run of a campaign (:class:`Run`): its consumer processes, its faults, its completion,
its dumps and its check. :mod:`chaos.runner` describes the steps."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import random
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common import BenchError
from bench.worker_process import WorkerProcess
from chaos.checker import check
from chaos.follower import Follower
from chaos.journal import Journal, JournalTail, now, write_jsonl
from chaos.operator import HangingOperator
from chaos.run_data import RunResult
from chaos.rundir import (
    COORDINATION,
    FAULTS,
    META,
    OUTPUT,
    PRODUCER,
    RESULT,
    TOPIC,
    WORKER_PREFIX,
    load_run,
)
from chaos.settings import (
    READY_TIMEOUT_S,
    SLOW_STOP_S,
    STOP_TIMEOUT_S,
    TICK_S,
    TRANSACTIONAL_MODES,
    Options,
    RunError,
)
from chaos.topics import end_offsets, read_output, read_topic

log = logging.getLogger("chaos")


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


class Run:
    """One run of a campaign (see :mod:`chaos.runner`)."""

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

    def _victim(self) -> tuple[Slot, ChaosProcess] | None:
        """A running consumer chosen by the run's generator, None when none runs."""
        running = self._running()
        if not running:
            return None
        slot = self.rng.choice(running)
        assert slot.process is not None
        return slot, slot.process

    def _kill(self) -> None:
        victim = self._victim()
        if victim is None:
            return
        slot, process = victim
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
        victim = self._victim()
        if victim is None:
            return
        slot, process = victim
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

    def _complete(self, follower: Follower, ends: dict[int, int]) -> Callable[[], bool]:
        """The run's completion test (see :mod:`chaos.runner`)."""
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
            for row in read_topic(self.bootstrap, self.topic, self.options.partitions):
                last[row["p"]] = max(last.get(row["p"], -1), row["o"])
            ends = {p: o + 1 for p, o in last.items()}

        def log_at_end() -> bool:
            follower.poll()
            position = follower.spso if self.mode == "share" else follower.committed
            return all(position(p) >= end for p, end in ends.items())

        return log_at_end

    def _drain(self, follower: Follower) -> None:
        ends = end_offsets(self.bootstrap, self.topic, self.options.partitions)
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
            partitions = options.partitions
            write_jsonl(self.directory / TOPIC, read_topic(self.bootstrap, self.topic, partitions))
            if self.mode == "eos":
                write_jsonl(self.directory / OUTPUT,
                            read_output(self.bootstrap, self.output, partitions))
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
