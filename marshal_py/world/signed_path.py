"""The fast path of signed records (``Signed/3``) about authenticated groups. Pure.

A signed record of an authenticated group must pass the same checks whichever way it is
read: its MAC, the skew between its own time and its broker time, its placement, the
checkpoint boundary, and the replay guard (PROTOCOL.md, authenticated groups). The general
path decodes the wrapper and the message into objects first; this one reads the common
messages (the base messages in their original form, MemberHeartbeat) straight from the
bytes, checks the MAC with one HMAC over the bytes, and hands the message to the same rules.

It only ever *accepts*: when anything is unusual (another wrapper or message version, a
field the codec would read differently, a key id the group does not hold, a MAC that does
not match, a skew too large, a misplaced record, one below a checkpoint), it returns -1
before changing any state, and the general path reads the record and says what is wrong.
The one refusal it gives itself is the replay guard's, exactly as the general path does.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Protocol

from marshal_py.protocol.auth import MAC_CHARS
from marshal_py.protocol.messages import MAX_ANNOUNCED_INTERVAL_MS
from marshal_py.world.macs import mac_matches
from marshal_py.world.sequences import PairSequences, sequence_refusal
from marshal_py.world.verdicts import HEARTBEAT, NOT_OWNER, REJECTED

if TYPE_CHECKING:
    from marshal_py.world.lifecycle import GroupLife
    from marshal_py.world.pairs import Pair, Route
    from marshal_py.world.rationalizer_config import RationalizerConfig
    from marshal_py.world.state import Owner


class SignedCore(Protocol):
    """What this path reads and changes of the record loop's state: the part of
    :class:`marshal_py.world.engine.Core` it shares (named here, so that this module does not
    import the loop that calls it)."""

    config: RationalizerConfig
    rejected: Counter[str]
    signed_groups: set[str]
    _signed_sent: tuple[bytes, int]
    _routes: dict[bytes, Route]
    _member_routes: dict[bytes, Route]
    _detail: str

    def _route_of(self, key: bytes, with_partition: bool) -> Route | None: ...

    def _life(self, pair: Pair, ts: int) -> GroupLife: ...

    def _membership(self, life: GroupLife, sender: Owner, ts: int, active: bool,
                    capacity: int, interval_ms: int) -> int: ...

    def _claim(self, route: Route, life: GroupLife, ts: int) -> int: ...

    def _release(self, route: Route, ts: int, offset: int) -> int: ...

    def _messages(self, route: Route, proposed_last_offset: int) -> int: ...



def natural(raw: bytes) -> bool:
    """Is ``raw`` a canonical non-negative decimal the fast paths may read (at most 18
    digits, so within int64)?"""
    return raw.isdigit() and len(raw) < 19 and (raw[0] != 48 or len(raw) == 1)


def member_fields(version: bytes, rest: bytes) -> tuple[bytes, bool, int, int] | None:
    """The route key, active flag, capacity and announced interval of a MemberHeartbeat
    (version 2 or 3, nothing escaped) from the part after its sent-at field; None when the
    codec must read it."""
    if version == b"3":
        fields = rest.rsplit(b"/", 3)
        if len(fields) != 4 or not natural(fields[3]):
            return None
        interval = int(fields[3])
        if interval > MAX_ANNOUNCED_INTERVAL_MS:
            return None
    elif version == b"2":
        fields = rest.rsplit(b"/", 2)
        if len(fields) != 3:
            return None
        interval = 0
    else:
        return None
    active, capacity = fields[1], fields[2]
    if active != b"1" and active != b"0":
        return None
    if capacity == b"-1":
        cap = -1
    elif natural(capacity):
        cap = int(capacity)
    else:
        return None
    return fields[0], active == b"1", cap, interval


def apply_member(core: SignedCore, version: bytes, rest: bytes, p: int, pos: int, ts: int
                 ) -> int:
    """Apply an unsigned MemberHeartbeat (version 2 or 3, nothing escaped) from its bytes
    after the sent-at field: its verdict code, or -1 (nothing changed) when the general path
    must read it."""
    fields = member_fields(version, rest)
    if fields is None:
        return -1
    route = core._member_routes.get(fields[0]) or core._route_of(fields[0], False)
    if route is None or route.home != p or pos < route.pair.open_from:
        return -1
    life = route.pair.life
    if life is None or ts > life.due:
        life = core._life(route.pair, ts)
    return core._membership(life, route.owner, ts, fields[1], fields[2], fields[3])


def apply_signed(core: SignedCore, raw_id: bytes, rest: bytes, p: int, pos: int, ts: int
                 ) -> int:
    """Apply a ``Signed/3/<raw_id>/<rest>`` record read at position ``pos`` of coordination
    partition ``p`` at broker time ``ts``: its verdict code, or -1 (nothing changed) when the
    general path must read it."""
    try:
        raw_seq, raw_mac, body = rest.split(b"/", 2)
        kind, version, sent, tail = body.split(b"/", 3)
    except ValueError:
        return -1
    # The sequence number and the sent-at time: canonical, within int64 (a 0 goes the
    # general way).
    if len(raw_mac) != MAC_CHARS or not (raw_seq.isdigit() and len(raw_seq) < 19
                                         and raw_seq[0] != 48):
        return -1
    # Records of one second share their sent-at field: checked and read once.
    last_sent, sent_ms = core._signed_sent
    if sent != last_sent:
        if not (sent.isdigit() and len(sent) < 19 and sent[0] != 48):
            return -1
        sent_ms = int(sent) * 1000
        core._signed_sent = (sent, sent_ms)
    raw = b"0"
    member: tuple[bytes, bool, int, int] | None = None
    route: Route | None
    if kind == b"Heartbeat" or kind == b"ReleasingPartition" or kind == b"ClaimingMessages":
        key, _, raw = tail.rpartition(b"/")
        if version != b"1" or not natural(raw):
            return -1
        route = core._routes.get(key) or core._route_of(key, True)
    elif kind == b"ClaimingPartition":
        if version != b"1":
            return -1
        route = core._routes.get(tail) or core._route_of(tail, True)
    elif kind == b"MemberHeartbeat":
        member = member_fields(version, tail) if b"%" not in body else None
        if member is None:
            return -1
        route = core._member_routes.get(member[0]) or core._route_of(member[0], False)
    else:
        return -1
    if route is None:
        return -1
    pair = route.pair
    macs = pair.macs
    skew = core.config.auth_max_skew_ms
    if macs is None or route.home != p or pos < pair.before \
            or not -skew <= ts - sent_ms <= skew:
        return -1
    keyed = macs.get(raw_id)
    if keyed is None or not mac_matches(keyed, raw_seq, body, raw_mac):
        return -1
    # Authentic, in place, after the checkpoint: from here on the general path's steps.
    group = pair.group
    signed_groups = core.signed_groups
    if group not in signed_groups:
        signed_groups.add(group)
    # The replay guard (sequences.sequence_refusal, inline for the common case: a number
    # above the sender's last one).
    sequences = pair.sequences
    if sequences is None:
        sequences = pair.sequences = PairSequences()
    sender = route.owner
    seq = int(raw_seq)
    horizon = ts - 2 * skew
    if horizon > sequences.oldest:
        sequences.forget_older_than(horizon)
    last = sequences.last
    entry = last.get(sender)
    if entry is not None and seq <= entry[0]:
        why = sequence_refusal(sequences, sender, seq, ts, skew)
        assert why is not None
        core.rejected[group] += 1
        core._detail = why
        return REJECTED
    last[sender] = (seq, ts)
    sequences.sequenced = True
    if ts < sequences.oldest:
        sequences.oldest = ts
    life = pair.life
    if life is None or ts > life.due:
        life = core._life(pair, ts)
        route.claim = None  # the pair may have expired
    if member is not None:
        return core._membership(life, sender, ts, member[1], member[2], member[3])
    if kind == b"Heartbeat":
        claim = route.claim
        if claim is None:
            claim = route.claim = pair.claim(route.partition)
        owner = claim.owner
        if owner is not sender and owner != sender:
            return NOT_OWNER
        # ExclusiveRules._heartbeat, inline.
        before = claim.last_heartbeat_ms
        claim.last_heartbeat_ms = ts
        if before is not None and ts < before:
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
        return HEARTBEAT
    if kind == b"ClaimingPartition":
        return core._claim(route, life, ts)
    if kind == b"ReleasingPartition":
        return core._release(route, ts, int(raw))
    return core._messages(route, int(raw))
