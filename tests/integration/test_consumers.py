"""`marshal consume` processes and the in-process Marshaler on the real broker.

Every test gets its own coordination topic, group and 12-partition data topic (a
:class:`Cluster`). Waiting is done by following the coordination log (a :class:`Watcher` in
this process, replaying it with the same rationalizer the members run) or by reading what
the processes printed, each with a deadline; take-over times are measured with the broker's
LogAppendTime stamps of the claims, and printed (run with ``-s`` to see them).
"""

from __future__ import annotations

import base64
import json
import signal
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from marshal_py import Marshaler
from marshal_py.world import Owner
from tests.integration.consumer_support import (
    HI,
    ON_EVERY_BROKER,
    ON_EVERY_BROKER_BOOTSTRAP,
    PARTITIONS,
    TP,
    BackgroundProducer,
    Cluster,
    ConsumerProcess,
    Event,
    broker_bootstrap,
    now_ms,
    run_marshal,
    state_json,
    wait_for,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def cluster(request: pytest.FixtureRequest, unique_name: str,
            tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(broker_bootstrap(request), unique_name, tmp_path)
    try:
        yield c
    finally:
        c.close()


def start_members(cluster: Cluster, count: int, mode: str = "alo",
                  prefix: str = "c", extra: Sequence[str] = ()) -> list[ConsumerProcess]:
    members = [cluster.spawn(f"{prefix}{i}", mode=mode, extra=extra)
               for i in range(1, count + 1)]
    for member in members:
        member.wait_joined()
    return members


def stop_gracefully(procs: list[ConsumerProcess], timeout: float = 30) -> None:
    for proc in procs:
        proc.terminate()
    for proc in procs:
        rc = proc.wait(timeout)
        assert rc == 0, f"{proc.client_id} exited {rc}: {proc.stderr_text()[-2000:]}"


def held_by(owners: dict[int, Owner | None], instances: set[str]) -> bool:
    return all(o is not None and o.instance_id in instances for o in owners.values())


def assert_everything_committed(cluster: Cluster) -> None:
    """After a graceful stop: every partition released with the end offset committed."""
    ends = cluster.producer.ends()
    rows = {row["partition"]: row for row in cluster.state()}
    assert sorted(rows) == list(range(cluster.partitions))
    for p, row in rows.items():
        assert row["status"] == "unclaimed", row
        assert row["committed_offset"] == ends[p], (p, row, ends[p])


@dataclass
class KillResult:
    victim: ConsumerProcess
    survivors: list[ConsumerProcess]
    victim_partitions: list[int]
    killed_at_ms: int
    detected_s: float  # kill -> watcher sees survivors holding all 12 (wall clock)
    takeover_ms: int  # kill -> broker time of the last take-over claim
    gaps_ms: list[int]  # per partition: take-over claim - victim's last heartbeat there
    after_takeover: list[TP]  # records produced once the take-over was complete


def kill_one_of_three(cluster: Cluster, mode: str, extra: Sequence[str] = ()) -> KillResult:
    """Three members settle 4/4/4; kill -9 one while records flow; the others take over."""
    cluster.producer.send(1200)
    members = start_members(cluster, 3, mode, extra=extra)
    owners = cluster.watcher.wait_balanced([m.instance_id for m in members], 4, timeout=20)
    victim, survivors = members[0], members[1:]
    survivor_ids = {s.instance_id for s in survivors}
    victim_partitions = sorted(p for p, o in owners.items()
                               if o is not None and o.instance_id == victim.instance_id)
    with BackgroundProducer(cluster.producer, rate=100) as background:
        background.wait_written(50)  # records are flowing when the victim dies
        killed_at_ms = now_ms()
        victim.kill()
        cluster.watcher.wait_owned(lambda o: held_by(o, survivor_ids), 2 * HI + 15,
                                   "the survivors to hold every partition")
        detected_s = (now_ms() - killed_at_ms) / 1000
    takeover_ms = 0
    gaps = []
    for p in victim_partitions:
        won = [e for e in cluster.watcher.partition_events(p, killed_at_ms)
               if e.verdict == "claim_won"]
        assert won, f"no take-over claim on partition {p}"
        assert won[0].sender.instance_id in survivor_ids
        takeover_ms = max(takeover_ms, won[0].ts_ms - killed_at_ms)
        beats = [e.ts_ms for e in cluster.watcher.partition_events(p)
                 if e.sender == victim.owner and e.verdict in ("heartbeat", "claim_won")]
        gaps.append(won[0].ts_ms - max(beats))
    after = cluster.producer.send(1200)
    return KillResult(victim, survivors, victim_partitions, killed_at_ms, detected_s,
                      takeover_ms, gaps, after)


def report_kill(mode: str, result: KillResult) -> None:
    print(f"\n[{mode}] kill -9 of {result.victim.client_id} (partitions "
          f"{result.victim_partitions}): survivors held all {PARTITIONS} partitions "
          f"{result.detected_s:.2f} s after the kill as seen by the watcher; last take-over "
          f"claim stamped {result.takeover_ms / 1000:.2f} s after the kill; take-over claim - "
          f"victim's last heartbeat per partition: "
          f"{', '.join(f'{g / 1000:.2f}' for g in result.gaps_ms)} s (HI {HI:.0f} s)")


@ON_EVERY_BROKER
def test_alo_kill_one_of_three_survivors_take_over_and_nothing_is_lost(
        cluster: Cluster) -> None:
    result = kill_one_of_three(cluster, "alo")
    report_kill("alo", result)
    assert result.detected_s < 2 * HI + 3
    # Nobody took a partition before it was stale (2 HI after the victim's last heartbeat).
    assert all(gap > 2 * HI * 1000 for gap in result.gaps_ms), result.gaps_ms

    cluster.wait_consumed(cluster.producer.produced, timeout=60)
    stop_gracefully(result.survivors)
    printed = cluster.printed()
    missing = set(cluster.producer.produced) - set(printed)
    assert not missing, f"at-least-once lost {len(missing)} records: {sorted(missing)[:10]}"
    redelivered = Counter(p for (p, _), n in Counter(printed).items() for _ in range(n - 1))
    print(f"[alo] {len(cluster.producer.produced)} records produced, {len(printed)} lines "
          f"printed, {sum(redelivered.values())} re-deliveries (by partition: "
          f"{dict(sorted(redelivered.items()))}; the victim's: {result.victim_partitions})")
    assert_everything_committed(cluster)


#: At-most-once windows of the kill test: small, so the crash bound is a real constraint.
AMO_WINDOW_RECORDS = 20


@ON_EVERY_BROKER
def test_amo_kill_one_of_three_never_delivers_a_record_twice(cluster: Cluster) -> None:
    result = kill_one_of_three(cluster, "amo", extra=("--batch-size", str(AMO_WINDOW_RECORDS)))
    report_kill("amo", result)
    assert result.detected_s < 2 * HI + 3
    assert all(gap > 2 * HI * 1000 for gap in result.gaps_ms), result.gaps_ms

    cluster.wait_consumed(result.after_takeover, timeout=60, procs=result.survivors)
    stop_gracefully(result.survivors)
    printed = cluster.printed()  # the killed process's output included
    twice = {tp: n for tp, n in Counter(printed).items() if n > 1}
    assert not twice, f"at-most-once delivered {len(twice)} records more than once: " \
                      f"{sorted(twice.items())[:10]}"
    lost = set(cluster.producer.produced) - set(printed)
    print(f"[amo] {len(cluster.producer.produced)} records produced, {len(printed)} printed, "
          f"none twice, {len(lost)} never delivered")
    # The crash bound: only the victim's partitions lose records, each at most the two
    # windows confirmed ahead of its hand-out; the survivors' graceful stop loses nothing.
    lost_by_partition = Counter(p for p, _ in lost)
    assert set(lost_by_partition) <= set(result.victim_partitions), lost_by_partition
    assert all(n <= 2 * AMO_WINDOW_RECORDS for n in lost_by_partition.values()), \
        lost_by_partition
    assert_everything_committed(cluster)


def test_zombie_resumed_after_losing_its_partitions_delivers_nothing_of_them(
        cluster: Cluster) -> None:
    cluster.producer.send(600)
    members = start_members(cluster, 3)
    cluster.watcher.wait_balanced([m.instance_id for m in members], 4, timeout=20)
    # Quiet first: everything produced so far is printed, so the zombie is idle (blocked in
    # a fetch) when it is paused, never between handing out a record and printing it.
    cluster.wait_consumed(cluster.producer.produced)
    zombie, others = members[0], members[1:]
    other_ids = {o.instance_id for o in others}
    lines_before = len(zombie.lines())

    zombie.send(signal.SIGSTOP)
    stopped_at_ms = now_ms()
    with BackgroundProducer(cluster.producer, rate=100) as background:
        cluster.watcher.wait_owned(lambda o: held_by(o, other_ids), 2 * HI + 15,
                                   "the others to take over the paused member's partitions")
        taken_over_s = (now_ms() - stopped_at_ms) / 1000
        # Keep producing for a while after the take-over (and stay paused > 3 s in all),
        # so that records the zombie never fetched wait in its old partitions.
        background.wait_written(len(background.written) + 50)
        wait_for(lambda: now_ms() - stopped_at_ms >= 3500, 5, "3.5 s of pause")
    # Every record is printed: those produced during the pause (the zombie's old partitions
    # included) by the new owners, since the zombie printed nothing while paused.
    cluster.wait_consumed(cluster.producer.produced)
    assert len(zombie.lines()) == lines_before
    zombie.send(signal.SIGCONT)
    resumed_at_ms = now_ms()
    paused_s = (resumed_at_ms - stopped_at_ms) / 1000

    # It comes back as a member and gets its fair share back (from the others' releases).
    cluster.watcher.wait_balanced([m.instance_id for m in members], 4, timeout=20)
    cluster.producer.send(600)
    cluster.wait_consumed(cluster.producer.produced)
    stop_gracefully(members)

    after_resume = zombie.printed()[lines_before:]
    by_others = Counter(cluster.printed(others))
    duplicated = sorted(tp for tp in after_resume if by_others[tp])
    assert not duplicated, f"the resumed zombie printed {len(duplicated)} records the new " \
                           f"owners had printed: {duplicated[:10]}"
    # Every record it printed after resuming belongs to a partition it won again after
    # resuming, at or after the committed offset it won it with.
    for partition, offset in after_resume:
        won = [e for e in cluster.watcher.partition_events(partition, resumed_at_ms)
               if e.verdict == "claim_won" and e.sender == zombie.owner]
        assert won, f"zombie printed {partition}/{offset} without winning {partition} again"
        assert offset >= (won[0].committed_after or 0), (partition, offset, won[0])
    ignored = [e for e in cluster.watcher.events
               if e.sender == zombie.owner and e.ts_ms >= resumed_at_ms
               and e.verdict == "not_owner"]
    print(f"\n[zombie] paused {paused_s:.2f} s; the others held its partitions "
          f"{taken_over_s:.2f} s after SIGSTOP; after SIGCONT it printed {len(after_resume)} "
          f"records, all of partitions it won back; {len(ignored)} of its records were "
          "ignored as not_owner")
    missing = set(cluster.producer.produced) - set(cluster.printed())
    assert not missing, f"lost {len(missing)} records: {sorted(missing)[:10]}"
    assert_everything_committed(cluster)


@pytest.mark.serial
def test_restart_with_the_same_client_id_reclaims_its_partitions(cluster: Cluster) -> None:
    """The only member crashes; its restarted process takes everything back by reclaim."""
    check_restart(cluster, members=1)


@pytest.mark.serial
def test_restart_among_others_takes_its_partitions_back_without_passing_through_them(
        kafka_bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    """One of three members crashes and restarts at once: its partitions come back to it,
    none of them to the two others. HI 2 s: the restart (about 1 s) happens well inside the
    2 HI its claims stay held, whatever the load, so the outcome does not depend on timing."""
    cluster = Cluster(kafka_bootstrap, unique_name, tmp_path, hi=2.0)
    try:
        check_restart(cluster, members=3)
    finally:
        cluster.close()


def check_restart(cluster: Cluster, members: int) -> None:
    """kill -9 member w1 right after a heartbeat and start `marshal consume --client-id w1`
    again at once: it reclaims each of its partitions (claim_reclaimed, no other owner in
    between) one HI after joining, well before they would go stale."""
    hi = cluster.hi
    watcher = cluster.watcher
    cluster.producer.send(600)
    started = start_members(cluster, members, prefix="w")
    owners = watcher.wait_balanced([m.instance_id for m in started], PARTITIONS // members,
                                   timeout=20)
    old = started[0]
    old = started[0]
    mine = sorted(p for p, o in owners.items() if o is not None and o.client_id == old.client_id)
    # Crash right after one of its heartbeats: its claims then stay held for the longest
    # time (2 HI), the window in which its restarted process must take them back.
    seen = len(watcher.events)

    def fresh_heartbeat() -> bool:
        watcher.refresh()
        return any(e.sender == old.owner and e.verdict == "heartbeat"
                   for e in watcher.events[seen:])

    wait_for(fresh_heartbeat, 10 * hi, f"a heartbeat of {old.client_id}", interval=0.01)
    killed_at_ms = now_ms()
    old.kill()
    new = cluster.spawn(old.client_id)
    new.wait_joined()
    assert new.instance_id != old.instance_id

    def next_owners() -> dict[int, Event] | None:
        watcher.refresh()
        firsts: dict[int, Event] = {}
        for e in watcher.ownership_changes(killed_at_ms):
            if e.partition in mine and e.verdict != "released":
                firsts.setdefault(e.partition, e)
        return firsts if len(firsts) == len(mine) else None

    wait_for(next_owners, 2 * hi + 15, f"new owners of {mine}", describe=watcher.describe)

    started_ms = int(new.started_at * 1000)
    joined_ms = min(e.ts_ms for e in watcher.events
                    if e.sender == new.owner and e.verdict == "member_heartbeat")
    reclaimed = []
    history = "; ".join(f"{(e.ts_ms - killed_at_ms) / 1000:.2f} s {e.partition} {e.verdict} "
                        f"{e.sender.client_id}/{e.sender.instance_id}"
                        for e in watcher.ownership_changes(killed_at_ms))
    for p in mine:
        changes = [e for e in watcher.ownership_changes(killed_at_ms) if e.partition == p]
        first = changes[0]
        assert (first.verdict, first.sender) == ("claim_reclaimed", new.owner), \
            f"partition {p} went first to {first.sender} ({first.verdict}), not back to " \
            f"{new.owner}; after the kill: {history}"
        reclaimed.append(first.ts_ms)
    last_beat_ms = max(e.ts_ms for e in watcher.events
                       if e.sender == old.owner and e.verdict == "heartbeat")
    churn = [e for e in watcher.ownership_changes(killed_at_ms) if e.partition not in mine]
    print(f"\n[restart] {old.client_id} killed {(killed_at_ms - last_beat_ms) / 1000:.2f} s "
          f"after its last heartbeat; new process joined "
          f"{(joined_ms - started_ms) / 1000:.2f} s after start; reclaimed {mine} "
          f"{(min(reclaimed) - started_ms) / 1000:.2f}-{(max(reclaimed) - started_ms) / 1000:.2f}"
          f" s after start ({(max(reclaimed) - joined_ms) / 1000:.2f} s after joining, "
          f"{(max(reclaimed) - last_beat_ms) / 1000:.2f} s after the old process's last "
          f"heartbeat; HI {hi:.0f} s); ownership changes of the other partitions meanwhile: "
          f"{len(churn)}")
    # It waited for one HI after joining (a live predecessor would have shown itself)...
    assert min(reclaimed) - joined_ms >= hi * 1000
    # ...and not much longer: well before the 2 HI + slack a take-over by others needs.
    assert max(reclaimed) - started_ms < (1.25 * hi + 2) * 1000

    tail = cluster.tail()
    verdicts = {(line["verdict"], line["record"].split("/")[3], int(line["record"].split("/")[-1]))
                for line in tail if line["record"].startswith("ClaimingPartition/")}
    for p in mine:
        assert ("claim_reclaimed", new.instance_id, p) in verdicts

    survivors = [new, *started[1:]]
    cluster.wait_consumed(cluster.producer.produced)
    stop_gracefully(survivors)
    assert set(cluster.producer.produced) <= set(cluster.printed())


def test_a_second_live_process_with_the_same_client_id_exits_2(cluster: Cluster) -> None:
    first = cluster.spawn("w1")
    first.wait_joined()
    cluster.watcher.wait_balanced([first.instance_id], PARTITIONS, timeout=20)

    second = cluster.spawn("w1")
    second.wait_joined()
    rc = second.wait(timeout=2 * HI + 20)
    exited_ms = now_ms()
    assert rc == 2, second.stderr_text()
    cluster.watcher.refresh()
    joined_ms = min(e.ts_ms for e in cluster.watcher.events
                    if e.sender == second.owner and e.verdict == "member_heartbeat")
    stderr = second.stderr_text()
    errors = [line for line in stderr.splitlines()
              if line.startswith("marshal: error") or "Traceback" in line]
    assert len(errors) == 1, stderr
    assert errors[0] == stderr.strip().splitlines()[-1], stderr
    assert errors[0].startswith("marshal: error: ") and "client id" in errors[0], stderr
    assert "w1" in errors[0] and first.instance_id in errors[0]
    assert "Traceback" not in stderr
    detected_s = (exited_ms - joined_ms) / 1000
    print(f"\n[client id in use] the second process exited 2 {detected_s:.2f} s after joining: "
          f"{errors[0]!r}")
    assert detected_s < HI + 3

    # The first one is unharmed and holds everything again.
    assert first.alive()
    cluster.watcher.wait_balanced([first.instance_id], PARTITIONS, timeout=20)
    stop_gracefully([first])


@pytest.fixture
def bootstrap(request: pytest.FixtureRequest) -> str:
    return broker_bootstrap(request)


@ON_EVERY_BROKER_BOOTSTRAP
def test_a_member_with_another_heartbeat_interval_exits_2_and_nothing_is_delivered_twice(
        bootstrap: str, unique_name: str, tmp_path: Path) -> None:
    # As a user tried it: one member with the default interval (10 s), one with 1 s, one
    # group, 4 partitions, 3,000 records.
    c = Cluster(bootstrap, unique_name, tmp_path, partitions=4, hi=10.0)
    try:
        produced = c.producer.send(3_000)
        slow = c.spawn("slow")
        slow.wait_joined()
        c.watcher.wait_balanced([slow.instance_id], 4, timeout=30, partitions=4)
        # Views judge slow's claims by the interval it announced, whatever their own setting.
        rows = state_json(c.bootstrap, c.ctopic, c.group, c.topic, hi=0.001)
        assert len(rows) == 4 and {r["status"] for r in rows} <= {"fresh", "unknown"}, rows
        groups = run_marshal("groups", "--json", "--bootstrap-servers", c.bootstrap,
                             "--coordination-topic", c.ctopic, "--group", c.group)
        assert groups.returncode == 0, groups.stderr
        members = json.loads(groups.stdout)[0]["topics"][0]["members"]
        assert members == [{"client_id": "slow", "instance_id": slow.instance_id,
                            "heartbeat_interval_s": 10.0}]
        fast = c.spawn("fast", hi=1.0)
        assert fast.wait(timeout=60) == 2, fast.stderr_text()
        stderr = fast.stderr_text()
        assert len(stderr.strip().splitlines()) == 1 and "Traceback" not in stderr, stderr
        assert stderr.startswith(
            f"marshal: error: group {c.group!r} runs with a heartbeat interval of 10 s "
            f"(announced on {c.topic} by slow, instance {slow.instance_id}), and this "
            "member's is 1 s: give every member of a group the same heartbeat interval "
            "(heartbeat_interval=10, marshal consume --heartbeat-interval 10)"), stderr
        assert fast.printed() == []
        c.wait_consumed(produced, timeout=60, procs=[slow])
        delivered = Counter(c.printed())
        assert set(delivered) == set(produced)
        assert [tp for tp, n in delivered.items() if n > 1] == []  # no record twice
        c.watcher.refresh()
        assert [e for e in c.watcher.events if e.sender.client_id == "fast"] == []  # it wrote
        assert {o.client_id for o in c.watcher.owners(4).values() if o} == {"slow"}  # nothing
        stop_gracefully([slow])
    finally:
        c.close()


def test_sigterm_releases_at_once_and_the_other_member_takes_over(cluster: Cluster) -> None:
    cluster.producer.send(600)
    members = start_members(cluster, 2)
    owners = cluster.watcher.wait_balanced([m.instance_id for m in members], 6, timeout=20)
    leaving, staying = members
    theirs = sorted(p for p, o in owners.items() if o == leaving.owner)
    with BackgroundProducer(cluster.producer, rate=100) as background:
        background.wait_written(50)
        terminated_at_ms = now_ms()
        leaving.terminate()
        cluster.watcher.wait_owned(lambda o: held_by(o, {staying.instance_id}), 2 * HI + 15,
                                   "the remaining member to hold every partition")
        held_s = (now_ms() - terminated_at_ms) / 1000
    assert leaving.wait() == 0, leaving.stderr_text()

    releases, claims, beats = {}, {}, {}
    for p in theirs:
        events = cluster.watcher.partition_events(p, terminated_at_ms)
        released = [e for e in events if e.verdict == "released" and e.sender == leaving.owner]
        won = [e for e in events if e.verdict == "claim_won" and e.sender == staying.owner]
        assert released and won, (p, events)
        assert won[0].ts_ms > released[0].ts_ms
        releases[p], claims[p] = released[0].ts_ms, won[0].ts_ms
        beats[p] = max(e.ts_ms for e in cluster.watcher.partition_events(p)
                       if e.sender == leaving.owner and e.verdict in ("heartbeat", "claim_won"))
    handover_ms = max(claims.values()) - min(releases.values())
    print(f"\n[sigterm] released {theirs} {(min(releases.values()) - terminated_at_ms) / 1000:.2f}"
          f" s after SIGTERM; the other member claimed them all {handover_ms / 1000:.2f} s after "
          f"the first release; the watcher saw it hold all {PARTITIONS} {held_s:.2f} s after "
          f"SIGTERM (HI {HI:.0f} s)")
    assert handover_ms < HI * 1000
    # Taken as released partitions, not as stale ones: long before 2 HI after the last beat.
    assert all(claims[p] - beats[p] < 2 * HI * 1000 for p in theirs)
    assert held_s < HI + 2

    cluster.wait_consumed(cluster.producer.produced, procs=[leaving, staying])
    stop_gracefully([staying])
    printed = cluster.printed()
    twice = sorted(tp for tp, n in Counter(printed).items() if n > 1)
    assert not twice, f"a graceful hand-over re-delivered {len(twice)} records: {twice[:10]}"
    assert set(cluster.producer.produced) <= set(printed)
    assert_everything_committed(cluster)


def test_consume_of_a_missing_topic_exits_2_naming_it(kafka_bootstrap: str,
                                                      unique_name: str) -> None:
    missing = f"{unique_name}-missing"
    result = run_marshal("consume", "--bootstrap-servers", kafka_bootstrap,
                         "--coordination-topic", f"__marshal-{unique_name}", "--group", "g",
                         "--topic", missing, "--client-id", "c1", "--heartbeat-interval",
                         str(HI), "--offset-reset", "earliest", "--print")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("marshal: error: ") and repr(missing) in lines[0], lines[0]
    assert "does not exist" in lines[0]


@pytest.mark.parametrize("fetcher", ["kafka-python", "confluent"])
def test_print_writes_one_json_object_per_record(cluster: Cluster, fetcher: str) -> None:
    sent = [
        (None, "héllo wörld".encode()),  # no key, UTF-8 value
        (b"k1", b"\xff\xfe\x00\x01"),  # value that is not UTF-8
        (b"k2", None),  # tombstone
        (b"\xc3\x28", b"v"),  # key that is not UTF-8
    ]
    assert cluster.producer.send_raw(sent, partition=5) == [0, 1, 2, 3]
    proc = cluster.spawn("printer", extra=["--max-records", str(len(sent)),
                                           "--fetcher", fetcher])
    assert proc.wait(timeout=60) == 0, proc.stderr_text()
    lines = proc.stdout_path.read_text().splitlines()
    assert len(lines) == len(sent)
    records = [json.loads(line) for line in lines]
    base = {"topic": cluster.topic, "partition": 5, "delivery_count": 1}

    def b64(raw: bytes) -> str:
        return base64.b64encode(raw).decode("ascii")

    assert records == [
        {**base, "offset": 0, "key": None, "value": "héllo wörld"},
        {**base, "offset": 1, "key": "k1", "value_b64": b64(b"\xff\xfe\x00\x01")},
        {**base, "offset": 2, "key": "k2", "value": None},
        {**base, "offset": 3, "key_b64": b64(b"\xc3\x28"), "value": "v"},
    ]
    # Key order as documented: topic, partition, offset, key, value, delivery_count.
    assert list(records[0]) == ["topic", "partition", "offset", "key", "value",
                                "delivery_count"]
    assert "consumed 4 records; committed and released" in proc.stderr_text()


def test_marshaler_resumes_a_group_from_its_committed_offsets(cluster: Cluster) -> None:
    cluster.producer.send(150)  # 12 or 13 records on each partition
    ends = cluster.producer.ends()
    bootstrap, ctopic, group, topic = (cluster.bootstrap, cluster.ctopic, cluster.group,
                                       cluster.topic)

    first: list[TP] = []
    with Marshaler(bootstrap, group_id=group, client_id="w1", heartbeat_interval=HI,
                   coordination_topic=ctopic) as m1:
        consumer = m1.consumer([topic], mode="alo", offset_reset="earliest")
        for record in consumer:
            first.append((record.partition, record.offset))
            assert consumer.commit(record)
            if len(first) == 60:
                break
        assert {tp.partition for tp in consumer.assignment()} == set(range(PARTITIONS))
        consumer.close()
        assert m1.members(topic) == []  # it left
        claims = {c.key.partition: c for c in m1.claims(topic)}
    assert len(set(first)) == 60
    for p in range(PARTITIONS):
        assert claims[p].owner is None  # released
        done = [o for q, o in first if q == p]
        assert claims[p].committed_offset == (max(done) + 1 if done else 0), (p, claims[p])

    second: list[TP] = []
    with Marshaler(bootstrap, group_id=group, client_id="w2", heartbeat_interval=HI,
                   coordination_topic=ctopic) as m2:
        consumer = m2.consumer([topic], mode="alo", offset_reset="earliest")
        deadline = time.monotonic() + 30
        while len(second) < 150 - 60 and time.monotonic() < deadline:
            for record in consumer.poll(timeout_s=0.5, max_records=50):
                second.append((record.partition, record.offset))
                consumer.commit(record)
        assert [o.client_id for o in m2.members(topic)] == ["w2"]
        consumer.close()
        after = {c.key.partition: c.committed_offset for c in m2.claims(topic)}
    assert len(second) == 150 - 60, f"got {len(second)} records"
    assert not set(first) & set(second), "records before the committed offset came again"
    assert sorted(first + second) == sorted(cluster.producer.produced)
    for p in range(PARTITIONS):
        offsets = [o for q, o in second if q == p]
        if offsets:
            assert offsets[0] == claims[p].committed_offset
    assert after == ends


def test_amo_planned_stop_loses_no_record(cluster: Cluster) -> None:
    """No crash, no pause: a member stops after 10 records, another continues from there."""
    cluster.producer.send_raw([(None, f"{i}".encode()) for i in range(100)], partition=0)
    first = cluster.spawn("a", mode="amo", extra=["--max-records", "10"])
    assert first.wait(timeout=60) == 0, first.stderr_text()
    assert first.printed() == [(0, o) for o in range(10)]
    second = cluster.spawn("b", mode="amo")
    second.wait_joined()

    def b_done() -> bool:  # b owns partition 0 and has committed up to its end
        claim = cluster.watcher.rationalizer.claim(cluster.group, cluster.topic, 0)
        return cluster.watcher.owners()[0] == second.owner and claim.committed_offset == 100

    wait_for(b_done, 30, "b to own partition 0 and commit offset 100",
             describe=lambda: str(cluster.state()[0]))
    stop_gracefully([second])
    assert second.printed() == [(0, o) for o in range(10, 100)], \
        f"b printed {len(second.printed())} records; partition 0: {cluster.state()[0]}"


def test_fair_members_take_what_a_capped_member_leaves(cluster: Cluster) -> None:
    a = cluster.spawn("a")
    b = cluster.spawn("b", extra=["--max-claims", "4"])
    a.wait_joined()
    b.wait_joined()
    try:
        owners = cluster.watcher.wait_owned(
            lambda o: sum(1 for x in o.values() if x == b.owner) == 4
            and sum(1 for x in o.values() if x == a.owner) >= 6, 20, "b at its cap")
        # Every partition consumed by someone within a few heartbeat intervals.
        cluster.watcher.wait_owned(lambda o: all(x is not None for x in o.values()), 4 * HI,
                                   f"every partition to be held (was {owners})")
    finally:
        stop_gracefully([a, b])
