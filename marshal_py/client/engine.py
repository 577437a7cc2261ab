"""MemberEngine: the coordination logic of one group member, single-threaded and steppable.

The engine claims partitions, heartbeats, renews, balances, confirms at-most-once batches
and releases, all through a :class:`~marshal_py.log.base.CoordinationLog`. It never starts a
thread and never reads a clock or a random source of its own: the caller passes a clock and a
``random.Random``. The threaded :class:`~marshal_py.client.consumer.Consumer` drives it against
Kafka; the simulation tests drive it against a MemoryLog and a virtual clock.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass, field

from marshal_py.client.engine_types import Balance, EngineClock, Mode, PartitionSource
from marshal_py.client.member_base import GroupMember, MemberConfig
from marshal_py.client.offsets import CommitTracker
from marshal_py.errors import ConfigurationError, CoordinationLogLostError, MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    Message,
    ReleasingPartition,
)
from marshal_py.world import Owner, PartitionClaim, Rationalizer

log = logging.getLogger(__name__)

TP = tuple[str, int]


@dataclass(frozen=True)
class EngineConfig(MemberConfig):
    """Settings of one exclusive-mode member (on top of :class:`MemberConfig`)."""

    mode: Mode = "alo"
    balance: Balance = "fair"
    max_claims: int | None = None
    #: Greedy members: release a partition whose lag exceeds this many records, when another
    #: live member holds fewer partitions and so could take it (None: never).
    release_lag: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in ("alo", "amo"):
            raise ConfigurationError(f"mode must be 'alo' or 'amo', not {self.mode!r}")
        if self.balance not in ("fair", "greedy"):
            raise ConfigurationError(f"balance must be 'fair' or 'greedy', not {self.balance!r}")
        if self.max_claims is not None and self.max_claims < 1:
            raise ConfigurationError("max_claims must be >= 1 (or None for no limit)")
        if self.release_lag is not None and self.release_lag < 1:
            raise ConfigurationError("release_lag must be >= 1 record (or None)")


@dataclass
class Holding:
    """A partition this member owns."""

    topic: str
    partition: int
    epoch: int
    tracker: CommitTracker
    #: Broker time of our last heartbeat seen applied in the log, plus one HI. Records are
    #: delivered only before it: others may take the partition 2 HI after that heartbeat.
    lease_until_ms: int
    next_heartbeat_ms: int
    last_renewal_ms: int
    heartbeat_failures: int = 0


@dataclass
class EngineStats:
    """Counters a caller can show or assert on."""

    claims_proposed: int = 0
    claims_won: int = 0
    claims_lost: int = 0
    lost_after_winning: int = 0
    released: int = 0
    heartbeats: int = 0
    heartbeat_failures: int = 0
    amo_batches_confirmed: int = 0
    amo_batches_refused: int = 0
    claim_latencies_ms: list[int] = field(default_factory=list)


class MemberEngine(GroupMember[EngineConfig]):
    """One member of a group: claims, heartbeats, balances, confirms and releases.

    Call :meth:`start` once, then :meth:`tick` regularly (several times per heartbeat
    interval), :meth:`accept` for every fetched batch, :meth:`commit` for processed records,
    and :meth:`close` at the end. Not thread-safe: the caller serializes calls.
    """

    def __init__(self, config: EngineConfig, log_: CoordinationLog, rationalizer: Rationalizer,
                 source: PartitionSource, clock: EngineClock, rng: random.Random) -> None:
        super().__init__(config, log_, rationalizer, source, clock, rng)
        self.holdings: dict[TP, Holding] = {}
        self.stats = EngineStats()
        self._epoch = 0
        self._reclaim_after_ms: int | None = None
        self._last_balance_release_ms: dict[str, int] = {}

    def _drop_all(self) -> None:
        self.holdings.clear()

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Replay the coordination log, announce this member, and look for a predecessor."""
        self._join()
        assert self._joined_ms is not None
        if self._predecessor_claims():
            # A previous process of this client may still hold claims. If it is dead, it
            # writes nothing more; if it is alive, it heartbeats within one interval.
            self._reclaim_after_ms = self._joined_ms + self.hi + self.hi // 4
            log.info("%s: waiting one heartbeat interval before reclaiming partitions held "
                     "under client id %s", self.config.group_id, self.config.client_id)
        self._catch_up()

    def close(self) -> None:
        """Release every partition with its committed offset and leave the group."""
        if self._closed:
            return
        self._closed = True
        for key in list(self.holdings):
            holding = self.holdings.pop(key)
            try:
                self._append(self._release_message(holding))
                self.stats.released += 1
            except MarshalError as exc:
                log.warning("could not release %s/%d: %s", key[0], key[1], exc)
        self._leave()

    # -- the periodic step -------------------------------------------------------------------

    def tick(self) -> None:
        """Catch up, drop lost claims, heartbeat, renew, balance and claim."""
        if self._closed:
            return
        caught_up = self._refresh()
        sent = self._send_heartbeats(self.clock.now_ms())
        if sent and caught_up:
            caught_up = self._refresh()  # read our heartbeats back: that renews the leases
        self._expire_leases(self.clock.now_ms())
        if not caught_up:
            return
        self._require_keys_if_signed()
        self._announce_if_due(self.clock.now_ms())
        for topic in self.config.topics:
            self._balance(topic)
        self.channel.maybe_checkpoint(self.me)

    def _refresh(self) -> bool:
        """Catch up with the log and update every holding from it; False if the log failed."""
        try:
            self._catch_up()
        except (CoordinationLogLostError, ConfigurationError):
            raise  # the log was recreated, or credentials or ACLs were refused: fatal
        except MarshalError as exc:
            log.warning("cannot read the coordination log: %s", exc)
            return False
        for key, holding in list(self.holdings.items()):
            claim = self._claim(*key)
            if claim.owner != self.me:
                del self.holdings[key]
                self.stats.lost_after_winning += 1
                log.warning("lost the claim on %s/%d to %s; stopped delivering it",
                            key[0], key[1], claim.owner)
            elif claim.last_heartbeat_ms is not None:
                holding.lease_until_ms = claim.last_heartbeat_ms + self.hi
        return True

    def _send_heartbeats(self, now: int) -> bool:
        sent = False
        for holding in list(self.holdings.values()):
            renewal_due = now - holding.last_renewal_ms >= self.config.renew_interval_ms
            if renewal_due and self._try_append(
                self._partition_message(ClaimingPartition, holding)
            ):
                holding.last_renewal_ms = now
                holding.next_heartbeat_ms = now  # a renewal is always followed by one
            if now >= holding.next_heartbeat_ms:
                sent = self._heartbeat(holding) or sent
        return sent

    def _expire_leases(self, now: int) -> None:
        for key, holding in list(self.holdings.items()):
            if now >= holding.lease_until_ms:
                # No heartbeat of ours confirmed for one HI: others may take the partition
                # at 2 HI, so we stop now and give it up.
                del self.holdings[key]
                log.warning("no heartbeat of %s/%d confirmed for one interval; released it",
                            key[0], key[1])
                if self._try_append(self._release_message(holding)):
                    self.stats.released += 1

    def _heartbeat(self, holding: Holding) -> bool:
        now = self.clock.now_ms()
        ok = self._try_append(
            self._partition_message(Heartbeat, holding, holding.tracker.committed)
        )
        if ok:
            holding.next_heartbeat_ms = now + self._jittered()
            holding.heartbeat_failures = 0
            self.stats.heartbeats += 1
        else:
            holding.heartbeat_failures += 1
            self.stats.heartbeat_failures += 1
            holding.next_heartbeat_ms = now + min(1000, self.hi // 10)
        return ok

    # -- balancing and claiming ---------------------------------------------------------------

    def _held_by_client(self, topic: str, count: int, now: int) -> dict[str, int]:
        """How many partitions of ``topic`` each client id holds (fresh or unknown)."""
        held: dict[str, int] = {}
        for claim in self.rationalizer.claims(self.config.group_id, topic):
            if claim.owner is not None and claim.is_held(now) and claim.key.partition < count:
                held[claim.owner.client_id] = held.get(claim.owner.client_id, 0) + 1
        return held

    def _capacity(self, topic: str, member: Owner) -> int | None:
        if member == self.me:
            return self.config.max_claims
        return self.rationalizer.member_capacity(self.config.group_id, topic, member)

    def target(self, topic: str, partitions: int, now: int) -> int:
        """How many partitions of ``topic`` this member aims to hold."""
        cap = self.config.max_claims if self.config.max_claims is not None else partitions
        if self.config.balance == "greedy":
            return min(cap, partitions)
        return self._fair_targets(topic, partitions, now)[self.me.client_id]

    def _fair_targets(self, topic: str, partitions: int, now: int) -> dict[str, int]:
        """Fair shares by client id: equal shares, the first ``N mod M`` one more, and what
        a member with a smaller announced capacity cannot take goes to the others."""
        members = self._members(topic, now)
        targets: dict[str, int] = {}
        remaining = partitions
        while members:
            base, extra = divmod(remaining, len(members))
            share = {m: base + (1 if i < extra else 0) for i, m in enumerate(members)}
            capped = [m for m in members
                      if (c := self._capacity(topic, m)) is not None and c < share[m]]
            if not capped:
                targets.update((m.client_id, share[m]) for m in members)
                break
            for m in capped:
                cap = self._capacity(topic, m)
                assert cap is not None
                targets[m.client_id] = cap
                remaining -= cap
                members.remove(m)
        return targets

    def _balance(self, topic: str) -> None:
        count = self.source.partition_count(topic)
        if count is None or count == 0:
            return
        now = self.clock.now_ms()
        self._reclaim_from_predecessor(topic, count, now)
        mine = sorted(p for (t, p) in self.holdings if t == topic)
        target = self.target(topic, count, now)
        if len(mine) < target:
            self._claim_some(topic, count, target - len(mine), now)
        elif len(mine) > target and self.config.balance == "fair":
            self._release_for_balance(topic, count, mine, now)
        elif self.config.release_lag is not None and len(mine) > 1:
            self._release_when_behind(topic, count, mine, now)

    def _reclaim_from_predecessor(self, topic: str, count: int, now: int) -> None:
        """Take back every partition a dead process of this client still holds, whatever
        the target (balancing afterwards), so none of them passes through another member."""
        if self._reclaim_after_ms is None or now < self._reclaim_after_ms:
            return
        wanted = []
        for claim in self.rationalizer.claims(self.config.group_id, topic):
            owner = claim.owner
            if (owner is not None and owner.client_id == self.me.client_id and owner != self.me
                    and claim.key.partition < count and claim.is_held(now)
                    and self._may_reclaim(owner, now)):
                wanted.append(claim.key.partition)
        if wanted:
            self._propose(topic, wanted)

    def _release_when_behind(self, topic: str, count: int, mine: list[int], now: int) -> None:
        """Hand the most lagging partition to a member that holds fewer, if we are behind."""
        assert self.config.release_lag is not None
        if now - self._last_balance_release_ms.get(topic, -(2**62)) < self.hi:
            return
        lags = {}
        for partition in mine:
            _, end = self.source.offset_bounds(topic, partition)
            lags[partition] = end - self.holdings[(topic, partition)].tracker.committed
        worst = max(lags, key=lambda p: (lags[p], p))
        if lags[worst] <= self.config.release_lag:
            return
        held = self._held_by_client(topic, count, now)
        others = [m.client_id for m in self._members(topic, now) if m != self.me]
        if not any(held.get(c, 0) < len(mine) - 1 for c in others):
            return  # alone, or nobody with room: keep going rather than release in vain
        self._last_balance_release_ms[topic] = now
        self._release(topic, [worst], f"behind by {lags[worst]} records")

    def _release_for_balance(self, topic: str, count: int, mine: list[int], now: int) -> None:
        if now - self._last_balance_release_ms.get(topic, -(2**62)) < self.hi:
            return  # then give the others one interval to take what we released
        targets = self._fair_targets(topic, count, now)
        held = self._held_by_client(topic, count, now)
        deficit = sum(max(0, t - held.get(c, 0)) for c, t in targets.items()
                      if c != self.me.client_id)
        excess = len(mine) - targets[self.me.client_id]
        if deficit <= 0 or excess <= 0:
            return  # nobody could take it: keep consuming rather than release in vain
        self._last_balance_release_ms[topic] = now
        self._release(topic, mine[len(mine) - min(excess, deficit):], "for another member")

    def _release(self, topic: str, partitions: list[int], why: str) -> None:
        for partition in partitions:
            holding = self.holdings.pop((topic, partition))
            if self._try_append(self._release_message(holding)):
                self.stats.released += 1
                log.info("released %s/%d (%s)", topic, partition, why)

    def _claimable(self, claim: PartitionClaim, now: int) -> bool:
        owner = claim.owner
        if owner is None:
            released_by_me = (
                claim.released_by is not None
                and claim.released_by.client_id == self.me.client_id
                and claim.last_release_ms is not None
                and now - claim.last_release_ms < self.hi
            )
            return not released_by_me
        if owner.client_id == self.me.client_id and owner != self.me:
            return self._may_reclaim(owner, now)
        return not claim.is_held(now)

    def reclaim_pending(self) -> bool:
        """True while partitions held under our client id by a previous process wait to be
        taken back (at most until they go stale)."""
        if self._reclaim_after_ms is None:
            return False
        return self.clock.now_ms() < self._reclaim_after_ms or bool(self._predecessor_claims())

    def _predecessor_claims(self) -> list[PartitionClaim]:
        now = self.clock.now_ms()
        found = []
        for topic in self.config.topics:
            for claim in self.rationalizer.claims(self.config.group_id, topic):
                owner = claim.owner
                if (owner is not None and owner.client_id == self.me.client_id
                        and owner != self.me and claim.is_held(now)):
                    found.append(claim)
        return found

    def _may_reclaim(self, owner: Owner, now: int) -> bool:
        """May this process take over claims of another instance of the same client?"""
        self._refuse_live_namesake(owner)
        return self._reclaim_after_ms is None or now >= self._reclaim_after_ms

    def _claim_some(self, topic: str, count: int, wanted: int, now: int) -> None:
        start = self.rng.randrange(count)
        candidates = []
        for i in range(count):
            partition = (start + i) % count
            if (topic, partition) in self.holdings:
                continue
            if self._claimable(self._claim(topic, partition), now):
                candidates.append(partition)
                if len(candidates) == wanted:
                    break
        if candidates:
            self._propose(topic, candidates)

    def _propose(self, topic: str, partitions: list[int]) -> None:
        """Propose claims, read the log back, and take up the ones won."""
        proposed_at = self.clock.now_ms()
        started = self.clock.monotonic_ms()
        for partition in partitions:
            self._append(ClaimingPartition(proposed_at // 1000, self.me.instance_id,
                                           self.me.client_id, self.config.group_id, topic,
                                           partition))
            self.stats.claims_proposed += 1
        self._catch_up()  # read back: the log decided
        for partition in partitions:
            claim = self._claim(topic, partition)
            if claim.owner == self.me:
                self._won(topic, partition, claim)
                self.stats.claim_latencies_ms.append(
                    round(self.clock.monotonic_ms() - started))
            else:
                self.stats.claims_lost += 1

    def _won(self, topic: str, partition: int, claim: PartitionClaim) -> None:
        start = self._start_offset(topic, partition, claim)
        now = self.clock.now_ms()
        self._epoch += 1
        assert claim.last_heartbeat_ms is not None
        holding = Holding(topic, partition, self._epoch, CommitTracker(start),
                          lease_until_ms=claim.last_heartbeat_ms + self.hi,
                          next_heartbeat_ms=now, last_renewal_ms=now)
        self.holdings[(topic, partition)] = holding
        self.stats.claims_won += 1
        self._heartbeat(holding)  # commits the starting offset at once
        log.info("claimed %s/%d, starting at offset %d", topic, partition, start)

    def _start_offset(self, topic: str, partition: int, claim: PartitionClaim) -> int:
        beginning, end = self.source.offset_bounds(topic, partition)
        candidates = []
        if claim.committed_offset is not None:
            candidates.append(claim.committed_offset)
        if self.config.mode == "amo" and claim.amo_claimed_offset is not None:
            candidates.append(claim.amo_claimed_offset + 1)
        if not candidates:
            return self._reset_position(topic, partition, beginning, end)
        start = max(candidates)
        if start < beginning:
            log.warning("%s/%d: committed offset %d was deleted by retention; starting at %d",
                        topic, partition, start, beginning)
            return beginning
        if start > end:
            log.warning("%s/%d: committed offset %d is past the end %d; resetting to %s",
                        topic, partition, start, end, self.config.offset_reset)
            return end if self.config.offset_reset == "latest" else beginning
        return start

    # -- consumption --------------------------------------------------------------------------

    def assignments(self) -> dict[TP, tuple[int, int]]:
        """Held partitions with (epoch, next offset to fetch)."""
        return {k: (h.epoch, h.tracker.position) for k, h in self.holdings.items()}

    def holds(self, topic: str, partition: int, epoch: int) -> bool:
        """May a record of this partition, fetched under claim ``epoch``, be delivered now?

        Only while the claim is ours in the log and our last confirmed heartbeat is less
        than one HI old (so a process resumed after a long pause delivers nothing until it
        has caught up and heartbeated again).
        """
        holding = self.holdings.get((topic, partition))
        return (holding is not None and holding.epoch == epoch
                and self.clock.now_ms() < holding.lease_until_ms)

    def accept(self, topic: str, partition: int, epoch: int, offsets: list[int],
               next_position: int) -> bool:
        """Decide whether a fetched batch may be delivered.

        At-least-once: yes while the claim is held. At-most-once: only once a
        ClaimingMessages for the batch's last offset is confirmed in the log and heartbeated;
        a refused batch is never delivered (it may be lost, never duplicated). Each record is
        then handed out through :meth:`deliver`.
        """
        holding = self.holdings.get((topic, partition))
        if holding is None or not self.holds(topic, partition, epoch) or not offsets:
            return False
        if self.config.mode == "alo":
            holding.tracker.delivered(offsets, next_position)
            return True
        last = max(offsets)
        message = self._partition_message(ClaimingMessages, holding, last)
        if not self._try_append(message):
            self.stats.amo_batches_refused += 1
            return False
        self._catch_up()
        claim = self._claim(topic, partition)
        confirmed = claim.amo_claimed_offset
        if claim.owner != self.me or confirmed is None or confirmed < last:
            self.stats.amo_batches_refused += 1
            self._refresh()
            return False
        holding.tracker.delivered(offsets, next_position)
        self.stats.amo_batches_confirmed += 1
        self._heartbeat(holding)
        return True

    def deliver(self, topic: str, partition: int, epoch: int, offset: int) -> bool:
        """Ask, right before handing a record out, whether it may be; True hands it out.

        At-most-once counts the record as done at this moment (so a release or heartbeat
        carries exactly what was handed out); at-least-once waits for :meth:`commit`.
        """
        if not self.holds(topic, partition, epoch):
            return False
        if self.config.mode == "amo":
            self.holdings[(topic, partition)].tracker.mark_through(offset)
        return True

    def rewind(self, topic: str, partition: int, epoch: int, offset: int) -> int | None:
        """Fetched records from ``offset`` on were not handed out (the lease lapsed for a
        moment): if the claim is still held under ``epoch``, return the position to fetch
        from again; None when the claim is gone (a new claim starts from the commit)."""
        holding = self.holdings.get((topic, partition))
        if holding is None or holding.epoch != epoch:
            return None
        holding.tracker.rewind(offset)
        return holding.tracker.position

    def commit(self, topic: str, partition: int, offset: int, epoch: int | None = None) -> bool:
        """Mark a delivered record processed (at-least-once). False if the claim is gone."""
        holding = self.holdings.get((topic, partition))
        if holding is None or (epoch is not None and holding.epoch != epoch):
            return False
        holding.tracker.mark(offset)
        return True

    def committed(self, topic: str, partition: int) -> int | None:
        """The committed offset of a held partition."""
        holding = self.holdings.get((topic, partition))
        return holding.tracker.committed if holding else None

    def flush_commits(self) -> None:
        """Heartbeat every held partition now (e.g. before a planned pause)."""
        for holding in list(self.holdings.values()):
            self._heartbeat(holding)

    # -- writing ------------------------------------------------------------------------------

    def _claim(self, topic: str, partition: int) -> PartitionClaim:
        return self.rationalizer.claim(self.config.group_id, topic, partition)

    def _partition_message(self, kind: type[Heartbeat] | type[ClaimingPartition]
                           | type[ReleasingPartition] | type[ClaimingMessages],
                           holding: Holding, *extra: int) -> Message:
        base = (self.clock.now_ms() // 1000, self.me.instance_id, self.me.client_id,
                self.config.group_id, holding.topic, holding.partition)
        return kind(*base, *extra)

    def _release_message(self, holding: Holding) -> Message:
        return self._partition_message(ReleasingPartition, holding, holding.tracker.committed)

    def _announced_capacity(self) -> int:
        return self.config.max_claims if self.config.max_claims is not None else -1


def held_partitions(engines: Iterable[MemberEngine]) -> dict[TP, list[Owner]]:
    """Which engines believe they hold each partition (for invariant checks)."""
    found: dict[TP, list[Owner]] = {}
    for engine in engines:
        for key in engine.holdings:
            found.setdefault(key, []).append(engine.me)
    return found
