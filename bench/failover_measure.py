"""Failover after kill -9 (:func:`failover_run`): three ``marshal consume --print`` members, the
one holding most killed, and when the survivors own and print its partitions (step 1 of
:mod:`bench.consumer`; the ``failover`` suite runs it too)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kafka import KafkaAdminClient, KafkaProducer

from bench.cli_process import CliProcess
from bench.common import (
    HI_S,
    MEMBERS,
    PARTITIONS,
    POLL_S,
    BenchError,
    create_topic,
    wait_for,
)
from marshal_py import Marshaler


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

        def survivors_own_all() -> bool:
            held = observer.holders(group, topic)
            return len(held) == PARTITIONS and set(held.values()) <= survivor_names

        owned_s, first_s, last_s = await_recovery(
            survivors, list(markers.values()), survivors_own_all, check_alive, killed_at,
            30 * scale, f"kill -9 of {victim.client_id}")
        return FailoverRun(
            split=split(holders, names),
            victim_held=len(dead),
            stale_s=stale_s,
            expired_s=expired_s,
            owned_s=owned_s,
            first_record_s=first_s,
            last_record_s=last_s,
        )


class Survivor(Protocol):
    """A member process that outlived the kill: its name, what it printed, its errors."""

    client_id: str

    def printed_at(self, value: str) -> float | None: ...

    def stderr_tail(self) -> str: ...


def await_recovery(survivors: Sequence[Survivor], markers: Sequence[str],
                   own_all: Callable[[], bool], check_alive: Callable[[], None],
                   killed_at: float, patience_s: float, what: str) -> tuple[float, float, float]:
    """Wait (at most ``patience_s`` after ``killed_at``) until ``own_all()`` says the survivors
    own every partition and one of them printed each marker; return the seconds from the kill
    to each: (owned, first marker printed, last marker printed)."""
    owned_at: float | None = None
    deadline = killed_at + patience_s
    while True:
        check_alive()
        if owned_at is None and own_all():
            owned_at = time.monotonic()
        printed = [min((t for t in (m.printed_at(v) for m in survivors) if t is not None),
                       default=None) for v in markers]
        times = [t for t in printed if t is not None]
        if owned_at is not None and len(times) == len(markers):
            return owned_at - killed_at, min(times) - killed_at, max(times) - killed_at
        if time.monotonic() >= deadline:
            raise BenchError(
                f"{patience_s:.0f} s after {what}: survivors own "
                f"{'all' if owned_at else 'not all'} partitions, printed "
                f"{len(times)}/{len(markers)} markers; "
                + "; ".join(f"{m.client_id}: {m.stderr_tail()}" for m in survivors))
        time.sleep(POLL_S)
