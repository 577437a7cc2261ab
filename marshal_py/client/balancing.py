"""How a member of an exclusive group decides its share: its fair target, and when to hand
partitions to others (a part of :class:`~marshal_py.client.engine.MemberEngine`).

Every question is answered from the rationalizer's indexes, in time independent of the
topic's partition count: the ranks of the live client ids (a fair share), how many partitions
each client id holds (what the others lack), never a walk of every claim or a sort of every
member, but when members announced capacities (then :meth:`Balancing._fair_targets`, O(M log
M)).
"""

from __future__ import annotations

import random

from marshal_py.client.engine_types import EngineClock, PartitionSource
from marshal_py.client.holdings import EngineConfig, HoldingMember
from marshal_py.log.base import CoordinationLog
from marshal_py.world import Owner, Rationalizer

__all__ = ["Balancing"]


class Balancing(HoldingMember):
    """Fair targets and releases for balance of one member."""

    def __init__(self, config: EngineConfig, log_: CoordinationLog, rationalizer: Rationalizer,
                 source: PartitionSource, clock: EngineClock, rng: random.Random) -> None:
        super().__init__(config, log_, rationalizer, source, clock, rng)
        self._last_balance_release_ms: dict[str, int] = {}
        #: The partitions of the last release for balance, by topic.
        self._released_for_balance: dict[str, list[int]] = {}

    def _held_by_client(self, topic: str, now: int) -> dict[str, int]:
        """How many partitions of ``topic`` each client id holds (fresh or unknown), from
        the rationalizer's index: O(client ids), whatever the partition count."""
        return self.rationalizer.held_counts(self.config.group_id, topic, now)

    def _capacity(self, topic: str, member: Owner) -> int | None:
        if member == self.me:
            return self.config.max_claims
        return self.rationalizer.member_capacity(self.config.group_id, topic, member)

    def target(self, topic: str, partitions: int, now: int) -> int:
        """How many partitions of ``topic`` this member aims to hold."""
        cap = self.config.max_claims if self.config.max_claims is not None else partitions
        if self.config.balance == "greedy":
            return min(cap, partitions)
        group = self.config.group_id
        if self.config.max_claims is None and not self.rationalizer.capacities_announced(
                group, topic):
            # Nobody is capped: equal shares, the first N mod M client ids one more. The
            # rank comes from the rationalizer's index, in O(log M) whatever the group size.
            rank = self.rationalizer.member_rank(group, topic, self.me.client_id, now)
            base, extra = divmod(partitions, rank.members)
            return base + (1 if rank.place < extra else 0)
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

    def _release_when_behind(self, topic: str, count: int, mine: list[int], now: int) -> None:
        """Hand the most lagging partition to a member that holds fewer, if we are behind."""
        assert self.config.release_lag is not None
        if now - self._last_balance_release_ms.get(topic, -(2**62)) < self.hi:
            return
        lags = {}
        for partition in mine:
            _, end = self.source.offset_bounds(topic, partition)
            lags[partition] = end - self.holdings[(topic, partition)].cursor.committed
        worst = max(lags, key=lambda p: (lags[p], p))
        if lags[worst] <= self.config.release_lag:
            return
        held = self._held_by_client(topic, now)
        others = [m.client_id for m in self._members(topic, now) if m != self.me]
        if not any(held.get(c, 0) < len(mine) - 1 for c in others):
            return  # alone, or nobody with room: keep going rather than release in vain
        self._last_balance_release_ms[topic] = now
        self._release([(topic, worst)], f"behind by {lags[worst]} records")

    def _release_for_balance(self, topic: str, count: int, mine: list[int], now: int) -> None:
        if now - self._last_balance_release_ms.get(topic, -(2**62)) < self.hi \
                and not self._released_taken(topic, now):
            return  # then give the others one interval to take what we released
        held = self._held_by_client(topic, now)
        shares = self._equal_shares(topic, count, now, held)
        if shares is not None:
            target, deficit = shares
        else:
            targets = self._fair_targets(topic, count, now)
            target = targets[self.me.client_id]
            deficit = sum(max(0, t - held.get(c, 0)) for c, t in targets.items()
                          if c != self.me.client_id)
        excess = len(mine) - target
        if deficit <= 0 or excess <= 0:
            return  # nobody could take it: keep consuming rather than release in vain
        self._last_balance_release_ms[topic] = now
        released = mine[len(mine) - min(excess, deficit):]
        self._released_for_balance[topic] = released
        self._release([(topic, p) for p in released], "for another member")

    def _equal_shares(self, topic: str, count: int, now: int,
                      held: dict[str, int]) -> tuple[int, int] | None:
        """(our fair share, what the other members lack of theirs) when nobody announced a
        capacity and we are live: from the ranks of the client ids that hold partitions, in
        O(H log M) for H holders (what the others lack is the partitions, less our share,
        less what each holder holds up to its own share). None: ask :meth:`_fair_targets`."""
        group = self.config.group_id
        if self.config.max_claims is not None or self.rationalizer.capacities_announced(
                group, topic):
            return None
        rank = self.rationalizer.member_rank(group, topic, self.me.client_id, now)
        if not rank.live:
            return None
        base, extra = divmod(count, rank.members)
        mine = base + (1 if rank.place < extra else 0)
        covered = 0
        for client, n in held.items():
            if client == self.me.client_id:
                continue
            theirs = self.rationalizer.member_rank(group, topic, client, now)
            if theirs.live:
                covered += min(n, base + (1 if theirs.place < extra else 0))
        return mine, count - mine - covered

    def _released_taken(self, topic: str, now: int) -> bool:
        """True when every partition of our last release for balance is held by another
        member: the pause after it has served its purpose (without this, each member above
        its share could give up its surplus only once per HI, and a group whose members
        join over an HI settled in over 2 HI: the last joiner waited for the previous
        release's pause to end)."""
        released = self._released_for_balance.get(topic)
        if not released:
            return False
        for partition in released:
            claim = self._claim(topic, partition)
            if claim.owner is None or claim.owner.client_id == self.me.client_id \
                    or not claim.is_held(now):
                return False
        return True
