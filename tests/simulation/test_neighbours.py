"""Neighbours cost nothing, and history is never missed (PROTOCOL.md sections 6 and 11).

MemoryLog and a virtual clock. Other groups write to the same coordination partition as the
group under test (claims, heartbeats, membership, garbage, ids that need escaping), as
writers that follow the protocol: each records its pair's history in the index before its
first record. A member of a brand-new group starts at the end of the partition, whatever its
neighbours wrote; a member joining a group with history -- with or without checkpoints,
whole or in parts, torn or not -- agrees exactly with a reader that saw every record; groups
that may not trust the index (authenticated, compatibility mode) and topics that are not
declared replay the window as before.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pytest

from marshal_py.client.channel import CoordinationChannel
from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.errors import BrokerUnavailableError
from marshal_py.identity import new_instance_id
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.protocol import (
    ClaimingPartition,
    Heartbeat,
    MemberHeartbeat,
    coordination_partition,
    encode,
)
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.index import (
    CheckpointAt,
    History,
    checkpoint_key,
    encode_entry,
    history_key,
)
from marshal_py.protocol.messages import CheckpointChunk
from marshal_py.replay import catch_up
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000
WINDOW = 3_600_000
COORD = 2
CP = coordination_partition("orders", COORD)
NEIGHBOURS = ("team.other", "team/slash", "100%", "orders.g2")


def config(keys: dict[str, tuple[GroupKey, ...]] | None = None) -> RationalizerConfig:
    return RationalizerConfig(COORD, HI, group_keys=keys or {})


class Neighbours:
    """Other groups' members writing to the partition of ``orders``: each pair's history is
    recorded in the index before its first record (the writer's duty)."""

    def __init__(self, log: MemoryLog, rng: random.Random) -> None:
        self.log, self.rng = log, rng
        self.declared: set[str] = set()
        self.groups: tuple[str, ...] = NEIGHBOURS

    def write(self, count: int) -> None:
        for _ in range(count):
            group = self.rng.choice(self.groups)
            if group not in self.declared:
                entry = History(self.log.topic, "", group, "orders", self.log.end_position(CP))
                self.log.append_index(history_key(group, "orders", new_instance_id()),
                                      encode_entry(entry))
                self.declared.add(group)
            member = f"n{self.rng.randrange(3)}"
            partition = self.rng.randrange(8)
            message = self.rng.choice([
                ClaimingPartition(0, f"{member}0000"[:8], member, group, "orders", partition),
                Heartbeat(0, f"{member}0000"[:8], member, group, "orders", partition,
                          self.rng.randrange(1000)),
                MemberHeartbeat(0, f"{member}0000"[:8], member, group, "orders", 1, -1, HI),
            ])
            self.log.append(CP, encode(message) if self.rng.random() > 0.02 else b"garbage")


class World:
    def __init__(self, *, declared: bool = True, partitions: int = 8,
                 max_value_bytes: int | None = None) -> None:
        self.clock = VirtualClock()
        options = {} if max_value_bytes is None else {"max_value_bytes": max_value_bytes}
        self.log = FailingLog(partitions=COORD, clock=self.clock, declared=declared, **options)
        self.topic = MemoryTopic("orders", partitions)
        self.rng = random.Random(5)
        self.neighbours = Neighbours(self.log, self.rng)
        self.full = Rationalizer(config())  # reads every record from the first

    def member(self, group: str, client: str, *, keys: Sequence[GroupKey] = (),
               compat: str | None = None, checkpoint_interval_ms: int = 5 * HI
               ) -> MemberEngine:
        options: dict[str, object] = {"compat": compat} if compat else {}
        engine = MemberEngine(
            EngineConfig(group_id=group, client_id=client, instance_id=new_instance_id(),
                         topics=("orders",), heartbeat_interval_ms=HI, offset_reset="earliest",
                         replay_window_ms=WINDOW, checkpoint_interval_ms=checkpoint_interval_ms,
                         **options),  # type: ignore[arg-type]
            self.log, Rationalizer(config({group: tuple(keys)} if keys else None)),
            self.topic, SimClock(self.clock), random.Random(self.rng.getrandbits(32)))
        engine.start()
        return engine

    def run(self, engines: Sequence[MemberEngine], steps: int, neighbours: int = 0) -> None:
        for _ in range(steps):
            self.clock.advance(200)
            self.neighbours.write(neighbours)
            for engine in engines:
                engine.tick()
        catch_up(self.log, self.full, range(COORD))

    def joiner_view(self, group: str, keys: Sequence[GroupKey] = ()
                    ) -> tuple[Rationalizer, CoordinationChannel]:
        """What a member joining ``group`` now knows after its replay."""
        r = Rationalizer(config({group: tuple(keys)} if keys else None))
        channel = CoordinationChannel(self.log, r, SimClock(self.clock), ["orders"],
                                      group=group)
        channel.open(WINDOW)
        return r, channel


class FailingLog(MemoryLog):
    """Appends of several records can be made to stop half-way (a writer that fails while
    writing a checkpoint's parts); and a window lookup can be made to answer as Kafka's
    two requests could (:attr:`meanwhile`)."""

    fail_after: int | None = None
    #: Run once by the next :meth:`position_for_time` that finds no record at or after the
    #: time, before it answers the end as it is then: what other writers do between the
    #: two requests of a lookup on Kafka (offsets by time, then the end).
    meanwhile: Callable[[], None] | None = None

    def position_for_time(self, partition: int, timestamp_ms: int) -> int:
        found = super().position_for_time(partition, timestamp_ms)
        if self.meanwhile is None or found != self.end_position(partition):
            return found
        meanwhile, self.meanwhile = self.meanwhile, None
        meanwhile()
        return self.end_position(partition)

    def append_all(self, items: Sequence[tuple[int, bytes]]) -> list[CoordinationRecord]:
        parts = any(value.startswith(b"CheckpointChunk/") for _, value in items)
        if self.fail_after is None or len(items) <= self.fail_after or not parts:
            return super().append_all(items)
        super().append_all(items[:self.fail_after])
        raise BrokerUnavailableError("the broker went away half-way (test)")


def counting(log: MemoryLog) -> list[int]:
    """Count the records ``log`` hands to readers from now on."""
    handed = [0]
    fetch = log.fetch

    def counted(starts, timeout_s):  # type: ignore[no-untyped-def]
        records = fetch(starts, timeout_s)
        handed[0] += len(records)
        return records

    log.fetch = counted  # type: ignore[method-assign]
    return handed


def test_a_new_group_starts_at_the_end_whatever_its_neighbours_wrote() -> None:
    w = World()
    w.neighbours.write(20_000)
    end = w.log.end_position(CP)
    handed = counting(w.log)
    new = w.member("brand.new", "a")
    assert new.channel.replay_starts[CP] == end
    assert handed[0] < 10  # its own records, not its neighbours'
    w.run([new], 10, neighbours=50)
    assert set(new.holdings) == {("orders", p) for p in range(8)}
    view = w.joiner_view("brand.new")[0]
    assert view.groups() == [("brand.new", "orders")]  # never applied a neighbour's record


def test_a_peer_that_joins_while_a_member_opens_is_never_skipped() -> None:
    """Two members of a brand-new group join together (issue 22): the peer reads the index,
    records its History and writes its first records after the member has read the index
    (so the member sees no History and begins at the end it read before), but before the
    member's window lookup answers -- with the end as it is then, past the peer's records
    (a partition with no record in the window). The member must begin at or before the
    end it read before the index, never at the later one, and so see its peer."""
    w = World()
    w.clock.advance(2 * WINDOW)
    w.neighbours.write(50)  # a declared topic's partition, nothing of it in the window...
    w.clock.advance(2 * WINDOW)
    before = w.log.end_position(CP)
    peers: list[MemberEngine] = []
    w.log.meanwhile = lambda: peers.append(w.member("brand.new", "b"))
    a = w.member("brand.new", "a")
    assert len(peers) == 1 and w.log.meanwhile is None
    b = peers[0]
    assert a.channel.index is not None and a.channel.index.history_start(
        "brand.new", "orders") is None  # read before the peer's History
    assert a.channel.replay_starts[CP] == before  # not the end after the peer's records
    assert b.channel.replay_starts[CP] == before
    w.run([a, b], 10)
    for member in (a, b):
        members = member.rationalizer.members("brand.new", "orders", w.clock())
        assert {m.client_id for m in members} == {"a", "b"}
        assert member.rationalizer.snapshot("brand.new", "orders") == \
            w.full.snapshot("brand.new", "orders")
    held = [set(a.holdings), set(b.holdings)]
    assert not held[0] & held[1]  # never both holding one partition


def test_a_joiner_of_a_group_with_history_agrees_with_a_full_reader() -> None:
    """The group's history was written by writers that record it but write no checkpoint:
    the joiner replays from where that history begins (not from the window's start), and
    knows exactly what a reader of every record knows."""
    w = World()
    w.neighbours.write(2_000)
    began = w.log.end_position(CP)
    w.neighbours.groups = ("orders.g", *NEIGHBOURS)
    w.neighbours.write(300)
    joiner = w.member("orders.g", "b", checkpoint_interval_ms=10**9)
    index = joiner.channel.index
    assert index is not None
    assert joiner.channel.replay_starts[CP] == index.history_start("orders.g", "orders")
    assert began <= joiner.channel.replay_starts[CP] < began + 300
    w.run([joiner], 5)
    view, _ = w.joiner_view("orders.g")
    assert view.snapshot("orders.g", "orders") == w.full.snapshot("orders.g", "orders")
    assert view.members("orders.g", "orders", w.clock()) == \
        w.full.members("orders.g", "orders", w.clock())
    assert {m.client_id for m in view.members("orders.g", "orders", w.clock())} > {"b"}


@pytest.mark.parametrize("seed", range(4))
def test_checkpointed_groups_among_neighbours_restore_exactly(seed: int) -> None:
    """Members come and go while neighbours write; at every step a joiner (from the
    checkpoint the index points at, or where the history begins) agrees with a full
    reader, and reads about one checkpoint interval of the group's records."""
    w = World()
    w.rng.seed(seed)
    engines: list[MemberEngine] = []
    for step in range(300):
        if step % 40 == 0 and len(engines) < 3:
            engines.append(w.member("orders.g", f"c{step}"))
        if step % 70 == 69 and engines:
            w.rng.choice(engines).close()
            engines = [e for e in engines if not e.closed]
        w.run(engines, 1, neighbours=w.rng.randrange(30))
        if step % 25 == 24:
            view, channel = w.joiner_view("orders.g")
            assert view.snapshot("orders.g", "orders") == \
                w.full.snapshot("orders.g", "orders"), step
            assert view.groups() == [("orders.g", "orders")]
            pointer = channel.index.checkpoint_position("orders.g", "orders") \
                if channel.index else None
            assert pointer is not None and channel.replay_starts[CP] <= pointer
            assert w.log.end_position(CP) - channel.replay_starts[CP] < 2_000


def test_an_authenticated_group_does_not_trust_absence() -> None:
    """A forger removes the group's History and checkpoint pointer from the index (a
    tombstone, then compaction): a member of the authenticated group still finds its
    checkpoint in the log, where a reader trusting the index would have started at the
    end and missed the group's history."""
    key = GroupKey("k1", b"0123456789abcdef0123456789abcdef")
    w = World()
    w.neighbours.write(500)
    first = w.member("sealed", "a", keys=[key])
    w.run([first], 10, neighbours=10)
    index = w.log._index
    index[:] = [r for r in index if b"/sealed/" not in (r[1] or b"")]
    view, channel = w.joiner_view("sealed", keys=[key])
    assert not channel.trusts_index
    assert 500 <= channel.replay_starts[CP] < w.log.end_position(CP)
    full = Rationalizer(config({"sealed": (key,)}))
    catch_up(w.log, full, [CP])
    assert view.snapshot("sealed", "orders") == full.snapshot("sealed", "orders")
    assert view.claims("sealed", "orders")
    end = w.log.end_position(CP)
    trusting = CoordinationChannel(w.log, Rationalizer(config()), SimClock(w.clock),
                                   ["orders"], group="sealed")
    trusting.open(WINDOW)
    assert trusting.replay_starts[CP] == end
    assert not trusting.rationalizer.claims("sealed", "orders")


def test_compat_members_and_undeclared_topics_replay_the_window() -> None:
    for declared, compat in ((False, None), (True, "v1")):
        w = World(declared=declared)
        w.neighbours.write(500)
        member = w.member("orders.g", "a", compat=compat)
        assert member.channel.replay_starts[CP] == 0
        assert member.channel.keep is None if compat else member.channel.keep is not None


def test_chunked_checkpoints_restore_exactly_and_torn_ones_are_skipped() -> None:
    w = World(partitions=64, max_value_bytes=1_500)
    a = w.member("orders.g", "a", checkpoint_interval_ms=2 * HI)
    w.run([a], 30, neighbours=5)
    chunks = [r for r in w.log.fetch({CP: 0}, 0) if r.value and
              r.value.startswith(b"CheckpointChunk/")]
    assert len(chunks) >= 3
    whole_at = w.joiner_view("orders.g")[1].replay_starts[CP]
    view, _ = w.joiner_view("orders.g")
    assert view.snapshot("orders.g", "orders") == w.full.snapshot("orders.g", "orders")
    # The next checkpoint is torn: its writer fails after two parts.
    w.log.fail_after = 2
    w.run([a], 12, neighbours=5)
    w.log.fail_after = None
    torn = [r for r in w.log.fetch({CP: 0}, 0) if r.position > chunks[-1].position
            and r.value and r.value.startswith(b"CheckpointChunk/")]
    assert torn, "no torn checkpoint was written"
    pointer = CheckpointAt(w.log.topic, "", "orders.g", "orders", torn[0].position)
    w.log.append_index(checkpoint_key("orders.g", "orders"), encode_entry(pointer))
    view, channel = w.joiner_view("orders.g")
    assert channel.replay_starts[CP] >= whole_at  # the older whole checkpoint, or newer
    assert view.snapshot("orders.g", "orders") == w.full.snapshot("orders.g", "orders")


def test_chunked_checkpoints_are_named_by_the_rationalizer_and_count_as_checkpoints() -> None:
    w = World(partitions=64, max_value_bytes=1_500)
    a = w.member("orders.g", "a", checkpoint_interval_ms=2 * HI)
    w.run([a], 30)
    written = a.channel.checkpoints_written
    parts = [r for r in w.log.fetch({CP: 0}, 0)
             if r.value and r.value.startswith(CheckpointChunk.TYPE.encode())]
    # One chunked checkpoint per interval, not one per step.
    assert 3 <= written <= 30 * 200 // (2 * HI) + 1
    assert len(parts) >= 3 * written
