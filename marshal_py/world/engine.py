"""The rationalizer's record loop: bytes in, rules applied. Pure.

Profiled before this design (issue 22), applying a heartbeat cost about 9 µs: decoding built
a dict and a frozen dataclass and ran five regular expressions per record, the group's
membership was scanned twice per record (pruning, and the retention check), and counting a
verdict hashed an enum member in Python. Now:

* The common records (the four base messages in their original form, MemberHeartbeat) are
  read straight from the bytes: the type and version are compared, and the part that names
  sender and subject (``instance/client/group/topic/partition``) is looked up in a cache of
  :class:`~marshal_py.world.pairs.Route` objects, whose ids were validated once; only the
  integers are checked per record. The same messages signed (``Signed/3``) for an
  authenticated group have a fast path of their own (:mod:`marshal_py.world.signed_path`).
  Anything else (any other type, extensions this rationalizer does not know included), or
  anything unusual about a common record (escapes, another version, a malformed field, a
  signature that does not check, an authenticated group's unsigned record, a checkpoint
  boundary, a misplaced record), takes the general path: the codec decodes it and the rules
  apply to the message. Both paths give the same verdicts: the fast ones only take what the
  codec would read the same way, and leave everything else untouched.
* Membership pruning and expiry cost one comparison per record
  (:attr:`~marshal_py.world.lifecycle.GroupLife.due`).
* No object is made per record unless someone asks for the outcome (:meth:`apply`, or an
  observer); verdicts are counted in a list.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from marshal_py.protocol.auth import DECLARATION_SEQ
from marshal_py.protocol.codec import DecodeError, decode_signed
from marshal_py.protocol.messages import (
    Checkpoint,
    CheckpointChunk,
    ClaimingMessages,
    ClaimingPartition,
    CommittingTransaction,
    Heartbeat,
    KeySharedMessage,
    MemberHeartbeat,
    PartitionMessage,
    ReleasingPartition,
    ResettingOffsets,
    ShareMessage,
    id_problem,
)
from marshal_py.protocol.placement import coordination_partition
from marshal_py.world import fast_beats
from marshal_py.world.authenticity import Authenticity
from marshal_py.world.exclusive import ExclusiveRules
from marshal_py.world.lifecycle import GroupLife
from marshal_py.world.modes import Modes
from marshal_py.world.pairs import Pair, Route
from marshal_py.world.signed_path import apply_member, apply_signed, natural
from marshal_py.world.state import Owner
from marshal_py.world.verdicts import (
    BEFORE_CHECKPOINT,
    CHECKPOINT,
    DECODE_CODES,
    DUPLICATE,
    HEARTBEAT,
    KEY_RANGES_HEARTBEAT,
    KEY_RANGES_IGNORED,
    MISPLACED,
    NOT_OWNER,
    PROOF_OF_LIFE,
    REJECTED,
    TOMBSTONE,
    TRANSACTION_COMMITTED,
    UNKNOWN_TYPE,
    VERDICTS,
    Outcome,
    Verdict,
)

if TYPE_CHECKING:
    from marshal_py.protocol.records import CoordinationRecord
    from marshal_py.world.rationalizer_config import RationalizerConfig

#: Verdicts whose detail the rules make only when asked (:attr:`Core._want_detail`).
_DETAILED = frozenset((KEY_RANGES_HEARTBEAT, KEY_RANGES_IGNORED))
_INT32_MAX = 2**31 - 1
#: The route caches are emptied when they grow past this (routes are only a cache).
_MAX_ROUTES = 200_000


class Core(Modes, ExclusiveRules, Authenticity):
    """The rationalizer's state and the loop that applies records to it (see
    :class:`~marshal_py.world.rationalizer.Rationalizer` for the public API)."""

    def __init__(self, config: RationalizerConfig) -> None:
        self.config = config
        self._pairs: dict[tuple[str, str], Pair] = {}
        self._home: dict[str, int] = {}
        self._owners: dict[Owner, Owner] = {}
        #: Routes by the bytes naming them: ``instance/client/group/topic/partition`` for
        #: partition records, ``instance/client/group/topic`` for membership records.
        self._routes: dict[bytes, Route] = {}
        self._member_routes: dict[bytes, Route] = {}
        #: Positions and times of the coordination partitions (while :meth:`_feed` runs, the
        #: one being read is kept in locals).
        self._next_position: dict[int, int] = {}
        self._last_timestamp: dict[int, int] = {}
        self._counts = [0] * len(VERDICTS)
        #: A sent-at field already found canonical (records of one second share it).
        self._sent_ok = b"0"
        #: The sent-at field of the last signed record the fast path read, in milliseconds.
        self._signed_sent = (b"0", 0)
        #: The outcome's detail and expiry flag of the record being applied (read only when
        #: an outcome is made).
        self._detail = ""
        self._expired_now = False
        self._want_detail = True
        #: Offsets of share messages that did not apply (void acquisitions, stale acks).
        self.share_ignored_offsets = 0
        #: Rejected records per authenticated group (unsigned, bad signature, replayed).
        self.rejected: Counter[str] = Counter()
        #: Groups seen in a signed record, verified or not: a member without the group's
        #: keys must not take part (it would accept what the others reject).
        self.signed_groups: set[str] = set()
        #: Authenticated group -> broker time of the newest authentic record signed without a
        #: sequence number (an older marshal_py, or a replay) refused in a sequenced pair.
        self.unsequenced_ms: dict[str, int] = {}
        #: (group, topic) pairs whose offsets expired (Empty for longer than the retention).
        self.expired_groups = 0

    @property
    def counters(self) -> Counter[Verdict]:
        """How many records got each verdict (a copy)."""
        return Counter({VERDICTS[i]: n for i, n in enumerate(self._counts) if n})

    # -- tables ------------------------------------------------------------------------------

    def _home_of(self, topic: str) -> int:
        home = self._home.get(topic)
        if home is None:
            home = self._home[topic] = coordination_partition(
                topic, self.config.coordination_partitions)
        return home

    def _pair(self, group: str, topic: str) -> Pair:
        pair = self._pairs.get((group, topic))
        if pair is None:
            config = self.config
            keys = config.group_keys.get(group)
            pair = self._pairs[(group, topic)] = Pair(
                group, topic, config.heartbeat_interval_for(group), config.offsets_retention_ms,
                tuple(keys) if keys is not None else None, self._home_of(topic))
        return pair

    def _owner(self, instance_id: str, client_id: str) -> Owner:
        owner = Owner(instance_id, client_id)
        return self._owners.setdefault(owner, owner)

    def _route_of(self, key: bytes, with_partition: bool) -> Route | None:
        """The route ``key`` names (``instance/client/group/topic[/partition]``), made and
        cached when its ids and partition are valid; None otherwise (the general path then
        reads the record and says what is wrong)."""
        fields = key.split(b"/")
        if len(fields) != (5 if with_partition else 4):
            return None
        try:
            instance, client, group, topic = (f.decode("utf-8") for f in fields[:4])
        except UnicodeDecodeError:
            return None
        for kind, value in (("instance_id", instance), ("client_id", client),
                            ("group_id", group), ("topic", topic)):
            if id_problem(kind, value) is not None:
                return None
        partition = -1
        if with_partition:
            raw = fields[4]
            if not natural(raw) or int(raw) > _INT32_MAX:
                return None
            partition = int(raw)
        routes = self._routes if with_partition else self._member_routes
        if len(routes) >= _MAX_ROUTES:
            routes.clear()
        route = routes[key] = Route(self._owner(instance, client), self._pair(group, topic),
                                    partition)
        return route

    def _claims_replaced(self) -> None:
        """A pair's claims were emptied or replaced: drop the routes (they cache claims)."""
        self._routes.clear()

    def _life(self, pair: Pair, ts: int) -> GroupLife:
        """The pair's membership before a record at ``ts`` applies: stale members pruned,
        and everything forgotten first if the pair has been Empty past the retention."""
        life = pair.life
        if life is None:
            return pair.new_life()
        if ts > life.due and life.settle(ts):
            pair.clear()
            self._claims_replaced()
            self.expired_groups += 1
            self._expired_now = True
            return pair.new_life()
        return life

    # -- the loop ------------------------------------------------------------------------------

    def _feed(self, records: Iterable[CoordinationRecord], want: bool,
              watched: frozenset[int] = frozenset()) -> list[Outcome]:
        """Apply ``records`` in order; with ``want``, return their outcomes; else those of
        the records whose verdict code is in ``watched`` (the others cost no object)."""
        outcomes: list[Outcome] = []
        # Outcomes are made for some records: each needs its own detail and expiry flag.
        track = want or bool(watched)
        # Heartbeats applied inline need no outcome (counted in `beats`).
        quiet_beats = not want and HEARTBEAT not in watched
        next_position = self._next_position
        last_timestamp = self._last_timestamp
        counts = self._counts
        routes = self._routes
        general = self._general
        life_of = self._life
        sent_ok = self._sent_ok
        # The coordination partition being read, its next position and last time: kept here
        # while records come from it, written back when another one's come (and at the end).
        at_p: int | None = None
        at_next = at_start = ts = 0
        # Heartbeats applied by the inline path, counted here and added at the end.
        beats = 0
        # Details that cost work of their own are made only for outcomes that carry them.
        self._want_detail = want or not _DETAILED.isdisjoint(watched)
        # Runs of owners' heartbeats and duplicates go through the C build (fast_beats) when
        # no outcome of either is wanted; it stops at anything else, before changing it. A
        # call that applied nothing is not repeated for the next 1, 3, 7, ... 31 records.
        fast = fast_beats.run_beats if quiet_beats and DUPLICATE not in watched else None
        records = records if isinstance(records, list) else list(records)
        n, i, cool, skip = len(records), 0, 0, 0
        try:
            while i < n:
                if skip:
                    skip -= 1
                elif fast is not None and at_p is not None:
                    j, at_next, t, sent_ok, b, d = fast(records, i, at_p, at_next, sent_ok,
                                                        routes)
                    if j == i:
                        cool = skip = min(2 * cool + 1, 31)
                    else:
                        ts, cool = t if t >= 0 else ts, 0
                        beats, i = beats + b, j
                        counts[DUPLICATE] += d
                        if i == n:
                            break
                record = records[i]
                i += 1
                p = record.partition
                if p != at_p:
                    if at_p is not None:
                        next_position[at_p] = at_next
                        if at_next != at_start:
                            last_timestamp[at_p] = ts
                    at_p = p
                    at_next = at_start = next_position.get(p, 0)
                pos = record.position
                if pos < at_next:
                    counts[DUPLICATE] += 1
                    if want or DUPLICATE in watched:
                        outcomes.append(Outcome(record, Verdict.DUPLICATE))
                    continue
                at_next = pos + 1
                ts = record.timestamp_ms
                if track:
                    self._detail = ""
                    self._expired_now = False
                value = record.value
                code = -1
                try:
                    # Type, version, the sender's time, the rest (ValueError: fewer fields;
                    # AttributeError: a tombstone, for the general path).
                    kind, version, sent, rest = value.split(b"/", 3)  # type: ignore[union-attr]
                except (ValueError, AttributeError):
                    kind = version = sent = rest = b""  # "" is never a canonical sent-at
                if sent == sent_ok or (kind != b"Signed" and natural(sent)):
                    sent_ok = sent
                    if kind == b"Heartbeat" and version == b"1":
                        key, _, raw = rest.rpartition(b"/")
                        route = routes.get(key) or self._route_of(key, True)
                        # The offset: canonical, at most 18 digits (within int64); 0 goes
                        # the general way.
                        if (route is not None and route.home == p
                                and pos >= route.pair.open_from and raw.isdigit()
                                and len(raw) < 19 and raw[0] != 48):
                            life = route.pair.life
                            if life is None or ts > life.due:
                                life = life_of(route.pair, ts)
                                route.claim = None  # the pair may have expired
                            claim = route.claim
                            if claim is None:
                                claim = route.pair.claim(route.partition)
                                route.claim = claim
                            sender = route.owner
                            owner = claim.owner
                            if owner is not sender and owner != sender:
                                code = NOT_OWNER
                            else:
                                last = claim.last_heartbeat_ms
                                claim.last_heartbeat_ms = ts
                                if last is not None and ts < last:
                                    # A broker clock that went back: re-arm the index.
                                    route.pair.index.beat(route.partition, claim)
                                if not claim.transactional:
                                    claim.committed_offset = int(raw)
                                announced = life.intervals.get(sender)
                                if announced is not None:
                                    claim.heartbeat_interval_ms = announced
                                members = life.members
                                seen = members.get(sender)
                                if seen is not None and ts >= seen:
                                    members[sender] = ts
                                    if life.shared:
                                        life.forget_live_view()
                                else:
                                    life.seen(sender, ts)
                                if quiet_beats:
                                    beats += 1
                                    continue
                                code = HEARTBEAT
                    elif kind == b"ClaimingPartition" or kind == b"ReleasingPartition" \
                            or kind == b"ClaimingMessages":
                        if version == b"1":
                            raw = b"0"
                            if kind == b"ClaimingPartition":
                                key = rest
                            else:
                                key, _, raw = rest.rpartition(b"/")
                            route = routes.get(key) or self._route_of(key, True)
                            if (route is not None and route.home == p
                                    and pos >= route.pair.open_from and natural(raw)):
                                life = route.pair.life
                                if life is None or ts > life.due:
                                    life = life_of(route.pair, ts)
                                    route.claim = None
                                if kind == b"ClaimingPartition":
                                    code = self._claim(route, life, ts)
                                elif kind == b"ReleasingPartition":
                                    code = self._release(route, ts, int(raw))
                                else:
                                    code = self._messages(route, int(raw))
                    elif kind == b"MemberHeartbeat" and b"%" not in rest:
                        code = apply_member(self, version, rest, p, pos, ts)
                elif kind == b"Signed" and version == b"3":
                    code = apply_signed(self, sent, rest, p, pos, ts)
                if code < 0:
                    code = general(value, p, pos, ts)
                counts[code] += 1
                if want or code in watched:
                    outcomes.append(Outcome.lazy(record, code, self._detail, self._expired_now))
        finally:
            self._sent_ok = sent_ok
            counts[HEARTBEAT] += beats
            if at_p is not None:
                next_position[at_p] = at_next
                if at_next != at_start:
                    last_timestamp[at_p] = ts
        return outcomes

    # -- the general path ----------------------------------------------------------------------

    def _general(self, value: bytes | None, p: int, pos: int, ts: int) -> int:
        """Any record the loop did not take: decode it with the codec, check it, apply it."""
        if value is None:
            return TOMBSTONE
        try:
            message, signature = decode_signed(value)
        except DecodeError as exc:
            self._detail = exc.detail
            return DECODE_CODES[exc.kind]
        group, topic = message.group_id, message.topic
        if signature is not None:
            self.signed_groups.add(group)
        refusal = self.refusal(message, signature, ts)
        if refusal is not None:
            self.rejected[group] += 1
            self._detail = refusal
            return REJECTED
        pair = self._pair(group, topic)
        if p != pair.home:
            self._detail = f"topic {topic!r} belongs on coordination partition {pair.home}"
            return MISPLACED
        if pos < pair.before:
            return BEFORE_CHECKPOINT
        if signature is not None and pair.keys is not None \
                and signature.seq != DECLARATION_SEQ:  # a gap declaration: rule 4 spares it
            why = self._replay_refusal(pair, message, signature, ts)
            if why is not None:
                self.rejected[group] += 1
                self._detail = why
                return REJECTED
        life = self._life(pair, ts)
        sender = self._owner(message.instance_id, message.client_id)
        if isinstance(message, MemberHeartbeat):
            return self._membership(life, sender, ts, bool(message.active), message.capacity,
                                    message.heartbeat_interval_ms)
        if isinstance(message, Checkpoint):
            life.last_checkpoint_ms = ts
            self._detail = f"state as of position {message.position}"
            return CHECKPOINT
        if isinstance(message, CheckpointChunk):
            # Assembled by the log layer (PROTOCOL.md 11); here it changes nothing.
            self._detail = (f"part {message.part + 1} of {message.parts} of the checkpoint "
                            f"as of position {message.position}")
            return CHECKPOINT
        if not isinstance(message, PartitionMessage):
            return UNKNOWN_TYPE  # a registered extension this rationalizer does not interpret
        if isinstance(message, ShareMessage):
            code, self._detail = self._share(pair, message.partition, sender, message, ts)
            if code in PROOF_OF_LIFE:
                life.seen(sender, ts)
            return code
        if isinstance(message, KeySharedMessage):
            code, self._detail = self._key_ranges(pair, message.partition, sender, message,
                                                  ts, life.intervals.get(sender))
            if code in PROOF_OF_LIFE:
                life.seen(sender, ts)
            return code
        if isinstance(message, ResettingOffsets):
            code, self._detail = self._reset_offsets(pair, message.partition, message.offset,
                                                     ts, life)
            return code
        if isinstance(message, CommittingTransaction):
            # Read only once its transaction committed (readers are read_committed), and
            # written only by a member that fenced every earlier writer of the partition's
            # transactional id: whoever sends it, its output is in the output topic, so its
            # offset is the partition's (PROTOCOL.md, exactly-once).
            committed = pair.claim(message.partition)
            committed.committed_offset = message.offset
            committed.transactional = True
            self._detail = f"offset {message.offset}"
            return TRANSACTION_COMMITTED
        route = Route(sender, pair, message.partition)
        if isinstance(message, ClaimingPartition):
            return self._claim(route, life, ts)
        claim = pair.claim(message.partition)
        if claim.owner != sender:
            return NOT_OWNER
        if isinstance(message, Heartbeat):
            return self._heartbeat(route, life, ts, message.offset)
        if isinstance(message, ReleasingPartition):
            return self._release(route, ts, message.offset)
        if isinstance(message, ClaimingMessages):
            return self._messages(route, message.proposed_last_offset)
        return UNKNOWN_TYPE  # a registered extension this rationalizer does not interpret
