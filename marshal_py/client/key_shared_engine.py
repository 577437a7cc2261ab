"""KeySharedEngine: one member of a key-shared group, single-threaded and steppable.

Key-shared mode lets more members than partitions consume a topic while keeping the order of
the records of each key. The 64-bit hash space of record keys of every partition is cut into
:data:`~marshal_py.protocol.messages.KEY_SLOTS` slots (``key_slot(key)``: the top 10 bits of
xxh3-64; records without a key hash like the empty key, so they share one slot and stay in
order). Each slot has at most one owner in the coordination log and its own committed offset
(:class:`~marshal_py.world.key_shared.KeySharedPartition`). Every member fetches the whole
partition and hands out only the records of the slots it owns.

A member's duties, per partition of each of its topics, at every step:

* **Target.** ``sticky_assignment(live owners, live members)``: a deterministic function of
  the log that every member computes alike (this process stands for its client id). Quotas
  differ by at most one slot and as few slots as possible move when members come and go.
* **Claim.** One ``ClaimingKeyRanges`` with the slots whose target is this member and that
  are free (unowned, or owned by a member stale for more than 2 HI), then read the log back:
  what it owns now is won.
* **Release.** A slot whose target is another member stops being handed out at once; it is
  released (``ReleasingKeyRanges``) only once every record of it handed to the application has
  been committed, with the release offset = the slot's next offset to hand out. So its next
  owner starts exactly where this one stopped, and no key is ever processed by two members
  at once, nor out of order.
* **Deliver.** A per-slot cursor ``n[s]`` is the next offset of slot ``s`` to hand out. It
  starts at the slot's committed offset (or the partition's end / beginning for
  ``offset_reset`` "latest" / "earliest" when the slot never committed). A fetched record of
  slot ``s`` is handed out iff this member owns ``s`` in the log, is not releasing it, its
  lease is valid, and ``offset >= n[s]``; handing it out sets ``n[s] = offset + 1``. The
  member fetches from ``min n[s]`` over its slots and scans the partition in order, so the
  cursor of a slot also advances over the records of other slots the scan passes (a slot with
  no traffic does not hold the committed offset back). When a newly won slot starts below the
  scan, the fetch moves back (a new *fetch epoch*: records fetched before it are dropped).
* **Lease.** Records are handed out only while this member's last claim or heartbeat about
  the partition, *seen applied in the log*, is less than one HI old. Others may take its slots
  only after 2 HI, so two members never deliver a slot at once. A lapsed lease stops delivery
  (nothing is released: records handed out may still be uncommitted) until a heartbeat is
  confirmed again. Every read that renews the lease (a heartbeat confirmed, a claim read
  back) first drops the slots the log now gives to others: a member stale for 2 HI may have
  lost some in that very read.
* **Heartbeat.** Every 0.6 to 0.8 HI for each partition where it owns slots:
  ``KeyRangesHeartbeat(offset=W)``, ``W`` = the lowest of the handed-out offsets not yet
  committed on the partition and of the cursors ``n[s]`` of its slots (a slot just won may
  start below the records in processing). Every record of every slot it owns below ``W`` was
  processed. After a crash, the successors re-deliver from there: about one HI
  of records, and everything from the oldest uncommitted record on (the heartbeat carries one
  offset for the whole partition).
* **Restarts.** A process that finds slots held under its own client id by another live
  instance waits 1.25 HI; if that instance wrote anything meanwhile it stops with
  :class:`~marshal_py.errors.ClientIdInUseError`, otherwise it claims them all back (the
  rationalizer grants a same-client claim at once) and balances afterwards.
* **Leave.** ``close()`` releases every slot at its cursor (after the caller applied the
  pending commits; uncommitted records are released at their own offset so they come again)
  and writes ``MemberHeartbeat(active=0)``.

Like :class:`~marshal_py.client.engine.MemberEngine` it never starts a thread and never reads
a clock or a random source of its own: the caller passes them. This module decides (target,
claims, restarts, the periodic step); what a member holds and writes about its slots, and
what it answers the consuming shell, is :class:`~marshal_py.client.key_slot_member.KeySlotMember`.
"""

from __future__ import annotations

import logging
import random

from marshal_py.client.engine_types import EngineClock, PartitionSource
from marshal_py.client.key_slot_member import KeySharedConfig, KeySlotMember
from marshal_py.client.key_slots import SlotHolding
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol import KEY_SLOTS
from marshal_py.world import Owner, Rationalizer, sticky_assignment

__all__ = ["KeySharedConfig", "KeySharedEngine"]

log = logging.getLogger(__name__)


def _distinct(owners: list[Owner | None]) -> list[Owner]:
    """The distinct owners of a slot list, found by identity first (cheap: the log's
    ``Owner`` objects are shared by the slots of one claim)."""
    by_id = dict(zip(map(id, owners), owners, strict=True))
    return [o for o in set(by_id.values()) if o is not None]


class KeySharedEngine(KeySlotMember):
    """One member of a key-shared group (see the module docstring for its duties).

    Call :meth:`start` once, then :meth:`tick` regularly (several times per heartbeat
    interval); fetch each partition of :meth:`fetch_plan` from its position and offer every
    fetched record, in offset order, to :meth:`deliver` right before handing it out; report
    processed records with :meth:`commit`; :meth:`close` at the end. Not thread-safe: the
    caller serializes calls.
    """

    def __init__(self, config: KeySharedConfig, log_: CoordinationLog,
                 rationalizer: Rationalizer, source: PartitionSource, clock: EngineClock,
                 rng: random.Random) -> None:
        super().__init__(config, log_, rationalizer, source, clock, rng)
        self._reclaim_after_ms: int | None = None

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Replay the coordination log, announce this member, and look for a predecessor."""
        self._join()
        assert self._joined_ms is not None
        self._catch_up()
        if self._predecessor_slots():
            # A previous process of this client may still own slots. Dead, it writes nothing
            # more; alive, it heartbeats within one interval.
            self._reclaim_after_ms = self._joined_ms + self.hi + self.hi // 4
            log.info("%s: waiting one heartbeat interval before reclaiming key slots held "
                     "under client id %s", self.config.group_id, self.config.client_id)

    def close(self) -> None:
        """Release every slot at its cursor (uncommitted records at their own offset, and
        slots of a micro-batch not complete at the batch's start, so they come again) and
        leave the group. Apply pending commits first."""
        if self._closed:
            return
        self._closed = True
        self._release_all()
        self._leave()

    def suspend(self) -> None:
        """Take no part until :meth:`resume`, as :meth:`close` does (every slot released at
        its cursor, uncommitted records at their own offset; leave the group). For an
        application that stopped asking for records (max_poll_interval)."""
        if self._closed or self.suspended:
            return
        self.suspended = True
        self._release_all()
        self._leave()

    def _forget_topic(self, topic: str) -> None:
        self._release_all(topic)

    # -- the periodic step -------------------------------------------------------------------

    def tick(self) -> None:
        """Catch up, drop lost slots, heartbeat, renew, then claim and release toward the
        target."""
        if self._closed:
            return
        caught_up = self._refresh()
        self._watch_topics()
        if self._send_heartbeats(self.clock.now_ms()) and caught_up:
            caught_up = self._refresh()  # read our heartbeats back: that renews the leases
        if not caught_up or self.suspended:
            return
        self._check_group()
        self._announce_if_due(self.clock.now_ms())
        for topic in self.config.topics:
            count = self.source.partition_count(topic) or 0
            for partition in range(count):
                self._balance(topic, partition)
        self.channel.maybe_checkpoint(self.me)

    def _refresh(self) -> bool:
        """Catch up with the log and reconcile every holding with it; False if the log failed."""
        if not self._try_catch_up():
            return False
        for holding in self.holdings.values():
            self._reconcile(holding)
        return True

    def _send_heartbeats(self, now: int) -> bool:
        sent = False
        for holding in self.holdings.values():
            if not holding.owned:
                continue
            # Renew the claim: keep it inside the replay window of members joining later.
            if (now - holding.last_renewal_ms >= self.config.renew_interval_ms
                    and self._try_append(self._claim_message(holding.topic, holding.partition,
                                                             holding.owned))):
                holding.last_renewal_ms = now
                holding.next_heartbeat_ms = now
            if now >= holding.next_heartbeat_ms:
                sent = self._heartbeat(holding) or sent
        return sent

    # -- target, claims and releases ----------------------------------------------------------

    def _live_owners(self, topic: str, partition: int, now: int) -> list[Owner | None]:
        """Each slot's owner, None where unowned or stale."""
        state = self._state(topic, partition)
        if state is None:
            return [None] * KEY_SLOTS
        return state.live_owners(now, self.hi)

    def target(self, topic: str, partition: int, now: int | None = None) -> list[Owner | None]:
        """The target owner of every slot of a partition, as every member computes it."""
        now = self.clock.now_ms() if now is None else now
        return sticky_assignment(self._live_owners(topic, partition, now),
                                 self._members(topic, now))

    def _target(self, holding: SlotHolding, owners: list[Owner | None],
                members: list[Owner]) -> list[Owner | None]:
        """sticky_assignment, computed again only when its inputs changed."""
        if holding.target_inputs != (owners, members):
            holding.target_inputs = (owners, members)
            holding.target = sticky_assignment(owners, members)
        return holding.target

    def _balance(self, topic: str, partition: int) -> None:
        now = self.clock.now_ms()
        owners = self._live_owners(topic, partition, now)
        holding = self.holdings.get((topic, partition))
        if holding is None:
            holding = self.holdings[(topic, partition)] = SlotHolding(topic, partition)
        target = self._target(holding, owners, self._members(topic, now))
        me = self.me
        mine = {s for s, t in enumerate(target) if t is me}  # the members list holds self.me
        # Releases: stop handing out at once, write the release once all is committed.
        leaving = holding.active - mine
        if leaving:
            holding.materialize()
            holding.active -= leaving
        returning = (holding.owned - holding.active) & mine
        if returning:
            self._activate(holding, returning)
        releasable = {s: holding.cursor[s] for s in holding.owned - holding.active
                      if not holding.per_slot.get(s)}
        if releasable:
            self._release(holding, releasable)
        # Claims: free slots whose target is us, and a dead predecessor's slots (all of them).
        wanted = [s for s in sorted(mine - holding.owned) if owners[s] is None]
        predecessors = {o for o in _distinct(owners)
                        if o.client_id == me.client_id and o != me}
        if predecessors and self._may_reclaim(predecessors, now):
            wanted = sorted(set(wanted) | {s for s, o in enumerate(owners)
                                           if o is not None and o in predecessors})
        if wanted:
            self._claim(holding, wanted)

    def _claim(self, holding: SlotHolding, slots: list[int]) -> None:
        if not self._try_append(self._claim_message(holding.topic, holding.partition, slots)):
            return
        self.stats.claims += 1
        self.stats.slots_proposed += len(slots)
        self._catch_up()  # read back: the log decided
        # Adopt what we won and renew the lease only together with dropping what others took
        # from us meanwhile (read in the same catch-up): the claim proves us alive only for
        # the slots we still own.
        self._reconcile(holding)

    # -- restarts -------------------------------------------------------------------------------

    def _predecessor_slots(self) -> list[Owner]:
        now = self.clock.now_ms()
        found = []
        for topic in self.config.topics:
            for _key, state in self.rationalizer.key_shared_partitions(self.config.group_id,
                                                                       topic):
                found += [o for o in state.live_owners(now, self.hi)
                          if o is not None and o.client_id == self.me.client_id
                          and o != self.me]
        return found

    def reclaim_pending(self) -> bool:
        """True while slots held under our client id by a previous process wait to be taken
        back (at most until they go stale)."""
        if self._reclaim_after_ms is None:
            return False
        return self.clock.now_ms() < self._reclaim_after_ms or bool(self._predecessor_slots())

    def _may_reclaim(self, owners: set[Owner], now: int) -> bool:
        """May this process take over slots of other instances of the same client?"""
        for owner in owners:
            self._refuse_live_namesake(owner)
        return self._reclaim_after_ms is None or now >= self._reclaim_after_ms

    # -- delivery --------------------------------------------------------------------------------

    # -- micro-batch members --------------------------------------------------------------------

    # -- writing ---------------------------------------------------------------------------------
