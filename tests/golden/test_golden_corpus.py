"""The rationalizer applies the same rules as the frozen copy of its earlier self.

Every log of the golden corpus (:mod:`tests.golden.corpus`) is replayed through the
rationalizer under test and through the frozen reference (:mod:`tests.golden.frozen`), record
by record. After every record the two must agree on the outcome (verdict, detail, message,
expiry) and on everything they show (:mod:`tests.golden.views`: claims, members, group
lifecycles, share-partitions' in-flight views, key-shared slot runs, counters, positions,
authentication state), at the record's time and 2 HI later. A record can change only the
(group, topic) pair it is about and the global tables, so those are compared after every
record, and everything (every pair, and every pair's checkpoint snapshot text) after every
7th record and at the end. Second readers restored from checkpoints
mid-way (some of them damaged) must agree too.

The reference's side never changes for a given log, so a replay that agrees leaves a record
of it (:mod:`tests.golden.record`: a digest of every compared value, in the Kafka jars' cache
directory), and later replays of the same log compute only the rationalizer's side and check
it against that record (about 55 % less CPU); any difference runs the reference live again
and asserts value by value. ``MARSHAL_GOLDEN_LIVE=1`` always runs it live.

``MARSHAL_GOLDEN_LOGS`` (default 30; 4, seeds 0-3, under ``bin/test --fast``: see
:mod:`tests.tiers`) and ``MARSHAL_GOLDEN_RECORDS`` (records per log, default 800) size the
corpus.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

import pytest

from marshal_py.protocol import Checkpoint, MemberHeartbeat, encode
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world import Rationalizer, RationalizerConfig, Verdict, fast_beats
from marshal_py.world.checkpoint import CheckpointError
from tests.golden import record as golden_record
from tests.golden import views
from tests.golden.corpus import GoldenLog, Restore, Settings, golden_log
from tests.golden.frozen import protocol as frozen_protocol
from tests.golden.frozen import world as frozen_world
from tests.golden.frozen.world.checkpoint import CheckpointError as FrozenCheckpointError
from tests.tiers import sized

LOGS = int(os.environ.get("MARSHAL_GOLDEN_LOGS", sized(30, 4)))
RECORDS = int(os.environ.get("MARSHAL_GOLDEN_RECORDS", "800"))
SNAPSHOT_EVERY = 7
#: A restored reader fetches from its start positions: it sees up to this many earlier records.
REREAD = 60


def _readers(s: Settings) -> tuple[Rationalizer, frozen_world.Rationalizer]:
    new = Rationalizer(RationalizerConfig(
        s.coordination_partitions, s.heartbeat_interval_ms, s.group_heartbeat_intervals,
        s.offsets_retention_ms, s.keys(), s.auth_max_skew_ms))  # type: ignore[arg-type]
    old = frozen_world.Rationalizer(frozen_world.RationalizerConfig(
        s.coordination_partitions, s.heartbeat_interval_ms, s.group_heartbeat_intervals,
        s.offsets_retention_ms, s.keys(), s.auth_max_skew_ms))
    return new, old


class _Pair:
    """The rationalizer under test and the reference, fed the same records. Without a
    reference (``live=False``: a record of it is checked instead, :mod:`tests.golden.record`)
    only the rationalizer's side is computed; every compared value goes into ``chain``."""

    def __init__(self, log: GoldenLog, name: str, chain: golden_record.Chain, live: bool) -> None:
        self.log, self.name, self.chain = log, name, chain
        new, old = _readers(log.settings)
        self.new: Rationalizer = new
        self.old: frozen_world.Rationalizer | None = old if live else None
        self.seen: set[str] = set()
        self.new_outcomes: list[Any] = []
        self.old_outcomes: list[Any] = []
        # Observers see the same outcomes apply() returns.
        self.new.observe(self.new_outcomes.append)
        if self.old is not None:
            self.old.observe(self.old_outcomes.append)

    def where(self, index: int) -> str:
        return f"seed {self.log.seed}, {self.name}, record {index}"

    def hi_of(self, group: str) -> int:
        s = self.log.settings
        return s.group_heartbeat_intervals.get(group, s.heartbeat_interval_ms)

    def same(self, view: Callable[[Any], Any], where: str) -> None:
        """``view`` of the rationalizer equals ``view`` of the reference (when live)."""
        value = view(self.new)
        self.chain.add(value)
        if self.old is not None:
            assert value == view(self.old), where

    def restore(self, restore: Restore) -> None:
        new_error = old_error = None
        try:
            self.new.restore(restore.partition, Checkpoint(
                0, "i", "c", restore.group, restore.topic, restore.position, restore.state))
        except CheckpointError as exc:
            new_error = str(exc)
        self.chain.add(new_error)
        if self.old is None:
            return
        try:
            self.old.restore(restore.partition, frozen_protocol.Checkpoint(
                0, "i", "c", restore.group, restore.topic, restore.position, restore.state))
        except FrozenCheckpointError as exc:
            old_error = str(exc)
        assert new_error == old_error, f"seed {self.log.seed}: restoring {restore}"

    def skip_to(self, partition: int, position: int) -> None:
        self.new.skip_to(partition, position)
        if self.old is not None:
            self.old.skip_to(partition, position)

    def apply(self, index: int, record: Any, *, snapshot: bool) -> None:
        where = self.where(index)
        new_out = self.new.apply(record)
        assert self.new_outcomes.pop() is new_out and not self.new_outcomes
        seen = views.outcome(new_out, encode)
        self.chain.add(seen)
        if self.old is not None:
            old_out = self.old.apply(record)
            assert self.old_outcomes.pop() is old_out and not self.old_outcomes
            assert seen == views.outcome(old_out, frozen_protocol.encode), where
        self.seen.add(new_out.verdict.value)
        ts = record.timestamp_ms
        later = ts + 2 * self.log.settings.heartbeat_interval_ms + 1
        cps = self.log.settings.coordination_partitions
        # What no query time changes is compared once, the rest at both times (the views'
        # queries are pure: tests/golden/views.py).
        if snapshot:
            self.same(lambda r: views.world_static(r, cps), where)
            for now in (ts, later):
                self.same(lambda r, now=now: views.world_at(r, now, self.hi_of),
                          f"{where}, now {now}")
            self.same(views.snapshots, where)
            return
        self.same(lambda r: views.global_static(r, cps), where)
        for now in (ts, later):
            self.same(lambda r, now=now: views.global_at(r, now), f"{where}, now {now}")
        pair = _pair_of(record.value)
        if pair is not None:
            self.same(lambda r: views.pair_static(r, *pair), where)
            hi = self.hi_of(pair[0])
            for now in (ts, later):
                self.same(lambda r, now=now: views.pair_at(r, *pair, now, hi),
                          f"{where}, now {now}")


def _pair_of(value: bytes | None) -> tuple[str, str] | None:
    """The (group, topic) a record is about: the only pair it can change (None: garbage)."""
    if value is None:
        return None
    try:
        message = frozen_protocol.decode(value)
    except frozen_protocol.DecodeError:
        return None
    return message.group_id, message.topic


def replay(log: GoldenLog, *, live: bool = True) -> tuple[set[str], str]:
    """Replay ``log`` through both (through the rationalizer alone unless ``live``), and the
    second readers it plans; the verdicts seen and the digest of every compared value."""
    chain = golden_record.Chain()
    main = _Pair(log, "main reader", chain, live)
    second: list[_Pair] = []
    restores = {r.index: r for r in log.restores}
    for index, entry in enumerate(log.records):
        planned = restores.get(index)
        if planned is not None:
            joining = _Pair(log, f"reader restored at record {index}", chain, live)
            joining.restore(planned)
            joining.skip_to(planned.partition, planned.start)
            for p, start in planned.others:
                joining.skip_to(p, start)
            for back in range(max(0, index - REREAD), index):
                # It fetches from its start positions: the records between its start and the
                # checkpoint's position are before the checkpoint, those below duplicates.
                joining.apply(back, log.records[back], snapshot=False)
            second.append(joining)
            if index % 3 == 0:
                main.restore(planned)  # restored over a state that already has it all
        for pair in (main, *second):
            pair.apply(index, entry, snapshot=index % SNAPSHOT_EVERY == 0)
    for pair in (main, *second):
        pair.same(views.snapshots, pair.where(-1))
        pair.same(views.counters, pair.where(-1))
    return set().union(*(p.seen for p in (main, *second))), chain.hexdigest()


def check(log: GoldenLog) -> set[str]:
    """Replay ``log`` against the reference's record when there is one that agrees (see
    :mod:`tests.golden.record`), else against the live reference, and record it then."""
    key = golden_record.log_key(log)
    expected = golden_record.recorded(key)
    if expected is not None:
        seen, digest = replay(log, live=False)
        if digest == expected:
            return seen
    seen, digest = replay(log)  # asserts value by value, naming the record
    golden_record.keep(key, digest)
    return seen


@pytest.mark.parametrize("seed", range(LOGS))
def test_the_rationalizer_agrees_with_the_frozen_rules_after_every_record(seed: int) -> None:
    check(golden_log(seed, RECORDS))


def _reference_verdicts(log: GoldenLog) -> set[str]:
    """The verdicts the reference gives over ``log``, its second readers included."""
    readers = [_readers(log.settings)[1]]
    restores = {r.index: r for r in log.restores}
    seen: set[str] = set()
    for index, record in enumerate(log.records):
        planned = restores.get(index)
        if planned is not None:
            joining = _readers(log.settings)[1]
            with contextlib.suppress(FrozenCheckpointError):
                joining.restore(planned.partition, frozen_protocol.Checkpoint(
                    0, "i", "c", planned.group, planned.topic, planned.position,
                    planned.state))
            joining.skip_to(planned.partition, planned.start)
            for p, start in planned.others:
                joining.skip_to(p, start)
            for back in log.records[max(0, index - REREAD):index]:
                seen.add(joining.apply(back).verdict.value)
            readers.append(joining)
        for reader in readers:
            seen.add(reader.apply(record).verdict.value)
    return seen


def test_the_corpus_reaches_every_verdict() -> None:
    """The corpus is worth its name: together its logs produce every verdict the rules give
    (UNKNOWN_TYPE from garbage: every registered type is interpreted)."""
    seen: set[str] = set()
    for seed in range(min(LOGS, 12)):
        seen |= _reference_verdicts(golden_log(seed, RECORDS))
    missing = {v.value for v in Verdict} - seen
    assert not missing, f"the corpus never produces {sorted(missing)}"


#: Verdict sets a filtered observer names in the test below (each also run alone).
_WATCHED = ((Verdict.CHECKPOINT, Verdict.BEFORE_CHECKPOINT),
            (Verdict.HEARTBEAT, Verdict.DUPLICATE, Verdict.NOT_OWNER),
            (Verdict.REJECTED, Verdict.MALFORMED, Verdict.CLAIM_WON, Verdict.RECORDS_ACQUIRED),
            (Verdict.KEY_RANGES_HEARTBEAT, Verdict.KEY_RANGES_IGNORED))


@pytest.mark.parametrize("seed", range(min(LOGS, 8)))
def test_observers_of_some_verdicts_see_what_record_by_record_application_gives(
        seed: int) -> None:
    """``apply_all`` with observers that name their verdicts (the fast path, outcomes made
    only for those) gives each observer exactly the outcomes, in order, that applying record
    by record gives with those verdicts, and leaves the same state and counters: each set of
    verdicts observed alone, and all of them together."""
    log = golden_log(seed, RECORDS)
    cps = log.settings.coordination_partitions
    one_by_one = _readers(log.settings)[0]
    every: list[Any] = []
    one_by_one.observe(every.append)
    together = _readers(log.settings)[0]
    readers: list[tuple[Rationalizer, tuple[Verdict, ...], list[Any]]] = []
    for verdicts in _WATCHED:
        alone = _readers(log.settings)[0]
        seen_alone: list[Any] = []
        seen_together: list[Any] = []
        alone.observe(seen_alone.append, verdicts)
        together.observe(seen_together.append, verdicts)
        readers += [(alone, verdicts, seen_alone), (together, verdicts, seen_together)]
    records = log.records
    for start in range(0, len(records), 97):  # batches of a fetch's size, as members apply
        chunk = records[start:start + 97]
        one_by_one.apply_all(chunk)
        for reader in {id(r): r for r, _, _ in readers}.values():
            reader.apply_all(chunk)
    end = records[-1].timestamp_ms
    for reader, verdicts, seen in readers:
        wanted = [views.outcome(o, encode) for o in every if o.verdict in verdicts]
        assert [views.outcome(o, encode) for o in seen] == wanted, verdicts
        assert reader.counters == one_by_one.counters
        assert views.snapshots(reader) == views.snapshots(one_by_one)
        assert views.global_view(reader, end, cps) == views.global_view(one_by_one, end, cps)


def _as_read(records: list[Any]) -> list[CoordinationRecord]:
    """The records as the log layer hands them over (the corpus builds the frozen copy's)."""
    return [CoordinationRecord(r.partition, r.position, r.timestamp_ms, r.value)
            for r in records]


def _chunked_agrees(make: Callable[[], Rationalizer], records: list[CoordinationRecord],
                    size: int) -> None:
    one_by_one, chunked = make(), make()
    cps = one_by_one.config.coordination_partitions
    for start in range(0, len(records), size):
        chunk = records[start:start + size]
        for record in chunk:
            one_by_one.apply(record)
        chunked.apply_all(chunk)
        at = chunk[-1].timestamp_ms
        assert chunked.counters == one_by_one.counters, (size, start)
        assert views.snapshots(chunked) == views.snapshots(one_by_one), (size, start)
        assert views.global_view(chunked, at, cps) == views.global_view(one_by_one, at, cps), \
            (size, start)


@pytest.fixture
def c_beats(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts what the C build of the owners' heartbeats applied (world/_feed.c)."""
    run = fast_beats.run_beats
    assert run is not None, "bin/setup builds marshal_py.world._feed: run it again"
    applied = {"beats": 0, "duplicates": 0}

    def counting(*args: Any) -> Any:
        answer = run(*args)
        applied["beats"] += answer[4]
        applied["duplicates"] += answer[5]
        return answer

    monkeypatch.setattr(fast_beats, "run_beats", counting)
    return applied


@pytest.mark.parametrize("seed", range(min(LOGS, 8)))
def test_apply_all_in_fetch_sized_chunks_gives_what_record_by_record_application_gives(
        seed: int) -> None:
    """``apply_all`` without observers (where runs of owners' heartbeats and duplicates may
    go through the C build, world/_feed.c) leaves, after every chunk, the same state and
    counters as applying record by record: chunks of 7 and of 97 records (a fetch's size),
    the corpus's order and its records grouped by coordination partition (as fetches return
    them, which gives the C build runs to apply)."""
    log = golden_log(seed, RECORDS)
    records = _as_read(log.records)
    grouped = sorted(records, key=lambda r: r.partition)
    for size in (7, 97):
        _chunked_agrees(lambda: _readers(log.settings)[0], records, size)
        _chunked_agrees(lambda: _readers(log.settings)[0], grouped, size)


def _settled_log() -> list[CoordinationRecord]:
    """Settled groups (bench.rationalizer's exclusive mix) with what the C build must leave
    to Python: heartbeats of non-owners, a broker clock that goes back, a client with two
    instances, and a stretch read again (duplicates)."""
    from bench.rationalizer import build_exclusive_log

    built = build_exclusive_log(6_000, 40, groups=4)
    records = []
    for n, r in enumerate(built):
        value, ts = r.value, r.timestamp_ms
        assert value is not None
        if n % 41 == 0 and value.startswith(b"Heartbeat/"):  # a heartbeat of a non-owner
            value = value.replace(b"000000/worker-0/", b"000001/worker-1/", 1)
        if n % 53 == 0:  # a broker clock that went back
            ts -= 5_000
        records.append(CoordinationRecord(r.partition, r.position, ts, value))
    # A second instance of one client in each group, alive throughout (the group's live
    # view then changes with every sign of life of that client).
    with_twins: list[CoordinationRecord] = []
    for n, r in enumerate(records):
        if n % 400 == 0:
            with_twins += [CoordinationRecord(
                r.partition, 0, r.timestamp_ms,
                encode(MemberHeartbeat(r.timestamp_ms // 1000, f"{g:02d}ffffff", "worker-0",
                                       f"group-{g:02d}", "events", 1, -1, 10_000)))
                for g in range(4)]
        with_twins.append(r)
    records = with_twins
    records = [CoordinationRecord(r.partition, k, r.timestamp_ms, r.value)
               for k, r in enumerate(records)]
    again = records[2_000:2_300]  # a reader that reads a stretch again: duplicates
    return records[:3_000] + again + records[3_000:]


def test_settled_exclusive_groups_apply_alike_through_the_c_build(
        c_beats: dict[str, int]) -> None:
    """The log the C build is for, chunk by chunk against record by record."""
    from bench.rationalizer import config_for

    log = _settled_log()
    config = config_for("exclusive", groups=4)
    for size in (7, 97, 500):
        _chunked_agrees(lambda: Rationalizer(config), log, size)
    assert c_beats["beats"] > 10_000 and c_beats["duplicates"] >= 300
