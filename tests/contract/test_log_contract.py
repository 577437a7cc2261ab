"""One contract, two implementations: MemoryLog and KafkaLog (on the real broker)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from kafka import KafkaAdminClient
from kafka.admin import NewPartitions

from marshal_py.errors import RecordTooLargeError
from marshal_py.log import CoordinationLog, KafkaLog, KafkaLogConfig, MemoryLog
from marshal_py.log.record_filter import RecordFilter
from marshal_py.protocol import ClaimingPartition, Heartbeat, coordination_partition, encode
from marshal_py.protocol.index import index_view
from marshal_py.replay import catch_up, follow, replay_start
from marshal_py.world import Owner, Rationalizer, RationalizerConfig

PARTITIONS = 2


@pytest.fixture(params=["memory", pytest.param("kafka", marks=pytest.mark.integration)])
def log(request: pytest.FixtureRequest, unique_name: str) -> Iterator[CoordinationLog]:
    if request.param == "memory":
        memory = MemoryLog(partitions=PARTITIONS)
        yield memory
        memory.close()
        return
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    kafka = KafkaLog(KafkaLogConfig(bootstrap_servers=bootstrap, topic=f"__marshal-{unique_name}",
                                    partitions=PARTITIONS))
    yield kafka
    kafka.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def add_partitions(log: CoordinationLog, total: int, request: pytest.FixtureRequest) -> None:
    """Grow the log's topic to ``total`` partitions, as an administrator could."""
    if isinstance(log, MemoryLog):
        log.add_partitions(total)
        return
    admin = KafkaAdminClient(bootstrap_servers=request.getfixturevalue("kafka_bootstrap"))
    try:
        admin.create_partitions({log.topic: NewPartitions(total)})
    finally:
        admin.close()


def test_partition_count(log: CoordinationLog) -> None:
    assert log.partition_count() == PARTITIONS
    assert log.metadata_partition_count == PARTITIONS


def test_the_placement_count_is_the_one_at_creation(
        log: CoordinationLog, request: pytest.FixtureRequest) -> None:
    """Partitions added later stay unused: records are placed, written and read on the
    first PARTITIONS only (PROTOCOL.md section 3)."""
    add_partitions(log, PARTITIONS + 3, request)
    opened: list[CoordinationLog] = [log]
    if isinstance(log, KafkaLog):  # a member that starts now reads the same layout
        opened.append(KafkaLog(KafkaLogConfig(bootstrap_servers=log.config.bootstrap_servers,
                                              topic=log.topic, create_topic=False)))
    try:
        for each in opened:
            assert each.partition_count() == PARTITIONS
            each.append(PARTITIONS - 1, b"last placed")
            with pytest.raises(ValueError, match="outside the layout"):
                each.append(PARTITIONS, b"unused")
            with pytest.raises(ValueError, match="outside the layout"):
                each.end_position(PARTITIONS)
        assert opened[-1].metadata_partition_count == PARTITIONS + 3
    finally:
        for each in opened[1:]:
            each.close()


def test_append_assigns_growing_positions_and_the_logs_own_timestamps(
        log: CoordinationLog) -> None:
    before = now_ms()
    first = log.append(1, b"one")
    second = log.append(1, b"two")
    other = log.append(0, b"zero")
    after = now_ms()
    assert (first.partition, first.position, first.value) == (1, 0, b"one")
    assert second.position == 1
    assert other.position == 0
    assert second.timestamp_ms >= first.timestamp_ms
    assert before - 5_000 <= first.timestamp_ms <= after + 5_000
    assert log.start_position(1) == 0
    assert log.end_position(1) == 2
    assert log.end_position(0) == 1


def test_fetch_returns_records_from_the_start_in_order(log: CoordinationLog) -> None:
    for i in range(5):
        log.append(0, f"r{i}".encode())
    log.append(1, b"other")
    got = []
    while len(got) < 3:
        got.extend(log.fetch({0: 2}, timeout_s=5.0))
    assert [r.value for r in got] == [b"r2", b"r3", b"r4"]
    assert [r.position for r in got] == [2, 3, 4]
    assert all(r.partition == 0 for r in got)


def test_fetch_returns_nothing_when_nothing_arrives(log: CoordinationLog) -> None:
    log.append(0, b"x")
    assert log.fetch({0: 1}, timeout_s=0.2) == []


def test_fetch_wakes_up_for_a_record_appended_meanwhile(log: CoordinationLog) -> None:
    log.append(0, b"warm-up")  # so the Kafka consumer has its metadata
    appended = threading.Event()

    def writer() -> None:
        appended.wait(5)
        log.append(0, b"late")

    thread = threading.Thread(target=writer)
    thread.start()
    appended.set()
    got = []
    deadline = time.monotonic() + 20
    while not got and time.monotonic() < deadline:
        got = log.fetch({0: 1}, timeout_s=5.0)
    thread.join()
    assert [r.value for r in got] == [b"late"]


def test_position_for_time(log: CoordinationLog) -> None:
    first = log.append(0, b"a")
    log.append(0, b"b")
    assert log.position_for_time(0, first.timestamp_ms) == 0
    assert log.position_for_time(0, 0) == 0
    assert log.position_for_time(0, now_ms() + 3_600_000) == log.end_position(0)
    assert replay_start(log, 0, now_ms() + 3_600_000, 1_000) == log.end_position(0)
    assert replay_start(log, 0, now_ms(), 0) == 0


def test_a_replay_start_never_passes_the_end_read_before(log: CoordinationLog) -> None:
    """With ``end`` (read before the index), the window's start is at or before it even when
    the lookup finds no record in the window and answers a later end (PROTOCOL.md 6.1)."""
    before = log.end_position(0)
    log.append(0, b"a peer's first record")
    later = now_ms() + 3_600_000  # no record in the window: the lookup answers the end
    assert replay_start(log, 0, later, 1_000) == before + 1
    assert replay_start(log, 0, later, 1_000, end=before) == before
    assert replay_start(log, 0, now_ms(), 0, end=before) == 0  # earlier starts stay


def test_catch_up_replays_into_the_same_world(log: CoordinationLog) -> None:
    topic = "events"
    cp = coordination_partition(topic, PARTITIONS)
    log.append(cp, encode(ClaimingPartition(0, "i1", "a", "g", topic, 0)))
    log.append(cp, encode(ClaimingPartition(0, "i2", "b", "g", topic, 0)))
    log.append(cp, b"garbage")
    log.append(cp, encode(Heartbeat(0, "i1", "a", "g", topic, 0, 17)))
    r = Rationalizer(RationalizerConfig(PARTITIONS, 10_000))
    assert catch_up(log, r, range(PARTITIONS)) == 4
    claim = r.claim("g", topic, 0)
    assert claim.owner == Owner("i1", "a")
    assert claim.committed_offset == 17
    assert r.skipped_count() == 1
    assert catch_up(log, r, range(PARTITIONS)) == 0


def test_follow_applies_records_as_they_arrive_until_stopped(log: CoordinationLog) -> None:
    topic = "events"
    cp = coordination_partition(topic, PARTITIONS)
    log.append(cp, encode(ClaimingPartition(0, "i1", "a", "g", topic, 0)))
    r = Rationalizer(RationalizerConfig(PARTITIONS, 10_000))
    stop = threading.Event()
    seen = 0
    for applied in follow(log, r, [cp], stop, fetch_timeout_s=1.0):
        seen += applied
        if seen == 1:
            log.append(cp, encode(Heartbeat(0, "i1", "a", "g", topic, 0, 5)))
        if seen == 2:
            stop.set()
    assert r.claim("g", topic, 0).committed_offset == 5
    assert r.next_position(cp) == 2


def test_fetch_matching_keeps_what_it_wants_and_says_how_far_it_read(
        log: CoordinationLog) -> None:
    for value in (b"mine-1", b"theirs-1", b"mine-2", b"theirs-2"):
        log.append(0, value)
    log.append(1, b"theirs-3")
    kept: list[bytes | None] = []
    reached: dict[int, int] = {}
    deadline = time.monotonic() + 20
    while reached != {0: 4, 1: 1} and time.monotonic() < deadline:
        starts = {0: reached.get(0, 1), 1: reached.get(1, 0)}
        fetched = log.fetch_matching(starts, 5.0, lambda v: v is not None and b"mine" in v)
        kept += [r.value for r in fetched.records]
        reached.update(fetched.reached)
    assert kept == [b"mine-2"]  # position 0 was not asked for
    assert reached == {0: 4, 1: 1}
    everything = log.fetch_matching({0: 0}, 5.0, None)
    assert [r.value for r in everything.records] == [b"mine-1", b"theirs-1", b"mine-2",
                                                      b"theirs-2"]
    assert everything.reached == {0: 4}
    nothing = log.fetch_matching({0: 4}, 0.2, lambda v: True)
    assert nothing.records == [] and nothing.reached == {}


def test_a_filtered_catch_up_applies_only_the_groups_records(log: CoordinationLog) -> None:
    topic = "events"
    cp = coordination_partition(topic, PARTITIONS)
    for group in ("g", "neighbour", "g/2"):
        log.append(cp, encode(ClaimingPartition(0, "i1", "a", group, topic, 0)))
    log.append(cp, encode(Heartbeat(0, "i1", "a", "neighbour", topic, 0, 9)))
    r = Rationalizer(RationalizerConfig(PARTITIONS, 10_000))
    assert catch_up(log, r, [cp], keep=RecordFilter(["g"])) == 1
    assert r.next_position(cp) == 4  # read past the rest
    assert r.claim("g", topic, 0).owner == Owner("i1", "a")
    assert r.claim("neighbour", topic, 0).owner is None


def test_records_larger_than_the_topic_takes_are_refused(log: CoordinationLog) -> None:
    assert 100_000 < log.max_value_bytes < 1_048_576
    log.append(0, b"x" * log.max_value_bytes)
    with pytest.raises(RecordTooLargeError):
        log.append(0, b"x" * 1_048_577)
    assert log.end_position(0) == 1


def test_the_index_reads_back_what_was_appended(log: CoordinationLog) -> None:
    before = [key for _, key, _ in log.read_index()]
    log.append_index(b"history/g/t/w1", b"History/2/x")
    log.append_index(b"checkpoint/g/t", b"CheckpointAt/2/y")
    records = log.read_index()
    assert [key for _, key, _ in records][len(before):] == [b"history/g/t/w1",
                                                            b"checkpoint/g/t"]
    offsets = [offset for offset, _, _ in records]
    assert offsets == sorted(offsets)
    assert records[-1][2] == b"CheckpointAt/2/y"


def test_a_topic_created_by_its_log_is_declared(
        log: CoordinationLog, request: pytest.FixtureRequest) -> None:
    """A coordination topic made by this version holds no record written without its
    History record (PROTOCOL.md section 6); an opener of an existing topic declares
    nothing."""
    if isinstance(log, MemoryLog):
        log = MemoryLog(partitions=PARTITIONS, declared=True)
    view = index_view(log.read_index(), log.topic, log.index_topic_id)
    assert view.declared
    assert index_view(log.read_index(), log.topic, "another-id").declared is \
        (log.index_topic_id == "")
    if isinstance(log, KafkaLog):
        assert log.index_topic_id  # Kafka 4 topics have ids
        again = KafkaLog(KafkaLogConfig(bootstrap_servers=log.config.bootstrap_servers,
                                        topic=log.topic, create_topic=True))
        try:
            assert not again.created_topic
            declared = [key for _, key, _ in again.read_index()
                        if key is not None and key.startswith(b"declared/")]
            assert len(declared) == 1
        finally:
            again.close()
    assert not index_view(MemoryLog().read_index(), "__marshal", "").declared
