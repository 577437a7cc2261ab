"""Fuzzing the codec and the rationalizer with at least 10^5 records per run.

Each hypothesis example expands a seed into a log of ~1,100 records: the valid records of a
protected group (every kind of message, from a few members, time moving on), interleaved with
garbage — random bytes, valid records of other groups mutated (bits flipped, bytes cut,
inserted or swapped, fields exchanged), and in the authenticated variant also the protected
group's own signed records, mutated. Two properties, checked on every record:

* nothing but :class:`DecodeError` ever escapes ``decode``, and ``Rationalizer.apply`` never
  raises;
* garbage never changes another group's state: the protected group's state after the mixed
  log equals its state after its own records alone (compared after every 20th of its
  records and at the end: comparing the JSON snapshots is what costs most).

In the unauthenticated variant a mutation may happen to produce a *valid* record about the
protected group (a changed digit in an offset): such records are not garbage and are left out
of the log. With authentication every mutation of a signed record must be rejected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marshal_py.protocol import DecodeError, GroupKey, Message, decode, encode, sign
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
    mixed = Rationalizer(RationalizerConfig(1, HI, group_keys=keys))
    clean = Rationalizer(RationalizerConfig(1, HI, group_keys=keys))
    now = 1_700_000_000_000
    own: list[bytes] = []
    for position in range(RECORDS_PER_EXAMPLE):
        now += rng.choice((0, 1, 50, 300, 900, 2_500))
        if rng.random() >= garbage_share:
            body = encode(_valid(rng, PROTECTED, now))
            value = sign(body, KEY) if authenticated else body
            own.append(value)
            record = CoordinationRecord(0, position, now, value)
            mixed.apply(record)
            clean.apply(record)
            if len(own) % COMPARE_EVERY == 0:
                assert _state(mixed) == _state(clean), f"seed {seed}, position {position}"
            continue
        kind = rng.randrange(4)
        if kind == 0:
            value = rng.randbytes(rng.randint(0, 80))
        elif kind == 1:
            value = encode(_valid(rng, rng.choice(OTHERS), now))  # another group's record
        elif kind == 2 or not (authenticated and own):
            value = _mutate(rng, encode(_valid(rng, rng.choice([*OTHERS, PROTECTED]), now)))
        else:
            value = _mutate(rng, rng.choice(own))  # the protected group's own, tampered with
            if value in own:
                continue  # a mutation that changed nothing is a replay, not garbage
        if not authenticated and _about_protected(value):
            continue  # a valid record about the protected group: not garbage
        with contextlib.suppress(DecodeError):  # anything else escaping is a failure
            decode(value)
        mixed.apply(CoordinationRecord(0, position, now, value))  # must not raise
    assert _state(mixed) == _state(clean), f"seed {seed}"


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.floats(0.2, 0.8))
def test_garbage_never_changes_another_groups_state(seed: int, garbage_share: float) -> None:
    _run(seed, garbage_share, authenticated=False)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2**32), st.floats(0.2, 0.8))
def test_tampered_records_of_an_authenticated_group_change_nothing(
        seed: int, garbage_share: float) -> None:
    _run(seed, garbage_share, authenticated=True)
