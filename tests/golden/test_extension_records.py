"""Records the fast paths do not know go the general way, and get the frozen rules' verdicts.

A hand-made log next to the generated corpus: an extension record neither codec knows (as a
newer marshal_py could write it: the rationalizer must only skip one it meets), plain and
signed; records that
look like the fast paths' but are not quite (another version, a type name sharing a prefix, a
signed record with a key the group does not hold, a bad MAC, a replay, one misplaced). Each is
replayed through the rationalizer and the frozen copy, compared after every record.
"""

from __future__ import annotations

from tests.golden.corpus import AUTH_GROUP, KEY_A, KEY_WRONG, T0, GoldenLog, Settings
from tests.golden.frozen.protocol import (
    ClaimingPartition,
    GroupKey,
    Heartbeat,
    MemberHeartbeat,
    coordination_partition,
    encode,
    sign,
)
from tests.golden.frozen.world import CoordinationRecord
from tests.golden.test_golden_corpus import replay

COORD = 3
TOPIC = "t1"
HOME = coordination_partition(TOPIC, COORD)
#: An extension type of a future version (the frozen codec predates ``CheckpointChunk``, which
#: the rationalizer now names: tests/unit/test_checkpoint_chunk_verdicts.py).
CHUNK = ("FutureExtension/2/1700000000/i1/a/g1/t1/40/0/2/" + "ab" * 32 + "/{}").encode()


def _log(values: list[tuple[int, bytes]]) -> GoldenLog:
    settings = Settings(COORD, 10_000, {}, 7 * 24 * 3600 * 1000, True, 120_000)
    records = [CoordinationRecord(p, i, T0 + 100 * i, v) for i, (p, v) in enumerate(values)]
    return GoldenLog(0, settings, records, [])


def test_unknown_extension_records_are_skipped_as_the_frozen_rules_skip_them() -> None:
    claim = encode(ClaimingPartition(T0 // 1000, "i1", "a", "g1", TOPIC, 0))
    seen, _ = replay(_log([
        (HOME, claim),
        (HOME, CHUNK),
        (HOME, sign(CHUNK.replace(b"/g1/", f"/{AUTH_GROUP}/".encode()), KEY_A, 1)),
        (HOME, claim.replace(b"ClaimingPartition/1/", b"ClaimingPartitions/1/")),
        (HOME, claim.replace(b"ClaimingPartition/1/", b"ClaimingPartition/7/")),
        (HOME, encode(Heartbeat(T0 // 1000, "i1", "a", "g1", TOPIC, 0, 5))),
    ]))
    assert {"unknown_type", "unknown_version", "heartbeat"} <= seen


def test_signed_records_off_the_fast_path_get_the_frozen_verdicts() -> None:
    def signed(message: object, seq: int, key: GroupKey = KEY_A) -> bytes:
        return sign(encode(message), key, seq)  # type: ignore[arg-type]

    now = T0 // 1000
    member = signed(MemberHeartbeat(now, "i1", "a", AUTH_GROUP, TOPIC, 1, -1, 10_000), 1)
    claim = signed(ClaimingPartition(now, "i1", "a", AUTH_GROUP, TOPIC, 0), 2)
    beat = signed(Heartbeat(now, "i1", "a", AUTH_GROUP, TOPIC, 0, 9), 3)
    other = next(p for p in range(COORD) if p != HOME)
    seen, _ = replay(_log([
        (HOME, member),
        (HOME, claim),
        (HOME, beat),
        (HOME, beat),  # a replay: its sequence number is not above the last one
        (HOME, signed(Heartbeat(now, "i1", "a", AUTH_GROUP, TOPIC, 0, 10), 4, KEY_WRONG)),
        (HOME, signed(Heartbeat(now, "i1", "a", AUTH_GROUP, TOPIC, 0, 11), 5,
                      GroupKey("kz", b"golden-secret-z-0123456789abcdef"))),
        (HOME, beat[:-1] + b"8"),  # the MAC no longer covers the message
        (other, signed(Heartbeat(now, "i1", "a", AUTH_GROUP, TOPIC, 0, 12), 6)),
        (HOME, signed(Heartbeat(now - 1000, "i1", "a", AUTH_GROUP, TOPIC, 0, 13), 7)),
        (HOME, encode(Heartbeat(now, "i1", "a", AUTH_GROUP, TOPIC, 0, 14))),  # unsigned
    ]))
    assert {"member_heartbeat", "claim_won", "heartbeat", "rejected", "misplaced"} <= seen
