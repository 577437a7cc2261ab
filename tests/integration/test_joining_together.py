"""Members of a brand-new group joining at once agree from the first record (issue 22).

On a fresh coordination topic (declared: History floors in use, PROTOCOL.md 6.1) eight
members of one new share group, each in a process of its own, join at the same moment. Each
begins its replay where the index says the group's history begins, or, when the index shows
none, at the end of the partition read before the index; none may begin past a peer's first
records (they did, when the window's start was looked up after the index and answered a
later end). Checked on the log itself: every record a member applied got the same verdict
from it as from a reader of every record, and no record was handed out twice in the same
delivery.
"""

from __future__ import annotations

import multiprocessing
import queue
from collections import Counter
from dataclasses import dataclass
from multiprocessing.synchronize import Barrier, Event
from typing import Any

import pytest

from marshal_py import Marshaler
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.replay import catch_up
from marshal_py.world import Outcome, Rationalizer, RationalizerConfig
from tests.integration.consumer_support import Producer, create_topic

pytestmark = pytest.mark.integration

MEMBERS = 8
RECORDS = 1_000
HI_S = 1.0
Verdicts = dict[int, tuple[str, str]]  # position -> (verdict, detail)


@dataclass(frozen=True)
class Report:
    """What a member saw: where its replay began, whether it trusted a declared index, the
    verdict of every record of its group it applied, and its group's state on the topic
    (``snapshot``) after the records before ``position``."""

    start: int
    trusted: bool
    seen: Verdicts
    position: int
    snapshot: str


def verdicts_of(rationalizer: Rationalizer, group: str) -> Verdicts:
    """Record, from now on, the verdict ``rationalizer`` gives each record of ``group``."""
    seen: Verdicts = {}

    def note(outcome: Outcome) -> None:
        message = outcome.message
        if message is not None and getattr(message, "group_id", None) == group:
            seen[outcome.record.position] = (outcome.verdict.value, outcome.detail)

    rationalizer.observe(note)
    return seen


def member(settings: dict[str, Any], together: Barrier, done: Event,
           out: multiprocessing.Queue[Any]) -> None:
    """One member (in its own process): join when all are ready, accept what it is handed
    (telling ``out`` each record), and when ``done`` report what its world saw."""
    try:
        with Marshaler(settings["bootstrap"], settings["group"], settings["client"], HI_S,
                       coordination_topic=settings["coordination"]) as m:
            seen = verdicts_of(m.rationalizer, settings["group"])
            together.wait(timeout=120)
            consumer = m.consumer([settings["topic"]], "share", offset_reset="earliest",
                                  batch_size=50, acknowledgement="explicit")
            while not done.is_set():
                for record in consumer.poll(timeout_s=0.2):
                    consumer.ack(record, "accept")
                    out.put(("delivered", record.offset, record.delivery_count))
            consumer.close()
            channel = consumer._engine.channel
            with m._lock:  # the world as of a position, to compare with a full reader's
                world = (m.rationalizer.next_position(0),
                         m.rationalizer.snapshot(settings["group"], settings["topic"]))
            out.put(("report", settings["client"], Report(
                channel.replay_starts[0],
                channel.trusts_index and channel.index is not None and channel.index.declared,
                seen, *world)))
    except BaseException as exc:  # the test reports it
        out.put(("error", settings["client"], f"{type(exc).__name__}: {exc}"))


def test_eight_member_processes_of_a_new_share_group_joining_at_once_agree(
        kafka_bootstrap: str, unique_name: str) -> None:
    coordination, data, group = f"__marshal-{unique_name}", unique_name, f"new.{unique_name}"
    create_topic(kafka_bootstrap, data, 1)
    producer = Producer(kafka_bootstrap, data, 1)
    producer.send(RECORDS)
    producer.close()
    # A fresh, declared topic with one partition: empty when the first members look up
    # where their window begins.
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=coordination,
                                 partitions=1)) as log:
        assert log.created_topic
    spawn = multiprocessing.get_context("spawn")
    together, done, out = spawn.Barrier(MEMBERS), spawn.Event(), spawn.Queue()
    processes = [spawn.Process(target=member, name=f"m{i}", daemon=True, args=(
        {"bootstrap": kafka_bootstrap, "coordination": coordination, "group": group,
         "topic": data, "client": f"m{i}"}, together, done, out)) for i in range(MEMBERS)]
    deliveries: Counter[tuple[int, int]] = Counter()
    reports: dict[str, Report] = {}
    try:
        for process in processes:
            process.start()
        while len(reports) < MEMBERS:
            try:
                event = out.get(timeout=120)
            except queue.Empty:
                pytest.fail(f"no word from the members for 120 s: {len(deliveries)} "
                            f"deliveries, {len(reports)} reports")
            if event[0] == "error":
                pytest.fail(f"member {event[1]} failed: {event[2]}")
            elif event[0] == "delivered":
                deliveries[(event[1], event[2])] += 1
                if len({offset for offset, _ in deliveries}) == RECORDS:
                    done.set()
            else:
                reports[event[1]] = event[2]
        for process in processes:
            process.join(timeout=30)
    finally:
        done.set()
        for process in processes:
            if process.is_alive():
                process.kill()

    # The floor was in use: every member trusted a declared index.
    assert all(report.trusted for report in reports.values())
    # No record handed out twice in one delivery (the symptom: twice with delivery count 1).
    assert [d for d, n in deliveries.items() if n > 1] == []
    assert {offset for offset, _ in deliveries} == set(range(RECORDS))
    # Every member's world agrees with a reader of every record: record by record, and as a
    # whole at the position it had read to.
    config = RationalizerConfig(coordination_partitions=1,
                                heartbeat_interval_ms=int(HI_S * 1000))
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=coordination,
                                 create_topic=False)) as log:
        full = Rationalizer(config)
        truth = verdicts_of(full, group)
        catch_up(log, full, [0])
        for client, report in sorted(reports.items()):
            seen, start = report.seen, report.start
            wrong = {p: (v, truth.get(p)) for p, v in seen.items() if truth.get(p) != v}
            assert wrong == {}, f"member {client} began at {start}: {wrong}"
            missed = [p for p in truth if start <= p < max(seen) and p not in seen]
            assert missed == [], f"member {client} began at {start}; did not apply {missed}"
            then = Rationalizer(config)
            catch_up(log, then, [0], until={0: report.position})
            assert report.snapshot == then.snapshot(group, data), \
                f"member {client} (began at {start}) disagrees at {report.position}"
