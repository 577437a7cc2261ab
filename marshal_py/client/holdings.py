"""The partitions an exclusive member holds: leases, heartbeats, releases, AMO windows.

:class:`HoldingMember` is the half of the exclusive engine that deals with partitions
already won; :class:`~marshal_py.client.engine.MemberEngine` adds claiming and balancing on
top. Each held partition has a :class:`~marshal_py.client.lease.PartitionLease` that the
engine publishes (``leases``, replaced whole on every change, ``lease_version`` counting the
changes) for the thread that hands records out; that thread reads it without a lock.

Writes are batched: every heartbeat, renewal and at-most-once window that is due goes out in
one :meth:`~marshal_py.client.channel.CoordinationChannel.append_all`, and the read-back that
confirms them is one fetch.
"""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from marshal_py.client.engine_types import Balance, EngineClock, EngineMode, PartitionSource
from marshal_py.client.lease import CommitCursor, PartitionLease
from marshal_py.client.member_base import GroupMember, MemberConfig
from marshal_py.errors import ConfigurationError, CoordinationLogLostError, MarshalError
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol import (
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    Message,
    ReleasingPartition,
)
from marshal_py.world import CoordinationRecord, PartitionClaim, Rationalizer

log = logging.getLogger(__name__)

TP = tuple[str, int]

#: Default upper bound of one at-most-once window, in records.
DEFAULT_AMO_WINDOW_RECORDS = 10_000
#: Default span of one at-most-once window: about this much consumption time.
DEFAULT_AMO_WINDOW_MS = 100


def _nothing() -> None:
    """The default :attr:`HoldingMember.on_leases`."""


@dataclass(frozen=True)
class EngineConfig(MemberConfig):
    """Settings of one exclusive-mode member (on top of :class:`MemberConfig`)."""

    mode: EngineMode = "alo"
    balance: Balance = "fair"
    max_claims: int | None = None
    #: Greedy members: release a partition whose lag exceeds this many records, when another
    #: live member holds fewer partitions and so could take it (None: never).
    release_lag: int | None = None
    #: At-most-once: a window confirms at most this many records...
    amo_window_records: int = DEFAULT_AMO_WINDOW_RECORDS
    #: ...and about this much consumption time (the delivering side sizes it).
    amo_window_ms: int = DEFAULT_AMO_WINDOW_MS

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.mode not in ("alo", "amo", "eos"):
            raise ConfigurationError(f"mode must be 'alo', 'amo' or 'eos', not {self.mode!r}")
        if self.balance not in ("fair", "greedy"):
            raise ConfigurationError(f"balance must be 'fair' or 'greedy', not {self.balance!r}")
        if self.max_claims is not None and self.max_claims < 1:
            raise ConfigurationError("max_claims must be >= 1 (or None for no limit)")
        if self.release_lag is not None and self.release_lag < 1:
            raise ConfigurationError("release_lag must be >= 1 record (or None)")
        if self.amo_window_records < 1:
            raise ConfigurationError("amo_batch_size must be >= 1 record")
        if not 1 <= self.amo_window_ms <= 60_000:
            raise ConfigurationError("amo_window must be between 0.001 and 60 seconds")


@dataclass
class Holding:
    """A partition this member owns."""

    topic: str
    partition: int
    epoch: int
    lease: PartitionLease
    #: Broker time of our last heartbeat seen applied in the log, plus one HI. Records are
    #: delivered only before it: others may take the partition 2 HI after that heartbeat.
    lease_until_ms: int
    next_heartbeat_ms: int
    last_renewal_ms: int
    heartbeat_failures: int = 0
    #: At-most-once: the highest offset a ClaimingMessages was written for under this claim.
    amo_requested: int = -1

    @property
    def cursor(self) -> CommitCursor:
        """Handed-out and committed records (written by the delivering side)."""
        return self.lease.cursor


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


class HoldingMember(GroupMember[EngineConfig]):
    """Held partitions of one exclusive member, their leases and what is written for them.

    Not thread-safe except where said: the caller serializes calls. ``handout_guard`` is
    taken around revoking a lease together with reading what was handed out under it; a
    threaded at-most-once consumer passes the lock its delivering thread holds while it
    hands a record out, so no record slips out between the two.
    """

    def __init__(self, config: EngineConfig, log_: CoordinationLog, rationalizer: Rationalizer,
                 source: PartitionSource, clock: EngineClock, rng: random.Random) -> None:
        super().__init__(config, log_, rationalizer, source, clock, rng)
        self.holdings: dict[TP, Holding] = {}
        self.stats = EngineStats()
        #: The leases of the held partitions, replaced whole on every change.
        self.leases: dict[TP, PartitionLease] = {}
        #: Incremented on every change of :attr:`leases`.
        self.lease_version = 0
        self.handout_guard: AbstractContextManager[object] = contextlib.nullcontext()
        #: Called (on the engine's thread) when claims were just won, before the step goes
        #: on: the delivering side may take the new leases up at once.
        self.on_leases: Callable[[], None] = _nothing
        #: True when the caller reads the log itself (:meth:`CoordinationChannel.follow`)
        #: between steps, so a step does not catch up first.
        self.follows_log = False
        self._epoch = 0

    # -- holdings and their leases ------------------------------------------------------------

    def _publish(self) -> None:
        self.leases = {key: h.lease for key, h in self.holdings.items()}
        self.lease_version += 1

    def _hold(self, topic: str, partition: int, start: int, lease_until_ms: int) -> Holding:
        self._epoch += 1
        now = self.clock.now_ms()
        lease = PartitionLease(topic, partition, self._epoch, start, 0.0)
        holding = Holding(topic, partition, self._epoch, lease, lease_until_ms,
                          next_heartbeat_ms=now, last_renewal_ms=now)
        self._set_lease_until(holding, lease_until_ms)
        self.holdings[(topic, partition)] = holding
        self._publish()
        return holding

    def _drop(self, key: TP) -> Holding:
        """Stop holding ``key``: its lease is revoked before anything else happens."""
        holding = self.holdings.pop(key)
        with self.handout_guard:
            holding.lease.revoke()
        self._publish()
        self._dropped(key)
        return holding

    def _dropped(self, key: TP) -> None:
        """``key`` is no longer held (subclasses)."""

    def _drop_all(self) -> None:
        for key in list(self.holdings):
            self._drop(key)

    def _set_lease_until(self, holding: Holding, until_ms: int) -> None:
        holding.lease_until_ms = until_ms
        if not holding.lease.revoked:
            holding.lease.deadline = self.clock.monotonic_ms() + (until_ms - self.clock.now_ms())

    def _sync_with_world(self) -> None:
        """Drop claims the log gave to others; extend leases by heartbeats read back."""
        for key, holding in list(self.holdings.items()):
            claim = self._claim(*key)
            if claim.owner != self.me:
                self._drop(key)
                self.stats.lost_after_winning += 1
                log.warning("lost the claim on %s/%d to %s; stopped delivering it",
                            key[0], key[1], claim.owner)
            elif claim.last_heartbeat_ms is not None \
                    and claim.last_heartbeat_ms + self.hi != holding.lease_until_ms:
                self._set_lease_until(holding, claim.last_heartbeat_ms + self.hi)

    def _read_back(self, written: list[CoordinationRecord]) -> bool:
        """Read our just-written records back and update the holdings; False on failure."""
        if not self._try_catch_up(lambda: self.channel.read_back(written)):
            return False
        self._sync_with_world()
        return True

    # -- heartbeats, renewals, expiry --------------------------------------------------------

    def _send_heartbeats(self, now: int, *, force: bool = False) -> list[CoordinationRecord]:
        """Write every renewal and heartbeat that is due (``force``: every heartbeat), in
        one batch; return what was written."""
        messages: list[Message] = []
        beating: list[Holding] = []
        renewing: list[Holding] = []
        for holding in self.holdings.values():
            if now - holding.last_renewal_ms >= self.config.renew_interval_ms:
                messages.append(self._partition_message(ClaimingPartition, holding))
                renewing.append(holding)
            if force or holding in renewing or now >= holding.next_heartbeat_ms:
                messages.append(self._heartbeat_message(holding))
                beating.append(holding)
        if not messages:
            return []
        try:
            written = self.channel.append_all(messages)
        except (ConfigurationError, CoordinationLogLostError):
            raise
        except MarshalError as exc:
            log.warning("could not write %d heartbeat(s): %s", len(beating), exc)
            for holding in beating:
                holding.heartbeat_failures += 1
                self.stats.heartbeat_failures += 1
                holding.next_heartbeat_ms = now + min(1000, self.hi // 10)
            return []
        for holding in renewing:
            holding.last_renewal_ms = now
        for holding in beating:
            holding.next_heartbeat_ms = now + self._jittered()
            holding.heartbeat_failures = 0
            self.stats.heartbeats += 1
        return written

    def _expire_leases(self, now: int) -> None:
        for key, holding in list(self.holdings.items()):
            if now >= holding.lease_until_ms:
                # No heartbeat of ours confirmed for one HI: others may take the partition
                # at 2 HI, so we stop now and give it up.
                self._drop(key)
                log.warning("no heartbeat of %s/%d confirmed for one interval; released it",
                            key[0], key[1])
                if self._try_append(self._release_message(holding)):
                    self.stats.released += 1

    def _forget_topic(self, topic: str) -> None:
        self._release([key for key in self.holdings if key[0] == topic], "topic deleted")

    def _release(self, keys: list[TP], why: str, *, closing: bool = False) -> None:
        """Stop holding ``keys`` and write their releases with the committed offsets in one
        batch. Refused credentials or ACLs stay fatal unless ``closing``; other failures are
        logged (the claims then go stale)."""
        held = [self._drop(key) for key in keys]
        if not held:
            return
        try:
            self.channel.append_all([self._release_message(h) for h in held])
        except CoordinationLogLostError:
            raise
        except ConfigurationError:
            if not closing:
                raise
            log.warning("could not release %s: refused", _names(held))
            return
        except MarshalError as exc:
            log.warning("could not release %s: %s", _names(held), exc)
            return
        self.stats.released += len(held)
        log.info("released %s (%s)", _names(held), why)

    # -- at-most-once windows -----------------------------------------------------------------

    def _confirm_windows(self) -> bool:
        """Confirm in the log every at-most-once window the delivering side asked for (one
        batch of ClaimingMessages, one read-back); True when any was confirmed."""
        if self.config.mode != "amo":
            return False
        now = self.clock.now_ms()
        # Asked again until confirmed: a window written but not read back (the read failed)
        # is written once more, which changes nothing in the log.
        asked = [h for h in self.holdings.values()
                 if h.lease.amo_wanted > h.lease.amo_confirmed and now < h.lease_until_ms]
        if not asked:
            return False
        wanted = {(h.topic, h.partition): h.lease.amo_wanted for h in asked}
        try:
            written = self.channel.append_all(
                [self._partition_message(ClaimingMessages, h, wanted[(h.topic, h.partition)])
                 for h in asked])
        except (ConfigurationError, CoordinationLogLostError):
            raise
        except MarshalError as exc:
            log.warning("cannot confirm at-most-once windows now: %s", exc)
            self.stats.amo_batches_refused += len(asked)
            return False
        for holding in asked:
            holding.amo_requested = wanted[(holding.topic, holding.partition)]
        if not self._read_back(written):
            return False
        confirmed = False
        for key, want in wanted.items():
            still = self.holdings.get(key)
            claim = self._claim(*key)
            if still is None or claim.owner != self.me or claim.amo_claimed_offset is None \
                    or claim.amo_claimed_offset < want:
                self.stats.amo_batches_refused += 1
                continue
            still.lease.amo_confirmed = max(still.lease.amo_confirmed, want)
            self.stats.amo_batches_confirmed += 1
            confirmed = True
        return confirmed

    # -- when the next step is due ------------------------------------------------------------

    def _holding_due_ms(self) -> int | None:
        """The earliest heartbeat, renewal or lease expiry of the held partitions."""
        due: list[int] = []
        for holding in self.holdings.values():
            due.append(holding.next_heartbeat_ms)
            due.append(holding.last_renewal_ms + self.config.renew_interval_ms)
            due.append(holding.lease_until_ms)
        return min(due) if due else None

    # -- the delivery interface of micro-batch members and simulations ------------------------

    def assignments(self) -> dict[TP, tuple[int, int]]:
        """Held partitions with (epoch, next offset to fetch)."""
        return {k: (h.epoch, h.cursor.position) for k, h in self.holdings.items()}

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
        """Decide, synchronously, whether a fetched batch may be delivered.

        At-least-once: yes while the claim is held. At-most-once: only once a
        ClaimingMessages for the batch's last offset is confirmed in the log (under this
        claim: a batch fetched again after a rewind needs no new one); a refused batch is
        never delivered (it may be lost, never duplicated). Each record is then handed out
        through :meth:`deliver`. (The threaded consumer confirms windows ahead of delivery
        instead: :attr:`leases`.)
        """
        holding = self.holdings.get((topic, partition))
        if holding is None or not self.holds(topic, partition, epoch) or not offsets:
            return False
        last = max(offsets)
        if self.config.mode == "amo" and holding.lease.amo_confirmed < last:
            holding.lease.amo_wanted = max(holding.lease.amo_wanted, last)
            if not self._confirm_windows() or holding.lease.amo_confirmed < last:
                self._sync_with_world()
                return False
        holding.cursor.handed(offsets, next_position)
        return True

    def deliver(self, topic: str, partition: int, epoch: int, offset: int) -> bool:
        """Ask, right before handing a record out, whether it may be; True hands it out.

        At-most-once counts the record as done at this moment (so a release or heartbeat
        carries exactly what was handed out); at-least-once waits for :meth:`commit`.
        """
        if not self.holds(topic, partition, epoch):
            return False
        if self.config.mode == "amo":
            self.holdings[(topic, partition)].cursor.commit_through(offset)
        return True

    def rewind(self, topic: str, partition: int, epoch: int, offset: int) -> int | None:
        """Fetched records from ``offset`` on were not handed out (the lease lapsed for a
        moment): if the claim is still held under ``epoch``, return the position to fetch
        from again; None when the claim is gone (a new claim starts from the commit)."""
        holding = self.holdings.get((topic, partition))
        if holding is None or holding.epoch != epoch:
            return None
        holding.cursor.rewind(offset)
        return holding.cursor.position

    def commit(self, topic: str, partition: int, offset: int, epoch: int | None = None) -> bool:
        """Mark a delivered record processed (at-least-once). False if the claim is gone."""
        holding = self.holdings.get((topic, partition))
        if holding is None or (epoch is not None and holding.epoch != epoch):
            return False
        holding.cursor.commit(offset)
        return True

    def committed(self, topic: str, partition: int) -> int | None:
        """The committed offset of a held partition."""
        holding = self.holdings.get((topic, partition))
        return holding.cursor.committed if holding else None

    def flush_commits(self) -> None:
        """Heartbeat every held partition now (e.g. before a planned pause)."""
        written = self._send_heartbeats(self.clock.now_ms(), force=True)
        if written:
            self._read_back(written)

    # -- messages -------------------------------------------------------------------------------

    def _claim(self, topic: str, partition: int) -> PartitionClaim:
        return self.rationalizer.claim(self.config.group_id, topic, partition)

    def _partition_message(self, kind: type[Heartbeat] | type[ClaimingPartition]
                           | type[ReleasingPartition] | type[ClaimingMessages],
                           holding: Holding, *extra: int) -> Message:
        base = (self.clock.now_ms() // 1000, self.me.instance_id, self.me.client_id,
                self.config.group_id, holding.topic, holding.partition)
        return kind(*base, *extra)

    def _heartbeat_message(self, holding: Holding) -> Message:
        return self._partition_message(Heartbeat, holding, holding.cursor.committed)

    def _release_message(self, holding: Holding) -> Message:
        return self._partition_message(ReleasingPartition, holding, holding.cursor.committed)


def _names(held: list[Holding]) -> str:
    return ", ".join(f"{h.topic}/{h.partition}" for h in held)
