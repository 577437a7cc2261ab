"""The rules of exclusive partitions and of membership records, as the rationalizer applies
them to a pair's state (a part of :class:`~marshal_py.world.engine.Core`). Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.world.verdicts import (
    CLAIM_LOST,
    CLAIM_RECLAIMED,
    CLAIM_RENEWED,
    CLAIM_WON,
    HEARTBEAT,
    MEMBER_HEARTBEAT,
    MEMBER_LEFT,
    MESSAGES_CLAIMED,
    NOT_OWNER,
    RELEASED,
)

if TYPE_CHECKING:
    from marshal_py.world.lifecycle import GroupLife
    from marshal_py.world.pairs import Route
    from marshal_py.world.state import Owner


class ExclusiveRules:
    """Claims, heartbeats, releases, ClaimingMessages and membership records. The caller has
    checked the record (placement, checkpoint, authentication) and brought the pair's
    membership up to the record's time."""

    # -- exclusive partitions ------------------------------------------------------------------

    def _heartbeat(self, route: Route, life: GroupLife, ts: int, offset: int) -> int:
        """A heartbeat from the partition's owner (the caller checked it is)."""
        claim = route.claim
        if claim is None:
            claim = route.claim = route.pair.claim(route.partition)
        earlier = claim.last_heartbeat_ms is not None and ts < claim.last_heartbeat_ms
        claim.last_heartbeat_ms = ts
        if earlier:
            route.pair.index.beat(route.partition, claim)  # a broker clock that went back
        if not claim.transactional:  # an exactly-once offset moves by transactions only
            claim.committed_offset = offset
        announced = life.intervals.get(route.owner)
        if announced is not None:
            claim.heartbeat_interval_ms = announced
        life.seen(route.owner, ts)
        return HEARTBEAT

    def _release(self, route: Route, ts: int, offset: int) -> int:
        claim = route.pair.claim(route.partition)
        sender = route.owner
        if claim.owner != sender:
            return NOT_OWNER
        claim.owner = None
        route.pair.index.freed(route.partition, sender)
        if not claim.transactional:
            claim.committed_offset = offset
        if claim.amo_claimed_offset is not None and claim.amo_claimed_offset >= offset:
            # The owner's last word: it handed out nothing from ``offset`` on, so what it
            # had confirmed beyond is free again and the next owner starts at ``offset``.
            claim.amo_claimed_offset = offset - 1
        claim.last_release_ms = ts
        claim.released_by = sender
        claim.heartbeat_interval_ms = None
        return RELEASED

    def _messages(self, route: Route, proposed_last_offset: int) -> int:
        claim = route.pair.claim(route.partition)
        if claim.owner != route.owner:
            return NOT_OWNER
        previous = claim.amo_claimed_offset
        if previous is None or proposed_last_offset > previous:
            claim.amo_claimed_offset = proposed_last_offset
        return MESSAGES_CLAIMED

    def _claim(self, route: Route, life: GroupLife, ts: int) -> int:
        claim = route.pair.claim(route.partition)
        sender = route.owner
        announced = life.intervals.get(sender)
        owner = claim.owner
        if owner == sender:
            earlier = claim.last_heartbeat_ms is not None and ts < claim.last_heartbeat_ms
            claim.last_heartbeat_ms = ts
            if announced is not None:
                claim.heartbeat_interval_ms = announced
            if earlier:
                route.pair.index.beat(route.partition, claim)  # a broker clock went back
            life.seen(sender, ts)
            return CLAIM_RENEWED
        if owner is not None and owner.client_id == sender.client_id:
            # A restarted process of the same logical consumer takes its partitions back.
            code = CLAIM_RECLAIMED
        elif owner is not None and claim.last_heartbeat_ms is not None and \
                ts - claim.last_heartbeat_ms <= 2 * (
                    claim.heartbeat_interval_ms if claim.heartbeat_interval_ms is not None
                    else route.pair.hi):
            return CLAIM_LOST  # held: judged by the interval its owner announced
        else:
            code = CLAIM_WON
        claim.owner = sender
        claim.claimed_at_ms = ts
        claim.last_heartbeat_ms = ts
        claim.heartbeat_interval_ms = announced
        route.pair.index.owned(route.partition, claim, owner)
        if code == CLAIM_RECLAIMED:
            for other in life.instances_of(sender.client_id):
                life.replaced(other)
        life.seen(sender, ts)
        return code

    # -- membership ----------------------------------------------------------------------------

    def _membership(self, life: GroupLife, sender: Owner, ts: int, active: bool,
                    capacity: int, interval_ms: int) -> int:
        if active:
            life.seen(sender, ts)
            life.announced(sender, interval_ms)
            if capacity >= 0:
                life.capacities[sender] = capacity
            else:
                life.capacities.pop(sender, None)
            return MEMBER_HEARTBEAT
        life.left(sender, ts)
        return MEMBER_LEFT
