"""The deterministic rationalizer: coordination records in, world state out.

Pure: it reads no clock, no socket and no file. Time enters only as each record's broker
timestamp and as the ``now_ms`` argument of queries, so the same records give the same state
on every machine, whenever they are replayed. The rules are written out in PROTOCOL.md.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from tests.golden.frozen.protocol.auth import GroupKey, Signature, verify
from tests.golden.frozen.protocol.codec import DecodeError, DecodeErrorKind, decode_signed
from tests.golden.frozen.protocol.messages import (
    AcknowledgingRecords,
    AcquiringRecords,
    Checkpoint,
    ClaimingKeyRanges,
    ClaimingMessages,
    ClaimingPartition,
    CommittingTransaction,
    Heartbeat,
    InitializingSharePartition,
    KeyRangesHeartbeat,
    KeySharedMessage,
    MemberHeartbeat,
    Message,
    PartitionMessage,
    ReleasingKeyRanges,
    ReleasingPartition,
    RenewingLocks,
    ResettingOffsets,
    ResettingSharePartition,
    ShareMessage,
)
from tests.golden.frozen.protocol.placement import coordination_partition
from tests.golden.frozen.protocol.ranges import format_ranges, parse_ranges
from tests.golden.frozen.world.checkpoint import ClaimState, PairState, decode_state, encode_state
from tests.golden.frozen.world.key_shared import KeySharedPartition, KeySharedResult
from tests.golden.frozen.world.lifecycle import (
    DEFAULT_OFFSETS_RETENTION_MS,
    GroupLife,
    GroupLifecycle,
)
from tests.golden.frozen.world.records import CoordinationRecord
from tests.golden.frozen.world.sequences import PairSequences, sequence_refusal
from tests.golden.frozen.world.share import InFlightRecord, RecordState, SharePartition, ShareResult
from tests.golden.frozen.world.state import Owner, PartitionClaim, PartitionKey

DEFAULT_HEARTBEAT_INTERVAL_MS = 10_000
#: How far a signed record's own time may be from the broker's append time (replay guard).
DEFAULT_AUTH_MAX_SKEW_MS = 120_000


class Verdict(enum.Enum):
    """What the rationalizer did with one record."""

    # Applied.
    CLAIM_WON = "claim_won"
    CLAIM_RENEWED = "claim_renewed"
    CLAIM_RECLAIMED = "claim_reclaimed"
    HEARTBEAT = "heartbeat"
    RELEASED = "released"
    MESSAGES_CLAIMED = "messages_claimed"
    MEMBER_HEARTBEAT = "member_heartbeat"
    MEMBER_LEFT = "member_left"
    SHARE_INITIALIZED = "share_initialized"
    RECORDS_ACQUIRED = "records_acquired"
    RECORDS_ACKNOWLEDGED = "records_acknowledged"
    LOCKS_RENEWED = "locks_renewed"
    SHARE_RESET = "share_reset"
    KEY_RANGES_CLAIMED = "key_ranges_claimed"
    KEY_RANGES_HEARTBEAT = "key_ranges_heartbeat"
    KEY_RANGES_RELEASED = "key_ranges_released"
    CHECKPOINT = "checkpoint"
    OFFSETS_RESET = "offsets_reset"
    TRANSACTION_COMMITTED = "transaction_committed"
    # Valid messages the rules ignore.
    CLAIM_LOST = "claim_lost"
    NOT_OWNER = "not_owner"
    SHARE_IGNORED = "share_ignored"
    KEY_RANGES_IGNORED = "key_ranges_ignored"
    BEFORE_CHECKPOINT = "before_checkpoint"
    RESET_IGNORED = "reset_ignored"
    MISPLACED = "misplaced"
    #: A record about an authenticated group that is unsigned, badly signed, or replayed.
    REJECTED = "rejected"
    # Records that were skipped.
    DUPLICATE = "duplicate"
    TOMBSTONE = "tombstone"
    MALFORMED = "malformed"
    UNKNOWN_TYPE = "unknown_type"
    UNKNOWN_VERSION = "unknown_version"

    @property
    def applied(self) -> bool:
        """True when the record changed (or confirmed) the world state."""
        return self in _APPLIED

    @property
    def skipped(self) -> bool:
        """True when the record could not be read as a message at all."""
        return self in _SKIPPED


_APPLIED = frozenset(
    {
        Verdict.CLAIM_WON,
        Verdict.CLAIM_RENEWED,
        Verdict.CLAIM_RECLAIMED,
        Verdict.HEARTBEAT,
        Verdict.RELEASED,
        Verdict.MESSAGES_CLAIMED,
        Verdict.MEMBER_HEARTBEAT,
        Verdict.MEMBER_LEFT,
        Verdict.SHARE_INITIALIZED,
        Verdict.RECORDS_ACQUIRED,
        Verdict.RECORDS_ACKNOWLEDGED,
        Verdict.LOCKS_RENEWED,
        Verdict.SHARE_RESET,
        Verdict.KEY_RANGES_CLAIMED,
        Verdict.KEY_RANGES_HEARTBEAT,
        Verdict.KEY_RANGES_RELEASED,
        Verdict.CHECKPOINT,
        Verdict.OFFSETS_RESET,
        Verdict.TRANSACTION_COMMITTED,
    }
)
_SKIPPED = frozenset(
    {Verdict.TOMBSTONE, Verdict.MALFORMED, Verdict.UNKNOWN_TYPE, Verdict.UNKNOWN_VERSION}
)
_PROOF_OF_LIFE = frozenset(
    {Verdict.CLAIM_WON, Verdict.CLAIM_RENEWED, Verdict.CLAIM_RECLAIMED, Verdict.HEARTBEAT,
     Verdict.RECORDS_ACQUIRED, Verdict.RECORDS_ACKNOWLEDGED, Verdict.LOCKS_RENEWED,
     Verdict.KEY_RANGES_CLAIMED, Verdict.KEY_RANGES_HEARTBEAT}
)
_DECODE_VERDICTS = {
    DecodeErrorKind.MALFORMED: Verdict.MALFORMED,
    DecodeErrorKind.UNKNOWN_TYPE: Verdict.UNKNOWN_TYPE,
    DecodeErrorKind.UNKNOWN_VERSION: Verdict.UNKNOWN_VERSION,
}


@dataclass(frozen=True, slots=True)
class Outcome:
    """The verdict on one record, with the message when it decoded.

    ``expired``: the record's (group, topic) had been Empty for longer than the offset
    retention, so all its state expired just before the record applied (KIP-211)."""

    record: CoordinationRecord
    verdict: Verdict
    message: Message | None = None
    detail: str = ""
    expired: bool = False


@dataclass(frozen=True, slots=True)
class RationalizerConfig:
    """Settings every member of a group must share, or they will disagree on the world.

    ``coordination_partitions``: partition count of the coordination topic (records about a
    topic are honoured only on that topic's coordination partition). ``heartbeat_interval_ms``:
    the heartbeat interval (HI); ``group_heartbeat_intervals`` overrides it per group.
    ``offsets_retention_ms``: how long an Empty group's offsets outlive it (KIP-211).
    ``group_keys``: the authenticated groups and their keys (two while a key rotates): every
    record about such a group must be signed with one of them, its own time (``sent_at``)
    be within ``auth_max_skew_ms`` of the broker's append time, and its writer's sequence
    number be above the last one accepted from the same sender; other records about it are
    rejected (PROTOCOL.md, authenticated groups).
    """

    coordination_partitions: int
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    group_heartbeat_intervals: Mapping[str, int] = field(default_factory=dict)
    offsets_retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS
    group_keys: Mapping[str, tuple[GroupKey, ...]] = field(default_factory=dict)
    auth_max_skew_ms: int = DEFAULT_AUTH_MAX_SKEW_MS

    def __post_init__(self) -> None:
        if self.coordination_partitions < 1:
            raise ValueError("coordination_partitions must be >= 1")
        if self.offsets_retention_ms < 1:
            raise ValueError("offsets_retention_ms must be >= 1 ms")
        for hi in (self.heartbeat_interval_ms, *self.group_heartbeat_intervals.values()):
            if hi < 1:
                raise ValueError(f"heartbeat intervals must be >= 1 ms, got {hi}")
        for group, keys in self.group_keys.items():
            if not keys:
                raise ValueError(f"authenticated group {group!r} has no key")
        if self.auth_max_skew_ms < 1000:
            raise ValueError("auth_max_skew_ms must be >= 1000 ms (senders write whole seconds)")

    def heartbeat_interval_for(self, group: str) -> int:
        """The HI of ``group`` in milliseconds."""
        return self.group_heartbeat_intervals.get(group, self.heartbeat_interval_ms)


class Rationalizer:
    """Replays coordination records into a world state.

    Feed records of each coordination partition in log order with :meth:`apply` (positions
    must grow; a repeated or older position is skipped as a duplicate). Query with
    :meth:`claim` / :meth:`claims`.
    """

    def __init__(self, config: RationalizerConfig) -> None:
        self.config = config
        self._claims: dict[PartitionKey, ClaimState] = {}
        self._next_position: dict[int, int] = {}
        self._last_timestamp: dict[int, int] = {}
        self.counters: Counter[Verdict] = Counter()
        self._observers: list[Callable[[Outcome], None]] = []
        self._home_partition: dict[str, int] = {}
        self._groups: dict[tuple[str, str], GroupLife] = {}
        self._shares: dict[PartitionKey, SharePartition] = {}
        self._key_shared: dict[PartitionKey, KeySharedPartition] = {}
        #: (group, topic) -> (coordination partition, position): the pair was restored from a
        #: checkpoint taken there; its records before that position are already in the state.
        self._restored_at: dict[tuple[str, str], tuple[int, int]] = {}
        #: Offsets of share messages that did not apply (void acquisitions, stale acks).
        self.share_ignored_offsets = 0
        #: Rejected records per authenticated group (unsigned, bad signature, replayed).
        self.rejected: Counter[str] = Counter()
        #: Groups seen in a signed record, verified or not: a member without the group's
        #: keys must not take part (it would accept what the others reject).
        self.signed_groups: set[str] = set()
        #: The replay guard of each authenticated (group, topic) pair.
        self._sequences: dict[tuple[str, str], PairSequences] = {}
        #: Authenticated group -> broker time of the newest authentic record signed without a
        #: sequence number (an older marshal_py, or a replay) refused in a sequenced pair.
        self.unsequenced_ms: dict[str, int] = {}
        #: (group, topic) pairs whose offsets expired (Empty for longer than the retention).
        self.expired_groups = 0
        self._expired_now = False

    def observe(self, observer: Callable[[Outcome], None]) -> None:
        """Call ``observer`` with the outcome of every record applied from now on."""
        self._observers.append(observer)

    # -- input -----------------------------------------------------------------------------

    def apply(self, record: CoordinationRecord) -> Outcome:
        """Apply one record and say what it did. Never raises for bad record content."""
        self._expired_now = False
        outcome = self._apply(record)
        if self._expired_now:
            outcome = replace(outcome, expired=True)
        self.counters[outcome.verdict] += 1
        for observer in self._observers:
            observer(outcome)
        return outcome

    def apply_all(self, records: Iterable[CoordinationRecord]) -> None:
        """Apply records in order."""
        for record in records:
            self.apply(record)

    def _apply(self, record: CoordinationRecord) -> Outcome:
        expected = self._next_position.get(record.partition, 0)
        if record.position < expected:
            return Outcome(record, Verdict.DUPLICATE)
        self._next_position[record.partition] = record.position + 1
        self._last_timestamp[record.partition] = record.timestamp_ms
        if record.value is None:
            return Outcome(record, Verdict.TOMBSTONE)
        try:
            message, signature = decode_signed(record.value)
        except DecodeError as exc:
            return Outcome(record, _DECODE_VERDICTS[exc.kind], detail=exc.detail)
        if signature is not None:
            self.signed_groups.add(message.group_id)
        refusal = self.refusal(message, signature, record.timestamp_ms)
        if refusal is not None:
            self.rejected[message.group_id] += 1
            return Outcome(record, Verdict.REJECTED, message, refusal)
        expected_partition = self._home_partition.get(message.topic)
        if expected_partition is None:
            expected_partition = coordination_partition(
                message.topic, self.config.coordination_partitions
            )
            self._home_partition[message.topic] = expected_partition
        if record.partition != expected_partition:
            return Outcome(
                record,
                Verdict.MISPLACED,
                message,
                f"topic {message.topic!r} belongs on coordination partition {expected_partition}",
            )
        pair = (message.group_id, message.topic)
        restored = self._restored_at.get(pair)
        if (restored is not None and restored[0] == record.partition
                and record.position < restored[1]):
            return Outcome(record, Verdict.BEFORE_CHECKPOINT, message)
        ts = record.timestamp_ms
        if signature is not None and message.group_id in self.config.group_keys:
            why = self._replay_refusal(pair, message, signature, ts)
            if why is not None:
                self.rejected[message.group_id] += 1
                return Outcome(record, Verdict.REJECTED, message, why)
        life = self._life_at(pair, ts)
        sender = Owner(message.instance_id, message.client_id)
        if isinstance(message, MemberHeartbeat):
            return Outcome(record, self._membership(message, sender, ts, life), message)
        if isinstance(message, Checkpoint):
            life.last_checkpoint_ms = ts
            return Outcome(record, Verdict.CHECKPOINT, message,
                           f"state as of position {message.position}")
        if not isinstance(message, PartitionMessage):
            # A registered extension this rationalizer does not interpret (yet).
            return Outcome(record, Verdict.UNKNOWN_TYPE, message)
        key = PartitionKey(message.group_id, message.topic, message.partition)
        hi = self.config.heartbeat_interval_for(key.group)
        if isinstance(message, ShareMessage):
            verdict, detail = self._share(key, sender, message, ts)
            if verdict in _PROOF_OF_LIFE:
                life.seen(sender, ts, hi)
            return Outcome(record, verdict, message, detail)
        if isinstance(message, KeySharedMessage):
            verdict, detail = self._key_ranges(key, sender, message, ts,
                                               life.intervals.get(sender))
            if verdict in _PROOF_OF_LIFE:
                life.seen(sender, ts, hi)
            return Outcome(record, verdict, message, detail)
        if isinstance(message, ResettingOffsets):
            verdict, detail = self._reset_offsets(key, message.offset, ts, life)
            return Outcome(record, verdict, message, detail)
        if isinstance(message, CommittingTransaction):
            # Read only once its transaction committed (readers are read_committed), and
            # written only by a member that fenced every earlier writer of the partition's
            # transactional id: whoever sends it, its output is in the output topic, so its
            # offset is the partition's (PROTOCOL.md, exactly-once).
            committed = self._claims.setdefault(key, ClaimState())
            committed.committed_offset = message.offset
            committed.transactional = True
            return Outcome(record, Verdict.TRANSACTION_COMMITTED, message,
                           f"offset {message.offset}")
        claim = self._claims.get(key)
        if claim is None:
            claim = self._claims[key] = ClaimState()
        verdict = self._transition(claim, key, sender, message, ts, life.intervals.get(sender))
        if verdict in _PROOF_OF_LIFE:
            if verdict is Verdict.CLAIM_RECLAIMED:
                for other in [m for m in life.members if m.client_id == sender.client_id]:
                    life.replaced(other)
            life.seen(sender, ts, hi)
        return Outcome(record, verdict, message)

    def _replay_refusal(self, pair: tuple[str, str], message: Message, signature: Signature,
                        ts: int) -> str | None:
        """The replay guard (after the signature and skew checks of :meth:`refusal`)."""
        sequences = self._sequences.get(pair)
        if sequences is None:
            sequences = self._sequences[pair] = PairSequences()
        why = sequence_refusal(sequences, Owner(message.instance_id, message.client_id),
                               signature.seq, ts, self.config.auth_max_skew_ms)
        if why is not None and signature.seq is None:
            group = message.group_id
            self.unsequenced_ms[group] = max(ts, self.unsequenced_ms.get(group, ts))
        return why

    def _reset_offsets(self, key: PartitionKey, offset: int, ts: int,
                       life: GroupLife) -> tuple[Verdict, str]:
        live = life.live(ts, self.config.heartbeat_interval_for(key.group))
        if live:
            return Verdict.RESET_IGNORED, f"group has {len(live)} live member(s)"
        claim = self._claims.setdefault(key, ClaimState())
        claim.owner = None
        claim.released_by = None
        claim.heartbeat_interval_ms = None
        claim.committed_offset = offset
        claim.transactional = False  # any mode may consume it again
        if claim.amo_claimed_offset is not None:
            claim.amo_claimed_offset = offset - 1
        keys = self._key_shared.get(key)
        if keys is not None:
            keys.reset(offset)
        # An administrator's reset restarts the empty group's retention clock.
        life.gone_at_ms = ts if life.gone_at_ms is None else max(life.gone_at_ms, ts)
        return Verdict.OFFSETS_RESET, f"offset {offset}"

    def _life_at(self, pair: tuple[str, str], ts: int) -> GroupLife:
        """The pair's membership before a record at ``ts`` applies: stale members pruned,
        and everything forgotten first if the pair has been Empty past the retention."""
        life = self._groups.get(pair)
        if life is None:
            life = self._groups[pair] = GroupLife()
            return life
        hi = self.config.heartbeat_interval_for(pair[0])
        if life.is_dead(ts, hi, self.config.offsets_retention_ms):
            self._expire(pair)
            self._expired_now = True
            life = self._groups[pair] = GroupLife()
            return life
        life.prune(ts, hi)
        return life

    def _expire(self, pair: tuple[str, str]) -> None:
        """KIP-211: the pair has been Empty for longer than the retention; its offsets (and
        share and key-shared state) expire together."""
        group, topic = pair
        for table in (self._claims, self._shares, self._key_shared):
            for key in [k for k in table if k.group == group and k.topic == topic]:
                del table[key]
        self._groups.pop(pair, None)
        self.expired_groups += 1

    def _key_ranges(self, key: PartitionKey, sender: Owner, message: KeySharedMessage,
                    ts: int, announced: int | None) -> tuple[Verdict, str]:
        state = self._key_shared.get(key)
        if state is None:
            state = self._key_shared[key] = KeySharedPartition()
        result: KeySharedResult
        if isinstance(message, ClaimingKeyRanges):
            hi = self.config.heartbeat_interval_for(key.group)
            result = state.claim(sender, parse_ranges(message.slots), ts, hi, announced)
            verdict = Verdict.KEY_RANGES_CLAIMED
        elif isinstance(message, KeyRangesHeartbeat):
            result = state.heartbeat(sender, message.offset, ts, announced)
            verdict = Verdict.KEY_RANGES_HEARTBEAT
        elif isinstance(message, ReleasingKeyRanges):
            result = state.release(sender, parse_ranges(message.slots), message.offset)
            verdict = Verdict.KEY_RANGES_RELEASED
        else:
            return Verdict.UNKNOWN_TYPE, ""
        if not result.applied:
            return Verdict.KEY_RANGES_IGNORED, "sender owns none of these slots"
        detail = "slots " + format_ranges(result.applied)
        if result.ignored:
            detail += f" ({result.ignored} slots did not apply)"
        return verdict, detail

    def _share(self, key: PartitionKey, sender: Owner, message: ShareMessage,
               ts: int) -> tuple[Verdict, str]:
        share = self._shares.get(key)
        if isinstance(message, InitializingSharePartition):
            if share is not None:
                return Verdict.SHARE_IGNORED, "already initialized"
            self._shares[key] = SharePartition(message.start_offset, message.delivery_limit,
                                               message.inflight_limit,
                                               message.dead_letter_topic)
            return Verdict.SHARE_INITIALIZED, f"SPSO {message.start_offset}"
        if share is None:
            return Verdict.SHARE_IGNORED, "share-partition not initialized"
        if isinstance(message, ResettingSharePartition):
            live = self.members(key.group, key.topic, ts)
            if live:
                return Verdict.SHARE_IGNORED, f"group has {len(live)} live member(s)"
            share.reset(message.start_offset)
            return Verdict.SHARE_RESET, f"SPSO {message.start_offset}"
        share.expire(ts)
        result: ShareResult
        if isinstance(message, AcquiringRecords):
            result = share.acquire(sender, parse_ranges(message.ranges), message.lock_ms, ts)
            verdict = Verdict.RECORDS_ACQUIRED
        elif isinstance(message, AcknowledgingRecords):
            result = share.acknowledge(sender, parse_ranges(message.ranges), message.kind, ts)
            verdict = Verdict.RECORDS_ACKNOWLEDGED
        elif isinstance(message, RenewingLocks):
            result = share.renew(sender, parse_ranges(message.ranges), message.lock_ms, ts)
            verdict = Verdict.LOCKS_RENEWED
        else:
            return Verdict.UNKNOWN_TYPE, ""
        self.share_ignored_offsets += result.ignored
        if not result.applied:
            return Verdict.SHARE_IGNORED, f"{result.ignored} offsets did not apply"
        detail = format_ranges(result.applied)
        if result.ignored:
            detail += f" ({result.ignored} offsets did not apply)"
        return verdict, detail

    def _membership(self, message: MemberHeartbeat, sender: Owner, ts: int,
                    life: GroupLife) -> Verdict:
        if message.active:
            life.seen(sender, ts, self.config.heartbeat_interval_for(message.group_id))
            life.announced(sender, message.heartbeat_interval_ms)
            if message.capacity >= 0:
                life.capacities[sender] = message.capacity
            else:
                life.capacities.pop(sender, None)
            return Verdict.MEMBER_HEARTBEAT
        life.left(sender, ts)
        return Verdict.MEMBER_LEFT

    def _transition(
        self, claim: ClaimState, key: PartitionKey, sender: Owner, message: PartitionMessage,
        ts: int, announced: int | None,
    ) -> Verdict:
        """``announced``: the heartbeat interval the sender announced as a member (None:
        none); a claim is judged by its owner's."""
        if isinstance(message, ClaimingPartition):
            return self._claim(claim, key, sender, ts, announced)
        if claim.owner != sender:
            return Verdict.NOT_OWNER
        if isinstance(message, Heartbeat):
            claim.last_heartbeat_ms = ts
            if not claim.transactional:  # an exactly-once offset moves by transactions only
                claim.committed_offset = message.offset
            if announced is not None:
                claim.heartbeat_interval_ms = announced
            return Verdict.HEARTBEAT
        if isinstance(message, ReleasingPartition):
            claim.owner = None
            if not claim.transactional:
                claim.committed_offset = message.offset
            if claim.amo_claimed_offset is not None and claim.amo_claimed_offset >= message.offset:
                # The owner's last word: it handed out nothing from ``offset`` on, so what it
                # had confirmed beyond is free again and the next owner starts at ``offset``.
                claim.amo_claimed_offset = message.offset - 1
            claim.last_release_ms = ts
            claim.released_by = sender
            claim.heartbeat_interval_ms = None
            return Verdict.RELEASED
        if isinstance(message, ClaimingMessages):
            previous = claim.amo_claimed_offset
            if previous is None or message.proposed_last_offset > previous:
                claim.amo_claimed_offset = message.proposed_last_offset
            return Verdict.MESSAGES_CLAIMED
        # A registered extension this rationalizer does not interpret (yet).
        return Verdict.UNKNOWN_TYPE

    def _claim(self, claim: ClaimState, key: PartitionKey, sender: Owner, ts: int,
               announced: int | None) -> Verdict:
        owner = claim.owner
        if owner == sender:
            claim.last_heartbeat_ms = ts
            if announced is not None:
                claim.heartbeat_interval_ms = announced
            return Verdict.CLAIM_RENEWED
        if owner is not None and owner.client_id == sender.client_id:
            # A restarted process of the same logical consumer takes its partitions back.
            verdict = Verdict.CLAIM_RECLAIMED
        elif owner is not None and claim.last_heartbeat_ms is not None and \
                ts - claim.last_heartbeat_ms <= 2 * self._claim_interval(key, claim):
            return Verdict.CLAIM_LOST  # held: judged by the interval its owner announced
        else:
            verdict = Verdict.CLAIM_WON
        claim.owner = sender
        claim.claimed_at_ms = ts
        claim.last_heartbeat_ms = ts
        claim.heartbeat_interval_ms = announced
        return verdict

    def _claim_interval(self, key: PartitionKey, claim: ClaimState) -> int:
        """The interval a claim is judged by: its owner's announced one, else the group's
        configured one."""
        if claim.heartbeat_interval_ms is not None:
            return claim.heartbeat_interval_ms
        return self.config.heartbeat_interval_for(key.group)

    # -- checkpoints -------------------------------------------------------------------------

    def snapshot(self, group: str, topic: str) -> str:
        """The checkpoint text of everything known about ``group`` on ``topic``.

        Write it in a :class:`~tests.golden.frozen.protocol.messages.Checkpoint` together with
        :meth:`next_position` of the topic's coordination partition *taken at the same
        moment*: the text describes the state after every record before that position."""
        pair = self._groups.get((group, topic)) or GroupLife()
        return encode_state(PairState(
            life=pair,
            claims={k.partition: v for k, v in self._claims.items()
                    if k.group == group and k.topic == topic},
            shares={k.partition: v for k, v in self._shares.items()
                    if k.group == group and k.topic == topic},
            key_shared={k.partition: v for k, v in self._key_shared.items()
                        if k.group == group and k.topic == topic},
            sequences=self._sequences.get((group, topic)) or PairSequences(),
        ))

    def restore(self, partition: int, checkpoint: Checkpoint) -> None:
        """Take the state of ``checkpoint``'s (group, topic) pair as of its position.

        Call before replaying ``partition`` from ``checkpoint.position`` (or earlier: records
        of the pair below that position are then skipped, the checkpoint already has them).
        Raises :class:`~tests.golden.frozen.world.checkpoint.CheckpointError` when the state text
        cannot be read; the rationalizer is unchanged then.
        """
        state = decode_state(checkpoint.state)
        group, topic = checkpoint.group_id, checkpoint.topic
        for table in (self._claims, self._shares, self._key_shared):
            for key in [k for k in table if k.group == group and k.topic == topic]:
                del table[key]
        self._groups[(group, topic)] = state.life
        for p, claim in state.claims.items():
            self._claims[PartitionKey(group, topic, p)] = claim
        for p, share in state.shares.items():
            self._shares[PartitionKey(group, topic, p)] = share
        for p, keys in state.key_shared.items():
            self._key_shared[PartitionKey(group, topic, p)] = keys
        self._sequences.pop((group, topic), None)
        if not state.sequences.is_empty():
            self._sequences[(group, topic)] = state.sequences
        self._restored_at[(group, topic)] = (partition, checkpoint.position)

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

    def claim(self, group: str, topic: str, partition: int) -> PartitionClaim:
        """The state of one partition (an unclaimed view when nothing is known of it)."""
        key = PartitionKey(group, topic, partition)
        return self._view(key, self._claims.get(key) or ClaimState())

    def claims(
        self, group: str | None = None, topic: str | None = None
    ) -> list[PartitionClaim]:
        """Every partition the log mentions, optionally filtered, sorted by key."""
        return [
            self._view(key, state)
            for key, state in sorted(self._claims.items())
            if (group is None or key.group == group) and (topic is None or key.topic == topic)
        ]

    def _view(self, key: PartitionKey, state: ClaimState) -> PartitionClaim:
        return PartitionClaim(
            key=key,
            owner=state.owner,
            claimed_at_ms=state.claimed_at_ms,
            last_heartbeat_ms=state.last_heartbeat_ms,
            committed_offset=state.committed_offset,
            last_release_ms=state.last_release_ms,
            released_by=state.released_by,
            amo_claimed_offset=state.amo_claimed_offset,
            heartbeat_interval_ms=self._claim_interval(key, state),
            transactional=state.transactional,
        )

    def members(self, group: str, topic: str, now_ms: int) -> list[Owner]:
        """Live members of ``group`` consuming ``topic`` as of ``now_ms``, sorted.

        A member is live while its last MemberHeartbeat, heartbeat or claim is at most 2 HI
        old (the HI it announced, else the configured one); a MemberHeartbeat with active=0
        removes it at once, and a restarted instance of the same client replaces the old one
        when it reclaims. Of several live instances of one client id only the one seen last
        counts (a restarted process and its dead predecessor are one member).
        """
        life = self._groups.get((group, topic))
        if life is None:
            return []
        return life.live(now_ms, self.config.heartbeat_interval_for(group))

    def member_interval(self, group: str, topic: str, member: Owner) -> int:
        """The heartbeat interval ``member`` is judged by: the one it announced, else the
        group's configured one."""
        life = self._groups.get((group, topic))
        hi = self.config.heartbeat_interval_for(group)
        return hi if life is None else life.interval_of(member, hi)

    def announced_interval(self, group: str, topic: str, member: Owner) -> int | None:
        """The heartbeat interval ``member`` announced (None: none, or not tracked)."""
        life = self._groups.get((group, topic))
        return None if life is None else life.intervals.get(member)

    def group_interval(self, group: str, topic: str, now_ms: int, *,
                       excluding_client: str | None = None) -> tuple[Owner, int] | None:
        """The heartbeat interval of ``group`` on ``topic`` as its members announce it: that
        of the live member, among those that announced one, that joined first (ties: the
        lowest owner), with that member; None when no live member announced one.
        ``excluding_client``: leave that client id's processes out."""
        life = self._groups.get((group, topic))
        if life is None:
            return None
        live = [m for m in life.live(now_ms, self.config.heartbeat_interval_for(group))
                if m in life.intervals and m.client_id != excluding_client]
        if not live:
            return None
        first = min(live, key=lambda m: (life.joined.get(m, life.members[m]), m))
        return first, life.intervals[first]

    def member_capacity(self, group: str, topic: str, member: Owner) -> int | None:
        """The most partitions ``member`` announced it will hold, or None for no limit."""
        life = self._groups.get((group, topic))
        return None if life is None else life.capacities.get(member)

    def group_state(self, group: str, topic: str, now_ms: int) -> GroupLifecycle | None:
        """The lifecycle of ``group`` on ``topic`` at ``now_ms`` (None if the log has never
        mentioned the pair, or its offsets expired and nothing came since)."""
        life = self._groups.get((group, topic))
        if life is None:
            return None
        return life.view(group, topic, now_ms, self.config.heartbeat_interval_for(group),
                         self.config.offsets_retention_ms)

    def last_checkpoint_ms(self, group: str, topic: str) -> int | None:
        """Broker time of the newest Checkpoint record of the pair, or None."""
        life = self._groups.get((group, topic))
        return None if life is None else life.last_checkpoint_ms

    def groups(self) -> list[tuple[str, str]]:
        """Every (group, topic) pair the rationalizer knows, sorted."""
        return sorted(self._groups)

    def key_shared_partition(self, group: str, topic: str,
                             partition: int) -> KeySharedPartition | None:
        """The key-shared state of a partition (read it, do not change it), or None."""
        return self._key_shared.get(PartitionKey(group, topic, partition))

    def key_shared_partitions(self, group: str | None = None, topic: str | None = None,
                              ) -> list[tuple[PartitionKey, KeySharedPartition]]:
        """Every key-shared partition, optionally filtered, sorted by key."""
        return [(k, v) for k, v in sorted(self._key_shared.items(), key=lambda kv: kv[0])
                if (group is None or k.group == group) and (topic is None or k.topic == topic)]

    def share_partition(self, group: str, topic: str, partition: int) -> SharePartition | None:
        """The share-partition's state machine (read it, do not change it), or None."""
        return self._shares.get(PartitionKey(group, topic, partition))

    def share_partitions(self, group: str | None = None,
                         topic: str | None = None) -> list[tuple[PartitionKey, SharePartition]]:
        """Every initialized share-partition, optionally filtered, sorted by key."""
        return [(k, v) for k, v in sorted(self._shares.items(), key=lambda kv: kv[0])
                if (group is None or k.group == group) and (topic is None or k.topic == topic)]

    def acquired_by(self, owner: Owner, group: str, topic: str, partition: int,
                    now_ms: int) -> list[InFlightRecord]:
        """Records of a share-partition that ``owner`` holds under a live lock at ``now_ms``."""
        share = self._shares.get(PartitionKey(group, topic, partition))
        if share is None:
            return []
        return [r for r in share.in_flight(now_ms)
                if r.state is RecordState.ACQUIRED and r.holder == owner]

    def member_last_seen(self, group: str, topic: str) -> dict[Owner, int]:
        """Broker time of each tracked member's last sign of life (live, or stale and not
        yet pruned)."""
        life = self._groups.get((group, topic))
        return {} if life is None else dict(life.members)

    def refusal(self, message: Message, signature: Signature | None,
                timestamp_ms: int) -> str | None:
        """Why a record about an authenticated group is not authentic (None: it is, or the
        group is not authenticated)."""
        keys = self.config.group_keys.get(message.group_id)
        if keys is None:
            return None
        if signature is None:
            return f"group {message.group_id!r} requires signed records; this one is unsigned"
        if not verify(signature, keys):
            known = ", ".join(k.key_id for k in keys)
            return (f"bad signature (key id {signature.key_id!r}; group "
                    f"{message.group_id!r} accepts {known})")
        skew = abs(timestamp_ms - message.sent_at * 1000)
        if skew > self.config.auth_max_skew_ms:
            return (f"signed {skew // 1000} s away from its broker time (more than "
                    f"{self.config.auth_max_skew_ms // 1000} s): a replayed record")
        return None

    def sequenced(self, group: str, topic: str) -> bool:
        """True once the authenticated pair accepted a record with a sequence number (its
        members run a marshal_py that signs with them; see :class:`PairSequences`)."""
        sequences = self._sequences.get((group, topic))
        return sequences is not None and sequences.sequenced

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
