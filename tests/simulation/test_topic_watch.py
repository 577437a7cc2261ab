"""A consumed topic deleted under running members (MemoryLog, virtual clock): every mode
warns once within one heartbeat interval and holds nothing of it; the same topic coming back
is consumed again; a new topic under the name stops the member with TopicRecreatedError."""

from __future__ import annotations

import logging
import random

import pytest

from marshal_py.client.engine import EngineConfig, MemberEngine
from marshal_py.client.key_shared_engine import KeySharedConfig, KeySharedEngine
from marshal_py.client.share_engine import ShareConfig, ShareEngine
from marshal_py.errors import TopicRecreatedError
from marshal_py.log import MemoryLog, VirtualClock
from marshal_py.world import Rationalizer, RationalizerConfig
from tests.simulation.harness import MemoryTopic, SimClock

HI = 1_000
Engine = MemberEngine | ShareEngine | KeySharedEngine


def new_engine(mode: str, log: MemoryLog, topic: MemoryTopic, clock: VirtualClock) -> Engine:
    common = dict(group_id="g", client_id="c1", instance_id="0000000a",
                  topics=(topic.name,), heartbeat_interval_ms=HI, offset_reset="earliest")
    rationalizer = Rationalizer(RationalizerConfig(2, HI))
    rng = random.Random(1)
    engine: Engine
    if mode == "share":
        engine = ShareEngine(ShareConfig(**common), log, rationalizer, topic,  # type: ignore[arg-type]
                             SimClock(clock), rng)
    elif mode == "key-shared":
        engine = KeySharedEngine(KeySharedConfig(**common), log, rationalizer,  # type: ignore[arg-type]
                                 topic, SimClock(clock), rng)
    else:
        engine = MemberEngine(EngineConfig(**common, mode=mode), log, rationalizer,  # type: ignore[arg-type]
                              topic, SimClock(clock), rng)
    engine.start()
    return engine


def holds(engine: Engine) -> bool:
    """Anything of the topic held: partitions, key slots, or acquired records."""
    if isinstance(engine, ShareEngine):
        return any(engine.held.values())
    if isinstance(engine, KeySharedEngine):
        return any(h.owned for h in engine.holdings.values())
    return bool(engine.holdings)


def run(engine: Engine, clock: VirtualClock, ms: int, step: int = 100) -> None:
    for _ in range(ms // step):
        clock.advance(step)
        engine.tick()
        if isinstance(engine, ShareEngine):
            engine.acquire("orders", 0, 5)


def topic_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "marshal_py.client.topic_watch" and r.levelno == logging.WARNING]


@pytest.mark.parametrize("mode", ["alo", "amo", "share", "key-shared"])
def test_a_deleted_topic_is_given_up_and_taken_again_when_it_comes_back(
        mode: str, caplog: pytest.LogCaptureFixture) -> None:
    clock = VirtualClock()
    log = MemoryLog(partitions=2, clock=clock)
    topic = MemoryTopic("orders", 2)
    for i in range(20):
        topic.produce(i % 2, b"x")
    engine = new_engine(mode, log, topic, clock)
    run(engine, clock, 3 * HI)
    assert holds(engine)
    caplog.set_level(logging.WARNING, logger="marshal_py")

    topic.delete()
    run(engine, clock, HI)  # within one heartbeat interval
    assert [w for w in topic_warnings(caplog) if "was deleted" in w] == [
        "g: topic 'orders' was deleted (it is gone from the cluster's metadata): released its "
        "partitions, waiting for it to come back (as a new topic, its committed offsets would "
        "point into another log: this member then stops)"]
    run(engine, clock, 5 * HI)
    assert not holds(engine)
    assert len(topic_warnings(caplog)) == 1  # said once

    topic.create("topic-1")  # the same topic again (a metadata answer that had missed it)
    for i in range(4):
        topic.produce(i % 2, b"y")
    run(engine, clock, 3 * HI)
    assert holds(engine)
    assert "topic 'orders' is back" in topic_warnings(caplog)[-1]


@pytest.mark.parametrize("mode", ["alo", "amo", "share", "key-shared"])
def test_a_topic_recreated_under_a_member_stops_it_saying_to_reset_the_offsets(
        mode: str) -> None:
    clock = VirtualClock()
    log = MemoryLog(partitions=2, clock=clock)
    topic = MemoryTopic("orders", 2)
    engine = new_engine(mode, log, topic, clock)
    run(engine, clock, 2 * HI)
    topic.delete()
    run(engine, clock, HI)
    topic.create("topic-2")
    with pytest.raises(TopicRecreatedError) as caught:
        run(engine, clock, HI)
    assert str(caught.value) == (
        "topic 'orders' was deleted and created again under this member (topic id topic-1 is "
        "now topic-2): the offsets group 'g' committed point into the old topic's log. Stop "
        "every member of the group, reset its offsets (`marshal reset-offsets --group g "
        "--topic orders --to-earliest`, or --to-datetime), then start them again")
    assert not holds(engine)
