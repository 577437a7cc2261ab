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
from itertools import chain

from marshal_py.client.balancing import Balancing
from marshal_py.client.engine_types import EngineClock, PartitionSource
from marshal_py.client.fencing import Fencing, fence_and_read, read_to_end
from marshal_py.client.holdings import (
    EngineConfig,
    EngineStats,
    Holding,
)
from marshal_py.errors import ConfigurationError
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol import ClaimingPartition, Message
from marshal_py.world import Owner, PartitionClaim, Rationalizer

log = logging.getLogger(__name__)

TP = tuple[str, int]

__all__ = ["EngineConfig", "EngineStats", "Holding", "MemberEngine", "held_partitions"]


class MemberEngine(Balancing):
    """One member of a group: claims, heartbeats, balances, confirms and releases.

    Call :meth:`start` once, then :meth:`tick` whenever something is due (:meth:`next_due_ms`)
    or the log has new records; the delivering side reads :attr:`leases`. Simulations and
    micro-batch members use :meth:`accept`, :meth:`deliver` and :meth:`commit` instead. Call
    :meth:`close` at the end. Not thread-safe: the caller serializes calls.

    Exactly-once (``mode="eos"``) needs ``fencing``: a won partition is fenced, the log read
    to its end, and only then started at its committed offset (:mod:`.fencing`).
    """

    def __init__(self, config: EngineConfig, log_: CoordinationLog, rationalizer: Rationalizer,
                 source: PartitionSource, clock: EngineClock, rng: random.Random,
                 fencing: Fencing | None = None) -> None:
        if (config.mode == "eos") != (fencing is not None):
            raise ConfigurationError("an exactly-once engine (mode 'eos') needs a fencing, and "
                                     "only it")
        super().__init__(config, log_, rationalizer, source, clock, rng)
        self.fencing = fencing
        self._reclaim_after_ms: int | None = None
        #: Claims this member won whose take-up failed (see :meth:`_propose`).
        self._untaken: set[TP] = set()

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
        self._release(list(self.holdings), "closing", closing=True)
        self._leave()

    def suspend(self, why: str) -> None:
        """Take no part until :meth:`resume`: release every partition with its committed
        offset (others take them at once) and announce leaving, so fair members share them
        out without this one. For an application that stopped asking for records."""
        if self._closed or self.suspended:
            return
        self.suspended = True
        self._release(list(self.holdings), why)
        self._leave()

    # -- the periodic step -------------------------------------------------------------------

    def tick(self) -> None:
        """Catch up (unless the caller follows the log), drop lost claims, heartbeat, confirm
        at-most-once windows, renew, balance and claim."""
        if self._closed:
            return
        with self._stopping_if_log_lost():
            self._tick()

    def follow(self, timeout_s: float) -> int:
        """Wait up to ``timeout_s`` for new coordination records and apply them (the caller
        then runs :meth:`tick`); return how many arrived."""
        if self._closed:
            return 0
        with self._stopping_if_log_lost():
            return self.channel.follow(timeout_s)

    def _tick(self) -> None:
        caught_up = self._refresh()
        self._watch_topics()
        written = self._send_heartbeats(self.clock.now_ms())
        if written and caught_up:
            caught_up = self._read_back(written)  # our heartbeats renew the leases
        self._expire_leases(self.clock.now_ms())
        self._confirm_windows()
        if not caught_up or self.suspended:
            return
        self._check_group()
        self._announce_if_due(self.clock.now_ms())
        for topic in self.config.topics:
            self._balance(topic)
        self.channel.maybe_checkpoint(self.me)

    def _refresh(self) -> bool:
        """Catch up with the log (unless the caller follows it) and update every holding
        from it; False if the log failed."""
        if not self.follows_log and not self._try_catch_up():
            return False
        self._sync_with_world()
        return True

    def next_due_ms(self) -> int:
        """The broker time at which :meth:`tick` next has something to do if the log stays
        quiet: a heartbeat, renewal or lease expiry, a membership heartbeat, a claim of
        someone else going stale (it could be taken), a member going stale (the fair shares
        change), the end of a balancing pause, a reclaim, or a checkpoint."""
        now = self.clock.now_ms()
        held = self._holding_due_ms()
        if held is not None and held <= now:
            return now  # overdue: at once
        due = [self._next_member_heartbeat_ms, now + self.hi, self.topic_watch.next_due_ms]
        if held is not None:
            due.append(held)
        if self._reclaim_after_ms is not None and self._reclaim_after_ms > now:
            due.append(self._reclaim_after_ms)
        group = self.config.group_id
        for topic in self.config.topics:
            for claim in self.rationalizer.claims(group, topic):
                if claim.owner is not None and claim.owner != self.me \
                        and claim.last_heartbeat_ms is not None:
                    due.append(claim.last_heartbeat_ms + 2 * claim.heartbeat_interval_ms + 1)
                if claim.last_release_ms is not None:
                    due.append(claim.last_release_ms + self.hi)
            member_deadline = self.rationalizer.next_member_deadline(group, topic, now)
            if member_deadline is not None:
                due.append(member_deadline + 1)
            paused = self._last_balance_release_ms.get(topic)
            if paused is not None:
                due.append(paused + self.hi)
        checkpoint = self.channel.next_checkpoint_ms()
        if checkpoint is not None:
            due.append(checkpoint)
        return min(t for t in due if t > now) if any(t > now for t in due) else now

    # -- balancing and claiming ---------------------------------------------------------------

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
        for claim in self._namesake_claims(topic, now):
            assert claim.owner is not None
            if claim.key.partition < count and self._may_reclaim(claim.owner, now):
                wanted.append(claim.key.partition)
        if wanted:
            self._propose(topic, wanted)

    def _claimable(self, claim: PartitionClaim, now: int) -> bool:
        owner = claim.owner
        if owner == self.me:
            # Ours in the log but not held: claimable only when taking it up failed after
            # the claim was won (not when the lease lapsed and it was given up).
            return (claim.key.topic, claim.key.partition) in self._untaken
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
        """True while partitions of a previous process of our client id wait to be taken
        back: held by it (at most until they go stale), or released by it less than one HI
        ago and taken by no one since (a client claims what it released only one HI later,
        PROTOCOL.md 7: a process restarted at once would otherwise settle holding none)."""
        now = self.clock.now_ms()
        if self._reclaim_after_ms is not None and (
                now < self._reclaim_after_ms or self._predecessor_claims()):
            return True
        me = self.me
        return any(claim.owner is None and claim.released_by is not None
                   and claim.released_by != me and claim.released_by.client_id == me.client_id
                   and claim.last_release_ms is not None
                   and now - claim.last_release_ms < self.hi
                   for topic in self.config.topics
                   for claim in self.rationalizer.claims(self.config.group_id, topic))

    def _predecessor_claims(self) -> list[PartitionClaim]:
        now = self.clock.now_ms()
        return [c for topic in self.config.topics for c in self._namesake_claims(topic, now)]

    def _namesake_claims(self, topic: str, now: int) -> list[PartitionClaim]:
        """Claims of ``topic`` held under our client id by another process (the index of
        owners: what our client id owns, not every partition)."""
        group = self.config.group_id
        found = []
        for partition in self.rationalizer.owned_by(group, topic, self.me.client_id):
            claim = self._claim(topic, partition)
            if claim.owner is not None and claim.owner != self.me and claim.is_held(now):
                found.append(claim)
        return found

    def _may_reclaim(self, owner: Owner, now: int) -> bool:
        """May this process take over claims of another instance of the same client?"""
        self._refuse_live_namesake(owner)
        return self._reclaim_after_ms is None or now >= self._reclaim_after_ms

    def _claim_some(self, topic: str, count: int, wanted: int, now: int) -> None:
        start = self.rng.randrange(count)
        # Claims won and not taken up yet (a take-up failed, or retake()) come first; then
        # what nobody holds, from the rationalizer's index (released, stale, never claimed,
        # each from a random start so members starting together spread their claims): a
        # step does not walk the topic's partitions.
        untaken = sorted(p for t, p in self._untaken if t == topic and p < count)
        order = chain(untaken, self.rationalizer.claimable(self.config.group_id, topic, count,
                                                           now, start))
        candidates: list[int] = []
        chosen: set[int] = set()
        for partition in order:
            if (topic, partition) in self.holdings or partition in chosen:
                continue
            if self._claimable(self._claim(topic, partition), now):
                candidates.append(partition)
                chosen.add(partition)
                if len(candidates) == wanted:
                    break
        if candidates:
            self._propose(topic, candidates)

    def retake(self, topic: str, partition: int, epoch: int) -> None:
        """Exactly-once: what the partition's last transaction under claim ``epoch`` did is
        unknown (its commit timed out, or its producer was fenced): stop handing it out now
        and take it up again at the next step (claim, fence, read the log, start at the
        committed offset). Nothing happens when ``epoch`` is no longer the held claim's: the
        partition was given up, or taken up again, meanwhile."""
        holding = self.holdings.get((topic, partition))
        if holding is not None and holding.epoch == epoch:
            self._drop((topic, partition))
            self._untaken.add((topic, partition))

    def _propose(self, topic: str, partitions: list[int]) -> None:
        """Propose claims (one batch), read them back, take up the ones won, and heartbeat
        their starting offsets at once."""
        proposed_at = self.clock.now_ms()
        started = self.clock.monotonic_ms()
        messages: list[Message] = [
            ClaimingPartition(proposed_at // 1000, self.me.instance_id, self.me.client_id,
                              self.config.group_id, topic, partition)
            for partition in partitions]
        # The bounds of the starting offsets are asked while the claims travel (exactly
        # once asks after fencing: a fence changes the end).
        bounds_ahead = None if self.fencing is not None else \
            self.source.offset_bounds_ahead([(topic, p) for p in partitions])
        written = self.channel.append_all(messages)
        self.stats.claims_proposed += len(partitions)
        self.channel.read_back(written)  # the log decided
        self._sync_with_world()
        mine = [p for p in partitions if self._claim(topic, p).owner == self.me]
        self.stats.claims_lost += len(partitions) - len(mine)
        # Until taken up, a won claim is ours in the log only: if taking it up fails (an
        # offset lookup, a fence), the next step claims it again, which renews it.
        self._untaken.update((topic, p) for p in mine)
        if mine and self.fencing is not None:
            mine = fence_and_read(self.fencing, topic, mine, self._read_to_end,
                                  lambda p: self._claim(topic, p).owner == self.me)
        if not mine:
            bounds = {}
        elif bounds_ahead is not None:
            bounds = bounds_ahead()
        else:
            bounds = self.source.offset_bounds_of([(topic, p) for p in mine])
        won = []
        for partition in mine:
            claim = self._claim(topic, partition)
            won.append(self._won(topic, partition, claim, bounds[(topic, partition)]))
            self._untaken.discard((topic, partition))
            self.stats.claim_latencies_ms.append(round(self.clock.monotonic_ms() - started))
        if won:
            self.on_leases()  # the delivering side starts fetching during the heartbeat
            # Commits the starting offsets at once; read back with the next step's.
            self._send_heartbeats(self.clock.now_ms())

    def _read_to_end(self) -> bool:
        """Read the log to its end (read_committed) and update the holdings; False when it
        cannot be read now."""
        read = self._try_catch_up(lambda: read_to_end(self.log, self.rationalizer,
                                                      self.channel.partitions.values()))
        self._sync_with_world()
        return read

    def _dropped(self, key: TP) -> None:
        if self.fencing is not None:
            self.fencing.forget(*key)

    def _won(self, topic: str, partition: int, claim: PartitionClaim,
             bounds: tuple[int, int]) -> Holding:
        start = self._start_offset(topic, partition, claim, bounds)
        assert claim.last_heartbeat_ms is not None
        holding = self._hold(topic, partition, start, claim.last_heartbeat_ms + self.hi)
        self.stats.claims_won += 1
        log.info("claimed %s/%d, starting at offset %d", topic, partition, start)
        return holding

    def _start_offset(self, topic: str, partition: int, claim: PartitionClaim,
                      bounds: tuple[int, int]) -> int:
        beginning, end = bounds
        candidates = []
        committed = claim.committed_offset
        if self.config.compat is not None and not committed:
            # As the original: a Marshal offset of 0 (or none) means "none"; then the offset
            # the group committed to Kafka (its members commit there too), if any.
            committed = self.source.group_committed_offset(self.config.group_id, topic,
                                                           partition) or committed
        if committed is not None:
            candidates.append(committed)
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

    def _announced_capacity(self) -> int:
        return self.config.max_claims if self.config.max_claims is not None else -1


def held_partitions(engines: Iterable[MemberEngine]) -> dict[TP, list[Owner]]:
    """Which engines believe they hold each partition (for invariant checks)."""
    found: dict[TP, list[Owner]] = {}
    for engine in engines:
        for key in engine.holdings:
            found.setdefault(key, []).append(engine.me)
    return found
