"""ShareEngine: one member of a share group, single-threaded and steppable.

Every member consumes every partition of its topics: it acquires ranges of records under
time-limited locks (``AcquiringRecords``), hands them out, and acknowledges them
(``AcknowledgingRecords``: accept, release, reject). The rationalizer decides who got what.
Like :class:`~marshal_py.client.engine.MemberEngine`, it never starts a thread and never reads
a clock or a random source of its own.
"""

from __future__ import annotations

import logging
import random
from collections import defaultdict
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import replace

from marshal_py.client.engine_types import EngineClock, PartitionSource
from marshal_py.client.member_base import GroupMember
from marshal_py.client.share_config import ShareConfig, ShareStats
from marshal_py.client.share_regions import RegionPicker, region_size
from marshal_py.errors import ConfigurationError, MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    InitializingSharePartition,
    Message,
    RenewingLocks,
    format_ranges,
    ranges_of,
)
from marshal_py.protocol.messages import ALL_ACK_KINDS
from marshal_py.world import CoordinationRecord, Rationalizer
from marshal_py.world.share import InFlightRecord, RecordState

__all__ = ["ShareConfig", "ShareEngine", "ShareStats"]

log = logging.getLogger(__name__)

TP = tuple[str, int]


class ShareEngine(GroupMember[ShareConfig]):
    """One member of a share group. Not thread-safe: the caller serializes calls."""

    def __init__(self, config: ShareConfig, log_: CoordinationLog, rationalizer: Rationalizer,
                 source: PartitionSource, clock: EngineClock, rng: random.Random) -> None:
        super().__init__(config, log_, rationalizer, source, clock, rng)
        #: Records this member acquired and has not acknowledged: tp -> offset -> delivery count
        self.held: dict[TP, dict[int, int]] = defaultdict(dict)
        self._lock_expiry: dict[TP, dict[int, int]] = defaultdict(dict)
        self._pending: dict[tuple[TP, str], list[int]] = defaultdict(list)
        #: The end (last stable offset under read_committed) each partition was last seen to
        #: have: asked again only when acquisition has caught up with it.
        self._ends: dict[TP, int] = {}
        #: Held offsets that are dead-letter duties, with their state when acquired.
        self.duties: dict[TP, dict[int, InFlightRecord]] = defaultdict(dict)
        self._told_dead_letters: set[TP] = set()
        self.stats = ShareStats()
        #: Bumped whenever held records are let go other than by this member's own
        #: acknowledgement (suspended, closed, dropped, a topic deleted, a lock elapsed): a
        #: consumer's copies of lock expiries taken before it are no proof of holding.
        self.drops = 0
        #: Per partition: which regions of the in-flight window this member asks for.
        self._pickers: dict[TP, RegionPicker] = {}
        #: How long another member's region may stay Available before this one takes it:
        #: two ticks of the coordination thread (min(1 s, HI / 5, lock / 10)).
        self._steal_after_ms = 2 * min(1_000, config.heartbeat_interval_ms // 5,
                                       config.lock_ms // 10)
        #: Entered around an acquisition's append (its round trip): a consumer that guards
        #: the engine with a lock may let its fetching thread hand records out meanwhile.
        self.appending: Callable[[], AbstractContextManager[object]] = nullcontext
        #: Acknowledgements written by :meth:`flush` that could not be applied at once.
        self._unread_acks: list[CoordinationRecord] = []

    def _drop_all(self) -> None:
        self.drops += 1
        self.duties.clear()
        self.held.clear()
        self._lock_expiry.clear()
        self._pending.clear()

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> None:
        """Replay the coordination log, announce this member, initialize share-partitions.
        A checkpoint due now waits for the next tick: the first acquisition comes first."""
        self._join()
        self.tick(checkpoint=False)

    def close(self) -> None:
        """Acknowledge what is pending, release what is held but unacknowledged, leave."""
        if self._closed:
            return
        try:
            self.drops += 1
            for tp, offsets in list(self.held.items()):
                for offset in offsets:
                    self._pending[(tp, "release")].append(offset)
            self.flush()
        except MarshalError as exc:
            log.warning("could not release share records on close: %s", exc)
        finally:
            self._closed = True
        self._leave()

    def suspend(self) -> None:
        """Take no part until :meth:`resume`: release what is held but unacknowledged (its
        delivery counts stay, so a record that hangs every handler reaches the delivery
        limit), acquire and renew nothing, leave. For an application that stopped asking
        for records (max_poll_interval)."""
        if self._closed or self.suspended:
            return
        self.suspended = True
        self.drops += 1
        for tp, offsets in list(self.held.items()):
            self._pending[(tp, "release")].extend(offsets)
        self.held.clear()
        self.duties.clear()
        self._lock_expiry.clear()
        try:
            self.flush()
        except MarshalError as exc:
            log.warning("could not release share records: %s", exc)
        self._leave()

    def tick(self, *, flush: bool = True, checkpoint: bool = True) -> None:
        """Catch up, announce membership, initialize new share-partitions, renew locks,
        (with ``flush``) write queued acknowledgements and (with ``checkpoint``) the group's
        checkpoint when one is due. A caller that acquires right after passes
        ``flush=False``: the acquisition carries them in its round trip, and the caller
        flushes what is left (:meth:`flush`); it may pass ``checkpoint=False`` and call
        :meth:`checkpoint` after its acquisition."""
        if self._closed:
            return
        self._catch_up()
        if self.suspended:
            return
        self._watch_topics()
        now = self.clock.now_ms()
        self._check_group()
        self._announce_if_due(now, strict=True)
        for topic in self.config.topics:
            count = self.source.partition_count(topic) or 0
            for partition in range(count):
                share = self.rationalizer.share_partition(self.config.group_id, topic,
                                                          partition)
                if share is None:
                    self._initialize(topic, partition)
                elif (topic, partition) not in self._told_dead_letters:
                    self._tell_dead_letters(topic, partition, share.dead_letter_topic)
        self._renew_due(now)
        if flush:
            self.flush()
        if checkpoint:
            self.checkpoint()

    def checkpoint(self) -> None:
        """Write the group's checkpoint where one is due (PROTOCOL.md 11.3)."""
        if not self._closed and not self.suspended:
            self.channel.maybe_checkpoint(self.me)

    def _forget_topic(self, topic: str) -> None:
        """Release the records held of a deleted topic (their delivery counts stay)."""
        self.drops += 1
        for tp in [tp for tp in self.held if tp[0] == topic]:
            self._pending[(tp, "release")].extend(self.held.pop(tp))
            self._lock_expiry.pop(tp, None)

    def _initialize(self, topic: str, partition: int) -> None:
        beginning, end = self.source.offset_bounds(topic, partition)
        start = self._reset_position(topic, partition, beginning, end)
        if self.config.start_time_ms is not None and partition < self._first_counts.get(
                topic, partition + 1):
            found = self.source.offset_for_time(topic, partition, self.config.start_time_ms)
            start = end if found is None else max(beginning, found)
        self._append(InitializingSharePartition(
            self.clock.now_ms() // 1000, self.me.instance_id, self.me.client_id,
            self.config.group_id, topic, partition, start, self.config.delivery_limit,
            self.config.inflight_limit, self.config.dead_letter_topic))
        self._catch_up()

    def _tell_dead_letters(self, topic: str, partition: int, logged: str) -> None:
        """Warn once when the log's dead-letter topic of a share-partition (fixed by its
        first initialization) is not this member's setting: the log's is the one used."""
        self._told_dead_letters.add((topic, partition))
        mine = self.config.dead_letter_topic
        if logged == mine:
            return
        where = f"{self.config.group_id} {topic}/{partition}"
        if not logged:
            log.warning("%s was initialized without a dead-letter topic: records reaching the "
                        "delivery limit are archived, not written to %r (reset the share "
                        "group's offsets while it is empty to set one)", where, mine)
        else:
            log.warning("%s dead-letters to %r, fixed when it was initialized; this member's "
                        "setting %s is not used", where, logged,
                        repr(mine) if mine else "(none)")

    def dead_letter_topic(self, topic: str, partition: int) -> str:
        """The topic the log says this share-partition dead-letters to ("" for none)."""
        share = self.rationalizer.share_partition(self.config.group_id, topic, partition)
        return "" if share is None else share.dead_letter_topic

    # -- acquiring -----------------------------------------------------------------------------

    def acquire(self, topic: str, partition: int, max_records: int | None = None,
                until: int | None = None, *, duties: bool = False,
                sharing: int | None = None) -> list[tuple[int, int]]:
        """Acquire up to ``max_records`` records of a partition; return (offset, delivery
        count) of those granted, in offset order. With ``duties``, records owed a dead
        letter come first (granted as duties: see :attr:`duties`), then Available records
        up to the partition's end (or ``until``, exclusive) in this member's regions of the
        in-flight window, then, if that is short, those of other members' regions left
        Available for two ticks (:mod:`marshal_py.client.share_regions`). ``sharing``: how
        many live members share the partition's regions (all of them by default; one when
        the application is fast: :mod:`marshal_py.client.share_window`)."""
        share = self.rationalizer.share_partition(self.config.group_id, topic, partition)
        if share is None or self._closed or self.suspended or \
                topic in self.topic_watch.missing:
            return []
        if self._unread_acks:
            # Acknowledgements written without a read-back move the SPSO, which bounds
            # what may be acquired: read them first (one fetch, rarely needed).
            unread = [r for r in self._unread_acks
                      if r.position >= self.rationalizer.next_position(r.partition)]
            self._unread_acks = []
            if unread:
                self.channel.read_back(unread)
            share = self.rationalizer.share_partition(self.config.group_id, topic, partition)
            if share is None:
                return []
        wanted = max_records or self.config.batch_size
        now = self.clock.now_ms()
        end = self._end_of(topic, partition, share.speo)
        limit = min(end, self._spso_after_acks(topic, partition, share.spso) + share.inflight_limit)
        if until is not None:
            limit = min(limit, until)
        mine = self.held.get((topic, partition), {})
        runs = share.runs_between(share.spso, limit - 1, now)
        candidates = [offset for a, b, view in runs if view.state is RecordState.DEAD_LETTER
                      for offset in range(a, b + 1) if offset not in mine][:wanted] \
            if duties and share.dead_letter_topic else []
        if len(candidates) < wanted:
            # Ranked by when they joined: a newcomer takes the last rank, and the ranks of
            # those before it stay (partition 0 of a fast group is read by its first member).
            members = self.rationalizer.members_by_join(self.config.group_id, topic, now)
            if self.me not in members:
                members = (*members, self.me)  # joins now: the last
            picker = self._pickers.setdefault((topic, partition), RegionPicker(partition))
            shared_by = len(members) if sharing is None else min(sharing, len(members))
            candidates += picker.pick(
                runs, wanted - len(candidates), members.index(self.me), len(members),
                region_size(share.inflight_limit, shared_by), mine, now,
                self._steal_after_ms, sharing=shared_by)
        if not candidates:
            return []
        ranges = ranges_of(candidates)
        message = AcquiringRecords(now // 1000, self.me.instance_id, self.me.client_id,
                                   self.config.group_id, topic, partition,
                                   format_ranges(ranges), self.config.lock_ms)
        # Queued acknowledgements go first, in the same round trip: they free the in-flight
        # window (and move the SPSO) before the acquisition applies.
        messages = [*self._acknowledgements(), message]
        self.stats.coordination_records += len(messages)
        with self.appending():
            written = self.channel.append_all(messages)
        self.stats.acquisitions += 1
        self.channel.read_back(written)  # the log decided which of them are ours
        granted = []
        expiries = self._lock_expiry[(topic, partition)]
        held = self.held[(topic, partition)]
        now = self.clock.now_ms()
        after = self.rationalizer.share_partition(self.config.group_id, topic, partition)
        for first, last in ranges if after is not None else ():
            assert after is not None
            for a, b, record in after.runs_between(first, last, now):
                if record.state is not RecordState.ACQUIRED or record.holder != self.me:
                    continue
                assert record.lock_expiry_ms is not None
                for offset in range(a, b + 1):
                    if offset in mine:
                        continue
                    held[offset] = record.delivery_count
                    expiries[offset] = record.lock_expiry_ms
                    granted.append((offset, record.delivery_count))
                    if record.duty:
                        self.duties[(topic, partition)][offset] = replace(record, offset=offset)
                        self.stats.duties += 1
        self.stats.records_acquired += len(granted)
        self.stats.records_void += len(candidates) - len(granted)
        granted.sort()
        return granted

    def _spso_after_acks(self, topic: str, partition: int, spso: int) -> int:
        """The SPSO once the queued accepts and rejects (written first) apply; the log clips
        what an acquisition asks past its limit, so the estimate never grants too much."""
        tp = (topic, partition)
        done = {*self._pending.get((tp, "accept"), ()), *self._pending.get((tp, "reject"), ())}
        while spso in done:
            spso += 1
        return spso

    def _end_of(self, topic: str, partition: int, speo: int) -> int:
        """The partition's end for acquiring new records: the one last asked for, asked again
        (one request) only once the share-partition's end offset (SPEO) has reached it, so a
        member with a backlog acquires without a request, and one at the end sees new
        records at once. A smaller end than the true one only limits what is acquired."""
        key = (topic, partition)
        end = self._ends.get(key)
        if end is None or end <= speo:
            end = self._ends[key] = self.source.end_offsets_of([key])[key]
        return end

    def lock_expiries(self, topic: str, partition: int) -> dict[int, int]:
        """The lock expiry (broker ms) of each offset of the partition this member holds
        (read it, do not change it)."""
        return self._lock_expiry.get((topic, partition), {})

    def holds(self, topic: str, partition: int, offset: int,
              delivery_count: int | None = None) -> bool:
        """May this record be handed out now (acquired by us, lock not elapsed)? With
        ``delivery_count``, only under that acquisition: a copy fetched under an earlier one
        whose lock elapsed is stale even when this member acquired the record again."""
        expiry = self._lock_expiry.get((topic, partition), {}).get(offset)
        count = self.held.get((topic, partition), {}).get(offset)
        return (count is not None and expiry is not None and self.clock.now_ms() < expiry
                and (delivery_count is None or count == delivery_count))

    def forget_unheld(self, topic: str, partition: int) -> int:
        """Stop holding records of a partition that the log no longer shows as this
        member's: acknowledged by another writer in its name (the workers of a micro-batch
        engine write ``gap`` for offsets they found empty), or their locks elapsed. Call with
        the log caught up; return how many were dropped."""
        held = self.held.get((topic, partition))
        if not held:
            return 0
        still = {r.offset for r in self.rationalizer.acquired_by(
            self.me, self.config.group_id, topic, partition, self.clock.now_ms())}
        gone = [offset for offset in held if offset not in still]
        self.drops += 1
        expiries = self._lock_expiry[(topic, partition)]
        for offset in gone:
            del held[offset]
            expiries.pop(offset, None)
            self.duties[(topic, partition)].pop(offset, None)
        return len(gone)

    # -- acknowledging -------------------------------------------------------------------------

    def ack(self, topic: str, partition: int, offset: int, kind: str = "accept") -> bool:
        """Queue an acknowledgement (written by :meth:`flush`); False if not held."""
        return self.ack_many(topic, partition, [offset], kind) == 1

    def ack_many(self, topic: str, partition: int, offsets: list[int],
                 kind: str = "accept") -> int:
        """Queue acknowledgements of several records of one partition at once (as
        :meth:`ack` does for one); return how many were held (the others are ignored)."""
        if kind not in ALL_ACK_KINDS:
            raise ConfigurationError(f"acknowledgement kind must be one of "
                                     f"{', '.join(sorted(ALL_ACK_KINDS))}, not {kind!r}")
        tp = (topic, partition)
        held = self.held.get(tp)
        if not held:
            return 0
        expiries = self._lock_expiry[tp]
        duties = self.duties.get(tp)
        done = [offset for offset in offsets if held.pop(offset, None) is not None]
        for offset in done:
            expiries.pop(offset, None)
        if duties:
            for offset in done:
                duties.pop(offset, None)
        self._pending[(tp, kind)].extend(done)
        return len(done)

    def flush(self) -> None:
        """Write queued acknowledgements, one record per partition and kind (one round
        trip for all of them)."""
        messages = self._acknowledgements()
        if messages:
            self.stats.coordination_records += len(messages)
            written = self.channel.append_all(messages)
            # Applied at once where nothing came between (the SPSO they move counts for
            # the next acquisition), else read with the next read-back.
            if not self.channel.apply_own(written):
                following = self.rationalizer.next_position
                self._unread_acks = [r for r in (*self._unread_acks, *written)
                                     if r.position >= following(r.partition)]

    def _acknowledgements(self) -> list[Message]:
        """The queued acknowledgements as messages (the queue is emptied)."""
        pending, self._pending = self._pending, defaultdict(list)
        messages: list[Message] = []
        for ((topic, partition), kind), offsets in sorted(pending.items()):
            if not offsets:
                continue
            messages.append(AcknowledgingRecords(
                self.clock.now_ms() // 1000, self.me.instance_id, self.me.client_id,
                self.config.group_id, topic, partition, format_ranges(ranges_of(offsets)),
                kind))
            self.stats.acks[kind] += len(offsets)
        return messages

    def _renew_due(self, now: int) -> None:
        for (topic, partition), expiries in list(self._lock_expiry.items()):
            due = [o for o, expiry in expiries.items()
                   if now < expiry and expiry - now < self.config.lock_ms // 2]
            for offset in [o for o, expiry in expiries.items() if expiry <= now]:
                self.drops += 1
                del expiries[offset]  # elapsed: no longer ours
                self.held[(topic, partition)].pop(offset, None)
                self.duties[(topic, partition)].pop(offset, None)
            if not due:
                continue
            self._append(RenewingLocks(now // 1000, self.me.instance_id, self.me.client_id,
                                       self.config.group_id, topic, partition,
                                       format_ranges(ranges_of(due)), self.config.lock_ms))
            self.stats.renewals += 1
            self._catch_up()
            for record in self.rationalizer.acquired_by(self.me, self.config.group_id, topic,
                                                        partition, self.clock.now_ms()):
                if record.offset in expiries and record.lock_expiry_ms is not None:
                    expiries[record.offset] = record.lock_expiry_ms

    # -- writing -------------------------------------------------------------------------------

    def _append(self, message: Message) -> int:
        self.stats.coordination_records += 1
        return super()._append(message)
