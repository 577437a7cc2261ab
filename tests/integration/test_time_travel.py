"""Time travel on the real broker: ``marshal state --at/--at-position`` and ``marshal tail
--from/--to`` against a recorded run.

Members of a group run (a first one takes every partition and commits, a second joins and
they share the partitions, the first leaves and the second commits more); at several
moments the test notes the world one member saw live -- where it had read the coordination
partition to, when, and its `marshal state` rows judged then. Afterwards `marshal state
--json --at-position P:O --at T`, and `--at T` alone, must print exactly those rows (from a
checkpoint before the moment: members checkpoint every second here), and `marshal tail
--from/--to` must print exactly the records between two moments.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from kafka import KafkaAdminClient, TopicPartition

from marshal_py import Marshaler
from marshal_py.admin.moments import iso
from marshal_py.admin.world_view import WorldView, state_rows
from marshal_py.client.consumer import Consumer
from marshal_py.log import KafkaLog, KafkaLogConfig
from marshal_py.replay.checkpoints import read_range
from tests.integration.test_neighbours import make_topic, wait_for

pytestmark = pytest.mark.integration

GROUP = "travel.g"
HI_S = 1.0


def marshal(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "marshal_py.cli", *args], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ))


@dataclass(frozen=True)
class Moment:
    """What a member saw live: it had read the coordination partition below ``position``
    at ``at_ms``; ``rows``: its `marshal state --json` rows then."""

    position: int
    at_ms: int
    rows: list[dict[str, object]]


Rows = list[dict[str, object]]


def note(m: Marshaler, topic: str, log: KafkaLog, until: Callable[[Rows], bool],
         step: Callable[[], object]) -> Moment:
    """The world ``m`` sees, once it shows ``until`` (``step`` keeps the members working
    meanwhile). Taken again until the moment is clean: the log's next record (once
    written) is stamped after it, so the time names this very position."""

    def clean() -> Moment | None:
        step()
        with m._lock:
            position = m.rationalizer.next_position(0)
            at = int(time.time() * 1000)
            view = WorldView(m.rationalizer, at, (0,), 0)
            rows = [r.as_dict() for r in state_rows(view, GROUP, topic)]
        if not until(rows):
            return None
        wait_for("a record after the moment", lambda: log.end_position(0) > position)
        after = read_range(log, 0, position, position + 1)
        if not after or after[0].timestamp_ms <= at:
            return None
        return Moment(position, at, rows)

    return wait_for("the moment", clean, 60)  # type: ignore[no-any-return]


class Committer:
    """Polls a consumer and commits every record it gets below ``upto`` (the others are
    delivered and left uncommitted); ``committed``: per partition, the offset committed."""

    def __init__(self, consumer: Consumer, upto: int) -> None:
        self.consumer, self.upto = consumer, upto
        self.committed: dict[int, int] = {}

    def step(self) -> None:
        for record in self.consumer.poll(timeout_s=0.1):
            if record.offset < self.upto:
                self.consumer.commit(record)
                self.committed[record.partition] = record.offset + 1

    def all_done(self, partitions: int) -> bool:
        self.step()
        return sorted(self.committed.values()) == [self.upto] * partitions


def owners(rows: Rows) -> set[object]:
    return {row["client_id"] for row in rows} if len(rows) == 4 else set()


def offsets(rows: Rows) -> set[object]:
    return {row["committed_offset"] for row in rows}


def test_state_at_a_moment_is_what_members_saw_then(kafka_bootstrap: str,
                                                   unique_name: str) -> None:
    coordination, data = f"__marshal-{unique_name}", f"trips-{unique_name}"
    make_topic(kafka_bootstrap, data, 4, 400)
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=coordination,
                                 partitions=1)) as log:
        assert log.created_topic

        def member(client: str) -> Marshaler:
            return Marshaler(kafka_bootstrap, GROUP, client, HI_S,
                             coordination_topic=coordination, checkpoint_interval=1.0)

        moments: list[Moment] = []
        with member("first") as a:
            first = Committer(a.consumer([data], "alo", offset_reset="earliest"), 10)
            wait_for("the first member's commits", lambda: first.all_done(4), 60)
            moments.append(note(a, data, log, lambda rows: owners(rows) == {"first"}
                                and offsets(rows) == {10}, first.step))
            with member("second") as b:
                second = Committer(b.consumer([data], "alo", offset_reset="earliest"), 30)

                def both() -> None:
                    first.step()
                    second.step()

                moments.append(note(b, data, log, lambda rows: owners(rows) == {"first",
                                                                                "second"},
                                    both))
                first.consumer.close()  # releases its partitions
                wait_for("the second member's commits", lambda: second.all_done(4), 60)
                moments.append(note(b, data, log, lambda rows: owners(rows) == {"second"}
                                    and offsets(rows) == {30}, second.step))
                second.consumer.close()
        end = log.end_position(0)

    common = ("--bootstrap-servers", kafka_bootstrap, "--coordination-topic", coordination,
              "--heartbeat-interval", str(HI_S), "--json", "--group", GROUP, "--topic", data)
    for moment in moments:
        by_position = marshal("state", *common, "--at-position", f"0:{moment.position}",
                              "--at", iso(moment.at_ms))
        assert by_position.returncode == 0, by_position.stderr
        assert json.loads(by_position.stdout) == moment.rows, moment
        by_time = marshal("state", *common, "--at", iso(moment.at_ms))
        assert by_time.returncode == 0, by_time.stderr
        assert json.loads(by_time.stdout) == moment.rows, moment
    # The last moment came several checkpoint intervals into the run: its replay started at
    # a checkpoint before it, not at the first record.
    replayed = re.search(r"records replayed: (\d+)", by_time.stderr)
    assert replayed is not None and int(replayed.group(1)) < moments[-1].position // 2
    # The records between two moments, with the verdicts every reader reached.
    start, stop = moments[0], moments[2]
    tail = marshal("tail", "--bootstrap-servers", kafka_bootstrap, "--coordination-topic",
                   coordination, "--heartbeat-interval", str(HI_S), "--json",
                   "--from", iso(start.at_ms + 1), "--to", iso(stop.at_ms))
    assert tail.returncode == 0, tail.stderr
    lines = [json.loads(line) for line in tail.stdout.splitlines()]
    assert [line["position"] for line in lines] == list(range(start.position, stop.position))
    assert stop.position < end  # records after the moment were not printed
    assert {"claim_won", "heartbeat"} <= {line["verdict"] for line in lines}


def test_moments_the_log_cannot_show_are_one_line_and_exit_2(kafka_bootstrap: str,
                                                            unique_name: str) -> None:
    coordination = f"__marshal-{unique_name}"
    with KafkaLog(KafkaLogConfig(bootstrap_servers=kafka_bootstrap, topic=coordination,
                                 partitions=1)) as log:
        for i in range(5):
            log.append(0, f"Heartbeat/0/a/b/g/t/0/{i}".encode())
        kept_from = read_range(log, 0, 3, 4)[0].timestamp_ms  # the oldest record kept below
    common = ("--bootstrap-servers", kafka_bootstrap, "--coordination-topic", coordination)

    def refused(*args: str) -> str:
        result = marshal(*args, *common)
        assert result.returncode == 2, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        return result.stderr

    assert "past the end" in refused("state", "--at-position", "0:6")
    assert "has partitions 0..0, not 3" in refused("state", "--at-position", "3:0")
    assert "is in the future" in refused("state", "--at", "2999-01-01T00:00:00Z")
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        admin.delete_records({TopicPartition(coordination, 0): 3})
    finally:
        admin.close()
    assert "before the retained coordination log" in refused("state", "--at",
                                                             iso(kept_from - 1))
    assert "before the retained coordination log" in refused("state", "--at-position", "0:3")
    assert "before the retained coordination log" in refused("tail", "--from",
                                                             iso(kept_from - 1))
