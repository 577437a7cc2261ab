"""The chaos checker on hand-made journals and coordination logs: clean runs pass, and each
kind of violation is detected (see chaos/checker.py for the rules)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from chaos.checker import check
from chaos.run_data import Incarnation, RunData, RunMeta, RunResult, TopicRecord
from marshal_py.protocol import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingKeyRanges,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    InitializingSharePartition,
    KeyRangesHeartbeat,
    Message,
    ReleasingKeyRanges,
    ReleasingPartition,
    ResettingSharePartition,
    coordination_partition,
    encode,
)
from marshal_py.world import CoordinationRecord

G, T = "g", "t"
T0 = 1_700_000_000_000  # ms
HI = 1000
A, B = ("aaaa0001", "A"), ("bbbb0002", "B")
COORDINATION_PARTITIONS = 4


@dataclass
class Log:
    """A coordination partition written by hand (the data topic's home partition)."""

    records: list[CoordinationRecord] = field(default_factory=list)

    def at(self, ms: int, message: Message) -> Log:
        home = coordination_partition(T, COORDINATION_PARTITIONS)
        self.records.append(CoordinationRecord(home, len(self.records), T0 + ms,
                                               encode(message)))
        return self


def claim(who: tuple[str, str], p: int = 0) -> ClaimingPartition:
    return ClaimingPartition(0, who[0], who[1], G, T, p)


def beat(who: tuple[str, str], offset: int, p: int = 0) -> Heartbeat:
    return Heartbeat(0, who[0], who[1], G, T, p, offset)


def release(who: tuple[str, str], offset: int, p: int = 0) -> ReleasingPartition:
    return ReleasingPartition(0, who[0], who[1], G, T, p, offset)


class Journal:
    """One incarnation's journal: hand-outs and completions at given ms after T0."""

    def __init__(self, who: tuple[str, str], name: str = "") -> None:
        self.who = who
        self.name = name or who[1]
        self.events: list[dict[str, Any]] = [
            {"e": "start", "client": who[1], "instance": who[0], "inc": self.name}]

    def deliver(self, ms: int, offset: int, key: str | None = "k1", p: int = 0,
                count: int = 1, done: bool = True) -> Journal:
        t = (T0 + ms) / 1000
        self.events.append({"e": "d", "p": p, "o": offset, "k": key, "c": count, "t0": t,
                            "t1": t + 0.0001})
        if done:
            self.events.append({"e": "x", "p": p, "o": offset, "t": t + 0.001})
        return self

    def done(self, ms: int, offset: int, p: int = 0) -> Journal:
        self.events.append({"e": "x", "p": p, "o": offset, "t": (T0 + ms) / 1000})
        return self

    def incarnation(self) -> Incarnation:
        return Incarnation.from_events(self.name, self.events)


def topic(offsets: Sequence[int] | int, key: str | None = "k1",
          keys: dict[int, str] | None = None, p: int = 0) -> list[TopicRecord]:
    offsets = range(offsets) if isinstance(offsets, int) else offsets
    return [TopicRecord(p, o, (keys or {}).get(o, key)) for o in offsets]


def run(mode: str, records: list[TopicRecord], journals: Sequence[Journal], log: Log,
        delivery_limit: int = 5, partitions: int = 1,
        outputs: Sequence[tuple[int, int]] = ()) -> RunResult:
    meta = RunMeta(mode, G, T, partitions, COORDINATION_PARTITIONS, HI, delivery_limit)
    data = RunData(meta, records, [(r.partition, r.offset) for r in records],
                   [j.incarnation() for j in journals], [], log.records,
                   outputs=list(outputs))
    return check(data)


def kinds(result: RunResult) -> set[str]:
    return {v.kind for v in result.violations}


# -- at-least-once ------------------------------------------------------------------------------


def test_alo_clean_run_passes() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0)).at(500, beat(A, 3)).at(900, release(A, 5))
    a = Journal(A)
    for o in range(5):
        a.deliver(100 + 50 * o, o)
    result = run("alo", topic(5), [a], log)
    assert result.ok, result.violations
    assert (result.records, result.handed_out, result.processed, result.lost) == (5, 5, 5, 0)


def test_alo_redelivery_after_a_takeover_is_counted_not_violated() -> None:
    log = (Log().at(0, claim(A)).at(10, beat(A, 0)).at(300, beat(A, 2))
           .at(2500, claim(B)).at(2510, beat(B, 2)))
    a = Journal(A).deliver(100, 0).deliver(150, 1).deliver(200, 2).deliver(250, 3)
    b = Journal(B).deliver(2600, 2).deliver(2650, 3).deliver(2700, 4)
    result = run("alo", topic(5), [a, b], log)
    assert result.ok, result.violations
    assert (result.duplicated, result.redeliveries) == (2, 2)


def test_alo_lost_record() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0))
    a = Journal(A).deliver(100, 0).deliver(150, 1).deliver(200, 2, done=False)
    result = run("alo", topic(3), [a], log)
    assert kinds(result) == {"lost"}
    assert result.lost == 1
    assert "p0@2" in result.violations[0].detail


def test_alo_zombie_hand_out_after_a_takeover() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0)).at(2500, claim(B)).at(2510, beat(B, 2))
    a = Journal(A).deliver(100, 0).deliver(150, 1).deliver(2800, 2)  # woke up, delivered
    b = Journal(B).deliver(2600, 2).deliver(2650, 3)
    result = run("alo", topic(4), [a, b], log)
    assert kinds(result) == {"without_ownership"}
    assert "by A" in result.violations[0].detail


def test_alo_hand_out_before_the_claim() -> None:
    log = Log().at(500, claim(A)).at(510, beat(A, 0))
    a = Journal(A).deliver(100, 0)
    assert kinds(run("alo", topic(1), [a], log)) == {"without_ownership"}


def test_alo_hand_out_straddling_the_end_of_a_stint_is_not_reported() -> None:
    """The decision lies somewhere in [t0, t1]: a release inside it proves nothing."""
    log = Log().at(0, claim(A)).at(10, beat(A, 0)).at(200, release(A, 1))
    a = Journal(A)
    a.events.append({"e": "d", "p": 0, "o": 0, "k": "k1", "c": 1, "t0": (T0 + 150) / 1000,
                     "t1": (T0 + 5000) / 1000})
    a.done(5001, 0)
    assert run("alo", topic(1), [a], log).ok


def test_alo_order_within_a_stint() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0))
    a = Journal(A).deliver(100, 0).deliver(150, 2).deliver(200, 1)
    assert kinds(run("alo", topic(3), [a], log)) == {"order_within_stint"}


def test_alo_skip_across_a_handover() -> None:
    log = (Log().at(0, claim(A)).at(10, beat(A, 0)).at(300, release(A, 2))
           .at(400, claim(B)).at(410, beat(B, 3)))
    a = Journal(A).deliver(100, 0).deliver(150, 1)
    b = Journal(B).deliver(500, 3).deliver(550, 2)  # started past 2, then went back
    result = run("alo", topic(4), [a, b], log)
    assert "skip_across_handover" in kinds(result)


def test_the_first_hand_out_must_be_the_first_record() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 1))
    a = Journal(A).deliver(100, 1).deliver(150, 2)
    assert kinds(run("alo", topic(3), [a], log)) == {"skip_across_handover", "lost"}


def test_unknown_record_and_wrong_key() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0))
    a = Journal(A).deliver(100, 0).deliver(150, 1, key="k9").deliver(200, 7)
    result = run("alo", topic(2), [a], log)
    assert "unknown_record" in kinds(result)
    assert sum(v.kind == "unknown_record" for v in result.violations) == 2


# -- at-most-once -------------------------------------------------------------------------------


def amo_log() -> Log:
    return (Log().at(0, claim(A)).at(10, beat(A, 0))
            .at(20, ClaimingMessages(0, A[0], A[1], G, T, 0, 2)).at(30, beat(A, 0))
            .at(2500, claim(B)).at(2510, beat(B, 3))
            .at(2520, ClaimingMessages(0, B[0], B[1], G, T, 0, 4)).at(2530, beat(B, 5)))


def test_amo_crash_loses_the_rest_of_the_batch_counted_not_violated() -> None:
    a = Journal(A).deliver(100, 0).deliver(150, 1)  # crashed before 2
    b = Journal(B).deliver(2600, 3).deliver(2650, 4)
    result = run("amo", topic(5), [a, b], amo_log())
    assert result.ok, result.violations
    assert (result.lost, result.unconsumed, result.duplicated) == (1, 0, 0)


def test_amo_records_beyond_the_final_position_are_unconsumed() -> None:
    a = Journal(A).deliver(100, 0).deliver(150, 1)
    b = Journal(B).deliver(2600, 3).deliver(2650, 4)
    result = run("amo", topic(7), [a, b], amo_log())
    assert result.ok
    assert (result.lost, result.unconsumed) == (1, 2)


def test_amo_delivered_twice() -> None:
    a = Journal(A).deliver(100, 0).deliver(150, 1)
    b = Journal(B).deliver(2600, 1).deliver(2650, 3).deliver(2700, 4)
    result = run("amo", topic(5), [a, b], amo_log())
    assert "delivered_twice" in kinds(result)


def test_amo_log_invariant_reconfirmation_is_reported() -> None:
    # B took over after A confirmed up to 5, then confirmed 3: at or below its floor C0.
    log = (Log().at(0, claim(A)).at(10, beat(A, 0))
           .at(20, ClaimingMessages(0, A[0], A[1], G, T, 0, 5)).at(2500, claim(B))
           .at(2520, ClaimingMessages(0, B[0], B[1], G, T, 0, 3)))
    result = run("amo", topic(6), [], log)
    assert "log_amo_reconfirmed" in kinds(result)


# -- exactly-once ---------------------------------------------------------------------------------


def commit_of(who: tuple[str, str], offset: int, p: int = 0) -> Message:
    from marshal_py.protocol import CommittingTransaction

    return CommittingTransaction(0, f"{who[0]}.t{p}", who[1], G, T, p, offset)


def test_eos_every_input_output_once_passes_whatever_was_handed_out_again() -> None:
    log = (Log().at(0, claim(A)).at(10, beat(A, 0)).at(300, commit_of(A, 2))
           .at(2500, claim(B)).at(2510, beat(B, 2)).at(2800, commit_of(B, 4)))
    a = Journal(A).deliver(100, 0).deliver(100, 1).deliver(400, 2).deliver(400, 3)
    b = Journal(B).deliver(2600, 2).deliver(2600, 3)  # a's second batch was aborted
    result = run("eos", topic(4), [a, b], log, outputs=[(0, 0), (0, 1), (0, 2), (0, 3)])
    assert result.ok, result.violations
    assert (result.lost, result.duplicated, result.redeliveries) == (0, 0, 2)


def test_eos_an_output_twice_a_missing_one_and_a_foreign_one_are_violations() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0)).at(300, commit_of(A, 3))
    a = Journal(A).deliver(100, 0).deliver(100, 1).deliver(100, 2)
    result = run("eos", topic(3), [a], log, outputs=[(0, 0), (0, 0), (0, 2), (0, 9)])
    assert kinds(result) == {"output_twice", "lost", "unknown_record"}
    assert (result.lost, result.duplicated) == (1, 1)


def test_eos_a_zombie_hand_out_is_a_violation() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0)).at(2500, claim(B)).at(2510, beat(B, 0))
    a = Journal(A).deliver(2700, 0)
    b = Journal(B).deliver(2600, 0)
    result = run("eos", topic(1), [a, b], log, outputs=[(0, 0)])
    assert kinds(result) == {"without_ownership"}


# -- key-shared ---------------------------------------------------------------------------------


def ks_claim(who: tuple[str, str], slots: str = "0-1023") -> ClaimingKeyRanges:
    return ClaimingKeyRanges(0, who[0], who[1], G, T, 0, slots)


def ks_beat(who: tuple[str, str], offset: int) -> KeyRangesHeartbeat:
    return KeyRangesHeartbeat(0, who[0], who[1], G, T, 0, offset)


def ks_release(who: tuple[str, str], offset: int, slots: str = "0-1023") -> ReleasingKeyRanges:
    return ReleasingKeyRanges(0, who[0], who[1], G, T, 0, slots, offset)


KEYS = {0: "k1", 1: "k2", 2: "k1", 3: "k2", 4: "k1"}  # k1: 0, 2, 4; k2: 1, 3


def test_key_shared_clean_run_with_a_graceful_handover() -> None:
    log = (Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0)).at(300, ks_release(A, 3))
           .at(400, ks_claim(B)).at(410, ks_beat(B, 3)))
    a = Journal(A).deliver(100, 0, "k1").deliver(150, 1, "k2").deliver(200, 2, "k1")
    b = Journal(B).deliver(500, 3, "k2").deliver(550, 4, "k1")
    result = run("key-shared", topic(5, keys=KEYS), [a, b], log)
    assert result.ok, result.violations
    assert result.duplicated == 0


def test_key_shared_redelivery_after_a_takeover_is_allowed() -> None:
    log = (Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0))
           .at(2500, ks_claim(B)).at(2510, ks_beat(B, 0)))
    a = Journal(A).deliver(100, 0, "k1").deliver(150, 1, "k2").deliver(200, 2, "k1")
    b = (Journal(B).deliver(2600, 0, "k1").deliver(2650, 1, "k2").deliver(2700, 2, "k1")
         .deliver(2750, 3, "k2").deliver(2800, 4, "k1"))
    result = run("key-shared", topic(5, keys=KEYS), [a, b], log)
    assert result.ok, result.violations
    assert result.duplicated == 3


def test_key_shared_redelivery_after_a_release_is_a_violation() -> None:
    log = (Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0)).at(300, ks_release(A, 3))
           .at(400, ks_claim(B)).at(410, ks_beat(B, 3)))
    a = Journal(A).deliver(100, 0, "k1").deliver(150, 1, "k2").deliver(200, 2, "k1")
    b = Journal(B).deliver(500, 2, "k1").deliver(520, 3, "k2").deliver(550, 4, "k1")
    assert kinds(run("key-shared", topic(5, keys=KEYS), [a, b], log)) == {
        "redelivered_after_release"}


def test_key_shared_order_within_a_stint_is_per_key() -> None:
    log = Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0))
    # Records of other keys in between are fine: k2 (1, 3) is in order; k1 (0, 4, 2) is not.
    a = (Journal(A).deliver(100, 0, "k1").deliver(150, 4, "k1").deliver(200, 1, "k2")
         .deliver(250, 2, "k1").deliver(300, 3, "k2"))
    result = run("key-shared", topic(5, keys=KEYS), [a], log)
    assert kinds(result) == {"order_within_stint"}
    assert len(result.violations) == 2  # 4 skips 2, then 2 goes back
    assert all("key k1" in v.detail for v in result.violations)


def test_key_shared_skip_across_a_handover() -> None:
    log = (Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0))
           .at(2500, ks_claim(B)).at(2510, ks_beat(B, 0)))
    a = Journal(A).deliver(100, 0, "k1").deliver(150, 1, "k2")
    b = Journal(B).deliver(2600, 4, "k1").deliver(2650, 3, "k2").deliver(2700, 2, "k1")
    result = run("key-shared", topic(5, keys=KEYS), [a, b], log)
    assert "skip_across_handover" in kinds(result)


def test_key_shared_zombie_hand_out_of_a_slot_it_lost() -> None:
    log = (Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0))
           .at(2500, ks_claim(B)).at(2510, ks_beat(B, 0)))
    a = Journal(A).deliver(100, 0, "k1").deliver(2900, 1, "k2")
    b = (Journal(B).deliver(2600, 0, "k1").deliver(2650, 1, "k2").deliver(2700, 2, "k1")
         .deliver(2750, 3, "k2").deliver(2800, 4, "k1"))
    result = run("key-shared", topic(5, keys=KEYS), [a, b], log)
    assert kinds(result) == {"without_ownership"}
    assert "slot" in result.violations[0].detail


def test_key_shared_slots_of_other_keys_do_not_cover_a_key() -> None:
    from marshal_py.protocol import key_slot

    k2 = key_slot(b"k2")
    log = Log().at(0, ks_claim(A, f"{k2}")).at(10, ks_beat(A, 0))
    a = Journal(A).deliver(100, 0, "k1")  # k1's slot was never A's
    assert "without_ownership" in kinds(run("key-shared", topic(1, keys=KEYS), [a], log))


def test_key_shared_completion_after_a_release_is_a_violation() -> None:
    log = (Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0)).at(300, ks_release(A, 1))
           .at(400, ks_claim(B)).at(410, ks_beat(B, 1)))
    a = Journal(A).deliver(100, 0, "k1", done=False).done(350, 0)
    b = Journal(B).deliver(500, 1, "k2")
    result = run("key-shared", topic(2, keys=KEYS), [a, b], log)
    assert kinds(result) == {"completed_after_release"}


def test_key_shared_late_completion_after_a_takeover_is_counted() -> None:
    log = (Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0))
           .at(2500, ks_claim(B)).at(2510, ks_beat(B, 0)))
    a = Journal(A).deliver(100, 0, "k1", done=False).done(3000, 0)  # frozen while processing
    b = Journal(B).deliver(2600, 0, "k1").deliver(2650, 1, "k2")
    result = run("key-shared", topic(2, keys=KEYS), [a, b], log)
    assert result.ok, result.violations
    assert result.late_completions == 1


def test_key_shared_lost() -> None:
    log = Log().at(0, ks_claim(A)).at(10, ks_beat(A, 0))
    a = Journal(A).deliver(100, 0, "k1").deliver(150, 1, "k2")
    result = run("key-shared", topic(3, keys=KEYS), [a], log)
    assert kinds(result) == {"lost"}


# -- share --------------------------------------------------------------------------------------


def init(limit: int = 5) -> InitializingSharePartition:
    return InitializingSharePartition(0, A[0], A[1], G, T, 0, 0, limit, 2000)


def acquire(who: tuple[str, str], ranges: str, lock_ms: int = 30_000) -> AcquiringRecords:
    return AcquiringRecords(0, who[0], who[1], G, T, 0, ranges, lock_ms)


def accept(who: tuple[str, str], ranges: str) -> AcknowledgingRecords:
    return AcknowledgingRecords(0, who[0], who[1], G, T, 0, ranges, "accept")


def test_share_clean_run() -> None:
    log = Log().at(0, init()).at(100, acquire(A, "0-2")).at(300, accept(A, "0-2"))
    a = Journal(A).deliver(150, 0).deliver(160, 1).deliver(170, 2)
    result = run("share", topic(3), [a], log)
    assert result.ok, result.violations
    assert result.lost == 0


def test_share_redelivery_after_an_elapsed_lock() -> None:
    log = (Log().at(0, init()).at(100, acquire(A, "0-1", 1000))
           .at(1500, acquire(B, "0-1")).at(1700, accept(B, "0-1")))
    a = Journal(A).deliver(150, 0, done=False)  # crashed
    b = Journal(B).deliver(1550, 0, count=2).deliver(1560, 1, count=2)
    result = run("share", topic(2), [a, b], log)
    assert result.ok, result.violations
    assert (result.duplicated, result.redeliveries) == (1, 1)


def test_share_not_accepted() -> None:
    log = Log().at(0, init()).at(100, acquire(A, "0-2")).at(300, accept(A, "0-1"))
    a = Journal(A).deliver(150, 0).deliver(160, 1).deliver(170, 2, done=False)
    result = run("share", topic(3), [a], log)
    assert kinds(result) == {"not_accepted"}
    assert result.lost == 1


def test_share_accepted_twice_after_a_reset() -> None:
    log = (Log().at(0, init()).at(100, acquire(A, "0")).at(200, accept(A, "0"))
           .at(10_000, ResettingSharePartition(0, A[0], A[1], G, T, 0, 0))
           .at(10_100, acquire(B, "0")).at(10_200, accept(B, "0")))
    a = Journal(A).deliver(150, 0)
    b = Journal(B).deliver(10_150, 0)
    result = run("share", topic(1), [a, b], log)
    assert {"accepted_twice", "log_share_accepted_twice"} <= kinds(result)


def test_share_accepted_without_being_processed() -> None:
    log = Log().at(0, init()).at(100, acquire(A, "0")).at(200, accept(A, "0"))
    a = Journal(A).deliver(150, 0, done=False)
    assert kinds(run("share", topic(1), [a], log)) == {"accepted_unprocessed"}


def test_share_delivery_count_without_an_acquisition() -> None:
    log = Log().at(0, init()).at(100, acquire(A, "0")).at(200, accept(A, "0"))
    a = Journal(A).deliver(150, 0, count=2)
    assert kinds(run("share", topic(1), [a], log)) == {"delivery_without_acquisition"}


def test_share_delivery_of_another_members_acquisition() -> None:
    log = Log().at(0, init()).at(100, acquire(B, "0")).at(200, accept(B, "0"))
    a = Journal(A).deliver(150, 0)
    b = Journal(B).done(160, 0)
    assert "delivery_without_acquisition" in kinds(run("share", topic(1), [a, b], log))


def test_share_zombie_hand_out_after_the_record_was_acquired_again() -> None:
    log = (Log().at(0, init()).at(100, acquire(A, "0", 1000))
           .at(1500, acquire(B, "0")).at(1700, accept(B, "0")))
    a = Journal(A).deliver(1600, 0)  # woke up past its lock and handed it out anyway
    b = Journal(B).deliver(1550, 0, count=2)
    assert kinds(run("share", topic(1), [a, b], log)) == {"delivered_after_reacquired"}


def test_share_one_acquisition_handed_out_twice() -> None:
    log = Log().at(0, init()).at(100, acquire(A, "0")).at(200, accept(A, "0"))
    a = Journal(A).deliver(150, 0).deliver(160, 0)
    assert kinds(run("share", topic(1), [a], log)) == {"acquisition_delivered_twice"}


def test_share_archived_at_the_delivery_limit_is_counted_not_violated() -> None:
    log = (Log().at(0, init(limit=2)).at(100, acquire(A, "0", 1000))
           .at(1500, acquire(B, "0", 1000)).at(3000, acquire(B, "1"))
           .at(3100, accept(B, "1")))
    a = Journal(A).deliver(150, 0, done=False)
    b = Journal(B).deliver(1550, 0, count=2, done=False).deliver(3050, 1)
    result = run("share", topic(2), [a, b], log, delivery_limit=2)
    assert result.ok, result.violations
    assert (result.archived, result.lost) == (1, 0)


# -- counting -----------------------------------------------------------------------------------


def test_faults_errors_and_lost_acknowledged_records_are_counted() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0))
    a = Journal(A).deliver(100, 0)
    a.events.append({"e": "error", "msg": "BrokerUnavailableError: gone"})
    meta = RunMeta("alo", G, T, 1, COORDINATION_PARTITIONS, HI)
    faults = [{"e": "kill"}, {"e": "stop"}, {"e": "cont"}, {"e": "broker_kill"},
              {"e": "kill"}]
    data = RunData(meta, topic(1), [(0, 0), (0, 1)], [a.incarnation()], faults, log.records)
    result = check(data)
    assert result.ok
    assert dict(result.faults) == {"kill": 2, "stop": 1, "broker": 1}
    assert result.consumer_errors == 1
    assert any("missing from the topic" in w for w in result.warnings)
    summary = result.to_dict()
    assert summary["faults"] == {"kill": 2, "stop": 1, "broker": 1}
    assert summary["violations"] == 0


def test_time_to_resume_after_a_broker_restart() -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0))
    a = Journal(A).deliver(100, 0).deliver(5000, 1).deliver(5100, 2)
    meta = RunMeta("alo", G, T, 1, COORDINATION_PARTITIONS, HI)
    faults = [{"e": "broker_kill", "t": (T0 + 200) / 1000},
              {"e": "broker_up", "t": (T0 + 3000) / 1000},
              {"e": "broker_kill", "t": (T0 + 6000) / 1000},
              {"e": "broker_up", "t": (T0 + 7000) / 1000}]  # nothing handed out after it
    result = check(RunData(meta, topic(3), [], [a.incarnation()], faults, log.records))
    assert result.ok, result.violations
    assert result.resumed_after_broker_s == [pytest.approx(2.0001, abs=1e-3)]


def test_an_unknown_mode_is_refused() -> None:
    meta = RunMeta("exactly-once", G, T, 1, COORDINATION_PARTITIONS, HI)
    with pytest.raises(ValueError, match="unknown mode"):
        check(RunData(meta, [], [], [], [], []))


def test_acknowledged_records_the_topic_no_longer_holds_are_counted_as_lost_by_the_broker(
        ) -> None:
    log = Log().at(0, claim(A)).at(10, beat(A, 0)).at(900, release(A, 3))
    a = Journal(A)
    for o in range(3):
        a.deliver(100 + 50 * o, o)
    meta = RunMeta("alo", G, T, 1, COORDINATION_PARTITIONS, HI, 5)
    produced = [(0, o) for o in range(4)]  # offset 3 acknowledged, then lost by the broker
    result = check(RunData(meta, topic(3), produced, [a.incarnation()], [], log.records))
    assert result.ok, result.violations
    assert (result.records, result.broker_lost) == (3, 1)
    assert any("the broker lost them" in w for w in result.warnings)
    assert result.to_dict()["broker_lost"] == 1
