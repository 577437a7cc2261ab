"""The Spark source's pure parts: options, checkpointed offsets, budget and task splitting."""

from __future__ import annotations

import dataclasses
import pickle
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marshal_py.client.batch_member import PlannedRange, ShareHolder, share_budget
from marshal_py.errors import ConfigurationError
from marshal_py.protocol import GroupKey, encode
from marshal_py.protocol.auth import (
    DECLARATION_SEQ,
    holder_key,
    split_signed,
    verify_declaration,
)
from marshal_py.spark.fetch import _Span
from marshal_py.spark.gaps import gap_messages, record_value
from marshal_py.spark.options import OPTIONS, parse_options
from marshal_py.spark.planning import BatchOffset, OffsetFormatError, ReadTask, split_ranges

BASE = {"bootstrap.servers": "127.0.0.1:9092", "group": "g", "topics": "a, b,a"}


def test_options_defaults_and_parsing() -> None:
    o = parse_options({**BASE, "maxRecordsPerTrigger": "500", "MODE": "Share",
                       "kafka.security_protocol": "PLAINTEXT", "failOnDataLoss": "false"})
    assert o.topics == ("a", "b")
    assert o.mode == "share"
    assert o.max_records_per_trigger == 500
    assert o.fail_on_data_loss is False
    assert o.kafka_config == {"security_protocol": "PLAINTEXT"}
    assert o.client_id.startswith("spark-")
    assert o.settle_timeout == 3 * 10.0 + 5
    assert o.fetcher == "auto"
    assert parse_options({**BASE, "fetcher": "Kafka-Python"}).fetcher == "kafka-python"


@pytest.mark.parametrize("raw, message", [
    ({"group": "g", "topics": "a"}, "'bootstrap.servers' of the marshal source is required"),
    ({**BASE, "topics": " , "}, "names no topic"),
    ({**BASE, "mode": "exactly-once"}, "must be alo, amo, share or key-shared"),
    ({**BASE, "maxRecordsPerTrigger": "0"}, "'maxRecordsPerTrigger' must be >= 1"),
    ({**BASE, "maxRecordsPerTrigger": "many"}, "must be an integer"),
    ({**BASE, "lock.duration": "7200"}, "between 1 and 3600"),
    ({**BASE, "heartbeat.interval": "0"}, "'heartbeat.interval' must be >= 0.01"),
    ({**BASE, "failOnDataLoss": "maybe"}, "true or false"),
    ({**BASE, "start.datetime": "2026-11-22T08:00:00"}, "needs a time zone"),
    ({**BASE, "grup": "x"}, "unknown option 'grup'"),
    ({**BASE, "authKeys": "/k", "auth.keys": "/k"}, "given twice"),
    ({**BASE, "kafka.no_such_setting": "1"}, "unknown kafka-python setting"),
    ({**BASE, "kafka.group_id": "etl"}, "sets group_id, which marshal_py's Kafka clients set "
                                        "themselves"),
    ({**BASE, "mode": "share", "max.poll.interval": "0.5"}, "'max.poll.interval' must be >= 1"),
    ({**BASE, "max.poll.interval": "60"}, "'max.poll.interval' applies to mode share only"),
    ({**BASE, "fetcher": "java"}, "'fetcher' must be auto, confluent or kafka-python"),
    ({**BASE, "fetcher": "confluent", "kafka.proxy_url": "http://p:1"},
     "fetcher=confluent: the setting kafka.proxy_url has no librdkafka equivalent; use "
     "fetcher=auto or kafka-python instead"),
])
def test_bad_options_are_refused_with_the_option_named(raw: dict[str, str],
                                                       message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        parse_options(raw)


@pytest.mark.parametrize(("kafka", "message"), [
    ({"kafka.chek_crcs": "false"}, "unknown kafka-python setting.*chek_crcs in the marshal_log "
                                   "source's kafka.. options"),
    ({"kafka.group_id": "audit"}, "^the marshal_log source's kafka.. options sets group_id, "
                                  "which marshal_py's Kafka clients set themselves"),
    ({"kafka.value_deserializer": "x"}, "sets value_deserializer"),
])
def test_the_log_sources_kafka_options_are_checked_as_a_members_are(
        kafka: dict[str, str], message: str) -> None:
    """They went straight to kafka-python: an unknown one failed in the task with kafka-python's
    own error, and group_id, enable_auto_commit or auto_offset_reset replaced the reader's."""
    from marshal_py.spark.log_source import LogOptions

    with pytest.raises(ConfigurationError, match=message):
        LogOptions({"bootstrap.servers": "127.0.0.1:9092", **kafka})
    assert LogOptions({"bootstrap.servers": "b:1", "kafka.check_crcs": "false"}).kafka_config \
        == {"check_crcs": False}


def test_auth_keys_may_be_spelled_auth_keys_in_camel_case(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("g k1 0123456789abcdef0123456789abcdef\n")
    keys.chmod(0o600)
    for name in ("authKeys", "auth.keys", "AUTHKEYS"):
        options = parse_options({**BASE, name: str(keys)})
        assert options.auth_keys_file == str(keys)
        assert [k.key_id for k in options.group_keys()] == ["k1"]


def test_every_option_is_documented_in_the_spark_guide() -> None:
    from pathlib import Path
    guide = (Path(__file__).parents[2] / "docs" / "spark.md").read_text()
    missing = [name for name in OPTIONS if f"`{name}`" not in guide]
    assert not missing, f"docs/spark.md lacks options {missing}"


def test_offsets_round_trip_and_carry_floors_forward() -> None:
    first = BatchOffset()
    assert BatchOffset.from_json(first.to_json()) == first
    ranges = [PlannedRange("t", 0, 0, 10), PlannedRange("t", 3, 5, 7, 2)]
    second = first.following("abc", 1, ranges)
    assert second.to_json() == {"v": 1, "planner": "abc", "batch": 1,
                                "next": {"t": {"0": 10, "3": 7}},
                                "ranges": [["t", 0, 0, 10, 1], ["t", 3, 5, 7, 2]]}
    assert BatchOffset.from_json(second.to_json()) == second
    third = second.following("abc", 2, [PlannedRange("t", 0, 10, 12)])
    assert third.next == {("t", 0): 12, ("t", 3): 7}
    assert third.key == ("abc", 2)


@pytest.mark.parametrize("data, message", [
    ({"v": 2, "planner": "", "batch": 0, "next": {}, "ranges": []}, "version 2"),
    ({"offset": 3}, "not a marshal source offset"),
    ({"v": 1, "planner": "", "batch": 0, "next": {}, "ranges": [["t", 0]]},
     "not a marshal source offset"),
])
def test_foreign_or_newer_offsets_are_refused_clearly(data: dict[str, object],
                                                      message: str) -> None:
    with pytest.raises(OffsetFormatError, match=message):
        BatchOffset.from_json(data)


def spans(tasks: list[ReadTask]) -> list[list[tuple[int, int, int]]]:
    return [[(r.partition, r.start, r.end) for r in t.ranges] for t in tasks]


def test_split_ranges_cuts_large_ranges_evenly() -> None:
    tasks = split_ranges([PlannedRange("t", 0, 0, 10), PlannedRange("t", 1, 4, 4)], 4)
    assert spans(tasks) == [[(0, 0, 4)], [(0, 4, 7)], [(0, 7, 10)]]
    assert split_ranges([], 10) == []


def test_split_ranges_packs_small_ranges_into_shared_tasks() -> None:
    ranges = [PlannedRange("t", p, 0, 30) for p in range(6)]
    assert spans(split_ranges(ranges, 100)) == [[(0, 0, 30), (1, 0, 30), (2, 0, 30)],
                                                [(3, 0, 30), (4, 0, 30), (5, 0, 30)]]


def test_split_ranges_honours_min_tasks() -> None:
    tasks = split_ranges([PlannedRange("t", 0, 0, 100)], 1000, min_tasks=4)
    assert spans(tasks) == [[(0, 0, 25)], [(0, 25, 50)], [(0, 50, 75)], [(0, 75, 100)]]


@settings(deadline=None)  # up to 3,000 offsets counted per example: slow on a busy machine
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1000), st.integers(0, 500)),
                max_size=6),
       st.integers(1, 300), st.one_of(st.none(), st.integers(1, 20)))
def test_split_ranges_covers_every_offset_once(spec: list[tuple[int, int, int]], limit: int,
                                               min_tasks: int | None) -> None:
    ranges = [PlannedRange("t", p, s, s + n) for p, s, n in spec]
    tasks = split_ranges(ranges, limit, min_tasks)
    covered = Counter((r.partition, o) for t in tasks for r in t.ranges
                      for o in range(r.start, r.end))
    wanted = Counter((r.partition, o) for r in ranges for o in range(r.start, r.end))
    assert covered == wanted
    assert all(0 < t.size <= limit for t in tasks)


@settings(deadline=None)
@given(st.dictionaries(st.tuples(st.just("t"), st.integers(0, 20)), st.integers(-5, 1000),
                       max_size=12),
       st.one_of(st.none(), st.integers(0, 5000)))
def test_share_budget_is_fair_and_never_over(available: dict[tuple[str, int], int],
                                             budget: int | None) -> None:
    out = share_budget(available, budget)
    assert all(0 <= out[tp] <= max(0, n) for tp, n in available.items())
    total_available = sum(max(0, n) for n in available.values())
    if budget is None:
        assert sum(out.values()) == total_available
        return
    assert sum(out.values()) == min(budget, total_available)
    # Water-filling: a partition that got less than it could have got no less than any other.
    for tp, n in available.items():
        if out[tp] < max(0, n):
            assert all(out[tp] >= out[other] - 1 for other in out)


def test_max_poll_interval_is_share_mode_seconds_and_off_by_default() -> None:
    assert parse_options({**BASE, "mode": "share"}).max_poll_interval_s is None
    assert parse_options({**BASE, "mode": "share", "max.poll.interval": "90"}
                         ).max_poll_interval_s == 90.0


def test_a_span_notes_as_gaps_only_offsets_inside_its_ranges() -> None:
    span = _Span([PlannedRange("t", 0, 20, 30, 2), PlannedRange("t", 0, 0, 10)])
    span.passed(2)  # the consumer is at 2: 0 and 1 came without a record
    span.passed(4)  # then a record at 4 (as the task sees it: passed up to it, then past it)
    span.accounted = 5
    span.passed(25)  # 5..24: 5..9 and 20..24 are inside the ranges, 10..19 are not
    span.passed(40)  # clipped at the span's end
    assert span.gaps == [(0, 3), (5, 9), (20, 29)]
    assert span.accounted == 30


def test_in_an_authenticated_group_gaps_are_declarations_signed_with_the_holder_key() -> None:
    """The holder shipped to the tasks carries the holder key, not the group secret; the
    record it signs passes a rationalizer that knows the group key (PROTOCOL.md 12.2)."""
    group_key = GroupKey("2026-11", b"0123456789abcdef0123456789abcdef")
    holder = ShareHolder("ab12cd34", "spark-q", "jobs.g", (("jobs", 0),),
                         holder_key(group_key, "ab12cd34", "spark-q"))
    shipped = pickle.loads(pickle.dumps(holder))
    assert shipped == holder and group_key.secret not in pickle.dumps(holder)
    [(_, message)] = gap_messages(shipped, {("jobs", 0): [(3, 4)]}, 1700000000)
    signature = split_signed(record_value(shipped, message))
    assert signature.seq == DECLARATION_SEQ and signature.body == encode(message)
    assert verify_declaration(signature, [group_key], "ab12cd34", "spark-q")
    assert not verify_declaration(signature, [group_key], "ab12cd34", "another-client")
    assert record_value(dataclasses.replace(holder, declaration_key=None), message) == \
        encode(message)  # an open group: the plain acknowledgement


def test_gap_acknowledgements_are_written_in_the_holders_name() -> None:
    holder = ShareHolder("ab12cd34", "spark-q", "jobs.g", (("jobs", 3), ("other", 0)))
    written = gap_messages(holder, {("jobs", 0): [(110, 111), (115, 115)], ("jobs", 1): []},
                           1700000000)
    assert [(p, encode(m)) for p, m in written] == [
        (3, b"AcknowledgingRecords/2/1700000000/ab12cd34/spark-q/jobs.g/jobs/0/110-111,115/gap")]
