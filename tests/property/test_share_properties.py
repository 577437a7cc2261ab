"""Invariants of share mode (KIP-932 share-partitions on the coordination log).

Random logs of share messages by three clients (and a restarted instance of one of them) on
one share-partition, which names a dead-letter topic in about half of them, with some
traffic about other share-partitions, a few resets and a little garbage; broker timestamps
never go back and advance by up to twice the longest lock (locks 1-5 s, delivery limit 2-5,
in-flight limit 2-10; acknowledgements accept, release, reject, gap and dead-lettered).
After every record the rationalizer is compared with an independent model written from the
rules (verdict, detail, ignored count, every share-partition's state, and the state as
queried at a later time), and these are checked on the observed states before and after
the record:

1. no record is accepted twice; an Acknowledged record, or one below the SPSO, is never
   Acknowledged or Acquired again (until a reset starts the share-partition over);
2. delivery counts never exceed the delivery limit (Available < limit, Acquired <= limit) and
   equal the number of acquisitions that delivered the record (a gap takes its acquisition
   back; a dead-letter duty is no delivery);
3. SPSO and SPEO never move back (except by a reset), SPSO <= SPEO <= SPSO + in-flight limit,
   and every acquired record lies below SPSO + in-flight limit when it is acquired;
4. an Acquired record has one holder and a lock expiring after its acquisition; it changes
   holder only through Available or Dead-letter (its lock elapsed), never from holder to
   holder;
5. only the holder's acknowledgement under a live lock changes a record; a reset applies only
   when the group has no live member;
6. the state is a function of the log prefix: chunked replays with re-deliveries and
   interleaved queries give the same share-partitions after every prefix;
7. records about other groups, partitions or topics never change the share-partition;
8. dead letters: where the share-partition names a dead-letter topic, a delivery attempt
   that ends at the limit (release, or the lock elapsing) leaves the record owed a dead
   letter (Dead-letter, since the release or the lock's expiry) instead of Archived, and
   only then (reject archives at once); an owed record is never delivered again: its count
   stays at the limit, and it is acquired only as a duty (duties + 1), by one holder at a
   time; it leaves only through its duty holder's dead-lettered or gap, exactly once, and
   a duty released or whose lock elapsed is owed again (never Available or Archived);
   accept and reject on a duty, and dead-lettered on a delivery, are ignored; the SPSO
   never passes an owed record, and every record it passes was accepted, archived or
   dead-lettered (or found a gap by its duty holder) exactly once.

The checks run a second time on logs that owe many dead letters (a dead-letter topic, delivery
limit 2-3, many releases, acknowledgements aimed at duties).

A seeded simulation of three consumers (crashing, racing, renewing, releasing, rejecting,
accepting; every tenth record fails every handler) consumes a 200-record topic to the end,
without and with a dead-letter topic, and checks that every record was accepted exactly
once by its holder, archived, or owed a dead letter and dead-lettered exactly once by a
holder of its duty, with delivery counts matching the grants; each record owed a dead
letter got exactly one letter in the dead-letter topic unless a duty holder crashed (or was
too late) between writing it and acknowledging it, and at least one otherwise. A record
naming a huge range must cost no more than the in-flight window.
"""

from __future__ import annotations

import contextlib
import gc
import random
import signal
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, Phase, event, given, settings
from hypothesis import strategies as st

from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    InitializingSharePartition,
    Message,
    RenewingLocks,
    ResettingSharePartition,
    ShareMessage,
    coordination_partition,
    encode,
)
from marshal_py.world import CoordinationRecord, Outcome, Owner, Rationalizer, RationalizerConfig
from marshal_py.world import Verdict as V
from marshal_py.world.share import InFlightRecord, RecordState

AV, AQ, ACK, ARC, DL = (RecordState.AVAILABLE, RecordState.ACQUIRED, RecordState.ACKNOWLEDGED,
                        RecordState.ARCHIVED, RecordState.DEAD_LETTER)
#: What the holder may acknowledge of a delivery, and of a dead-letter duty.
DELIVERY_ACKS = frozenset({"accept", "release", "reject", "gap"})
DUTY_ACKS = frozenset({"dead-lettered", "gap", "release"})
COORD = 3
HI = 2_000  # a group with no sign of life for 2 HI is empty: resets apply
T_START = 1_700_000_000_000
Key = tuple[str, str, int]
MAIN: Key = ("g", "t", 0)
#: Same topic and coordination partition, other partition; other group; other topic (and
#: coordination partition).
OTHERS: list[Key] = [("g", "t", 1), ("h", "t", 0), ("g", "u", 0)]
KEYS = [MAIN, *OTHERS]
SENDERS = [Owner("i-a", "a"), Owner("i-b", "b"), Owner("i-c", "c"), Owner("i-a2", "a")]
LOCK_MIN, LOCK_MAX = 1_000, 5_000
SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large]
#: No "explain" phase: tracing every line while re-running long logs makes a failure take
#: minutes to report.
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
SHARE_OPS = (AcquiringRecords, AcknowledgingRecords, RenewingLocks)

assert coordination_partition("t", COORD) != coordination_partition("u", COORD)


def home(key: Key) -> int:
    return coordination_partition(key[1], COORD)


# -- ranges, written independently of marshal_py.protocol.ranges ----------------------------


def text_of(offsets: Iterable[int]) -> str:
    parts: list[list[int]] = []
    for o in sorted(set(offsets)):
        if parts and o == parts[-1][1] + 1:
            parts[-1][1] = o
        else:
            parts.append([o, o])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def offsets_of(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(" (")[0].split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


# -- an independent model of one share-partition ---------------------------------------------


@dataclass
class Rec:
    state: RecordState
    count: int
    holder: Owner | None = None
    expiry: int | None = None
    duty: bool = False
    owed_since: int | None = None
    duties: int = 0


@dataclass
class Model:
    spso: int
    delivery_limit: int
    inflight_limit: int
    dead_letter_topic: str = ""
    speo: int = -1
    recs: dict[int, Rec] = field(default_factory=dict)
    exhausted: Counter[int] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.speo = self.spso

    def get(self, offset: int) -> Rec:
        return self.recs.get(offset) or Rec(AV, 0)

    def reset(self, start_offset: int) -> None:
        self.spso = self.speo = start_offset
        self.recs.clear()

    def _after_attempt(self, rec: Rec, when: int) -> Rec:
        """What an Acquired record becomes when its attempt ends at ``when`` (a release, or
        its lock's expiry): a duty is owed again; a delivery at the limit is owed a dead
        letter (since ``when``) or archived; any other delivery is Available."""
        if rec.duty:
            return Rec(DL, rec.count, owed_since=rec.owed_since, duties=rec.duties)
        if rec.count < self.delivery_limit:
            return Rec(AV, rec.count)
        if self.dead_letter_topic:
            return Rec(DL, rec.count, owed_since=when)
        return Rec(ARC, rec.count)

    def _end_attempt(self, offset: int, rec: Rec, when: int) -> None:
        if not rec.duty and rec.count >= self.delivery_limit:
            self.exhausted[offset] += 1
        self.recs[offset] = self._after_attempt(rec, when)

    def _advance(self) -> None:
        while self.spso < self.speo and self.get(self.spso).state in (ACK, ARC):
            self.recs.pop(self.spso, None)
            self.spso += 1

    def apply(self, sender: Owner, message: Message, ts: int) -> tuple[list[int], int]:
        """Apply an acquire / acknowledge / renew at broker time ``ts``: (applied, ignored)."""
        for offset, rec in sorted(self.recs.items()):
            if rec.state is AQ and rec.expiry is not None and rec.expiry <= ts:
                self._end_attempt(offset, rec, rec.expiry)
        self._advance()
        assert isinstance(message, SHARE_OPS)
        applied: list[int] = []
        offsets = offsets_of(message.ranges)
        for offset in offsets:
            rec = self.get(offset)
            if isinstance(message, AcquiringRecords):
                if not self.spso <= offset < self.spso + self.inflight_limit:
                    continue
                if rec.state is AV:  # a delivery
                    self.recs[offset] = Rec(AQ, rec.count + 1, sender, ts + message.lock_ms)
                    self.speo = max(self.speo, offset + 1)
                    applied.append(offset)
                elif rec.state is DL:  # a duty: no delivery
                    self.recs[offset] = Rec(AQ, rec.count, sender, ts + message.lock_ms, True,
                                            rec.owed_since, rec.duties + 1)
                    applied.append(offset)
                continue
            if rec.state is not AQ or rec.holder != sender or rec.expiry is None \
                    or rec.expiry <= ts:
                continue
            if isinstance(message, AcknowledgingRecords) and message.kind not in (
                    DUTY_ACKS if rec.duty else DELIVERY_ACKS):
                continue
            applied.append(offset)
            if isinstance(message, RenewingLocks):
                rec.expiry = ts + message.lock_ms
            elif message.kind == "release":
                self._end_attempt(offset, rec, ts)
            elif rec.duty:  # dead-lettered, or gap: nothing left to write
                self.recs[offset] = Rec(ARC, rec.count)
            elif message.kind == "accept":
                self.recs[offset] = Rec(ACK, rec.count)
            elif message.kind == "reject":
                self.recs[offset] = Rec(ARC, rec.count)
            else:  # gap: the acquisition delivered nothing
                self.recs[offset] = Rec(ARC, rec.count - 1)
        self._advance()
        return applied, len(offsets) - len(applied)

    def view(self, now: int | None = None) -> tuple[tuple[Any, ...], ...]:
        out = []
        for offset in range(self.spso, self.speo):
            rec = self.get(offset)
            if now is not None and rec.state is AQ and rec.expiry is not None \
                    and rec.expiry <= now:
                rec = self._after_attempt(rec, rec.expiry)
            out.append((offset, rec.state, rec.count, rec.holder, rec.expiry, rec.duty,
                        rec.owed_since, rec.duties))
        return tuple(out)


# -- snapshots of the rationalizer -----------------------------------------------------------


@dataclass(frozen=True)
class Snap:
    spso: int
    speo: int
    recs: tuple[InFlightRecord, ...]
    exhausted: tuple[tuple[int, int], ...]
    dead_letter_topic: str

    def get(self, offset: int) -> InFlightRecord | None:
        """The record at ``offset``; None below the SPSO (done); Available from the SPEO."""
        if offset < self.spso:
            return None
        if offset >= self.speo:
            return InFlightRecord(offset, AV, 0, None, None)
        return self.recs[offset - self.spso]

    def rows(self) -> tuple[tuple[Any, ...], ...]:
        return rows(self.recs)


def rows(recs: Iterable[InFlightRecord]) -> tuple[tuple[Any, ...], ...]:
    return tuple((r.offset, r.state, r.delivery_count, r.holder, r.lock_expiry_ms, r.duty,
                  r.owed_since_ms, r.duties) for r in recs)


def snap(r: Rationalizer, key: Key) -> Snap | None:
    share = r.share_partition(*key)
    if share is None:
        return None
    return Snap(share.spso, share.speo, tuple(share.in_flight()),
                tuple(sorted(Counter(share.exhausted).items())), share.dead_letter_topic)


def snaps(r: Rationalizer) -> dict[Key, Snap | None]:
    return {key: snap(r, key) for key in KEYS}


def model_snap(m: Model) -> tuple[Any, ...]:
    return m.spso, m.speo, m.view(), tuple(sorted(m.exhausted.items())), m.dead_letter_topic


def snap_tuple(s: Snap) -> tuple[Any, ...]:
    return s.spso, s.speo, s.rows(), s.exhausted, s.dead_letter_topic


# -- random logs -----------------------------------------------------------------------------


@dataclass
class Sent:
    """A well-formed share message written on its home coordination partition."""

    key: Key
    sender: Owner
    message: ShareMessage


@dataclass
class Writer:
    records: list[CoordinationRecord] = field(default_factory=list)
    sent: list[Sent | None] = field(default_factory=list)
    positions: list[int] = field(default_factory=lambda: [0] * COORD)
    now: int = T_START

    def raw(self, value: bytes | None, partition: int, sent: Sent | None = None
            ) -> CoordinationRecord:
        record = CoordinationRecord(partition, self.positions[partition], self.now, value)
        self.positions[partition] += 1
        self.records.append(record)
        self.sent.append(sent)
        return record

    def send(self, key: Key, sender: Owner, message_type: type[ShareMessage],
             **fields: Any) -> CoordinationRecord:
        message = message_type(0, sender.instance_id, sender.client_id, key[0], key[1], key[2],
                                **fields)
        return self.raw(encode(message), home(key), Sent(key, sender, message))


GARBAGE = [
    b"\xff\xfe not text",
    b"AcquiringRecords/2/0/i-a/a/g/t/0/0-3/0",           # lock_ms out of range
    b"AcquiringRecords/2/0/i-a/a/g/t/0/3-1/1000",        # bad range
    b"AcknowledgingRecords/2/0/i-a/a/g/t/0/0-3/maybe",   # bad kind
    b"AcknowledgingRecords/2/0/i-a/a/g/t/0/0,0/accept",  # overlapping ranges
    b"RenewingLocks/1/0/i-a/a/g/t/0/0-3/1000",           # share messages start at v2
    b"InitializingSharePartition/2/0/i-a/a/g/t/0/0/1/5",  # delivery limit below 2
    b"InitializingSharePartition/2/0/i-a/a/g/t/0/0/3/5/dlq",  # v2 has no dead-letter topic
    b"InitializingSharePartition/3/0/i-a/a/g/t/0/0/3/5",  # v3 has one
    b"InitializingSharePartition/3/0/i-a/a/g/t/0/0/3/5/d\x01q",  # control characters
    b"Nonsense/2/x",
]


#: An initialization's dead-letter topic: none (version 2), "dlq" (version 3), or None: none,
#: written as version 3 with an empty topic.
DEAD_LETTER_TOPICS = st.sampled_from(["", "dlq", "dlq", None])


class Op(NamedTuple):
    """One record to write; ``aim`` picks its offsets from the state when it is written."""

    kind: str
    key: Key
    sender: Owner
    dt: int
    lock_ms: int
    ack_kind: str
    aim: str
    mask: int | None  # which of the aimed offsets (bits), None: all
    n: int            # how many offsets a fetch asks for
    raw: frozenset[int]
    init: tuple[int, int, int, str | None]  # start, limits, dead-letter topic (below)
    garbage: int
    later: int  # when to query the state after this record, ms after it


OP_FIELDS: dict[str, st.SearchStrategy[Any]] = dict(
    kind=st.sampled_from(["acquire"] * 4 + ["ack"] * 4 + ["renew"] * 2
                         + ["init", "garbage", "reset"]),
    key=st.sampled_from([MAIN] * 6 + OTHERS),
    sender=st.sampled_from(SENDERS),
    dt=st.one_of(st.just(0), st.integers(0, 1_000), st.integers(0, 1_000),
                 st.integers(0, 2 * LOCK_MAX)),
    lock_ms=st.integers(LOCK_MIN, LOCK_MAX),
    ack_kind=st.sampled_from(["accept", "accept", "release", "release", "reject",
                              "dead-lettered", "gap"]),
    aim=st.sampled_from(["aimed", "aimed", "duty", "any", "raw"]),
    mask=st.one_of(st.none(), st.integers(0, 2**16 - 1)),
    n=st.integers(1, 6),
    raw=st.frozensets(st.integers(0, 24), min_size=1, max_size=6),
    init=st.tuples(st.integers(0, 4), st.integers(2, 5), st.integers(2, 10),
                   DEAD_LETTER_TOPICS),
    garbage=st.integers(0, len(GARBAGE) + 2),
    later=st.integers(0, 2 * LOCK_MAX),
)
OPS = st.builds(Op, **OP_FIELDS)
MAIN_INIT = st.tuples(st.integers(0, 4), st.integers(2, 5), st.integers(3, 8),
                      DEAD_LETTER_TOPICS)
#: Logs that reach the delivery limit and work off dead-letter duties often: the main
#: share-partition dead-letters at a low limit; releases, acknowledgements aimed at duties
#: and short pauses (locks outlive a few records) are common.
DEAD_LETTER_OPS = st.builds(Op, **{
    **OP_FIELDS,
    "kind": st.sampled_from(["acquire"] * 8 + ["ack"] * 10 + ["renew"] * 2
                            + ["garbage", "reset"]),
    "dt": st.one_of(st.just(0), st.integers(0, 1_000), st.integers(0, 2 * LOCK_MAX)),
    "ack_kind": st.sampled_from(["accept", "release", "release", "release", "reject",
                                 "dead-lettered", "dead-lettered", "gap"]),
    "aim": st.sampled_from(["aimed", "duty", "duty", "any", "raw"]),
})
DEAD_LETTER_MAIN_INIT = st.tuples(st.integers(0, 4), st.integers(2, 3), st.integers(3, 8),
                                  st.just("dlq"))
#: A chunk of a replay: which partition, how many records, a re-delivery, a query.
CHUNKS = st.tuples(st.integers(0, COORD - 1), st.integers(1, 6),
                   st.one_of(st.none(), st.integers(0, 1_000)),
                   st.one_of(st.none(), st.tuples(st.integers(-LOCK_MAX, 200 * LOCK_MAX),
                                                  st.integers(0, 30))))


def offsets_for(op: Op, r: Rationalizer, now: int) -> tuple[Owner, str, bool]:
    """The sender and ranges of ``op``'s record (an aimed acknowledgement or renewal comes
    from a holder, of what it holds; aimed at duties, from a duty holder, of its duties),
    and whether it was aimed at duties."""
    share = r.share_partition(*op.key)
    chosen: list[int] = []
    sender = op.sender
    duties = False
    if share is not None and op.aim != "raw":
        view = share.in_flight(now)
        owed = [x.offset for x in view if x.state is DL]
        if op.aim == "any":
            chosen = [x.offset for x in view]
        elif op.kind != "acquire":
            held = [x for x in view if x.state is AQ]
            if op.aim == "duty" and any(x.duty for x in held):
                held, duties = [x for x in held if x.duty], True
            holders = [x.holder for x in held if x.holder is not None]
            if holders and sender not in holders:
                sender = holders[op.n % len(holders)]
            chosen = [x.offset for x in held if x.holder == sender]
        elif op.aim == "duty" and owed:  # the records owed a dead letter, as a member
            # taking duties asks for them
            chosen, duties = owed[:op.n], True
        else:  # the next Available (or owed) offsets, as a fetch asks for them
            chosen = [x.offset for x in view if x.state in (AV, DL)]
            chosen = (chosen + list(range(share.speo, share.speo + op.n)))[:op.n]
        if op.mask is not None and op.kind != "acquire":
            chosen = [o for i, o in enumerate(chosen) if op.mask >> (i % 16) & 1]
    return sender, text_of(chosen or op.raw), duties and bool(chosen)


def send_init(w: Writer, key: Key, sender: Owner, start: int, delivery_limit: int,
              inflight_limit: int, dead_letter_topic: str | None) -> CoordinationRecord:
    """An initialization (``dead_letter_topic`` None: version 3 naming none, an empty field;
    ``encode`` writes version 2 for it)."""
    if dead_letter_topic is not None:
        return w.send(key, sender, InitializingSharePartition, start_offset=start,
                      delivery_limit=delivery_limit, inflight_limit=inflight_limit,
                      dead_letter_topic=dead_letter_topic)
    message = InitializingSharePartition(0, sender.instance_id, sender.client_id, *key, start,
                                         delivery_limit, inflight_limit)
    v2, v3 = b"InitializingSharePartition/2/", b"InitializingSharePartition/3/"
    value = encode(message)
    assert value.startswith(v2)
    return w.raw(v3 + value[len(v2):] + b"/", home(key), Sent(key, sender, message))


def write_op(op: Op, w: Writer, r: Rationalizer) -> CoordinationRecord:
    """Append the record ``op`` describes (looking at ``r`` to aim it)."""
    w.now += op.dt
    sender = op.sender
    if op.kind == "garbage":
        if op.garbage < len(GARBAGE):
            return w.raw(GARBAGE[op.garbage], home(MAIN))
        if op.garbage == len(GARBAGE):
            return w.raw(None, home(MAIN))
        # A well-formed acquisition of the main share-partition on the wrong coordination
        # partition (misplaced), or of a partition that was never initialized.
        misplaced = op.garbage == len(GARBAGE) + 1
        message = AcquiringRecords(0, sender.instance_id, sender.client_id, "g", "t",
                                   0 if misplaced else 9, "0-30", LOCK_MAX)
        if misplaced:
            return w.raw(encode(message), (home(MAIN) + 1) % COORD)
        return w.raw(encode(message), home(MAIN), Sent(("g", "t", 9), sender, message))
    if op.kind == "reset":
        return w.send(op.key, sender, ResettingSharePartition, start_offset=op.init[0])
    if op.kind == "init":
        return send_init(w, op.key, sender, *op.init)
    sender, ranges, duties = offsets_for(op, r, w.now)
    if op.kind == "acquire":
        return w.send(op.key, sender, AcquiringRecords, ranges=ranges, lock_ms=op.lock_ms)
    if op.kind == "renew":
        return w.send(op.key, sender, RenewingLocks, ranges=ranges, lock_ms=op.lock_ms)
    # A duty holder mostly says what a duty takes (accept on a duty comes from other aims).
    kind = "dead-lettered" if duties and op.ack_kind == "accept" else op.ack_kind
    return w.send(op.key, sender, AcknowledgingRecords, ranges=ranges, kind=kind)


def draw_log(data: st.DataObject, r: Rationalizer, min_size: int, max_size: int,
             check: Callable[[Writer, CoordinationRecord, Outcome, int], None] | None = None,
             resets: bool = True, ops_from: st.SearchStrategy[Op] = OPS,
             main_init_from: st.SearchStrategy[tuple[int, int, int, str | None]] = MAIN_INIT,
             ) -> Writer:
    """A random log, applied to ``r`` as it is written: a few records, the main
    initialization, then anything (resets only if ``resets``). ``check`` is called after
    each record, with a time to query the state at (ms after the record)."""
    w = Writer()
    main_init_at = data.draw(st.integers(0, 2))
    main_init = data.draw(main_init_from)
    size = data.draw(st.integers(min_size, max_size))  # lists alone would be mostly short
    ops: list[Op | None] = data.draw(st.lists(ops_from, min_size=size, max_size=size))
    ops.insert(min(main_init_at, len(ops)), None)
    for op in ops:
        if op is None:
            send_init(w, MAIN, SENDERS[main_init_at], *main_init)
        else:
            write_op(op if resets or op.kind != "reset" else op._replace(kind="acquire"), w, r)
        outcome = r.apply(w.records[-1])
        if check is not None:
            check(w, w.records[-1], outcome, op.later if op is not None else 0)
    return w


# -- the per-record checks -------------------------------------------------------------------


@dataclass
class Tracker:
    """What the log did to the main share-partition so far, from the observed states."""

    accepted: Counter[int] = field(default_factory=Counter)
    archived: set[int] = field(default_factory=set)
    grants: Counter[int] = field(default_factory=Counter)  # deliveries (less gaps)
    acquired_at: dict[int, int] = field(default_factory=dict)
    #: Records owed a dead letter (their last delivery attempt ended at the limit), how
    #: often each one's duty was granted, and how each was settled by its duty holder
    #: (dead-lettered, or a gap).
    owed: set[int] = field(default_factory=set)
    duties: Counter[int] = field(default_factory=Counter)
    settled: Counter[int] = field(default_factory=Counter)

    def clear(self) -> None:
        """A reset starts the share-partition over: records may be delivered again."""
        self.accepted.clear()
        self.archived.clear()
        self.grants.clear()
        self.acquired_at.clear()
        self.owed.clear()
        self.duties.clear()
        self.settled.clear()

    def finished(self, offset: int) -> int:
        """How many times ``offset`` was finished: accepted, archived or settled."""
        return self.accepted[offset] + (offset in self.archived) + self.settled[offset]


def check_grant(before: InFlightRecord, after: InFlightRecord, message: ShareMessage,
                sender: Owner, ts: int, t: Tracker, delivery_limit: int,
                dead_letters: bool) -> bool:
    """A grant (only by an acquisition by the new holder, of an Available or owed record,
    or one whose lock elapsed before this record - never from holder to holder, 4): checks
    it; whether the record reached the delivery limit on the way (its lock elapsed)."""
    assert isinstance(message, AcquiringRecords) and after.holder == sender
    elapsed = before.state is AQ and before.lock_expiry_ms is not None \
        and before.lock_expiry_ms <= ts
    assert before.state in (AV, DL) or elapsed
    assert after.lock_expiry_ms == ts + message.lock_ms > ts
    offset = after.offset
    t.acquired_at[offset] = ts
    if not after.duty:  # a delivery
        assert before.state is AV or (not before.duty and before.delivery_count < delivery_limit)
        assert after.delivery_count == before.delivery_count + 1
        assert (after.owed_since_ms, after.duties) == (None, 0)
        assert offset not in t.accepted and offset not in t.archived  # 1
        assert offset not in t.owed  # 8: a record owed a dead letter is never delivered again
        t.grants[offset] += 1
        event("acquired again after the lock elapsed" if before.state is AQ
              else "acquired" if before.delivery_count == 0 else "acquired again")
        return False
    # 8: a duty, of a record owed a dead letter (or whose last delivery's lock, or the
    # last duty's, just elapsed): no delivery, the count stays at the limit.
    assert dead_letters
    just_owed = before.state is AQ and not before.duty
    assert not just_owed or before.delivery_count >= delivery_limit
    assert after.delivery_count == before.delivery_count == delivery_limit
    assert after.owed_since_ms == (before.lock_expiry_ms if just_owed
                                   else before.owed_since_ms) is not None
    assert after.duties == before.duties + 1 == t.duties[offset] + 1
    if just_owed:
        t.owed.add(offset)
    assert offset in t.owed and not t.settled[offset]
    t.duties[offset] += 1
    event("duty taken" + (" again" if after.duties > 1 else "")
          + (" as the lock elapsed" if before.state is AQ else ""))
    return just_owed


def check_ended(before: InFlightRecord, after: InFlightRecord | None, kind: str, ts: int,
                t: Tracker, delivery_limit: int, dead_letters: bool) -> bool:
    """An attempt that ended by its holder's acknowledgement of ``kind``, or its lock
    elapsing (``kind`` "elapsed"): checks what it left; whether the record reached the
    delivery limit."""
    offset = before.offset
    ended = after.state if after is not None else None  # None: now below the SPSO
    if before.duty:  # 8: a duty is settled, or passed on
        assert kind in DUTY_ACKS or kind == "elapsed"
        if kind in ("dead-lettered", "gap"):
            assert ended in (ARC, None)
            t.settled[offset] += 1
            return False
        assert after is not None and ended is DL and not after.duty
        assert (after.delivery_count, after.owed_since_ms, after.duties) == (
            before.delivery_count, before.owed_since_ms, before.duties)
        return False
    assert kind != "dead-lettered"
    if kind == "accept":  # 1, 5
        assert ended in (ACK, None)
        assert offset not in t.accepted and offset not in t.archived
        t.accepted[offset] += 1
    elif kind == "reject":
        assert ended in (ARC, None)
        t.archived.add(offset)
    elif kind == "gap":  # the acquisition delivered nothing: its count is taken back
        assert ended in (ARC, None)
        assert after is None or after.delivery_count == before.delivery_count - 1
        t.grants[offset] -= 1
        t.archived.add(offset)
    elif before.delivery_count < delivery_limit:  # release, or the lock elapsed
        assert after is not None and ended is AV
        assert after.delivery_count == before.delivery_count
    elif dead_letters:  # 8: owed a dead letter since the release, or the lock's expiry
        assert after is not None and ended is DL
        assert after.delivery_count == before.delivery_count
        since = ts if kind == "release" else before.lock_expiry_ms
        assert (after.owed_since_ms, after.duties) == (since, 0)
        t.owed.add(offset)
        event(f"owed a dead letter ({kind})")
    else:
        assert ended in (ARC, None)
        t.archived.add(offset)
    return kind in ("release", "elapsed") and before.delivery_count >= delivery_limit


def check_transition(b: Snap | None, a: Snap | None, sent: Sent | None, outcome: Outcome,
                     ts: int, t: Tracker, delivery_limit: int) -> None:
    """Properties 1-5, 7 and 8 for the main share-partition across one record."""
    about_main = sent is not None and sent.key == MAIN
    if not about_main:
        assert a == b, "a record about something else changed the share-partition"  # 7
        return
    assert sent is not None
    if a is None:
        assert b is None
        return
    message, sender = sent.message, sent.sender
    if b is None:  # initialized by this record
        assert isinstance(message, InitializingSharePartition)
        assert (a.spso, a.speo, a.recs, a.dead_letter_topic) == (
            message.start_offset, message.start_offset, (), message.dead_letter_topic)
        event("initialized with a dead-letter topic" if a.dead_letter_topic
              else "initialized")
        return
    assert a.dead_letter_topic == b.dead_letter_topic
    dead_letters = bool(a.dead_letter_topic)
    if isinstance(message, ResettingSharePartition):
        if outcome.verdict is V.SHARE_RESET:  # only when the group is empty (the model says)
            assert (a.spso, a.speo, a.recs) == ((message.start_offset,) * 2 + ((),))
            assert a.exhausted == b.exhausted
            t.clear()
            event("reset applied")
        else:
            assert a == b
            event("reset ignored: the group has live members")
        return
    share_op = isinstance(message, SHARE_OPS)
    applied = set(offsets_of(outcome.detail)) if outcome.verdict in (
        V.RECORDS_ACQUIRED, V.RECORDS_ACKNOWLEDGED, V.LOCKS_RENEWED) else set()
    named = set(offsets_of(message.ranges)) if isinstance(message, SHARE_OPS) else set()
    limit_hits = Counter(dict(a.exhausted)) - Counter(dict(b.exhausted))
    hits: set[int] = set()  # the records whose last delivery attempt ended at the limit
    # 3. SPSO and SPEO only grow; the in-flight window is bounded.
    assert b.spso <= a.spso <= a.speo and b.speo <= a.speo
    for offset in range(b.spso, max(a.speo, b.speo)):
        before, after = b.get(offset), a.get(offset)
        assert before is not None
        if after is not None and after.state is AQ and (
                before.state is not AQ or before.holder != after.holder
                or before.delivery_count != after.delivery_count
                or (before.duty, before.duties) != (after.duty, after.duties)):
            assert offset in applied
            if check_grant(before, after, message, sender, ts, t, delivery_limit,
                           dead_letters):
                hits.add(offset)
            continue
        assert offset not in applied or not isinstance(message, AcquiringRecords)
        if before.state is AQ:
            assert before.holder is not None and before.lock_expiry_ms is not None
            elapsed = share_op and before.lock_expiry_ms <= ts
            held = (share_op and before.holder == sender and not elapsed)
            what = "a duty" if before.duty else "a delivery"
            if isinstance(message, AcknowledgingRecords) and offset in named:
                if before.holder != sender:
                    event(f"{what} acknowledged by a non-holder: ignored")
                elif held and message.kind not in (DUTY_ACKS if before.duty
                                                   else DELIVERY_ACKS):
                    assert offset not in applied  # 8
                    event(f"{what} acknowledged {message.kind}: ignored")
            if after is not None and after.state is AQ:
                # Still held by the same attempt: the lock moves only by the holder's renewal.
                assert not elapsed
                assert offset not in applied or (isinstance(message, RenewingLocks) and held)
                assert after == before or after.lock_expiry_ms != before.lock_expiry_ms
                if after.lock_expiry_ms != before.lock_expiry_ms:
                    assert isinstance(message, RenewingLocks) and held and offset in applied
                    assert after.lock_expiry_ms == ts + message.lock_ms
                    assert after == replace(before, lock_expiry_ms=after.lock_expiry_ms)
                continue
            kind = "elapsed"
            if isinstance(message, AcknowledgingRecords) and held and offset in applied:
                kind = message.kind
                event(f"{what} acknowledged: {kind}")
            else:
                # 5: nothing but the lock elapsing ends an attempt without the holder's ack.
                assert elapsed, f"offset {offset} changed without its holder's acknowledgement"
                assert offset not in applied
                event(f"the lock of {what} elapsed" + (
                    " at the limit" if not before.duty and before.delivery_count >= delivery_limit
                    else ""))
                if isinstance(message, AcknowledgingRecords) and offset in named:
                    event("acknowledged after the lock elapsed: ignored")
            if check_ended(before, after, kind, ts, t, delivery_limit, dead_letters):
                hits.add(offset)
            continue
        # Available, Acknowledged and Archived records change only as the SPSO passes them;
        # a record owed a dead letter, only when its duty is granted (8).
        assert offset not in applied
        if after is None:
            assert before.state in (ACK, ARC), f"offset {offset} left {before.state} below the SPSO"
        else:
            assert after == before
    # The SPSO passed only finished records: each one accepted, archived, or (8) owed a
    # dead letter and settled by its duty holder - exactly once.
    for offset in range(b.spso, a.spso):
        assert t.finished(offset) == 1
        assert (offset in t.owed) == (t.settled[offset] == 1)
    assert limit_hits.keys() == hits and all(n == 1 for n in limit_hits.values())
    if share_op:
        assert all(x.lock_expiry_ms is not None and x.lock_expiry_ms > ts
                   for x in a.recs if x.state is AQ)


def check_state(a: Snap, delivery_limit: int, inflight_limit: int, t: Tracker) -> None:
    """Properties 1-4 and 8 on one state of the main share-partition."""
    assert a.speo - a.spso <= inflight_limit  # 3
    assert [x.offset for x in a.recs] == list(range(a.spso, a.speo))
    for x in a.recs:
        assert 0 <= x.delivery_count <= delivery_limit  # 2
        assert x.delivery_count == t.grants[x.offset]
        owed = x.state is DL or x.duty
        if owed:  # 8: owed a dead letter: delivered up to the limit, never again
            assert a.dead_letter_topic and x.offset in t.owed
            assert x.delivery_count == delivery_limit
            assert x.owed_since_ms is not None and x.duties == t.duties[x.offset]
            assert t.finished(x.offset) == 0
        else:
            assert x.owed_since_ms is None and x.duties == 0
            assert (x.offset in t.owed) == (x.state is ARC and t.settled[x.offset] == 1)
        if x.state is AV:
            assert x.delivery_count < delivery_limit
        elif x.state is AQ:
            assert 1 <= x.delivery_count <= delivery_limit
            assert x.holder is not None and x.lock_expiry_ms is not None  # 4
            assert x.lock_expiry_ms > t.acquired_at[x.offset]
            assert t.finished(x.offset) == 0  # 1
        elif x.state is ACK:
            assert t.accepted[x.offset] == 1 and t.finished(x.offset) == 1
        elif x.state is ARC:
            assert t.accepted[x.offset] == 0 and t.finished(x.offset) == 1
        if x.state is not AQ:
            assert x.holder is None and x.lock_expiry_ms is None and not x.duty
    assert all(n == 1 for n in t.accepted.values())
    assert all(n == 1 for n in t.settled.values()) and set(t.settled) <= t.owed
    assert not t.archived & (set(t.accepted) | t.owed)


@dataclass
class World:
    """The model of every share-partition, and when each (group, topic) last showed life."""

    models: dict[Key, Model] = field(default_factory=dict)
    last_life: dict[tuple[str, str], int] = field(default_factory=dict)

    def empty(self, key: Key, ts: int) -> bool:
        """No member of the key's group showed life on its topic in the last 2 HI."""
        last = self.last_life.get(key[:2])
        return last is None or ts - last > 2 * HI

    def expect(self, sent: Sent, ts: int) -> tuple[V, str | None, int]:
        """The verdict, detail (None: not compared) and ignored offsets of ``sent``."""
        message = sent.message
        model = self.models.get(sent.key)
        if isinstance(message, InitializingSharePartition):
            if model is not None:
                return V.SHARE_IGNORED, "already initialized", 0
            self.models[sent.key] = Model(message.start_offset, message.delivery_limit,
                                          message.inflight_limit, message.dead_letter_topic)
            return V.SHARE_INITIALIZED, None, 0
        if model is None:
            return V.SHARE_IGNORED, "share-partition not initialized", 0
        if isinstance(message, ResettingSharePartition):
            if not self.empty(sent.key, ts):
                return V.SHARE_IGNORED, None, 0
            model.reset(message.start_offset)
            return V.SHARE_RESET, f"SPSO {message.start_offset}", 0
        applied, ignored = model.apply(sent.sender, message, ts)
        if not applied:
            return V.SHARE_IGNORED, f"{ignored} offsets did not apply", ignored
        self.last_life[sent.key[:2]] = ts  # applied share records are a sign of life
        verdict = {AcquiringRecords: V.RECORDS_ACQUIRED,
                   AcknowledgingRecords: V.RECORDS_ACKNOWLEDGED,
                   RenewingLocks: V.LOCKS_RENEWED}[type(message)]
        detail = text_of(applied) + (f" ({ignored} offsets did not apply)" if ignored else "")
        return verdict, detail, ignored


# -- the properties --------------------------------------------------------------------------


@settings(max_examples=300, deadline=None,
          suppress_health_check=SUPPRESS, phases=PHASES)
@given(st.data())
def test_share_partition_invariants_after_every_record(data: st.DataObject) -> None:
    check_every_record(data, OPS, MAIN_INIT, 5)


@settings(max_examples=150, deadline=None,
          suppress_health_check=SUPPRESS, phases=PHASES)
@given(st.data())
def test_dead_letter_invariants_after_every_record(data: st.DataObject) -> None:
    """The same checks on logs that owe many dead letters (property 8 in depth)."""
    check_every_record(data, DEAD_LETTER_OPS, DEAD_LETTER_MAIN_INIT, 20)


def check_every_record(data: st.DataObject, ops_from: st.SearchStrategy[Op],
                       main_init_from: st.SearchStrategy[tuple[int, int, int, str | None]],
                       min_size: int) -> None:
    """Properties 1-5, 7 and 8, and the model, after every record of a random log of
    ``min_size`` to 70 records."""
    r = Rationalizer(RationalizerConfig(COORD, HI))
    solo = Rationalizer(RationalizerConfig(COORD, HI))
    world = World()
    models = world.models
    t = Tracker()
    last_snaps, last_ignored = snaps(r), 0

    def check(w: Writer, record: CoordinationRecord, outcome: Outcome, later: int) -> None:
        sent, ts = w.sent[-1], record.timestamp_ms
        nonlocal last_snaps, last_ignored
        before, after = last_snaps, snaps(r)
        expected = world.expect(sent, ts) if sent is not None else None
        # The properties, on the observed transition of the main share-partition.
        limit = models[MAIN].delivery_limit if MAIN in models else 0
        check_transition(before[MAIN], after[MAIN], sent, outcome, ts, t, limit)
        main = after[MAIN]
        if main is not None:
            check_state(main, limit, models[MAIN].inflight_limit, t)
        # Against the model: verdict, detail, ignored offsets and the whole state.
        if expected is None:
            assert outcome.verdict in (V.MALFORMED, V.TOMBSTONE, V.UNKNOWN_TYPE, V.MISPLACED,
                                       V.UNKNOWN_VERSION)
        else:
            assert (outcome.verdict, outcome.detail) == (
                expected[0], outcome.detail if expected[1] is None else expected[1])
        ignored = expected[2] if expected is not None else 0
        assert r.share_ignored_offsets == last_ignored + ignored
        for key in KEYS:
            got, model = after[key], models.get(key)
            assert (got is None) == (model is None)
            if got is not None and model is not None:
                assert snap_tuple(got) == model_snap(model)
        if main is not None:
            m = models[MAIN]
            # A query at a later time shows what the next record will find; it changes
            # nothing.
            share = r.share_partition(*MAIN)
            assert share is not None
            assert rows(share.in_flight(ts + later)) == m.view(ts + later)
            assert snap(r, MAIN) == main
            if (sent is not None and sent.key == MAIN
                    and isinstance(sent.message, AcquiringRecords)
                    and max(offsets_of(sent.message.ranges)) >= main.spso + m.inflight_limit):
                event("acquisition beyond the in-flight limit")
        # 7: a log holding only the records about the main share-partition's group and topic
        # (whose signs of life decide whether a reset applies) gives the same state.
        if sent is not None and sent.key[:2] == MAIN[:2]:
            solo.apply(record)
        assert snap(solo, MAIN) == main
        last_snaps, last_ignored = after, r.share_ignored_offsets

    draw_log(data, r, min_size, 70, check, ops_from=ops_from, main_init_from=main_init_from)
    for key in KEYS:
        share = r.share_partition(*key)
        if share is not None:
            assert Counter(share.exhausted) == models[key].exhausted


def prefix_snaps(records: list[CoordinationRecord]) -> dict[int, list[dict[Key, Any]]]:
    """For each coordination partition, the state of its keys after each of its prefixes."""
    out: dict[int, list[dict[Key, Any]]] = {}
    for p in range(COORD):
        r = Rationalizer(RationalizerConfig(COORD, HI))
        keys = [k for k in KEYS if home(k) == p]
        states = [{k: snap(r, k) for k in keys}]
        for record in records:
            if record.partition == p:
                r.apply(record)
                states.append({k: snap(r, k) for k in keys})
        out[p] = states
    return out


@settings(max_examples=200, deadline=None,
          suppress_health_check=SUPPRESS, phases=PHASES)
@given(st.data())
def test_state_is_a_function_of_the_log_prefix(data: st.DataObject) -> None:
    w = draw_log(data, Rationalizer(RationalizerConfig(COORD, HI)), 5, 60)
    records = w.records
    straight = Rationalizer(RationalizerConfig(COORD, HI))
    verdicts = {(o.record.partition, o.record.position): (o.verdict, o.detail)
                for o in map(straight.apply, records)}
    prefixes = prefix_snaps(records)
    assert {k: prefixes[home(k)][-1][k] for k in KEYS} == snaps(straight)

    chunked = Rationalizer(RationalizerConfig(COORD, HI))
    seen: dict[tuple[int, int], tuple[V, str]] = {}

    def note(o: Outcome) -> None:
        if o.verdict is not V.DUPLICATE:
            where = (o.record.partition, o.record.position)
            assert where not in seen
            seen[where] = (o.verdict, o.detail)

    chunked.observe(note)
    queues = {p: [x for x in records if x.partition == p] for p in range(COORD)}
    done = dict.fromkeys(range(COORD), 0)
    delivered: list[CoordinationRecord] = []
    while any(queues.values()):
        which, take, redeliver, query = data.draw(CHUNKS)
        p = [p for p, q in queues.items() if q][which % COORD % sum(map(bool, queues.values()))]
        chunk, queues[p] = queues[p][:take], queues[p][take:]
        if delivered and redeliver is not None:  # a re-delivery after a reconnect
            chunked.apply_all(delivered[-(1 + redeliver % len(delivered)):])
        chunked.apply_all(chunk)
        delivered.extend(chunk)
        done[p] += len(chunk)
        if query is not None:  # queries at any time, of any record, change nothing
            when, offset = T_START + query[0], query[1]
            for key in KEYS:
                share = chunked.share_partition(*key)
                if share is not None:
                    share.in_flight(when)
                    share.counts(when)
                    share.record(offset)
                    chunked.acquired_by(SENDERS[0], *key, when)
        for key in KEYS:
            assert snap(chunked, key) == prefixes[home(key)][done[home(key)]][key]
    assert seen == verdicts
    assert chunked.share_ignored_offsets == straight.share_ignored_offsets
    for key in KEYS:
        a, b = chunked.share_partition(*key), straight.share_partition(*key)
        assert (a is None) == (b is None)
        if a is not None and b is not None:
            assert a.exhausted == b.exhausted


@settings(max_examples=150, deadline=None,
          suppress_health_check=SUPPRESS, phases=PHASES)
@given(st.data())
def test_other_share_partitions_never_change_this_one(data: st.DataObject) -> None:
    """7, directly: interleaving any log about the other keys leaves the main one unchanged."""
    # Without resets: whether a reset applies depends on signs of life of the whole group.
    w = draw_log(data, Rationalizer(RationalizerConfig(COORD, HI)), 5, 50, resets=False)
    main_only = [x for x, s in zip(w.records, w.sent, strict=True)
                 if s is not None and s.key == MAIN]
    others = [x for x, s in zip(w.records, w.sent, strict=True)
              if s is None or s.key != MAIN]
    alone = Rationalizer(RationalizerConfig(COORD, HI))
    alone_states = [snap(alone, MAIN)]
    for x in main_only:
        alone.apply(x)
        alone_states.append(snap(alone, MAIN))
    # Re-interleave the other records arbitrarily (positions renumbered per partition; their
    # times are kept, so they may even go back: the main share-partition must not care).
    positions = [0] * COORD
    i = j = 0
    mixed = Rationalizer(RationalizerConfig(COORD, HI))
    order = iter(data.draw(st.lists(st.booleans(), min_size=len(w.records),
                                    max_size=len(w.records))))
    while i < len(main_only) or j < len(others):
        take_main = j == len(others) or (i < len(main_only) and next(order))
        x = main_only[i] if take_main else others[j]
        mixed.apply(CoordinationRecord(x.partition, positions[x.partition], x.timestamp_ms,
                                       x.value))
        positions[x.partition] += 1
        i, j = (i + 1, j) if take_main else (i, j + 1)
        assert snap(mixed, MAIN) == alone_states[i]


# -- a huge range in one small record --------------------------------------------------------


class _Slow(Exception):
    pass


@contextlib.contextmanager
def deadline(seconds: float) -> Iterator[None]:
    """Raise _Slow in the block after ``seconds`` of this process's CPU (user and system: a
    busy machine that keeps the test waiting for a core does not count), and again every 50 ms
    of CPU until it ends (an exception raised while a finalizer runs is swallowed, so the
    cyclic collector, which runs them, is off meanwhile)."""

    def alarm(signum: int, frame: object) -> None:
        raise _Slow

    previous = signal.signal(signal.SIGPROF, alarm)
    gc.disable()
    signal.setitimer(signal.ITIMER_PROF, seconds, 0.05)
    try:
        yield
    finally:
        while True:
            try:
                signal.setitimer(signal.ITIMER_PROF, 0)
                break
            except _Slow:
                continue
        signal.signal(signal.SIGPROF, previous)
        gc.enable()


def huge_range_log(kind: str, inflight_limit: int) -> Writer:
    w = Writer()
    a = SENDERS[0]
    w.send(MAIN, a, InitializingSharePartition, start_offset=0, delivery_limit=5,
           inflight_limit=inflight_limit)
    w.send(MAIN, a, AcquiringRecords, ranges="0-9", lock_ms=LOCK_MAX)
    huge = f"0-{2**62}"
    if kind == "acquire":
        w.send(MAIN, SENDERS[1], AcquiringRecords, ranges=huge, lock_ms=LOCK_MAX)
    elif kind == "ack":
        w.send(MAIN, a, AcknowledgingRecords, ranges=huge, kind="accept")
    else:
        w.send(MAIN, a, RenewingLocks, ranges=huge, lock_ms=LOCK_MAX)
    return w


@pytest.mark.parametrize("kind", ["acquire", "ack", "renew"])
def test_a_huge_range_costs_no_more_than_the_in_flight_window(kind: str) -> None:
    """One small record naming offsets 0-2^62 must not stall the readers of the log (it did
    until the ranges were clipped to the in-flight window)."""
    r = Rationalizer(RationalizerConfig(COORD, HI))
    with deadline(1.0):
        outcomes = [r.apply(x) for x in huge_range_log(kind, 10).records]
    share = r.share_partition(*MAIN)
    assert share is not None
    if kind == "acquire":
        assert outcomes[-1].verdict is V.SHARE_IGNORED
        assert r.share_ignored_offsets == 2**62 + 1
        assert [x.holder for x in share.in_flight()] == [SENDERS[0]] * 10
    else:
        assert outcomes[-1].detail == f"0-9 ({2**62 + 1 - 10} offsets did not apply)"
        assert r.share_ignored_offsets == 2**62 + 1 - 10
        assert share.spso == (10 if kind == "ack" else 0)


def test_a_huge_range_with_a_huge_inflight_limit_does_not_stall_the_readers() -> None:
    """A rogue writer's initialization with an unbounded in-flight limit is malformed (the
    limit is bounded like KIP-932's), so the huge acquisition after it finds no share state."""
    w = Writer()
    a = SENDERS[0]
    rogue = (f"InitializingSharePartition/2/0/{a.instance_id}/{a.client_id}/"
             f"{MAIN[0]}/{MAIN[1]}/{MAIN[2]}/0/5/{2**63 - 1}").encode()
    w.raw(rogue, home(MAIN), None)
    w.send(MAIN, SENDERS[1], AcquiringRecords, ranges=f"0-{2**62}", lock_ms=LOCK_MAX)
    r = Rationalizer(RationalizerConfig(COORD, HI))
    with deadline(0.5):
        outcomes = [r.apply(x) for x in w.records]
    assert outcomes[0].verdict is V.MALFORMED
    assert r.share_partition(*MAIN) is None


# -- a simulation of three consumers ---------------------------------------------------------


TOPIC_SIZE = 200


@dataclass
class SimConsumer:
    client: str
    instance: int = 0
    holding: list[int] = field(default_factory=list)  # granted, as the consumer believes
    duties: set[int] = field(default_factory=set)  # of those, dead-letter duties
    down_until: int = 0

    @property
    def owner(self) -> Owner:
        return Owner(f"{self.client}-{self.instance}", self.client)


@pytest.mark.parametrize("dead_letters", [False, True], ids=["no-dlq", "dlq"])
@pytest.mark.parametrize("seed", range(6))
def test_three_consumers_consume_a_topic_each_record_accepted_once_archived_or_dead_lettered(
        seed: int, dead_letters: bool) -> None:
    rng = random.Random(seed)
    lock_ms, delivery_limit, inflight_limit = 2_000, 3, 16
    w = Writer()
    r = Rationalizer(RationalizerConfig(COORD, HI))
    # A ledger kept from the verdicts alone: grants, live locks, outcomes.
    grants: Counter[int] = Counter()
    duty_grants: Counter[int] = Counter()
    locks: dict[int, tuple[Owner, int, bool]] = {}  # offset -> holder, lock expiry, duty
    accepted: Counter[int] = Counter()
    rejected: set[int] = set()
    dead_lettered: Counter[int] = Counter()  # dead-lettered acknowledgements that applied
    # The dead-letter topic: (offset, writer) for each letter written; letters whose writer
    # crashed before acknowledging, or acknowledged too late.
    letters: list[tuple[int, Owner]] = []
    unconfirmed: Counter[int] = Counter()
    w.send(MAIN, Owner("admin", "admin"), InitializingSharePartition, start_offset=0,
           delivery_limit=delivery_limit, inflight_limit=inflight_limit,
           dead_letter_topic="dlq" if dead_letters else "")
    r.apply(w.records[-1])
    share = r.share_partition(*MAIN)
    assert share is not None

    def send(c: SimConsumer, message_type: type[ShareMessage], **fields: Any) -> list[int]:
        ts, spso = w.now, share.spso
        outcome = r.apply(w.send(MAIN, c.owner, message_type, **fields))
        applied = offsets_of(outcome.detail) if outcome.verdict.applied else []
        for offset in applied:
            if message_type is AcquiringRecords:
                # Only a record no one holds under a live lock, not finished, in the window;
                # a record owed a dead letter only as a duty, never delivered again.
                assert offset not in locks or locks[offset][1] <= ts, "taken from its holder"
                assert offset not in accepted and offset not in rejected
                assert offset not in dead_lettered
                assert share.spso <= offset < share.spso + inflight_limit
                duty = share.record(offset).duty
                assert duty == (offset in share.exhausted)
                (duty_grants if duty else grants)[offset] += 1
                locks[offset] = (c.owner, ts + lock_ms, duty)
                continue
            # Acknowledgements and renewals apply only for the holder, under a live lock.
            holder, expiry, duty = locks[offset]
            assert holder == c.owner and expiry > ts
            if message_type is RenewingLocks:
                locks[offset] = (c.owner, ts + lock_ms, duty)
                continue
            del locks[offset]
            kind = fields["kind"]
            assert kind in (("dead-lettered", "release") if duty
                            else ("accept", "release", "reject"))
            if kind == "accept":
                accepted[offset] += 1
            elif kind == "reject":
                rejected.add(offset)
            elif kind == "dead-lettered":
                dead_lettered[offset] += 1
        # The SPSO passes a record owed a dead letter only once it was dead-lettered.
        for offset in range(spso, share.spso):
            assert (offset in share.exhausted and dead_letters) == (dead_lettered[offset] == 1)
        for x in share.in_flight():
            assert x.delivery_count == grants[x.offset] <= delivery_limit
            if x.state is AQ:
                assert (x.holder, x.lock_expiry_ms, x.duty) == locks[x.offset]
            if x.state is DL or x.duty:
                assert x.delivery_count == delivery_limit and x.offset in share.exhausted
                assert x.duties == duty_grants[x.offset]
        return applied

    def write_letters(c: SimConsumer, offsets: Iterable[int]) -> None:
        letters.extend((o, c.owner) for o in offsets if o in c.duties)

    consumers = [SimConsumer(c) for c in "abc"]
    poison = set(range(7, TOPIC_SIZE, 10))
    stale_acks = crashes = races = 0
    for _ in range(50_000):
        if share.spso >= TOPIC_SIZE:
            break
        w.now += rng.randint(0, 700)
        c = rng.choice(consumers)
        if c.down_until > w.now:
            continue
        if c.down_until:  # restarted: a new instance that remembers nothing
            c.down_until, c.instance, c.holding, c.duties = 0, c.instance + 1, [], set()
        if c.holding:
            roll = rng.random()
            if roll < 0.04 or (roll < 0.07 and c.duties):  # crash: its locks elapse
                if roll >= 0.04:  # after writing its letters, before acknowledging them
                    write_letters(c, c.holding)
                    unconfirmed.update(c.duties)
                c.down_until = w.now + rng.randint(lock_ms, 3 * lock_ms)
                crashes += 1
                continue
            if roll < 0.08:
                send(c, RenewingLocks, ranges=text_of(c.holding), lock_ms=lock_ms)
                continue
            batch = c.holding[:rng.randint(1, len(c.holding))]
            by_kind: dict[str, list[int]] = {}
            for offset in batch:
                if offset in c.duties:  # mostly written to the dead-letter topic
                    kind = rng.choices(["dead-lettered", "release"], [90, 10])[0]
                elif offset in poison:  # every handler fails on it
                    kind = "release"
                else:
                    kind = rng.choices(["accept", "release", "reject"], [85, 10, 5])[0]
                by_kind.setdefault(kind, []).append(offset)
            for kind, offsets in by_kind.items():
                if kind == "dead-lettered":  # the letters first, then the acknowledgement
                    write_letters(c, offsets)
                applied = send(c, AcknowledgingRecords, ranges=text_of(offsets), kind=kind)
                stale_acks += len(offsets) - len(applied)
                if kind == "dead-lettered":  # too late: its lock had elapsed
                    unconfirmed.update(set(offsets) - set(applied))
            c.holding = [o for o in c.holding if o not in batch]
            c.duties -= set(batch)
            continue
        # Fetch: ask for the next Available (or owed) records of the topic - or, racing the
        # others with an old view, for offsets of the window whatever their state.
        n = rng.randint(1, 8)
        if rng.random() < 0.25:
            first = share.spso + rng.randint(0, inflight_limit)
            wanted = list(range(first, min(TOPIC_SIZE, first + n)))
            races += 1
        else:
            view = share.in_flight(w.now)
            wanted = [x.offset for x in view if x.state in (AV, DL)]
            wanted += range(share.speo, min(TOPIC_SIZE, share.speo + n))
            wanted = wanted[:n]
        if wanted:
            c.holding = send(c, AcquiringRecords, ranges=text_of(wanted), lock_ms=lock_ms)
            c.duties = {o for o in c.holding if share.record(o).duty}
    else:
        pytest.fail(f"the topic was not consumed: SPSO {share.spso}")

    exhausted = Counter(share.exhausted)
    owed = set(exhausted) if dead_letters else set()
    archived = rejected | (set(exhausted) - owed)
    assert not rejected & set(exhausted)
    assert all(n == 1 for n in exhausted.values())
    assert all(n == 1 for n in accepted.values()), "a record was accepted twice"
    assert not archived & set(accepted) and not owed & (archived | set(accepted))
    assert set(accepted) | archived | owed == set(range(TOPIC_SIZE))
    assert sum(accepted.values()) + len(archived) + len(owed) == TOPIC_SIZE
    assert all(grants[o] == delivery_limit for o in exhausted)  # only at the limit
    assert all(1 <= grants[o] <= delivery_limit for o in range(TOPIC_SIZE))
    assert poison <= set(exhausted)
    assert share.spso == share.speo == TOPIC_SIZE and share.in_flight() == []
    # Each record owed a dead letter was dead-lettered once by a holder of its duty; it got
    # exactly one letter unless a writer crashed (or was too late) before acknowledging it,
    # and at least one either way.
    written = Counter(o for o, _ in letters)
    assert dead_lettered == Counter(owed)
    assert set(duty_grants) == set(written) == owed
    assert all(written[o] == 1 for o in owed if not unconfirmed[o])
    assert written == dead_lettered + unconfirmed
    # The run exercised what it claims to: crashes, races, redeliveries, stale
    # acknowledgements, records archived at the limit (or owed dead letters, duties passed
    # on, and duplicate letters).
    assert crashes and races and stale_acks and exhausted and max(grants.values()) > 1
    if dead_letters:
        assert max(duty_grants.values()) > 1 and unconfirmed
