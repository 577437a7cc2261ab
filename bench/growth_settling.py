"""How a group settles on MemoryLog with a virtual clock (:class:`Settling`: members join a
topic, claim and balance until the ownership is quiet for two HI), and the costs measured
along the way: replay rate, state bytes, work per member and per partition (step 1 of
:mod:`bench.suite_growth`)."""

from __future__ import annotations

import gc
import heapq
import random
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.harness import BenchError
from bench.rationalizer import COORD
from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol.messages import CheckpointChunk
from marshal_py.replay import catch_up
from marshal_py.world import Outcome, Rationalizer, RationalizerConfig, Verdict
from tests.simulation.harness import MemoryTopic, SimClock

HI_MS = 10_000
TICK_MS = min(1_000, HI_MS // 5)  # Marshaler._tick_s at this HI
GROUP, TOPIC = "g", "orders"
QUIET_HI = 2
GIVE_UP_HI = 100
ACTIVITY = frozenset({Verdict.CLAIM_WON, Verdict.CLAIM_LOST, Verdict.CLAIM_RECLAIMED,
                      Verdict.RELEASED})


# -- 1. settling --------------------------------------------------------------------------------


@dataclass
class SettleRun:
    members: int
    partitions: int
    seed: int
    settled: bool
    settle_hi: float  # first start to the last claim or release
    owned_hi: float  # first start to every partition held
    records: int  # coordination records written up to the last claim or release
    claims: int  # ClaimingPartition won or lost (renewals not counted) up to then
    releases: int
    by_type: dict[str, int]
    sim_s: float  # wall time of the simulation
    ticks: int
    tick_us_settled: float  # mean CPU of one engine step once settled
    records_per_hi_settled: float  # the group's records per HI once settled
    apply_rate: float  # a fresh rationalizer replaying the run's whole log, records/s (CPU)
    state_bytes: int  # tracemalloc: what that rationalizer retains
    log_digest: list[bytes] = field(default_factory=list, repr=False)

    @property
    def member_ms_per_hi(self) -> float:
        """Coordination CPU of one settled member per HI: its ticks plus applying the
        group's records to its own rationalizer."""
        ticks = self.tick_us_settled * (HI_MS / TICK_MS) / 1000
        apply = self.records_per_hi_settled / self.apply_rate * 1000
        return ticks + apply

    @property
    def within_2hi(self) -> bool:
        """Settled, with the last claim or release within 2 HI of the first start."""
        return self.settled and self.settle_hi <= 2


class Settling:
    """M members of one group starting within the first HI on a P-partition topic."""

    def __init__(self, members: int, partitions: int, seed: int, shared: bool = True) -> None:
        self.members, self.partitions, self.shared = members, partitions, shared
        self.rng = random.Random(seed)
        self.seed = seed
        self.clock = VirtualClock()
        self.t0 = self.clock()
        self.log = MemoryLog(partitions=COORD, clock=self.clock)
        self.topic = MemoryTopic(TOPIC, partitions)
        self.view = Rationalizer(RationalizerConfig(COORD, HI_MS))  # shared, or the auditor
        self.view.observe(self._see)
        self.chunk_notes: list[Callable[[Outcome], None]] = []
        if shared:
            self.view.observe(self._chunk)
        self.kinds: Counter[str] = Counter()
        self.last_activity: tuple[int, int] | None = None  # (broker time, position)
        self.kinds_at_activity: Counter[str] = Counter()
        self.claims = self.releases = 0
        self.claims_at_activity = self.releases_at_activity = 0
        self.engines: dict[int, MemberEngine] = {}
        self.tick_log: list[tuple[int, float]] = []  # (virtual time, seconds) of every tick

    def _chunk(self, outcome: Outcome) -> None:
        if isinstance(outcome.message, CheckpointChunk):
            for note in self.chunk_notes:
                note(outcome)

    def _see(self, outcome: Outcome) -> None:
        kind = type(outcome.message).__name__ if outcome.message is not None else "undecoded"
        self.kinds[kind] += 1
        verdict = outcome.verdict
        if verdict in (Verdict.CLAIM_WON, Verdict.CLAIM_LOST, Verdict.CLAIM_RECLAIMED):
            self.claims += 1
        elif verdict is Verdict.RELEASED:
            self.releases += 1
        if verdict in ACTIVITY:
            self.last_activity = (outcome.record.timestamp_ms, outcome.record.position)
            self.kinds_at_activity = Counter(self.kinds)
            self.claims_at_activity, self.releases_at_activity = self.claims, self.releases

    def _engine(self, i: int, seed: int) -> MemberEngine:
        rationalizer = (self.view if self.shared
                        else Rationalizer(RationalizerConfig(COORD, HI_MS)))
        config = EngineConfig(group_id=GROUP, client_id=f"member-{i:05d}",
                              instance_id=f"{seed:08x}", topics=(TOPIC,),
                              heartbeat_interval_ms=HI_MS, offset_reset="earliest")
        engine = MemberEngine(config, self.log, rationalizer, self.topic, SimClock(self.clock),
                              random.Random(seed))
        if self.shared:
            # Each engine observes its rationalizer (for chunked checkpoints). Sharing one,
            # M observers would run on every record, M times what a member pays: hand them
            # only what they look at, the chunks.
            note = engine.channel._note_chunk
            rationalizer.unobserve(note)
            self.chunk_notes.append(note)
        engine.start()
        return engine

    def fair(self, now: int) -> tuple[bool, bool]:
        """(every partition held, every live member at its fair share) at ``now``."""
        held: Counter[str] = Counter()
        for claim in self.view.claims(GROUP, TOPIC):
            if claim.owner is not None and claim.is_held(now):
                held[claim.owner.client_id] += 1
        owned = sum(held.values()) == self.partitions
        live = self.view.members(GROUP, TOPIC, now)
        if len(live) != self.members:
            return owned, False
        base, extra = divmod(self.partitions, len(live))
        ordered = sorted(live, key=lambda o: (o.client_id, o.instance_id))
        return owned, all(held[m.client_id] == base + (1 if i < extra else 0)
                          for i, m in enumerate(ordered))

    def run(self) -> SettleRun:
        events: list[tuple[int, int, bool]] = []  # (time, member, started)
        seeds = [self.rng.getrandbits(32) for _ in range(self.members)]
        for i in range(self.members):
            heapq.heappush(events, (self.t0 + self.rng.randrange(HI_MS), i, False))
        owned_at: int | None = None
        settled = False
        next_check = self.t0 + TICK_MS
        began = time.perf_counter()
        while events:
            at, i, started = heapq.heappop(events)
            if at > self.clock():
                self.clock.advance(at - self.clock())
            if not started:
                self.engines[i] = self._engine(i, seeds[i])
            else:
                t = time.process_time()
                self.engines[i].tick()
                self.tick_log.append((at, time.process_time() - t))
            heapq.heappush(events, (self.clock() + TICK_MS + self.rng.randrange(20), i, True))
            now = self.clock()
            if now < next_check:
                continue
            next_check = now + TICK_MS
            catch_up(self.log, self.view, range(COORD))
            owned, fair = self.fair(now)
            if owned and owned_at is None:
                owned_at = now
            if (len(self.engines) == self.members and self.last_activity is not None
                    and now - self.last_activity[0] >= QUIET_HI * HI_MS and owned and fair):
                settled = True
                break
            if now - self.t0 > GIVE_UP_HI * HI_MS:
                break
        sim_s = time.perf_counter() - began
        last_ms, last_position = self.last_activity or (self.clock(), -1)
        after = [s for at, s in self.tick_log if at >= last_ms]
        quiet_hi = max(1e-9, (self.clock() - last_ms) / HI_MS)
        end = self.log.end_position(self._partition())
        values = [r.value for r in self.log.fetch({self._partition(): 0}, 0) if r.value]
        return SettleRun(
            members=self.members, partitions=self.partitions, seed=self.seed, settled=settled,
            settle_hi=(last_ms - self.t0) / HI_MS,
            owned_hi=((owned_at or self.clock()) - self.t0) / HI_MS,
            records=last_position + 1, claims=self.claims_at_activity,
            releases=self.releases_at_activity, by_type=dict(self.kinds_at_activity),
            sim_s=sim_s, ticks=len(self.tick_log),
            tick_us_settled=(sum(after) / len(after) * 1e6) if after else float("nan"),
            records_per_hi_settled=(end - last_position - 1) / quiet_hi,
            apply_rate=replay_rate(self.log, self._partition()),
            state_bytes=state_bytes(self.log, self._partition()),
            log_digest=values,
        )

    def _partition(self) -> int:
        from marshal_py.protocol import coordination_partition

        return coordination_partition(TOPIC, COORD)


def replay_rate(log: MemoryLog, partition: int) -> float:
    """Records per CPU second a fresh rationalizer applies replaying ``partition`` of
    ``log`` (best of 3: the replay is short and the machine is shared)."""
    records = log.fetch({partition: 0}, 0)
    best = 0.0
    for _ in range(3):
        r = Rationalizer(RationalizerConfig(COORD, HI_MS))
        started = time.process_time()
        r.apply_all(records)
        best = max(best, len(records) / max(1e-9, time.process_time() - started))
    return best


def state_bytes(log: MemoryLog, partition: int) -> int:
    """Bytes a fresh rationalizer retains (``tracemalloc``) after replaying ``partition`` of
    ``log``: the world's state, not the records."""
    records = log.fetch({partition: 0}, 0)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        r = Rationalizer(RationalizerConfig(COORD, HI_MS))
        r.apply_all(records)
        gc.collect()
        retained = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    del r
    return retained


def per_member_and_partition(members: Sequence[int], partitions: int,
                             states: Sequence[float]) -> tuple[float, float]:
    """(bytes per member, bytes per partition): the least-squares slope of the state
    against M, and the intercept (the state with no member) over P."""
    if len(members) < 2:
        return float("nan"), float("nan")
    mx = sum(members) / len(members)
    my = sum(states) / len(states)
    sxx = sum((m - mx) ** 2 for m in members)
    slope = sum((m - mx) * (y - my) for m, y in zip(members, states, strict=True)) / sxx
    return slope, (my - slope * mx) / partitions


def check_shared_view(partitions: int, seed: int) -> None:
    """One rationalizer shared by every engine gives the same log as one each (10 members)."""
    shared = Settling(10, partitions, seed, shared=True).run()
    own = Settling(10, partitions, seed, shared=False).run()
    if shared.log_digest != own.log_digest:
        raise BenchError(f"the shared-rationalizer simulation wrote a different log than one "
                         f"rationalizer per member (10 members, {partitions} partitions, seed "
                         f"{seed}): {len(shared.log_digest)} vs {len(own.log_digest)} records")
