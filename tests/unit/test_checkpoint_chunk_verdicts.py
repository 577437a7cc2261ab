"""A CheckpointChunk met in the log: named as part of a checkpoint, and it changes nothing
(the log layer assembles the parts; PROTOCOL.md 11)."""

from __future__ import annotations

from marshal_py.protocol import ClaimingPartition, coordination_partition, encode
from marshal_py.protocol.messages import CheckpointChunk
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig
from marshal_py.world.rationalizer import Verdict

T0 = 1_700_000_000_000


def test_a_checkpoint_part_is_named_and_changes_no_claim() -> None:
    home = coordination_partition("t1", 3)
    rationalizer = Rationalizer(RationalizerConfig(coordination_partitions=3,
                                                   heartbeat_interval_ms=10_000))
    claim = encode(ClaimingPartition(T0 // 1000, "i1", "a", "g1", "t1", 0))
    chunk = encode(CheckpointChunk(T0 // 1000, "i1", "a", "g1", "t1", 40, 0, 2, "ab" * 32,
                                   "{}"))
    rationalizer.apply(CoordinationRecord(home, 0, T0, claim))
    before = rationalizer.claims("g1", "t1")
    outcome = rationalizer.apply(CoordinationRecord(home, 1, T0 + 100, chunk))
    assert outcome.verdict is Verdict.CHECKPOINT
    assert outcome.detail == "part 1 of 2 of the checkpoint as of position 40"
    assert rationalizer.claims("g1", "t1") == before
