"""A fast, seeded generator of realistic coordination traffic, for auditing at scale.

:func:`generate` yields ``(coordination_partition, timestamp_ms, value)`` in time order: the
records members following PROTOCOL.md section 7 would write — member heartbeats, claims and
lost races, heartbeats with growing offsets, at-most-once ``ClaimingMessages``, renewals,
releases on leave, takeovers after a crash (once the owner is stale for 2 HI), same-client
restarts that reclaim after 1.25 HI, share groups (initialize, acquire, accept / release /
reject, renew, locks left to elapse) — plus a little garbage and, rarely, a faulty client
(a zombie heartbeat, a restart that reclaims at once, an AMO confirmation below the floor)
so that the audit has violations to find. The generator keeps its own rough model of who
owns what; the rationalizer decides what the records mean.

Time is virtual: timestamps start at ``start_ms`` and advance with the simulated members, so
a generated log must be written to a topic with ``message.timestamp.type=CreateTime`` and the
records' timestamps set explicitly (:func:`produce`); a ``LogAppendTime`` topic would stamp
the whole log within seconds and every claim would look fresh. Writing a generated log to
Kafka (:func:`create_topic`, :func:`produce`) is in :mod:`~marshal_py.audit.generated_topic`.
"""

from __future__ import annotations

import heapq
import multiprocessing
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from marshal_py.audit.generated_topic import GeneratedRecord, create_topic, produce
from marshal_py.protocol.codec import encode
from marshal_py.protocol.messages import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    InitializingSharePartition,
    MemberHeartbeat,
    Message,
    ReleasingPartition,
    RenewingLocks,
)
from marshal_py.protocol.placement import coordination_partition

__all__ = ["DEFAULT_START_MS", "GeneratedRecord", "create_topic", "generate",
           "generate_in_background", "produce"]

DEFAULT_START_MS = 1_700_000_000_000


@dataclass
class _Client:
    name: str
    instance: str
    alive: bool = True
    restarts: int = 0


@dataclass
class _Part:
    owner: int | None = None  # client index
    last_hb: int = 0
    committed: int = 0
    amo: int = -1


@dataclass
class _World:
    group: str
    topic: str
    cp: int
    partitions: int
    amo: bool
    share: bool
    clients: list[_Client] = field(default_factory=list)
    parts: list[_Part] = field(default_factory=list)
    speo: list[int] = field(default_factory=list)
    redeliver: list[list[tuple[int, int, int]]] = field(default_factory=list)
    initialized: set[int] = field(default_factory=set)


class _Generator:
    def __init__(self, seed: int, coordination_partitions: int, hi_ms: int,
                 start_ms: int, worlds: int, garbage: float, faults: float) -> None:
        self.rng = random.Random(seed)
        self.hi = hi_ms
        self.now = start_ms
        self.garbage = garbage
        self.faults = faults
        self.cps = coordination_partitions
        self.heap: list[tuple[int, int, str, int, int, Any]] = []
        self.seq = 0
        self.out: list[GeneratedRecord] = []
        self.worlds: list[_World] = []
        for w in range(worlds):
            topic = f"topic-{w % max(1, worlds // 2)}"
            share = w % 5 == 4
            world = _World(
                group=f"team-{w}.{'queue' if share else 'job'}", topic=topic,
                cp=coordination_partition(topic, coordination_partitions),
                partitions=self.rng.choice((4, 8, 12, 24)) if not share else 3,
                amo=(w % 3 == 1), share=share)
            for c in range(self.rng.randint(2, 5)):
                world.clients.append(_Client(f"worker-{c}", self._instance()))
            world.parts = [_Part() for _ in range(world.partitions)]
            world.speo = [0] * world.partitions
            world.redeliver = [[] for _ in range(world.partitions)]
            self.worlds.append(world)
            for c in range(len(world.clients)):
                self.at(self.rng.randint(0, self.hi), "join", w, c)

    def _instance(self) -> str:
        return f"{self.rng.getrandbits(32):08x}"

    def at(self, when: int, kind: str, world: int, client: int, arg: Any = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (when, self.seq, kind, world, client, arg))

    def emit(self, world: _World, message: Message) -> None:
        self.out.append((world.cp, self.now, encode(message)))
        if self.garbage and self.rng.random() < self.garbage:
            junk = self.rng.choice((b"\x00\xffnot marshal", b"Heartbeat/9/0/a/b/c/d/0/1",
                                    b"ClaimingEverything/1/0/a/b/c/d/0", b"Heartbeat/1/x"))
            self.out.append((self.rng.randrange(self.cps), self.now, junk))

    def base(self, world: _World, c: int, partition: int) -> tuple[int, str, str, str, str, int]:
        client = world.clients[c]
        return (self.now // 1000, client.instance, client.name, world.group, world.topic,
                partition)

    def jitter(self, low: float, high: float) -> int:
        return int(self.hi * self.rng.uniform(low, high))

    def step(self) -> None:
        when, _, kind, w, c, arg = heapq.heappop(self.heap)
        self.now = max(self.now, when)
        world = self.worlds[w]
        client = world.clients[c]
        getattr(self, f"_on_{kind}")(world, w, c, client, arg)

    # -- exclusive members -------------------------------------------------------------------

    def _on_join(self, world: _World, w: int, c: int, client: _Client, arg: int) -> None:
        client.alive = True
        self.emit(world, MemberHeartbeat(self.now // 1000, client.instance, client.name,
                                         world.group, world.topic, 1))
        self.at(self.now + self.jitter(0.6, 0.8), "member", w, c, client.restarts)
        if world.share:
            for p in range(world.partitions):
                if p not in world.initialized:
                    self.emit(world, InitializingSharePartition(
                        *self.base(world, c, p), 0, 5, 2000))
                    world.initialized.add(p)
            for _ in range(2):  # two acquisitions in flight (pre-claiming)
                self.at(self.now + self.jitter(0.05, 0.2), "acquire", w, c, client.restarts)
        else:
            self.at(self.now + self.jitter(0.05, 0.3), "claim", w, c, client.restarts)
        if self.rng.random() < 0.5:
            self.at(self.now + self.jitter(20, 200), "crash", w, c, client.restarts)
        else:
            self.at(self.now + self.jitter(20, 200), "leave", w, c, client.restarts)

    def _live(self, client: _Client, epoch: int) -> bool:
        return client.alive and client.restarts == epoch

    def _on_member(self, world: _World, w: int, c: int, client: _Client, epoch: int) -> None:
        if not self._live(client, epoch):
            return
        self.emit(world, MemberHeartbeat(self.now // 1000, client.instance, client.name,
                                         world.group, world.topic, 1))
        self.at(self.now + self.jitter(0.6, 0.8), "member", w, c, epoch)

    def _on_claim(self, world: _World, w: int, c: int, client: _Client, epoch: int) -> None:
        if not self._live(client, epoch):
            return
        live = sum(1 for x in world.clients if x.alive)
        target = -(-world.partitions // max(1, live))
        held = [p for p, part in enumerate(world.parts) if part.owner == c]
        start = self.rng.randrange(world.partitions)
        for i in range(world.partitions):
            if len(held) >= target:
                break
            p = (start + i) % world.partitions
            part = world.parts[p]
            free = part.owner is None or self.now - part.last_hb > 2 * self.hi
            if part.owner == c or not free:
                continue
            self.emit(world, ClaimingPartition(*self.base(world, c, p)))
            part.owner, part.last_hb = c, self.now
            held.append(p)
            self.at(self.now + self.jitter(0.05, 0.2), "hb", w, c, p + 1_000 * epoch)
            if self.rng.random() < 0.2:  # a racing member loses
                other = self.rng.randrange(len(world.clients))
                if other != c and world.clients[other].alive:
                    self.emit(world, ClaimingPartition(*self.base(world, other, p)))
        self.at(self.now + self.jitter(0.2, 0.3), "claim", w, c, epoch)

    def _on_hb(self, world: _World, w: int, c: int, client: _Client, arg: int) -> None:
        p, epoch = arg % 1_000, arg // 1_000
        part = world.parts[p]
        if not self._live(client, epoch) or part.owner != c:
            if (self.faults and part.owner not in (None, c) and client.alive
                    and self.rng.random() < self.faults):
                # A zombie that missed its loss heartbeats: not_owner.
                self.emit(world, Heartbeat(*self.base(world, c, p), part.committed))
            return
        if world.amo:
            batch = self.rng.randint(20, 200)
            first = max(part.committed, part.amo + 1)
            proposed = first + batch - 1
            if self.faults and self.rng.random() < self.faults and part.amo > 10:
                proposed = part.amo - 5  # a faulty client re-confirms below the floor
            self.emit(world, ClaimingMessages(*self.base(world, c, p), proposed))
            part.amo = max(part.amo, proposed)
            part.committed = max(part.committed, proposed + 1)
        else:
            part.committed += self.rng.randint(0, 500)
        self.emit(world, Heartbeat(*self.base(world, c, p), part.committed))
        part.last_hb = self.now
        if self.rng.random() < 0.01:
            self.emit(world, ClaimingPartition(*self.base(world, c, p)))  # a renewal
        self.at(self.now + self.jitter(0.6, 0.8), "hb", w, c, arg)

    def _on_crash(self, world: _World, w: int, c: int, client: _Client, epoch: int) -> None:
        if not self._live(client, epoch):
            return
        client.alive = False
        if self.rng.random() < 0.5:
            # Restarted with the same client id: joins, waits 1.25 HI, reclaims what it held.
            delay = self.jitter(0.1, 3)
            self.at(self.now + delay, "restart", w, c, epoch)
        else:
            self.at(self.now + self.jitter(5, 30), "rejoin", w, c, epoch)

    def _on_restart(self, world: _World, w: int, c: int, client: _Client, epoch: int) -> None:
        client.instance = self._instance()
        client.restarts += 1
        self._on_join(world, w, c, client, 0)
        wait = self.jitter(1.25, 1.3)
        if self.faults and self.rng.random() < self.faults * 50:
            wait = 0  # a faulty restart reclaims while the old instance may be alive
        self.at(self.now + wait, "reclaim", w, c, client.restarts)

    def _on_reclaim(self, world: _World, w: int, c: int, client: _Client, epoch: int) -> None:
        if not self._live(client, epoch):
            return
        for p, part in enumerate(world.parts):
            if part.owner == c:
                self.emit(world, ClaimingPartition(*self.base(world, c, p)))
                part.last_hb = self.now
                self.at(self.now + self.jitter(0.05, 0.2), "hb", w, c, p + 1_000 * epoch)

    def _on_rejoin(self, world: _World, w: int, c: int, client: _Client, epoch: int) -> None:
        client.instance = self._instance()
        client.restarts += 1
        self._on_join(world, w, c, client, 0)

    def _on_leave(self, world: _World, w: int, c: int, client: _Client, epoch: int) -> None:
        if not self._live(client, epoch):
            return
        for p, part in enumerate(world.parts):
            if part.owner == c and not world.share:
                self.emit(world, ReleasingPartition(*self.base(world, c, p), part.committed))
                part.owner = None
                if world.amo and part.amo >= part.committed:
                    part.amo = part.committed - 1
        self.emit(world, MemberHeartbeat(self.now // 1000, client.instance, client.name,
                                         world.group, world.topic, 0))
        client.alive = False
        self.at(self.now + self.jitter(2, 20), "rejoin", w, c, epoch)

    # -- share members -----------------------------------------------------------------------

    def _on_acquire(self, world: _World, w: int, c: int, client: _Client, epoch: int) -> None:
        if not self._live(client, epoch):
            return
        p = self.rng.randrange(world.partitions)
        redo = world.redeliver[p]
        ready = next((k for k, entry in enumerate(redo) if entry[0] < self.now), None)
        if ready is not None:
            _, first, last = redo.pop(ready)
        else:
            first = world.speo[p]
            last = first + self.rng.randint(5, 30) - 1
            world.speo[p] = last + 1
        self.emit(world, AcquiringRecords(*self.base(world, c, p), _text(first, last), 30_000))
        # Processing time: mostly well inside the 30 s lock, sometimes not.
        self.at(self.now + int(min(self.rng.expovariate(1 / 3_000), 45_000)), "ack", w, c,
                (epoch, p, first, last, self.now + 30_000))

    def _on_ack(self, world: _World, w: int, c: int, client: _Client,
                arg: tuple[int, int, int, int, int]) -> None:
        epoch, p, first, last, expiry = arg
        if not self._live(client, epoch):
            # Crashed or left: the locks elapse and someone else acquires them again.
            world.redeliver[p].append((expiry, first, last))
            return
        if self.now >= expiry:
            # Too slow: the lock elapsed, the member drops the batch, others get it again.
            world.redeliver[p].append((self.now, first, last))
            self.at(self.now + self.rng.randint(10, 2_000), "acquire", w, c, epoch)
            return
        roll = self.rng.random()
        if roll < 0.05:
            self.emit(world, RenewingLocks(*self.base(world, c, p), _text(first, last), 30_000))
            self.at(self.now + self.rng.randint(100, 20_000), "ack", w, c,
                    (epoch, p, first, last, self.now + 30_000))
            return
        kind = "accept" if roll < 0.88 else "release" if roll < 0.98 else "reject"
        self.emit(world, AcknowledgingRecords(*self.base(world, c, p), _text(first, last), kind))
        if kind == "release":
            world.redeliver[p].append((self.now, first, last))
        self.at(self.now + self.rng.randint(10, 2_000), "acquire", w, c, epoch)


def _text(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


def generate(records: int, *, seed: int = 1, coordination_partitions: int = 4,
             heartbeat_interval_ms: int = 10_000, start_ms: int = DEFAULT_START_MS,
             worlds: int = 12, garbage: float = 0.002,
             faults: float = 0.002) -> Iterator[GeneratedRecord]:
    """``records`` coordination records ``(coordination_partition, timestamp_ms, value)``
    in time order (timestamps never decrease, so every coordination partition is ordered).

    ``worlds`` (group, topic) pairs are simulated, every fifth a share group, every third
    exclusive one at most once; ``garbage`` and ``faults`` are per-record probabilities of
    undecodable records and faulty clients.
    """
    gen = _Generator(seed, coordination_partitions, heartbeat_interval_ms, start_ms, worlds,
                     garbage, faults)
    produced = 0
    while produced < records:
        gen.step()
        if gen.out:
            take = gen.out[: records - produced]
            gen.out.clear()
            produced += len(take)
            yield from take


def generate_in_background(records: int, *, chunk: int = 10_000,
                           **options: Any) -> Iterator[GeneratedRecord]:
    """:func:`generate` run in a child process, handed over in chunks: the same records in the
    same order, while this process spends its time producing them.

    Generating costs about as much CPU per record as kafka-python's ``send``, so on two cores
    generating beside producing roughly halves the time to fill a topic. ``options`` are
    :func:`generate`'s. Raises :class:`RuntimeError` if the child fails or dies.
    """
    context = multiprocessing.get_context("spawn")  # no fork of a process holding threads
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_generate_into, args=(sender, records, chunk, options),
                            name="marshal-audit-generate", daemon=True)
    child.start()
    sender.close()
    try:
        while True:
            try:
                item = receiver.recv()
            except EOFError:
                raise RuntimeError(
                    f"the generator process exited early (exit code {child.exitcode})"
                ) from None
            if item is None:
                return
            if isinstance(item, str):
                raise RuntimeError(item)
            yield from item
    finally:
        receiver.close()
        if child.is_alive():
            child.terminate()
        child.join()


def _generate_into(sender: Connection, records: int, chunk: int,
                   options: dict[str, Any]) -> None:
    """The child's side of :func:`generate_in_background`: chunks, then None (or an error)."""
    try:
        batch: list[GeneratedRecord] = []
        for record in generate(records, **options):
            batch.append(record)
            if len(batch) >= chunk:
                sender.send(batch)
                batch = []
        if batch:
            sender.send(batch)
        sender.send(None)
    except (BrokenPipeError, KeyboardInterrupt):
        pass  # the reader stopped early
    except Exception as exc:  # reported to the reader, which raises it
        sender.send(f"generating records failed: {exc!r}")
    finally:
        sender.close()
