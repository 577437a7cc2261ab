"""Time travel (``marshal state --at``) against a checkpointing simulation (MemoryLog).

Members run, crash and restart, writing their group's checkpoint every interval, while a
reader follows the log from its first record. At regular moments the test notes that
reader's world (and where the log ended, and when). Afterwards, each moment is replayed the
way ``marshal state --at`` does -- from the newest checkpoint whose records all lie below
the moment, up to it -- and must agree exactly with what was noted; the moment a time names
is the position the log had reached then.
"""

from __future__ import annotations

import pytest

from marshal_py.admin.moments import moment_at_position, moment_at_time
from marshal_py.admin.world_view import WorldView, load_world, share_rows, state_rows
from marshal_py.protocol import coordination_partition
from marshal_py.replay import catch_up
from marshal_py.replay.checkpoints import start_from_checkpoints
from marshal_py.world import Rationalizer
from tests.simulation.test_checkpoints import (
    HI,
    LOG_RETENTION,
    OFFSETS_RETENTION,
    CheckpointingSimulation,
    config,
)


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_the_world_replayed_at_a_moment_is_the_world_seen_then(mode: str) -> None:
    sim = CheckpointingSimulation(3, mode, consumers=3, partitions=4)  # type: ignore[arg-type]
    follower = Rationalizer(config())
    cp = coordination_partition("orders", 2)
    noted: list[tuple[int, int, str, list[object]]] = []
    for step in range(400):
        sim.step(faults=True, produce=True)
        catch_up(sim.log, follower, [0, 1])
        if step % 25 == 24:
            at = sim.clock()
            view = WorldView(follower, at, (cp,), 0)
            noted.append((at, sim.log.end_position(cp), follower.snapshot("sim", "orders"),
                          [r.as_dict() for r in state_rows(view, "sim", "orders")]))
    now = sim.clock()
    from_checkpoints = 0
    for at, position, snapshot, rows in noted:
        # The moment a time names is where the log had got to then.
        moment = moment_at_time(sim.log, (cp,), at, now)
        assert moment.until == {cp: position} and moment.at_ms == at
        reader = Rationalizer(config())
        window_start = sim.log.position_for_time(cp, at - LOG_RETENTION)
        start = start_from_checkpoints(sim.log, reader, cp, "sim", ["orders"], window_start,
                                       ceiling=position)
        assert start <= position
        from_checkpoints += start > window_start
        catch_up(sim.log, reader, [cp], until={cp: position})
        assert reader.next_position(cp) == position
        assert reader.snapshot("sim", "orders") == snapshot, at
        # What `marshal state --at T --group sim --topic orders` prints.
        view = load_world(sim.log, heartbeat_interval_ms=HI, window_ms=LOG_RETENTION,
                          topic="orders", group="sim", offsets_retention_ms=OFFSETS_RETENTION,
                          now_ms=at, until=moment.until)
        assert [r.as_dict() for r in state_rows(view, "sim", "orders")] == rows, at
        assert share_rows(view, "sim", "orders") == []
        # And `--at-position cp:position --at T`.
        by_position = moment_at_position(sim.log, cp, position, at)
        assert by_position.until == {cp: position} and by_position.at_ms == at
    assert from_checkpoints >= len(noted) - 3  # all but the first moments start at one


def test_a_checkpoint_written_after_the_moment_is_not_used() -> None:
    sim = CheckpointingSimulation(5, "alo", consumers=2, partitions=4)
    cp = coordination_partition("orders", 2)
    for _ in range(200):
        sim.step(faults=False, produce=True)
    position = sim.log.end_position(cp)
    for _ in range(200):
        sim.step(faults=False, produce=True)
    newest = Rationalizer(config())
    assert start_from_checkpoints(sim.log, newest, cp, "sim", ["orders"], 0) > position
    past = Rationalizer(config())
    assert start_from_checkpoints(sim.log, past, cp, "sim", ["orders"], 0,
                                  ceiling=position) < position
