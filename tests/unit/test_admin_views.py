"""The pure parts of the admin commands: groups, lag, watch frames, reset planning, metrics."""

from __future__ import annotations

import io
from types import SimpleNamespace

from rich.console import Console

from marshal_py.admin.groups import ago, duration, group_rows, groups_json, overall_state
from marshal_py.admin.lag import exclusive_committed, lag_report, report_lines, require_group
from marshal_py.admin.watch import build_frame, frame_topics, render_frame
from marshal_py.cli.common import table_lines
from marshal_py.errors import MarshalError
from marshal_py.protocol import ClaimingKeyRanges, KeyRangesHeartbeat
from marshal_py.world import GroupState, Owner, Rationalizer, RationalizerConfig
from tests.support import HI, T0, Scenario

RETENTION = 60_000


def replay(s: Scenario, retention_ms: int = RETENTION) -> Rationalizer:
    r = Rationalizer(RationalizerConfig(s.partitions, HI, offsets_retention_ms=retention_ms))
    r.apply_all(s.records)
    return r


def lifecycle_scenario() -> Scenario:
    """g.live: stable on t1 (w1), empty on t2 (w2 left at 1 s). g.gone: left at 0."""
    s = Scenario()
    s.member("w1", 0, group="g.live", topic="t1")
    s.claim("w1", 10, group="g.live", topic="t1")
    s.member("w2", 0, group="g.live", topic="t2")
    s.member("w2", 1_000, group="g.live", topic="t2", active=False)
    s.member("w9", 0, group="g.gone", topic="t1")
    s.member("w9", 0, group="g.gone", topic="t1", active=False)
    s.heartbeat("w1", 5_000, 7, group="g.live", topic="t1")
    return s


def test_group_rows_show_each_pair_and_the_groups_overall_state() -> None:
    r = replay(lifecycle_scenario())
    now = T0 + 6_000
    rows = group_rows(r, now)
    assert [(x.group, x.topic, x.lifecycle.state, x.group_state) for x in rows] == [
        ("g.gone", "t1", GroupState.EMPTY, GroupState.EMPTY),
        ("g.live", "t1", GroupState.STABLE, GroupState.STABLE),
        ("g.live", "t2", GroupState.EMPTY, GroupState.STABLE),
    ]
    stable, empty = rows[1], rows[2]
    assert stable.lifecycle.members == (Owner("i-w1", "w1"),)
    assert stable.lifecycle.expires_at_ms is None
    assert empty.lifecycle.since_ms == T0 + 1_000
    assert empty.lifecycle.expires_at_ms == T0 + 1_000 + RETENTION
    assert empty.cells(now) == ["g.live", "t2", "empty", "stable", None, "5s ago",
                                "offsets expire in 55s"]
    assert stable.cells(now)[4] == "w1 (instance i-w1)"
    assert [x.topic for x in group_rows(r, now, group="g.live", topic="t2")] == ["t2"]


def test_an_empty_pair_turns_dead_after_the_retention() -> None:
    r = replay(lifecycle_scenario())
    now = T0 + 1_000 + RETENTION + 1
    rows = {(x.group, x.topic): x for x in group_rows(r, now)}
    assert rows[("g.live", "t2")].lifecycle.state is GroupState.DEAD
    assert rows[("g.live", "t1")].lifecycle.state is GroupState.EMPTY  # stale since 5 s + 2 HI
    assert rows[("g.live", "t2")].group_state is GroupState.EMPTY
    assert rows[("g.live", "t2")].cells(now)[6] == "offsets expired 1ms ago"


def test_groups_json_nests_topics_under_their_group() -> None:
    r = replay(lifecycle_scenario())
    out = groups_json(group_rows(r, T0 + 6_000))
    assert [(g["group"], g["state"]) for g in out] == [("g.gone", "empty"), ("g.live", "stable")]
    live = out[1]["topics"]
    assert isinstance(live, list)
    assert live[0]["members"] == [{"client_id": "w1", "instance_id": "i-w1",
                                   "heartbeat_interval_s": None}]  # announced none
    assert set(live[1]) == {"topic", "state", "members", "since_ms", "since",
                            "expires_at_ms", "expires_at"}
    assert live[1]["expires_at"] is not None and live[1]["expires_at"].endswith("+00:00")


def test_overall_state_and_durations() -> None:
    assert overall_state([GroupState.DEAD, GroupState.STABLE]) is GroupState.STABLE
    assert overall_state([GroupState.DEAD, GroupState.EMPTY]) is GroupState.EMPTY
    assert overall_state([GroupState.DEAD]) is GroupState.DEAD
    assert [duration(ms) for ms in (950, 12_000, 185_000, 7_800_000, 8 * 86_400_000)] == [
        "950ms", "12s", "3m05s", "2h10m", "8d00h"]
    assert ago(1_000, 61_000) == "1m00s ago"
    assert ago(61_000, 1_000) == "in 1m00s"
    assert ago(None, 0) is None


def lag_scenario() -> Scenario:
    s = Scenario()
    s.member("w1", 0, group="g", topic="ex")
    s.claim("w1", 0, group="g", topic="ex", partition=0)
    s.heartbeat("w1", 100, 120, group="g", topic="ex", partition=0)
    s.claim("w1", 0, group="g", topic="ex", partition=1)
    s.heartbeat("w1", 100, 50, group="g", topic="ex", partition=1)
    s.claim_messages("w1", 200, 99, group="g", topic="ex", partition=1)
    s.share_init("w2", 0, 40, group="g", topic="sh")
    s.acquire("w2", 10, "40-49", group="g", topic="sh")
    s.ack("w2", 20, "40-44", group="g", topic="sh")
    base = dict(sent_at=0, instance_id="i-w3", client_id="w3", group_id="g", topic="ks",
                partition=0)
    s.write(ClaimingKeyRanges(**base, slots="0-511"), 0)  # type: ignore[arg-type]
    s.write(KeyRangesHeartbeat(**base, offset=30), 10)  # type: ignore[arg-type]
    s.write(ClaimingKeyRanges(**{**base, "instance_id": "i-w4", "client_id": "w4"},
                              slots="512-1023"), 10)  # type: ignore[arg-type]
    s.write(KeyRangesHeartbeat(**{**base, "instance_id": "i-w4", "client_id": "w4"},
                               offset=25), 20)  # type: ignore[arg-type]
    return s


def test_lag_per_mode() -> None:
    r = replay(lag_scenario())
    counts = {"ex": 3, "sh": 1, "ks": 1}
    ends = {("ex", 0): 200, ("ex", 1): 150, ("ex", 2): 10, ("sh", 0): 60, ("ks", 0): 100}
    report = lag_report(r, "g", ["ex", "sh", "ks"], counts, ends, T0 + 1_000)
    got = [(x.topic, x.partition, x.mode, x.end_offset, x.committed_offset, x.lag, x.owners,
            x.status) for x in report.rows]
    assert got == [
        ("ex", 0, "exclusive", 200, 120, 80, ("w1",), "fresh"),
        ("ex", 1, "amo", 150, 100, 50, ("w1",), "fresh"),  # max(50, 99 + 1)
        ("ex", 2, "-", 10, None, None, (), "never claimed"),
        ("sh", 0, "share", 60, 45, 15, ("w2",), "5 in flight"),
        ("ks", 0, "key-shared", 100, 25, 75, ("w3 (512 slots)", "w4 (512 slots)"),
         "all slots owned"),
    ]
    assert report.topic_totals() == {"ex": {"lag": 130, "partitions": 3, "unknown": 1},
                                     "sh": {"lag": 15, "partitions": 1, "unknown": 0},
                                     "ks": {"lag": 75, "partitions": 1, "unknown": 0}}
    assert report.total_lag == 220
    assert report_lines(report)[0] == "ex: lag 130 over 3 partition(s), 1 unknown"
    assert report_lines(report)[-1] == "total lag of g: 220"
    data = report.as_json()
    assert data["total_lag"] == 220 and data["unknown_partitions"] == 1
    first = data["partitions"][0]  # type: ignore[index]
    assert set(first) == {"topic", "partition", "mode", "end_offset", "committed_offset", "lag",
                          "owners", "status"}


def test_a_stale_owner_is_shown_stale_and_lag_never_negative() -> None:
    r = replay(lag_scenario())
    report = lag_report(r, "g", ["ex"], {"ex": 1}, {("ex", 0): 100}, T0 + 100 + 3 * HI)
    assert (report.rows[0].lag, report.rows[0].status) == (0, "stale")
    claim = r.claim("g", "ex", 1)
    assert exclusive_committed(claim) == 100


def test_unknown_group_is_one_clear_error() -> None:
    r = replay(lag_scenario())
    assert require_group(r, "g", "__marshal") == ["ex", "ks", "sh"]
    assert require_group(r, "g", "__marshal", "sh") == ["sh"]
    for args in (("nobody", "__marshal"), ("g", "__marshal", "elsewhere")):
        try:
            require_group(r, *args)
        except MarshalError as exc:
            assert "unknown group" in str(exc) and "\n" not in str(exc)
        else:
            raise AssertionError("expected an error")


def test_watch_frame_and_render() -> None:
    r = replay(lag_scenario())
    ends = {("ex", 0): 200, ("ex", 1): 150, ("sh", 0): 60, ("ks", 0): 100}
    frame = build_frame(r, T0 + 1_000, ends)
    assert frame_topics(frame) == ["ex", "ks", "sh"]
    assert [(p["partition"], p["owner"], p["status"], p["committed_offset"], p["lag"])
            for p in frame["partitions"]] == [(0, "w1", "fresh", 120, 80),
                                              (1, "w1", "fresh", 100, 50)]
    assert [(s["spso"], s["speo"], s["acquired"], s["lag"]) for s in frame["shares"]] == [
        (45, 50, 5, 15)]
    assert [(k["owner"], k["slots"], k["slot_count"], k["committed_offset"], k["status"])
            for k in frame["key_shared"]] == [("w3", "0-511", 512, 30, "fresh"),
                                              ("w4", "512-1023", 512, 25, "fresh")]
    out = io.StringIO()
    Console(file=out, width=200, color_system=None).print(render_frame(frame))
    text = out.getvalue()
    for title in ("Groups", "Partition ownership", "Share-partitions", "Key-shared slots"):
        assert title in text
    assert "w1 (instance i-w1)" in text and "0-511" in text
    only = build_frame(r, T0 + 1_000, ends, group="g", topic="sh")
    assert not only["partitions"] and not only["key_shared"] and len(only["shares"]) == 1


def test_table_lines_align_and_show_missing_values() -> None:
    assert table_lines(("a", "long_name"), [[1, None], ["xyz", True]]) == [
        "a    long_name", "1    -", "xyz  yes"]


def test_metrics_collector_reads_a_consumer_defensively_and_stays_monotonic() -> None:
    from marshal_py.client.metrics import MarshalCollector

    r = replay(lag_scenario())
    holding = SimpleNamespace(cursor=SimpleNamespace(committed=120))
    engine = SimpleNamespace(
        holdings={("ex", 0): holding},
        stats=SimpleNamespace(heartbeats=7, released=1, amo_batches_confirmed=0),
        channel=SimpleNamespace(records_written=12, checkpoints_written=2))
    consumer = SimpleNamespace(records_delivered=40, topics=("ex",), _engine=engine)
    marshaler = SimpleNamespace(group_id="g", client_id="w1", instance_id="i-w1",
                                _consumer=consumer, rationalizer=r,
                                me=Owner("i-w1", "w1"),
                                clock=SimpleNamespace(now_ms=lambda: T0 + 1_000))
    collector = MarshalCollector(marshaler)  # type: ignore[arg-type]

    def samples() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in collector.collect() for s in family.samples}

    first = samples()
    g = (("group", "g"),)
    assert first[("marshal_records_delivered_total", g)] == 40
    assert first[("marshal_heartbeats_written_total", g)] == 7
    assert first[("marshal_coordination_records_written_total", g)] == 12
    assert first[("marshal_checkpoints_written_total", g)] == 2
    where = (("group", "g"), ("partition", "0"), ("topic", "ex"))
    assert first[("marshal_claims_held", where)] == 1
    assert first[("marshal_committed_offset", where)] == 120
    assert first[("marshal_group_members", (("group", "g"), ("topic", "ex")))] == 1
    # A key-shared or unknown kind of consumer: no holdings, no stats; counters carry on.
    marshaler._consumer = SimpleNamespace(records_delivered=5, topics=("ks",))
    marshaler.me = Owner("i-w3", "w3")
    second = samples()
    assert second[("marshal_records_delivered_total", g)] == 45
    assert second[("marshal_heartbeats_written_total", g)] == 7
    ks = (("group", "g"), ("partition", "0"), ("topic", "ks"))
    assert second[("marshal_key_slots_held", ks)] == 512
    assert second[("marshal_committed_offset", ks)] == 30
    assert not any(name == "marshal_claims_held" for name, _ in second)
    # A key-shared engine's holdings (owned slots, commit floor) are read as slots.
    slots = SimpleNamespace(owned={1, 2, 3}, commit_floor=lambda: 17)
    marshaler._consumer = SimpleNamespace(
        records_delivered=1, topics=("ks",),
        _engine=SimpleNamespace(holdings={("ks", 0): slots}, stats=SimpleNamespace(
            heartbeats=2)))
    third = samples()
    assert third[("marshal_key_slots_held", ks)] == 3
    assert third[("marshal_committed_offset", ks)] == 17
    assert third[("marshal_records_delivered_total", g)] == 46
    assert third[("marshal_heartbeats_written_total", g)] == 9
