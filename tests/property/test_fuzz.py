"""Fuzzing the codec and the rationalizer with at least 10^5 records per run.

Each hypothesis example expands a seed into a log of ~1,100 records: the valid records of a
protected group (every kind of message, from a few members, time moving on), interleaved with
garbage — random bytes, valid records of other groups mutated (bits flipped, bytes cut,
inserted or swapped, fields exchanged), and in the authenticated variant also the protected
group's own signed records, mutated or copied unchanged to a later position (replays, most
of them within the skew bound of their writing). Two properties, checked on every record:

* nothing but :class:`DecodeError` ever escapes ``decode``, and ``Rationalizer.apply`` never
  raises;
* garbage never changes another group's state: the protected group's state after the mixed
  log equals its state after its own records alone (compared after every 20th of its
  records and at the end: comparing the JSON snapshots is what costs most). In the
  authenticated variant, a reader restored from a checkpoint of the mixed log taken at a
  random point, which then reads the rest of the mixed log (replays of records from before
  its checkpoint included), must agree too.

In the unauthenticated variant a mutation may happen to produce a *valid* record about the
protected group (a changed digit in an offset): such records are not garbage and are left out
of the log. With authentication every mutation and every copy of a signed record must be
rejected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marshal_py.protocol import Checkpoint, DecodeError, GroupKey, Message, decode, encode, sign
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig
from tests.property.streams import KINDS, message_for

HI = 1_000
PROTECTED = ("orders", "t")
OTHERS = [("billing", "t"), ("orders", "u"), ("billing", "u")]
SENDERS = [("i1", "a"), ("i2", "a"), ("i3", "b"), ("i4", "c")]
KEY = GroupKey("k1", b"fuzzing-secret-0123456789abcdef!")
RECORDS_PER_EXAMPLE = 1_100
#: 100 examples: 110,000 records per variant and run; MARSHAL_FUZZ_EXAMPLES runs longer.
EXAMPLES = int(os.environ.get("MARSHAL_FUZZ_EXAMPLES", "100"))
COMPARE_EVERY = 20  # the protected group's state is compared after every 20th own record
RECENT = 30  # half the replays copy one of the last 30 own records: within the skew bound


def _valid(rng: random.Random, pair: tuple[str, str], now_ms: int) -> Message:
    while True:
        message = message_for(rng.choice(KINDS), rng.choice(SENDERS), pair, rng.randrange(3),
                              rng.randrange(41), rng.randrange(1024))
        if message is not None:
            return dataclasses.replace(message, sent_at=now_ms // 1000)


def _mutate(rng: random.Random, data: bytes) -> bytes:
    raw = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        choice = rng.randrange(6)
        if choice == 0 and raw:  # flip a bit
            i = rng.randrange(len(raw))
            raw[i] ^= 1 << rng.randrange(8)
        elif choice == 1 and raw:  # cut
            del raw[rng.randrange(len(raw)):]
        elif choice == 2:  # insert bytes
            i = rng.randrange(len(raw) + 1)
            raw[i:i] = rng.randbytes(rng.randint(1, 5))
        elif choice == 3:  # exchange two '/'-separated fields
            fields = bytes(raw).split(b"/")
            if len(fields) > 3:
                a, b = rng.sample(range(len(fields)), 2)
                fields[a], fields[b] = fields[b], fields[a]
                raw = bytearray(b"/".join(fields))
        elif choice == 4:  # a separator or escape in a random place
            i = rng.randrange(len(raw) + 1)
            raw[i:i] = rng.choice([b"/", b"%", b"%2F", b"%zz", b"\xff", b"-1"])
        elif raw:  # replace a digit
            digits = [i for i, c in enumerate(raw) if 48 <= c <= 57]
            if digits:
                raw[rng.choice(digits)] = rng.randrange(48, 58)
    return bytes(raw)


def _about_protected(value: bytes) -> bool:
    try:
        message = decode(value)
    except DecodeError:
        return False
    return (message.group_id, message.topic) == PROTECTED


def _state(r: Rationalizer) -> str:
    return r.snapshot(*PROTECTED)


def _run(seed: int, garbage_share: float, authenticated: bool) -> None:
    rng = random.Random(seed)
    keys = {PROTECTED[0]: (KEY,)} if authenticated else {}
    config = RationalizerConfig(1, HI, group_keys=keys)
    mixed = Rationalizer(config)
    clean = Rationalizer(config)
    #: A reader that starts from a checkpoint of the mixed log (authenticated variant).
    restored: Rationalizer | None = None
    restore_at = rng.randrange(RECORDS_PER_EXAMPLE // 4, RECORDS_PER_EXAMPLE * 3 // 4)
    now = 1_700_000_000_000
    own: list[bytes] = []
    seq = 0

    def apply_mixed(record: CoordinationRecord) -> None:
        mixed.apply(record)  # must not raise
        if restored is not None:
            restored.apply(record)

    def agree(where: str) -> None:
        assert _state(mixed) == _state(clean), where
        if restored is not None:
            assert _state(restored) == _state(clean), f"restored, {where}"

    for position in range(RECORDS_PER_EXAMPLE):
        now += rng.choice((0, 1, 50, 300, 900, 2_500))
        if authenticated and restored is None and position >= restore_at:
            restored = Rationalizer(config)
            restored.restore(0, Checkpoint(now // 1000, "i9", "z", *PROTECTED, position,
                                           _state(mixed)))
            restored.skip_to(0, position)
        if rng.random() >= garbage_share:
            body = encode(_valid(rng, PROTECTED, now))
            seq += 1
            value = sign(body, KEY, seq) if authenticated else body
            own.append(value)
            record = CoordinationRecord(0, position, now, value)
            apply_mixed(record)
            clean.apply(record)
            if len(own) % COMPARE_EVERY == 0:
                agree(f"seed {seed}, position {position}")
            continue
        kind = rng.randrange(5 if authenticated and own else 3)
        if kind == 0:
            value = rng.randbytes(rng.randint(0, 80))
        elif kind == 1:
            value = encode(_valid(rng, rng.choice(OTHERS), now))  # another group's record
        elif kind == 2:
            value = _mutate(rng, encode(_valid(rng, rng.choice([*OTHERS, PROTECTED]), now)))
        elif kind == 3:
            value = _mutate(rng, rng.choice(own))  # the protected group's own, tampered with
        else:  # a copy of one of its own, appended again
            value = rng.choice(own[-RECENT:] if rng.random() < 0.5 else own)
        if not authenticated and _about_protected(value):
            continue  # a valid record about the protected group: not garbage
        with contextlib.suppress(DecodeError):  # anything else escaping is a failure
            decode(value)
        apply_mixed(CoordinationRecord(0, position, now, value))
    agree(f"seed {seed}")
    if authenticated:
        assert restored is not None


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.floats(0.2, 0.8))
def test_garbage_never_changes_another_groups_state(seed: int, garbage_share: float) -> None:
    _run(seed, garbage_share, authenticated=False)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.floats(0.2, 0.8))
def test_tampered_records_of_an_authenticated_group_change_nothing(
        seed: int, garbage_share: float) -> None:
    _run(seed, garbage_share, authenticated=True)
