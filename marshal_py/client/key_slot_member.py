"""KeySlotMember: a key-shared member's slots, the half of
:class:`~marshal_py.client.key_shared_engine.KeySharedEngine` that works on what it holds.

Per partition, a :class:`~marshal_py.client.key_slots.SlotHolding` keeps the slots this member
owns and hands out, their cursors and the records in processing. This class keeps the
holdings in line with the log (:meth:`_reconcile`: slots lost to others, slots won), takes up
and releases slots, heartbeats the commit floor, and answers the consuming shell (fetch plan,
delivery, commits, micro-batch ranges). Deciding which slots to claim or give up (the target,
restarts, the periodic step) is the engine's. No thread, no clock or random source of its own.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass

from marshal_py.client.engine_types import EngineClock, PartitionSource
from marshal_py.client.key_slots import TP, KeySharedStats, SlotHolding
from marshal_py.client.member_base import GroupMember, MemberConfig
from marshal_py.errors import MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol import (
    ClaimingKeyRanges,
    KeyRangesHeartbeat,
    Message,
    ReleasingKeyRanges,
    format_ranges,
    ranges_of,
)
from marshal_py.world import Rationalizer
from marshal_py.world.key_shared import KeySharedPartition

__all__ = ["KeySharedConfig", "KeySlotMember"]

# Logged as the engine, as before this module was split off.
log = logging.getLogger("marshal_py.client.key_shared_engine")


@dataclass(frozen=True)
class KeySharedConfig(MemberConfig):
    """Settings of one key-shared member: those of :class:`MemberConfig`, nothing more."""


class KeySlotMember(GroupMember[KeySharedConfig]):
    """The slots a key-shared member holds, per partition, and what it writes about them
    (see :class:`~marshal_py.client.key_shared_engine.KeySharedEngine` for the whole
    member). Not thread-safe: the caller serializes calls."""

    def __init__(self, config: KeySharedConfig, log_: CoordinationLog,
                 rationalizer: Rationalizer, source: PartitionSource, clock: EngineClock,
                 rng: random.Random) -> None:
        super().__init__(config, log_, rationalizer, source, clock, rng)
        self.holdings: dict[TP, SlotHolding] = {}
        self.stats = KeySharedStats()

    def _drop_all(self) -> None:
        self.holdings.clear()

    def _state(self, topic: str, partition: int) -> KeySharedPartition | None:
        return self.rationalizer.key_shared_partition(self.config.group_id, topic, partition)

    # -- the holdings and the log -------------------------------------------------------

    def _reconcile(self, holding: SlotHolding) -> None:
        """Bring a holding in line with the log as read: drop the slots others own now, take
        up those the log gave us, and set the lease from our last claim or heartbeat about
        the partition that the log applied.

        Called after every read of the log that may renew the lease (:meth:`_refresh`, and a
        claim's read-back): a lease renewed without it would cover slots taken from us while
        we were stale, read in the same catch-up, and hand them out beside their new owner.
        """
        topic, partition = holding.topic, holding.partition
        state = self._state(topic, partition)
        if state is None:
            lost = set(holding.owned)
            found: set[int] = set()
        else:
            owners = state.owners()
            iid, cid = self.me.instance_id, self.me.client_id
            ours = {s for s, o in enumerate(owners)
                    if o is not None and o.instance_id == iid and o.client_id == cid}
            lost = holding.owned - ours
            found = ours - holding.owned
        if lost:
            holding.materialize()
            holding.drop(lost)
            self.stats.slots_lost += len(lost)
            log.warning("lost %d key slots of %s/%d to other members; stopped delivering "
                        "them", len(lost), topic, partition)
        if found:  # a claim of ours the log applied (maybe while we could not read it back)
            self._adopt(holding, found)
        seen = None if state is None else state.last_seen.get(self.me)
        holding.lease_until_ms = 0 if seen is None else seen + self.hi

    def _adopt(self, holding: SlotHolding, slots: set[int]) -> None:
        """Take up slots the log says we own: start each at its committed offset."""
        state = self._state(holding.topic, holding.partition)
        assert state is not None
        beginning, end = self.source.offset_bounds(holding.topic, holding.partition)
        reset = self._reset_position(holding.topic, holding.partition, beginning, end)
        uncommitted = False
        starts: dict[int, int] = {}
        for slot in slots:
            committed = state.committed(slot)
            if committed is None:
                start, uncommitted = reset, True
            elif committed < beginning:
                start = beginning  # deleted by retention
            elif committed > end:
                start = reset
            else:
                start = committed
            starts[slot] = start
        if not holding.owned:
            holding.last_renewal_ms = self.clock.now_ms()  # the claim was just written
        holding.owned |= slots
        holding.cursor.update(starts)
        self._activate(holding, slots)
        self.stats.slots_won += len(slots)
        log.info("took %d key slots of %s/%d (now %d), starting at offset %d", len(slots),
                 holding.topic, holding.partition, len(holding.owned), min(starts.values()))
        if uncommitted:
            self._heartbeat(holding)  # commit the starting offset at once

    def _activate(self, holding: SlotHolding, slots: set[int]) -> None:
        """Hand out ``slots`` (owned) again; move the scan back if one starts below it."""
        lowest = min(holding.cursor[s] for s in slots)
        if holding.scan is not None and holding.active:
            holding.materialize()
        holding.active |= slots
        if holding.scan is None or lowest < holding.scan or not (holding.active - slots):
            holding.scan = min(holding.cursor[s] for s in holding.active)
            holding.epoch += 1
            self.stats.seeks += 1

    def _heartbeat(self, holding: SlotHolding) -> bool:
        floor = holding.commit_floor()
        if floor is None:
            return False
        now = self.clock.now_ms()
        ok = self._try_append(KeyRangesHeartbeat(
            now // 1000, self.me.instance_id, self.me.client_id, self.config.group_id,
            holding.topic, holding.partition, floor))
        if ok:
            holding.next_heartbeat_ms = now + self._jittered()
            self.stats.heartbeats += 1
        else:
            holding.next_heartbeat_ms = now + min(1000, self.hi // 10)
            self.stats.heartbeat_failures += 1
        return ok

    def _release(self, holding: SlotHolding, offsets: dict[int, int]) -> None:
        """Write one ReleasingKeyRanges per distinct offset (slot -> release offset)."""
        by_offset: dict[int, list[int]] = {}
        for slot, offset in offsets.items():
            by_offset.setdefault(offset, []).append(slot)
        for offset, slots in sorted(by_offset.items()):
            self._append(ReleasingKeyRanges(
                self.clock.now_ms() // 1000, self.me.instance_id, self.me.client_id,
                self.config.group_id, holding.topic, holding.partition,
                format_ranges(ranges_of(slots)), offset))
            holding.drop(slots)
            self.stats.slots_released += len(slots)
            log.info("released %d key slots of %s/%d at offset %d", len(slots), holding.topic,
                     holding.partition, offset)

    def _release_all(self, topic: str | None = None) -> None:
        """Release every slot (of ``topic``, or of every topic) at its cursor."""
        for key, holding in list(self.holdings.items()):
            if topic is not None and key[0] != topic:
                continue
            holding.materialize()
            offsets: dict[int, int] = {}
            for slot in holding.owned:
                offsets[slot] = holding.cursor[slot]
            for offset, slot in holding.outstanding.items():
                offsets[slot] = min(offsets.get(slot, offset), offset)
            # A micro-batch not complete: its slots come again from the batch's start.
            for start, slots in holding.batches.items():
                for slot in slots:
                    offsets[slot] = min(offsets.get(slot, start), start)
            try:
                self._release(holding, offsets)
            except MarshalError as exc:
                log.warning("could not release the key slots of %s/%d: %s", holding.topic,
                            holding.partition, exc)
            del self.holdings[key]

    # -- delivery -----------------------------------------------------------------------

    def fetch_plan(self) -> dict[TP, tuple[int, int]]:
        """Partitions to fetch, each with (fetch epoch, position): fetch from the position
        whenever the epoch changes; records fetched under an older epoch are not delivered.
        A partition whose lease lapsed is left out until a heartbeat is confirmed again."""
        now = self.clock.now_ms()
        return {key: (h.epoch, h.scan) for key, h in self.holdings.items()
                if h.active and h.scan is not None and now < h.lease_until_ms}

    def deliver(self, topic: str, partition: int, epoch: int, offset: int, slot: int) -> bool:
        """Offer a fetched record (in offset order) right before handing it out; True hands
        it out and advances its slot's cursor past it (:meth:`SlotHolding.deliver`)."""
        holding = self.holdings.get((topic, partition))
        return holding is not None and holding.deliver(epoch, offset, slot,
                                                       self.clock.now_ms(), self.stats)

    def passed(self, topic: str, partition: int, epoch: int, position: int) -> None:
        """The fetch of ``epoch`` passed every offset below ``position`` after the records
        offered so far (:meth:`SlotHolding.passed`)."""
        holding = self.holdings.get((topic, partition))
        if holding is not None:
            holding.passed(epoch, position, self.clock.now_ms())

    def commit(self, topic: str, partition: int, offset: int) -> bool:
        """Mark a handed-out record processed. False if it was not outstanding (its slot was
        lost meanwhile, or it was committed already)."""
        holding = self.holdings.get((topic, partition))
        return holding is not None and holding.commit(offset)

    # -- micro-batch members ------------------------------------------------------------

    def hand_out_range(self, topic: str, partition: int, end: int
                       ) -> tuple[int, frozenset[int], dict[int, int]] | None:
        """Hand out at once every record of this member's active slots of a partition up to
        ``end`` (exclusive), for a micro-batch (:meth:`SlotHolding.hand_out_range`); report it
        processed with :meth:`commit_range`."""
        holding = self.holdings.get((topic, partition))
        return None if holding is None else holding.hand_out_range(end, self.clock.now_ms())

    def commit_range(self, topic: str, partition: int, start: int) -> bool:
        """The micro-batch range of a partition handed out from ``start`` is processed. False
        if no such range is outstanding (its slots were lost meanwhile)."""
        holding = self.holdings.get((topic, partition))
        return holding is not None and holding.commit_range(start)

    def may_deliver(self, topic: str, partition: int, slot: int) -> bool:
        """Would a record of ``slot`` be handed out now (owned, not releasing, lease valid)?"""
        holding = self.holdings.get((topic, partition))
        return (holding is not None and slot in holding.active
                and self.clock.now_ms() < holding.lease_until_ms)

    def owns(self, topic: str, partition: int, slot: int) -> bool:
        """Is ``slot`` of the partition ours (as last read from the log)?"""
        holding = self.holdings.get((topic, partition))
        return holding is not None and slot in holding.owned

    def slots(self, topic: str, partition: int) -> set[int]:
        """The slots of a partition this member owns (a copy)."""
        holding = self.holdings.get((topic, partition))
        return set() if holding is None else set(holding.owned)

    def uncommitted(self) -> int:
        """Records handed out and not yet committed, over all partitions."""
        return sum(len(h.outstanding) for h in self.holdings.values())

    def flush_commits(self) -> None:
        """Heartbeat every partition where we own slots now (e.g. before a planned pause)."""
        for holding in self.holdings.values():
            if holding.owned:
                self._heartbeat(holding)

    # -- writing ------------------------------------------------------------------------

    def _claim_message(self, topic: str, partition: int, slots: Iterable[int]) -> Message:
        return ClaimingKeyRanges(self.clock.now_ms() // 1000, self.me.instance_id,
                                 self.me.client_id, self.config.group_id, topic, partition,
                                 format_ranges(ranges_of(slots)))
