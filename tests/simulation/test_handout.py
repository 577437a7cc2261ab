"""The threaded Consumer's delivery path (HandOut over published leases, commit cursors,
pipelined at-most-once windows) under crashes, pauses, restarts and closes, with the same
invariants on every step as tests/simulation/test_consumers.py, and the at-most-once crash
bound: a crash loses at most the confirmed, not handed-out records of two windows; nothing
else is ever lost (a close or a hand-over loses nothing)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.simulation.handout_harness import HandOutSimulation
from tests.simulation.test_consumers import run


@pytest.mark.parametrize(("seed", "gaps"), [(0, False), (1, False), (2, True), (3, True)])
def test_alo_through_the_hand_out_delivers_every_record(seed: int, gaps: bool) -> None:
    """With gaps (offsets that hold no record) too: the committed offset passes them (run()
    checks every partition ends committed at its end) and never a record not yet done."""
    sim = HandOutSimulation(seed, "alo", gaps=gaps)
    run(sim)
    delivered = {(d.tp[1], d.offset) for d in sim.deliveries}
    assert sim.present() - delivered == set()
    assert sim.faults["crash"] + sim.faults["pause"] + sim.faults["close"] >= 5


@pytest.mark.parametrize(("seed", "gaps"), [(0, False), (1, False), (2, True), (3, True)])
def test_amo_windows_lose_only_what_a_crash_had_confirmed_and_never_deliver_twice(
        seed: int, gaps: bool) -> None:
    sim = HandOutSimulation(seed, "amo", window_records=4, gaps=gaps)
    run(sim)
    counts = Counter((d.tp, d.offset) for d in sim.deliveries)
    assert max(counts.values()) == 1
    delivered = {(d.tp[1], d.offset) for d in sim.deliveries}
    produced = sim.present()
    lost = produced - delivered
    assert lost <= sim.may_lose, sorted(lost - sim.may_lose)[:10]
    assert sim.faults["crash"] >= 1 and sim.largest_loss <= 2 * sim.window_records
    assert len(delivered) > 0.5 * len(produced)  # and it did deliver most of them
