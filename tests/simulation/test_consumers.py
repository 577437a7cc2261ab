"""Simulated consumer processes with crashes, pauses and restarts, invariants on every step.

- at most one member may deliver a partition at any time, and it is the owner in a fully
  caught-up view of the log;
- at-least-once: after the run drains, every produced record was delivered;
- at-most-once: no record is ever delivered twice.
"""

from __future__ import annotations

from collections import Counter

import pytest

from marshal_py.replay import catch_up
from tests.simulation.harness import Delivery, Simulation

STEPS = 1500
DRAIN = 300


def check_step(sim: Simulation) -> None:
    catch_up(sim.log, sim.auditor, range(sim.log.partition_count()))
    for (topic, partition), members in sim.delivering().items():
        assert len(members) == 1, f"{topic}/{partition} delivered by {members}"
        assert sim.auditor.claim("sim", topic, partition).owner == members[0]


def run(sim: Simulation) -> None:
    for step in range(STEPS):
        sim.step(faults=True, produce=step < STEPS - DRAIN)
        check_step(sim)
        if sim.mode == "amo":
            counts = Counter((d.tp, d.offset) for d in sim.deliveries)
            assert max(counts.values(), default=1) == 1
    for _ in range(DRAIN):  # calm: everybody alive, no new faults
        sim.step(faults=False, produce=False)
        check_step(sim)
    # Liveness: once calm, every partition is owned and committed to its end.
    for partition, records in enumerate(sim.topic.records):
        claim = sim.auditor.claim("sim", "orders", partition)
        assert claim.owner is not None
        assert claim.committed_offset == len(records), (partition, claim)


@pytest.mark.parametrize("seed", range(6))
def test_alo_delivers_every_record_with_one_deliverer_per_partition(seed: int) -> None:
    sim = Simulation(seed, "alo")
    run(sim)
    delivered = {(d.tp[1], d.offset) for d in sim.deliveries}
    produced = {(p, o) for p, records in enumerate(sim.topic.records) for o in range(len(records))}
    assert produced - delivered == set()
    assert sim.faults["crash"] + sim.faults["pause"] + sim.faults["close"] >= 5
    assert sim.produced > 500
    # Re-deliveries are bounded: a record comes again only if its first deliverer had not
    # committed it, or committed it less than about one heartbeat interval (plus a step)
    # before its stint on the partition ended.
    first: dict[tuple[object, int], Delivery] = {}
    times: dict[tuple[str, object], list[int]] = {}
    for d in sim.deliveries:
        first.setdefault((d.tp, d.offset), d)
        times.setdefault((d.instance, d.tp), []).append(d.at_ms)
    again = [d for d in sim.deliveries if first[(d.tp, d.offset)] is not d]
    for d in again:
        original = first[(d.tp, d.offset)]
        stint_end = max(t for t in times[(original.instance, original.tp)] if t < d.at_ms)
        committed = sim.committed_at.get((original.instance, original.tp, original.offset))
        assert committed is None or stint_end - committed <= sim.hi + 500, (original, d)
    assert len(again) < 0.2 * len(sim.deliveries)


@pytest.mark.parametrize("seed", range(6))
def test_amo_never_delivers_a_record_twice(seed: int) -> None:
    sim = Simulation(seed, "amo")
    run(sim)
    counts = Counter((d.tp, d.offset) for d in sim.deliveries)
    assert max(counts.values()) == 1
    assert len(counts) > 0.5 * sim.produced  # and it did deliver most of them
    assert sim.faults["crash"] + sim.faults["pause"] + sim.faults["close"] >= 5
