"""Checkpoint state: the whole state of one (group, topic) pair as compact JSON. Pure.

A :class:`~tests.golden.frozen.protocol.messages.Checkpoint` record carries this text. Restoring it
gives a rationalizer exactly the state a reader that replayed every earlier record has, so a
replay may begin at the checkpoint instead of at the start of the group's history. The
layout (version 2; version 1, without the replay guard of authenticated groups, is still
read) is documented in PROTOCOL.md; owners are written once in a table and referred to by
index.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tests.golden.frozen.protocol.messages import KEY_SLOTS
from tests.golden.frozen.world.key_shared import KeySharedPartition
from tests.golden.frozen.world.lifecycle import GroupLife
from tests.golden.frozen.world.sequences import PairSequences
from tests.golden.frozen.world.share import InFlightRecord, RecordState, SharePartition
from tests.golden.frozen.world.state import Owner

CHECKPOINT_VERSION = 2
#: Versions :func:`decode_state` reads (1: written before the replay guard existed).
READABLE_VERSIONS = (1, 2)
_STATES = {s: i for i, s in enumerate(RecordState)}
_STATE_OF = dict(enumerate(RecordState))


class CheckpointError(ValueError):
    """A checkpoint's state text cannot be read (garbage, or a version we do not know)."""


@dataclass(slots=True)
class ClaimState:
    """One exclusive partition's coordination state (the rationalizer's claim fields)."""

    owner: Owner | None = None
    claimed_at_ms: int | None = None
    last_heartbeat_ms: int | None = None
    committed_offset: int | None = None
    last_release_ms: int | None = None
    released_by: Owner | None = None
    amo_claimed_offset: int | None = None
    #: The heartbeat interval the owner announced, by which the claim is judged (None: the
    #: owner announced none, so each reader's configured interval judges it).
    heartbeat_interval_ms: int | None = None
    #: Exactly-once: the committed offset moves only by CommittingTransaction records (and
    #: resets); heartbeats and releases still renew and release the claim.
    transactional: bool = False


@dataclass(slots=True)
class PairState:
    """Everything a rationalizer knows about one (group, topic) pair."""

    life: GroupLife = field(default_factory=GroupLife)
    claims: dict[int, ClaimState] = field(default_factory=dict)
    shares: dict[int, SharePartition] = field(default_factory=dict)
    key_shared: dict[int, KeySharedPartition] = field(default_factory=dict)
    sequences: PairSequences = field(default_factory=PairSequences)


class _Owners:
    def __init__(self) -> None:
        self.table: list[list[str]] = []
        self._index: dict[Owner, int] = {}

    def ref(self, owner: Owner | None) -> int | None:
        if owner is None:
            return None
        index = self._index.get(owner)
        if index is None:
            index = self._index[owner] = len(self.table)
            self.table.append([owner.instance_id, owner.client_id])
        return index


def encode_state(state: PairState) -> str:
    """The checkpoint text of ``state`` (deterministic: same state, same text)."""
    owners = _Owners()
    life = state.life
    doc: dict[str, Any] = {
        "v": CHECKPOINT_VERSION,
        "life": [
            [[owners.ref(m), ts, life.capacities.get(m, -1), life.intervals.get(m, 0),
              life.joined.get(m, ts)]
             for m, ts in sorted(life.members.items())],
            life.gone_at_ms, life.last_checkpoint_ms, life.stable_since_ms,
        ],
        "claims": [
            [p, owners.ref(c.owner), c.claimed_at_ms, c.last_heartbeat_ms, c.committed_offset,
             c.last_release_ms, owners.ref(c.released_by), c.amo_claimed_offset,
             c.heartbeat_interval_ms, *([1] if c.transactional else [])]
            for p, c in sorted(state.claims.items())
        ],
        "shares": [
            [p, s.spso, s.speo, s.delivery_limit, s.inflight_limit,
             [_share_record(r, owners) for r in s.stored_records()],
             *([s.dead_letter_topic] if s.dead_letter_topic else [])]
            for p, s in sorted(state.shares.items())
        ],
        "keys": [
            [p, _slot_runs(k, owners),
             [[owners.ref(o), ts, k.intervals.get(o, 0)]
              for o, ts in sorted(k.last_seen.items())]]
            for p, k in sorted(state.key_shared.items())
        ],
        "auth": [
            int(state.sequences.sequenced),
            [[owners.ref(sender), seq, ts]
             for sender, (seq, ts) in sorted(state.sequences.last.items())],
        ],
    }
    doc["owners"] = owners.table
    return json.dumps(doc, separators=(",", ":"), sort_keys=True)


def _share_record(r: InFlightRecord, owners: _Owners) -> list[Any]:
    """One stored share record; dead-letter fields only when the record owes a letter."""
    fields: list[Any] = [r.offset, _STATES[r.state], r.delivery_count, owners.ref(r.holder),
                         r.lock_expiry_ms]
    if r.duty or r.owed_since_ms is not None or r.duties:
        fields += [int(r.duty), r.owed_since_ms, r.duties]
    return fields


def _slot_runs(partition: KeySharedPartition, owners: _Owners) -> list[list[Any]]:
    return [[run.first, run.last, owners.ref(run.owner), run.committed]
            for run in partition.runs()]


def decode_state(text: str) -> PairState:
    """Parse checkpoint text; raises :class:`CheckpointError` on anything unexpected."""
    try:
        doc = json.loads(text)
        if not isinstance(doc, dict) or type(doc.get("v")) is not int \
                or doc["v"] not in READABLE_VERSIONS:
            raise CheckpointError(f"unknown checkpoint version {doc.get('v')!r}"
                                  if isinstance(doc, dict) else "checkpoint is not an object")
        table = [Owner(str(i), str(c)) for i, c in doc["owners"]]

        def owner(ref: Any) -> Owner | None:
            return None if ref is None else table[_int(ref)]

        members, gone_at, last_checkpoint, stable_since = doc["life"]
        life = GroupLife(gone_at_ms=_opt(gone_at), last_checkpoint_ms=_opt(last_checkpoint),
                         stable_since_ms=_opt(stable_since))
        for entry in members:  # version 1 and 2: [member, last seen, capacity]
            ref, ts, capacity, *rest = _fields(entry, 3, 5)
            member = table[_int(ref)]
            life.members[member] = _int(ts)
            if _int(capacity) >= 0:
                life.capacities[member] = _int(capacity)
            if rest:
                if _int(rest[0]) > 0:
                    life.intervals[member] = _int(rest[0])
                life.joined[member] = _int(rest[1])
            else:
                life.joined[member] = _int(ts)
        state = PairState(life=life)
        for entry in doc["claims"]:  # version 1 and 2: without the interval
            p, own, claimed, beat, committed, released, by, amo, *rest = \
                _fields(entry, 8, 10)
            state.claims[_int(p)] = ClaimState(
                owner(own), _opt(claimed), _opt(beat), _opt(committed), _opt(released),
                owner(by), _opt(amo), _opt(rest[0]) if rest else None,
                len(rest) > 1 and bool(_int(rest[1])))
        for p, spso, speo, limit, inflight, records, *dead_letters in doc["shares"]:
            stored = [_stored_record(fields, owner) for fields in records]
            topic = _str(dead_letters[0]) if dead_letters else ""
            state.shares[_int(p)] = SharePartition.restored(_int(spso), _int(speo), _int(limit),
                                                            _int(inflight), stored, topic)
        for p, runs, seen in doc["keys"]:
            owners_of: list[Owner | None] = [None] * KEY_SLOTS
            committed_of: list[int | None] = [None] * KEY_SLOTS
            for first, last, own, committed in runs:
                for slot in range(_int(first), _int(last) + 1):
                    owners_of[slot] = owner(own)
                    committed_of[slot] = _opt(committed)
            partition = KeySharedPartition()
            last_seen: dict[Owner, int] = {}
            intervals: dict[Owner, int] = {}
            for entry in seen:  # version 1 and 2: [owner, last seen]
                ref, ts, *interval = _fields(entry, 2, 3)
                last_seen[table[_int(ref)]] = _int(ts)
                if interval and _int(interval[0]) > 0:
                    intervals[table[_int(ref)]] = _int(interval[0])
            partition.restore(owners_of, committed_of, last_seen, intervals)
            state.key_shared[_int(p)] = partition
        if doc["v"] >= 2:
            sequenced, last = doc["auth"]
            state.sequences.sequenced = _int(sequenced) == 1
            for ref, seq, ts in last:
                state.sequences.last[table[_int(ref)]] = (_int(seq), _int(ts))
        return state
    except CheckpointError:
        raise
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise CheckpointError(f"malformed checkpoint state: {exc}") from exc


def _stored_record(fields: Any, owner: Any) -> InFlightRecord:
    o, st, n, h, x, *dead = _fields(fields, 5, 8)
    duty, owed, duties = dead if dead else (0, None, 0)
    return InFlightRecord(_int(o), _STATE_OF[_int(st)], _int(n), owner(h), _opt(x),
                          bool(_int(duty)), _opt(owed), _int(duties))


def _str(value: Any) -> str:
    if type(value) is not str:
        raise CheckpointError(f"expected a string, got {value!r}")
    return value


def _fields(entry: Any, shortest: int, longest: int) -> list[Any]:
    """A list of ``shortest`` to ``longest`` values (older versions wrote fewer)."""
    if not isinstance(entry, list) or not shortest <= len(entry) <= longest:
        raise CheckpointError(f"expected a list of {shortest} to {longest} values, got "
                              f"{str(entry)[:40]}")
    return entry


def _int(value: Any) -> int:
    if type(value) is not int:
        raise CheckpointError(f"expected an integer, got {value!r}")
    return value


def _opt(value: Any) -> int | None:
    return None if value is None else _int(value)
