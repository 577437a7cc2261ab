"""The golden corpus: generated coordination logs that exercise every rule of the rationalizer.

Each log comes from one seed and a :class:`~tests.golden.frozen.world.RationalizerConfig`-like
set of settings: a few groups (exclusive, share, key-shared, exactly-once, authenticated with
two keys) on a few topics over one to three coordination partitions, written by a few
members that restart, leave and go quiet, with time moving on by small and large steps (and
sometimes back: CreateTime logs), positions with gaps and repeats, every message type in
every version, escaped ids, garbage (random bytes, mutated records, tombstones, unknown types
and versions, control characters, overlong ids), signed records with replays, wrong keys,
skewed clocks and unsequenced versions, Checkpoint records carrying the reference's own
snapshots, and resets.

The records are encoded and signed with the frozen codec (:mod:`tests.golden.frozen`), so the
corpus does not move when the codec under test changes. The generator peeks at a reference
rationalizer (the frozen one) to aim its share and key-shared records near the live state, so
that most of them do something.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from tests.golden.frozen.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    Checkpoint,
    ClaimingKeyRanges,
    ClaimingMessages,
    ClaimingPartition,
    CommittingTransaction,
    GroupKey,
    Heartbeat,
    InitializingSharePartition,
    KeyRangesHeartbeat,
    MemberHeartbeat,
    Message,
    ReleasingKeyRanges,
    ReleasingPartition,
    RenewingLocks,
    ResettingOffsets,
    ResettingSharePartition,
    coordination_partition,
    encode,
    sign,
    sign_v2,
)
from tests.golden.frozen.world import CoordinationRecord, Rationalizer

T0 = 1_700_000_000_000
KEY_A = GroupKey("ka", b"golden-secret-a-0123456789abcdef")
KEY_B = GroupKey("kb", b"golden-secret-b-0123456789abcdef")
KEY_WRONG = GroupKey("ka", b"golden-secret-x-0123456789abcdef")
AUTH_GROUP = "secure"
#: Groups by what they do; topics; members (two processes of client "a": restarts).
EXCLUSIVE = ["g1", "g2", "eos", AUTH_GROUP]
SHARE, KEYED = "sg", "kg"
TOPICS = ["t1", "t2", "odd/topic%"]
SENDERS = [("i1", "a"), ("i2", "a"), ("i3", "b"), ("i4", "c"), ("i5", "d"),
           ("in/st%", "cl/ient")]


@dataclass
class Settings:
    """Settings of one log's readers (the same for the reference and the rationalizer under
    test)."""

    coordination_partitions: int
    heartbeat_interval_ms: int
    group_heartbeat_intervals: dict[str, int]
    offsets_retention_ms: int
    authenticated: bool
    auth_max_skew_ms: int

    def keys(self) -> dict[str, tuple[GroupKey, ...]]:
        return {AUTH_GROUP: (KEY_A, KEY_B)} if self.authenticated else {}


@dataclass
class Restore:
    """A second reader starts here: it restores ``state`` (a checkpoint of ``group`` on
    ``topic`` taken at ``position`` of coordination partition ``partition``), skips to
    ``start`` (at or before ``position``: the records between are before the checkpoint),
    and reads the rest of the log."""

    index: int  # the log entry it starts before
    partition: int
    group: str
    topic: str
    position: int
    state: str
    start: int
    others: list[tuple[int, int]] = field(default_factory=list)  # (partition, start)


@dataclass
class GoldenLog:
    """One log of the corpus."""

    seed: int
    settings: Settings
    records: list[CoordinationRecord]
    restores: list[Restore]


class _Writer:
    """Builds one log, watching a reference reader to aim records at the live state."""

    def __init__(self, seed: int, length: int) -> None:
        rng = self.rng = random.Random(seed)
        self.settings = Settings(
            coordination_partitions=rng.choice([1, 1, 2, 3]),
            heartbeat_interval_ms=rng.choice([1_000, 2_000]),
            group_heartbeat_intervals=({"g2": 3_000} if rng.random() < 0.5 else {}),
            offsets_retention_ms=rng.choice([15_000, 40_000, 7 * 24 * 3600 * 1000]),
            authenticated=rng.random() < 0.6,
            auth_max_skew_ms=rng.choice([1_000, 5_000, 120_000]),
        )
        from tests.golden.frozen.world import RationalizerConfig

        s = self.settings
        self.reference = Rationalizer(RationalizerConfig(
            s.coordination_partitions, s.heartbeat_interval_ms, s.group_heartbeat_intervals,
            s.offsets_retention_ms, s.keys(), s.auth_max_skew_ms))
        self.length = length
        self.now = T0
        self.positions = [0] * s.coordination_partitions
        self.records: list[CoordinationRecord] = []
        self.restores: list[Restore] = []
        self.seq: dict[str, int] = {}
        self.signed: list[bytes] = []
        self.topics = rng.sample(TOPICS, rng.choice([1, 2, 3]))
        self.partitions = rng.choice([1, 2, 3])
        self.senders = SENDERS[:rng.choice([3, 4, 6])]

    # -- output ---------------------------------------------------------------------------

    def emit(self, value: bytes | None, partition: int | None = None) -> None:
        rng = self.rng
        cp = rng.randrange(self.settings.coordination_partitions) if partition is None \
            else partition
        position = self.positions[cp]
        roll = rng.random()
        if roll < 0.03:
            position += rng.randint(1, 5)  # transaction markers, compacted records: a gap
        elif roll < 0.05 and position > 0:
            position = max(0, position - rng.randint(1, 3))  # a repeat: a duplicate
        record = CoordinationRecord(cp, position, self.now, value)
        self.positions[cp] = max(self.positions[cp], position + 1)
        self.records.append(record)
        self.reference.apply(record)

    def send(self, message: Message, *, misplace: bool = False) -> None:
        """Encode (and for the authenticated group sign) ``message`` and write it to its
        topic's coordination partition (another one when ``misplace``)."""
        rng = self.rng
        body = encode(message)
        home = coordination_partition(message.topic, self.settings.coordination_partitions)
        cp = home
        if misplace and self.settings.coordination_partitions > 1:
            cp = (home + 1) % self.settings.coordination_partitions
        value = body
        signing = message.group_id == AUTH_GROUP or rng.random() < 0.03
        if signing and rng.random() > 0.04:  # now and then the authenticated group forgets
            roll = rng.random()
            writer = message.instance_id
            if roll < 0.04:
                value = sign_v2(body, rng.choice([KEY_A, KEY_B]))
            elif roll < 0.07:
                value = sign(body, KEY_WRONG, self._next_seq(writer))
            else:
                key = KEY_B if rng.random() < 0.3 else KEY_A
                seq = self._next_seq(writer)
                if rng.random() < 0.03:
                    # A writer that went back (never to 0: no writer numbers a record 0,
                    # which marks a gap declaration; tests/unit/test_auth.py covers those).
                    seq = max(1, seq - rng.randint(1, 3))
                value = sign(body, key, seq)
            self.signed.append(value)
        self.emit(value, cp)

    def _next_seq(self, writer: str) -> int:
        self.seq[writer] = self.seq.get(writer, self.rng.randrange(0, 5)) + 1
        return self.seq[writer]

    # -- time -------------------------------------------------------------------------------

    def tick(self) -> None:
        rng = self.rng
        roll = rng.random()
        hi = self.settings.heartbeat_interval_ms
        if roll < 0.55:
            self.now += rng.randint(0, 40)
        elif roll < 0.85:
            self.now += rng.randint(hi // 4, hi)
        elif roll < 0.95:
            self.now += rng.randint(hi, 3 * hi + 1)
        elif roll < 0.985:
            self.now += rng.choice([2 * hi, 2 * hi + 1, self.settings.offsets_retention_ms,
                                    self.settings.offsets_retention_ms + 3 * hi + 7])
        else:
            self.now -= rng.randint(1, 2 * hi)  # CreateTime: a producer's clock behind

    def sent_at(self) -> int:
        rng = self.rng
        roll = rng.random()
        if roll < 0.95:
            return self.now // 1000
        skew = self.settings.auth_max_skew_ms
        return max(0, (self.now + rng.choice([-1, 1]) * (skew + rng.randint(1, 5_000)))
                   // 1000)

    # -- messages -----------------------------------------------------------------------------

    def base(self, group: str) -> tuple[int, str, str, str, str, int]:
        rng = self.rng
        instance, client = rng.choice(self.senders)
        return (self.sent_at(), instance, client, group, rng.choice(self.topics),
                rng.randrange(self.partitions))

    def offset(self) -> int:
        return self.rng.choice([0, 1, 5, 17, 100, 101, self.rng.randrange(1_000)])

    def exclusive(self) -> Message:
        rng = self.rng
        group = rng.choice(EXCLUSIVE)
        base = self.base(group)
        roll = rng.random()
        if group == "eos" and roll < 0.2:
            return CommittingTransaction(*base, self.offset())
        if roll < 0.35:
            return Heartbeat(*base, self.offset())
        if roll < 0.6:
            return ClaimingPartition(*base)
        if roll < 0.72:
            return ReleasingPartition(*base, self.offset())
        if roll < 0.82:
            return ClaimingMessages(*base, self.offset())
        if roll < 0.97:
            return self.member(group, base)
        return ResettingOffsets(*base, self.offset())

    def member(self, group: str, base: tuple[int, str, str, str, str, int]) -> Message:
        rng = self.rng
        active = 0 if rng.random() < 0.12 else 1
        hi = rng.choice([0, 0, 500, 1_000, 2_500, self.settings.heartbeat_interval_ms])
        return MemberHeartbeat(*base[:5], active, rng.choice([-1, -1, 0, 1, 2]), hi)

    def share(self) -> Message:
        rng = self.rng
        base = self.base(SHARE)
        _, _, _, group, topic, partition = base
        state = self.reference.share_partition(group, topic, partition)
        roll = rng.random()
        if state is None or roll < 0.03:
            return InitializingSharePartition(*base, rng.choice([0, 10]), rng.choice([2, 3]),
                                              rng.choice([8, 20, 50]),
                                              rng.choice(["", "", "dead-letters"]))
        lo = state.spso
        if roll < 0.1:
            return self.member(group, base)
        if roll < 0.13:
            return ResettingSharePartition(*base, lo + rng.randint(0, 5))
        first = lo + rng.randint(-2, max(1, state.speo - lo + 4))
        ranges = self.ranges(max(0, first), rng.randint(1, 6))
        if roll < 0.45:
            return AcquiringRecords(*base, ranges, rng.choice([1_000, 1_500, 4_000]))
        if roll < 0.85:
            # Aim at what a member holds: its own records, acknowledged by itself.
            held = [r for r in state.in_flight(self.now) if r.holder is not None]
            if held and rng.random() < 0.8:
                record = rng.choice(held)
                assert record.holder is not None
                base = (base[0], record.holder.instance_id, record.holder.client_id,
                        *base[3:])
                ranges = self.ranges(record.offset, rng.randint(1, 4))
            kind = rng.choice(["accept", "accept", "release", "reject", "gap",
                               "dead-lettered"])
            return AcknowledgingRecords(*base, ranges, kind)
        return RenewingLocks(*base, ranges, rng.choice([1_000, 3_000]))

    def ranges(self, first: int, length: int) -> str:
        rng = self.rng
        if rng.random() < 0.25:
            gap = rng.randint(1, 3)
            second = first + length + gap
            return f"{first}-{first + length - 1},{second}" if length > 1 \
                else f"{first},{second}-{second + 2}"
        return f"{first}-{first + length - 1}" if length > 1 else str(first)

    def keyed(self) -> Message:
        rng = self.rng
        base = self.base(KEYED)
        roll = rng.random()
        a = rng.choice([0, 1, 100, 511, 512, 700, 1000, 1023])
        b = min(1023, a + rng.choice([0, 1, 10, 255, 511, 1023]))
        slots = f"{a}-{b}" if a < b else str(a)
        if rng.random() < 0.15 and b + 3 < 1023:
            slots += f",{b + 2}-{min(1023, b + 40)}"
        if roll < 0.3:
            return ClaimingKeyRanges(*base, slots)
        if roll < 0.65:
            return KeyRangesHeartbeat(*base, self.offset())
        if roll < 0.8:
            return ReleasingKeyRanges(*base, slots, self.offset())
        if roll < 0.95:
            return self.member(KEYED, base)
        return ResettingOffsets(*base, self.offset())

    def checkpoint(self) -> Message:
        """A Checkpoint record carrying the reference's own snapshot (or, rarely, junk)."""
        rng = self.rng
        group = rng.choice([*EXCLUSIVE, SHARE, KEYED])
        topic = rng.choice(self.topics)
        cp = coordination_partition(topic, self.settings.coordination_partitions)
        state = self.reference.snapshot(group, topic) if rng.random() < 0.9 else '{"v":9}'
        instance, client = rng.choice(self.senders)
        return Checkpoint(self.sent_at(), instance, client, group, topic,
                          self.reference.next_position(cp), state)

    def garbage(self) -> bytes | None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.1:
            return None  # a tombstone
        if roll < 0.2:
            return rng.randbytes(rng.randint(0, 60))
        if roll < 0.3 and self.signed:
            return rng.choice(self.signed)  # a replayed signed record
        if roll < 0.4:
            return rng.choice([b"Nonsense/2/a/b", b"Heartbeat/7/1/i/c/g/t/0/1", b"Heartbeat",
                               b"MemberHeartbeat/1/1/i/c/g/t/1", b"Signed/3/ka/1/xyz/body",
                               b"Signed/9/x", b"Heartbeat/1/01/i/c/g/t/0/1",
                               b"Heartbeat/1/1/i/c/g/t/-0/1", b"Heartbeat/1/1/i/c/g/t/0/+1",
                               b"Heartbeat/1/1/i/c/g/t/2147483648/1",
                               b"Heartbeat/1/1/i/c/g/t/0/9223372036854775808",
                               b"Heartbeat/1/1/i/c/g/t/0/-9223372036854775808",
                               b"Heartbeat/1/1/i/c/g/t/0/1_0", b"Heartbeat/1/ 1/i/c/g/t/0/1",
                               b"Heartbeat/2/1/i%2/c/g/t/0/1", b"ClaimingPartition/1/1/i/c/g/t",
                               "Heartbeat/1/1/i\u0085/c/g/t/0/1".encode(),
                               "Heartbeat/1/1/\u00e9/\u4e2d/g1/t1/0/1".encode(),
                               b"Heartbeat/1/1/i/c/g/t/0/\xd9\xa3",
                               b"Heartbeat/1/1/i/c/g/" + b"x" * 250 + b"/0/1",
                               b"Heartbeat/1/1/" + b"i" * 256 + b"/c/g/t/0/1",
                               b"AcquiringRecords/2/1/i/c/sg/t1/0/5-3/1000",
                               b"AcquiringRecords/2/1/i/c/sg/t1/0/1-3/999",
                               b"ClaimingKeyRanges/2/1/i/c/kg/t1/0/1024",
                               b"Checkpoint/2/1/i/c/g1/t1/-1/{}"])
        message = self.any_message()
        raw = bytearray(encode(message))
        for _ in range(rng.randint(1, 3)):
            choice = rng.randrange(5)
            if choice == 0 and raw:
                i = rng.randrange(len(raw))
                raw[i] ^= 1 << rng.randrange(8)
            elif choice == 1 and raw:
                del raw[rng.randrange(len(raw)):]
            elif choice == 2:
                i = rng.randrange(len(raw) + 1)
                raw[i:i] = rng.choice([b"/", b"%", b"%2F", b"%zz", b"\xff", b"-1", b"\x01", b"0"])
            elif choice == 3:
                fields = bytes(raw).split(b"/")
                if len(fields) > 3:
                    x, y = rng.sample(range(len(fields)), 2)
                    fields[x], fields[y] = fields[y], fields[x]
                    raw = bytearray(b"/".join(fields))
            else:
                digits = [i for i, c in enumerate(raw) if 48 <= c <= 57]
                if digits:
                    raw[rng.choice(digits)] = rng.randrange(48, 58)
        return bytes(raw)

    def any_message(self) -> Message:
        roll = self.rng.random()
        if roll < 0.5:
            return self.exclusive()
        if roll < 0.75:
            return self.share()
        return self.keyed()

    # -- the log ------------------------------------------------------------------------------

    def write(self) -> None:
        rng = self.rng
        restore_at = {rng.randrange(self.length // 5, self.length) for _ in range(2)}
        while len(self.records) < self.length:
            self.tick()
            if len(self.records) in restore_at:
                restore_at.discard(len(self.records))
                self.plan_restore()
            roll = rng.random()
            if roll < 0.5:
                self.send(self.exclusive(), misplace=rng.random() < 0.02)
            elif roll < 0.7:
                self.send(self.share(), misplace=rng.random() < 0.02)
            elif roll < 0.86:
                self.send(self.keyed(), misplace=rng.random() < 0.02)
            elif roll < 0.89:
                self.send(self.checkpoint())
            else:
                self.emit(self.garbage())

    def plan_restore(self) -> None:
        """A second reader joins here from a checkpoint of a pair the log has seen."""
        rng = self.rng
        groups = self.reference.groups()
        if groups and rng.random() < 0.9:
            group, topic = rng.choice(groups)
        else:
            group, topic = rng.choice(EXCLUSIVE), rng.choice(self.topics)
        cp = coordination_partition(topic, self.settings.coordination_partitions)
        position = self.reference.next_position(cp)
        state = self.reference.snapshot(group, topic)
        if rng.random() < 0.05:
            state = state[: len(state) // 2]  # a damaged checkpoint: restore must refuse it
        start = max(0, position - rng.choice([0, 0, 1, 5, 50]))
        others = [(p, self.reference.next_position(p) - rng.choice([0, 3]))
                  for p in range(self.settings.coordination_partitions) if p != cp]
        self.restores.append(Restore(len(self.records), cp, group, topic, position, state,
                                     start, [(p, max(0, s)) for p, s in others]))


def golden_log(seed: int, length: int) -> GoldenLog:
    """The log of ``seed`` (``length`` records)."""
    writer = _Writer(seed, length)
    writer.write()
    return GoldenLog(seed, writer.settings, writer.records, writer.restores)
