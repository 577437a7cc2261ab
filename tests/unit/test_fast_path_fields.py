"""The fast path reads a record the way the codec does, from the very first record."""

from __future__ import annotations

from marshal_py.protocol import coordination_partition
from marshal_py.world import CoordinationRecord, Rationalizer, RationalizerConfig, Verdict

CP = coordination_partition("events", 1)


def test_an_empty_sent_at_field_is_malformed_even_in_a_fresh_rationalizer() -> None:
    r = Rationalizer(RationalizerConfig(1, 1_000))
    first = r.apply(CoordinationRecord(CP, 0, 1_000, b"ClaimingPartition/1//i/c/g/events/0"))
    assert first.verdict is Verdict.MALFORMED
    assert r.claims() == []
