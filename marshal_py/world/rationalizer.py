"""The deterministic rationalizer: coordination records in, world state out.

Pure: it reads no clock, no socket and no file. Time enters only as each record's broker
timestamp and as the ``now_ms`` argument of queries, so the same records give the same state
on every machine, whenever they are replayed. The rules are written out in PROTOCOL.md; how
the records are applied fast is described in :mod:`marshal_py.world.engine`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from itertools import chain

from marshal_py.protocol.messages import Checkpoint
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world.checkpoint import ClaimState, PairState, decode_state, encode_state
from marshal_py.world.engine import Core
from marshal_py.world.key_shared import KeySharedPartition
from marshal_py.world.lifecycle import (
    GroupLife,
    GroupLifecycle,
    MemberRank,
)
from marshal_py.world.pairs import Pair
from marshal_py.world.rationalizer_config import (
    DEFAULT_AUTH_MAX_SKEW_MS,
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    RationalizerConfig,
)
from marshal_py.world.sequences import PairSequences
from marshal_py.world.share import InFlightRecord, RecordState, SharePartition
from marshal_py.world.state import Owner, PartitionClaim, PartitionKey
from marshal_py.world.verdicts import CODE, Outcome, Verdict

__all__ = ["DEFAULT_AUTH_MAX_SKEW_MS", "DEFAULT_HEARTBEAT_INTERVAL_MS", "Outcome", "Rationalizer",
           "RationalizerConfig", "Verdict"]

class Rationalizer(Core):
    """Replays coordination records into a world state.

    Feed records of each coordination partition in log order with :meth:`apply` or
    :meth:`apply_all` (positions must grow; a repeated or older position is skipped as a
    duplicate). Query with :meth:`claim` / :meth:`claims` and the other views.
    """

    def __init__(self, config: RationalizerConfig) -> None:
        super().__init__(config)
        #: (observer, the verdict codes it wants; None: every record's outcome)
        self._observers: list[tuple[Callable[[Outcome], None], frozenset[int] | None]] = []
        #: The codes every observer wants, when each named its verdicts (None otherwise).
        self._watched: frozenset[int] | None = frozenset()

    def observe(self, observer: Callable[[Outcome], None],
                verdicts: Iterable[Verdict] | None = None) -> None:
        """Call ``observer`` with the outcome of every record applied from now on; with
        ``verdicts``, only of the records given one of them.

        An observer of every outcome makes :meth:`apply_all` apply record by record, with an
        outcome each; observers that name their verdicts keep it on the fast path (no
        object for the other records), and are called, in log order, once the records
        :meth:`apply_all` was given are all applied."""
        codes = None if verdicts is None else frozenset(CODE[v] for v in verdicts)
        self._observers.append((observer, codes))
        self._rewatch()

    def unobserve(self, observer: Callable[[Outcome], None]) -> None:
        """Stop calling ``observer`` (registered with :meth:`observe`)."""
        for i, (registered, _) in enumerate(self._observers):
            if registered == observer:
                del self._observers[i]
                self._rewatch()
                return
        raise ValueError(f"{observer!r} does not observe this rationalizer")

    def _rewatch(self) -> None:
        watched: frozenset[int] | None = frozenset()
        for _, codes in self._observers:
            watched = None if codes is None or watched is None else watched | codes
        self._watched = watched

    # -- input -----------------------------------------------------------------------------

    def apply(self, record: CoordinationRecord) -> Outcome:
        """Apply one record and say what it did. Never raises for bad record content."""
        outcome = self._feed((record,), True)[0]
        if self._observers:
            self._tell(outcome)
        return outcome

    def _tell(self, outcome: Outcome) -> None:
        code = CODE[outcome.verdict]
        for observer, codes in self._observers:
            if codes is None or code in codes:
                observer(outcome)

    def apply_all(self, records: Iterable[CoordinationRecord]) -> None:
        """Apply records in order (the fastest way: no outcome is made unless an observer
        wants it)."""
        watched = self._watched
        if watched is None:
            for record in records:
                self.apply(record)
        elif watched:
            for outcome in self._feed(records, False, watched):
                self._tell(outcome)
        else:
            self._feed(records, False)

    # -- checkpoints -------------------------------------------------------------------------

    def snapshot(self, group: str, topic: str) -> str:
        """The checkpoint text of everything known about ``group`` on ``topic``.

        Write it in a :class:`~marshal_py.protocol.messages.Checkpoint` together with
        :meth:`next_position` of the topic's coordination partition *taken at the same
        moment*: the text describes the state after every record before that position."""
        pair = self._pairs.get((group, topic))
        if pair is None:
            return encode_state(PairState())
        return encode_state(PairState(
            life=pair.life or GroupLife(),
            claims=pair.claims, shares=pair.shares, key_shared=pair.keyed,
            sequences=pair.sequences or PairSequences(),
        ))

    def restore(self, partition: int, checkpoint: Checkpoint) -> None:
        """Take the state of ``checkpoint``'s (group, topic) pair as of its position.

        Call before replaying ``partition`` from ``checkpoint.position`` (or earlier: records
        of the pair below that position are then skipped, the checkpoint already has them).
        Raises :class:`~marshal_py.world.checkpoint.CheckpointError` when the state text
        cannot be read; the rationalizer is unchanged then.
        """
        state = decode_state(checkpoint.state)
        pair = self._pair(checkpoint.group_id, checkpoint.topic)
        pair.clear()
        self._claims_replaced()
        state.life.configure(pair.hi, pair.retention_ms)
        pair.life = state.life
        pair.claims.update(state.claims)
        pair.index.rebuild(pair.claims, min(pair.hi, state.life.min_interval))
        pair.shares.update(state.shares)
        pair.keyed.update(state.key_shared)
        pair.sequences = None if state.sequences.is_empty() else state.sequences
        pair.restored(partition, checkpoint.position)

    def skip_to(self, coordination_partition: int, position: int) -> None:
        """Begin (or continue) that partition's replay at ``position``; records below it will
        be treated as duplicates. Only moves forward."""
        if position > self._next_position.get(coordination_partition, 0):
            self._next_position[coordination_partition] = position

    # -- queries ---------------------------------------------------------------------------

    def next_position(self, coordination_partition: int) -> int:
        """The position the next record of that coordination partition will have."""
        return self._next_position.get(coordination_partition, 0)

    def last_timestamp_ms(self, coordination_partition: int) -> int | None:
        """Broker timestamp of the last record applied from that coordination partition."""
        return self._last_timestamp.get(coordination_partition)

    def _known(self, group: str, topic: str) -> Pair | None:
        return self._pairs.get((group, topic))

    def _life_of(self, group: str, topic: str) -> GroupLife | None:
        pair = self._pairs.get((group, topic))
        return None if pair is None else pair.life

    def _chosen(self, group: str | None, topic: str | None) -> list[Pair]:
        """The pairs matching the filters, sorted by (group, topic)."""
        if group is not None and topic is not None:
            pair = self._pairs.get((group, topic))
            return [] if pair is None else [pair]
        return [pair for key, pair in sorted(self._pairs.items())
                if (group is None or key[0] == group) and (topic is None or key[1] == topic)]

    def claim(self, group: str, topic: str, partition: int) -> PartitionClaim:
        """The state of one partition (an unclaimed view when nothing is known of it)."""
        pair = self._pairs.get((group, topic))
        state = pair.claims.get(partition) if pair is not None else None
        hi = self.config.heartbeat_interval_for(group)
        return _view(PartitionKey(group, topic, partition), state or ClaimState(), hi)

    def claims(
        self, group: str | None = None, topic: str | None = None
    ) -> list[PartitionClaim]:
        """Every partition the log mentions, optionally filtered, sorted by key."""
        return [_view(PartitionKey(pair.group, pair.topic, p), pair.claims[p], pair.hi)
                for pair in self._chosen(group, topic) for p in sorted(pair.claims)]

    def claimable(self, group: str, topic: str, count: int, now_ms: int,
                  start: int = 0) -> Iterator[int]:
        """The partitions below ``count`` nobody holds at ``now_ms`` (no owner, or a stale
        one): released ones first, then stale ones, then those never claimed, each from
        ``start`` round. Lazy, and in time independent of the partition count (but for
        partitions never claimed): take what you need before the next record is applied."""
        pair = self._pairs.get((group, topic))
        if pair is None:
            return chain(range(start, count), range(min(start, count)))
        life = pair.life
        return pair.index.claimable(pair.claims, count, now_ms, pair.hi,
                                    pair.hi if life is None else life.min_interval, start)

    def held_counts(self, group: str, topic: str, now_ms: int) -> dict[str, int]:
        """How many partitions of ``topic`` each client id holds at ``now_ms`` (an owner
        that is not stale), in O(client ids) (and the stale claims)."""
        pair = self._pairs.get((group, topic))
        if pair is None:
            return {}
        life = pair.life
        return pair.index.held_counts(pair.claims, now_ms, pair.hi,
                                      pair.hi if life is None else life.min_interval)

    def owned_by(self, group: str, topic: str, client_id: str) -> list[int]:
        """The partitions of ``topic`` owned under ``client_id`` (by any of its processes,
        held or stale), sorted."""
        pair = self._pairs.get((group, topic))
        return [] if pair is None else sorted(pair.index.by_client.get(client_id, ()))

    def members(self, group: str, topic: str, now_ms: int) -> list[Owner]:
        """Live members of ``group`` consuming ``topic`` as of ``now_ms``, sorted.

        A member is live while its last MemberHeartbeat, heartbeat or claim is at most 2 HI
        old (the HI it announced, else the configured one); a MemberHeartbeat with active=0
        removes it at once, and a restarted instance of the same client replaces the old one
        when it reclaims. Of several live instances of one client id only the one seen last
        counts (a restarted process and its dead predecessor are one member).
        """
        life = self._life_of(group, topic)
        if life is None:
            return []
        return life.live(now_ms, self.config.heartbeat_interval_for(group))

    def next_member_deadline(self, group: str, topic: str, now_ms: int) -> int | None:
        """The earliest broker time at or after ``now_ms`` at which a tracked member of the
        pair is last live (``last seen + 2 x its interval``); None: none. O(log M) amortised,
        the same as a scan of :meth:`member_last_seen`."""
        life = self._life_of(group, topic)
        if life is None:
            return None
        return life.next_deadline(now_ms, self.config.heartbeat_interval_for(group))

    def member_interval(self, group: str, topic: str, member: Owner) -> int:
        """The heartbeat interval ``member`` is judged by: the one it announced, else the
        group's configured one."""
        life = self._life_of(group, topic)
        hi = self.config.heartbeat_interval_for(group)
        return hi if life is None else life.interval_of(member, hi)

    def announced_interval(self, group: str, topic: str, member: Owner) -> int | None:
        """The heartbeat interval ``member`` announced (None: none, or not tracked)."""
        life = self._life_of(group, topic)
        return None if life is None else life.intervals.get(member)

    def group_interval(self, group: str, topic: str, now_ms: int, *,
                       excluding_client: str | None = None) -> tuple[Owner, int] | None:
        """The heartbeat interval of ``group`` on ``topic`` as its members announce it: that
        of the live member, among those that announced one, that joined first (ties: the
        lowest owner), with that member; None when no live member announced one.
        ``excluding_client``: leave that client id's processes out."""
        life = self._life_of(group, topic)
        if life is None:
            return None
        first = life.first_announced(now_ms, self.config.heartbeat_interval_for(group),
                                     excluding_client)
        return None if first is None else (first, life.intervals[first])

    def stable_since(self, group: str, topic: str) -> int | None:
        """When the pair last turned Stable (broker ms); None: never, or not tracked."""
        life = self._life_of(group, topic)
        return None if life is None else life.stable_since_ms

    def members_by_join(self, group: str, topic: str, now_ms: int) -> tuple[Owner, ...]:
        """:meth:`members` in the order they joined the pair (their first sign of life since
        tracked, ties: the lowest owner): a member's place changes only when one that
        joined before it goes. Every reader of the log computes the same order."""
        life = self._life_of(group, topic)
        if life is None:
            return ()
        return life.live_by_join(now_ms, self.config.heartbeat_interval_for(group))

    def live_members(self, group: str, topic: str, now_ms: int) -> tuple[Owner, ...]:
        """:meth:`members` as a tuple, without a copy: the same object while the live
        members stay the same."""
        life = self._life_of(group, topic)
        if life is None:
            return ()
        return life.live_tuple(now_ms, self.config.heartbeat_interval_for(group))

    def member_rank(self, group: str, topic: str, client_id: str, now_ms: int) -> MemberRank:
        """Where ``client_id`` stands among the client ids with a live member of ``group``
        on ``topic`` at ``now_ms``: what a fair share needs, in O(log M) while no member
        went stale (see :class:`MemberRank`)."""
        life = self._life_of(group, topic)
        if life is None:
            return MemberRank(1, 0, False)
        return life.rank(client_id, now_ms, self.config.heartbeat_interval_for(group))

    def capacities_announced(self, group: str, topic: str) -> int:
        """How many tracked members of ``group`` on ``topic`` announced a capacity."""
        life = self._life_of(group, topic)
        return 0 if life is None else len(life.capacities)

    def member_capacity(self, group: str, topic: str, member: Owner) -> int | None:
        """The most partitions ``member`` announced it will hold, or None for no limit."""
        life = self._life_of(group, topic)
        return None if life is None else life.capacities.get(member)

    def group_state(self, group: str, topic: str, now_ms: int) -> GroupLifecycle | None:
        """The lifecycle of ``group`` on ``topic`` at ``now_ms`` (None if the log has never
        mentioned the pair, or its offsets expired and nothing came since)."""
        life = self._life_of(group, topic)
        if life is None:
            return None
        return life.view(group, topic, now_ms, self.config.heartbeat_interval_for(group),
                         self.config.offsets_retention_ms)

    def last_checkpoint_ms(self, group: str, topic: str) -> int | None:
        """Broker time of the newest Checkpoint record of the pair, or None."""
        life = self._life_of(group, topic)
        return None if life is None else life.last_checkpoint_ms

    def groups(self) -> list[tuple[str, str]]:
        """Every (group, topic) pair the rationalizer knows, sorted."""
        return sorted(key for key, pair in self._pairs.items() if pair.life is not None)

    def key_shared_partition(self, group: str, topic: str,
                             partition: int) -> KeySharedPartition | None:
        """The key-shared state of a partition (read it, do not change it), or None."""
        pair = self._pairs.get((group, topic))
        return None if pair is None else pair.keyed.get(partition)

    def key_shared_partitions(self, group: str | None = None, topic: str | None = None,
                              ) -> list[tuple[PartitionKey, KeySharedPartition]]:
        """Every key-shared partition, optionally filtered, sorted by key."""
        return [(PartitionKey(pair.group, pair.topic, p), pair.keyed[p])
                for pair in self._chosen(group, topic) for p in sorted(pair.keyed)]

    def share_partition(self, group: str, topic: str, partition: int) -> SharePartition | None:
        """The share-partition's state machine (read it, do not change it), or None."""
        pair = self._pairs.get((group, topic))
        return None if pair is None else pair.shares.get(partition)

    def share_partitions(self, group: str | None = None,
                         topic: str | None = None) -> list[tuple[PartitionKey, SharePartition]]:
        """Every initialized share-partition, optionally filtered, sorted by key."""
        return [(PartitionKey(pair.group, pair.topic, p), pair.shares[p])
                for pair in self._chosen(group, topic) for p in sorted(pair.shares)]

    def acquired_by(self, owner: Owner, group: str, topic: str, partition: int,
                    now_ms: int) -> list[InFlightRecord]:
        """Records of a share-partition that ``owner`` holds under a live lock at ``now_ms``."""
        share = self.share_partition(group, topic, partition)
        if share is None:
            return []
        return [r for r in share.in_flight(now_ms)
                if r.state is RecordState.ACQUIRED and r.holder == owner]

    def member_last_seen(self, group: str, topic: str) -> dict[Owner, int]:
        """Broker time of each tracked member's last sign of life (live, or stale and not
        yet pruned)."""
        life = self._life_of(group, topic)
        return {} if life is None else dict(life.members)

    def sequenced(self, group: str, topic: str) -> bool:
        """True once the authenticated pair accepted a record with a sequence number (its
        members run a marshal_py that signs with them; see :class:`PairSequences`)."""
        pair = self._pairs.get((group, topic))
        return pair is not None and pair.sequences is not None and pair.sequences.sequenced

    def rejected_count(self, group: str | None = None) -> int:
        """Records about authenticated groups that were rejected (of ``group``, or all)."""
        return self.rejected[group] if group is not None else sum(self.rejected.values())

    def ignored_count(self) -> int:
        """Valid messages the rules ignored (lost claims, non-owners, misplaced)."""
        return sum(n for v, n in self.counters.items() if not v.applied and not v.skipped
                   and v not in (Verdict.DUPLICATE, Verdict.BEFORE_CHECKPOINT))

    def skipped_count(self) -> int:
        """Records that could not be read as messages (garbage, unknown types or versions)."""
        return sum(n for v, n in self.counters.items() if v.skipped)


def _view(key: PartitionKey, state: ClaimState, hi: int) -> PartitionClaim:
    """A claim's view; judged by its owner's announced interval, else the group's ``hi``."""
    return PartitionClaim(
        key, state.owner, state.claimed_at_ms, state.last_heartbeat_ms, state.committed_offset,
        state.last_release_ms, state.released_by, state.amo_claimed_offset,
        state.heartbeat_interval_ms if state.heartbeat_interval_ms is not None else hi,
        state.transactional)
