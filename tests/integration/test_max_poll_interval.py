"""The bound on processing time (max_poll_interval) of every consumer, on a real broker: a
member whose application stops asking for records gives its partitions up (others take them
at once), its late commit is refused with CommitFailedError, and its next poll joins the
group again. At-least-once loses nothing; at-most-once delivers nothing twice; share and
key-shared members give their records and key slots back; an exactly-once member's late
batch commits nothing (its commit returns False) and each record's output is seen once."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from marshal_py import CommitFailedError, ExactlyOnceConsumer, Marshaler
from marshal_py.client.consumer import Consumer
from tests.integration.consumer_support import create_topic
from tests.integration.test_cli_admin import make_topic, wait_for
from tests.integration.test_exactly_once import read_topic

pytestmark = pytest.mark.integration

HI = 1.0
PARTITIONS, PER_PARTITION = 2, 50


def first_records(consumer: Any) -> list[Any]:
    """The first records a consumer hands out (then its handler "hangs": no more polls)."""
    got: list[Any] = []
    deadline = time.monotonic() + 30
    while not got:
        assert time.monotonic() < deadline, "no records came"
        got = consumer.poll(timeout_s=0.5, max_records=5)
    return got


def held(consumer: Consumer) -> set[int]:
    consumer.poll(timeout_s=0.05, max_records=0)
    return {tp.partition for tp in consumer.assignment()}


@pytest.mark.serial
@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_a_hung_handler_gives_its_partitions_up_and_joins_again_when_it_polls(
        kafka_bootstrap: str, unique_name: str, mode: str) -> None:
    topic, ctopic = unique_name, f"__marshal-{unique_name}"
    make_topic(kafka_bootstrap, topic, PARTITIONS, PER_PARTITION)
    common: dict[str, Any] = dict(heartbeat_interval=HI, coordination_topic=ctopic)
    settings: dict[str, Any] = dict(offset_reset="earliest", max_poll_interval=2.0)
    with Marshaler(kafka_bootstrap, f"{topic}.g", "w1", **common) as m1, \
            Marshaler(kafka_bootstrap, f"{topic}.g", "w2", **common) as m2:
        c1 = m1.consumer([topic], mode, **settings)
        assert isinstance(c1, Consumer)
        wait_for(lambda: held(c1) == {0, 1}, "w1 to hold both partitions")
        first = first_records(c1)
        deadline = time.monotonic() + 30
        # w1's handler now hangs: it asks for nothing more. w2 joins and, once w1 has been
        # silent for max_poll_interval, gets both partitions from the committed offsets.
        c2 = m2.consumer([topic], mode, **settings)
        assert isinstance(c2, Consumer)
        got: list[Any] = []
        total = PARTITIONS * PER_PARTITION
        expected = total if mode == "alo" else total - len(first)
        while len({(r.partition, r.offset) for r in got}) < expected:
            assert time.monotonic() < deadline + 30, f"w2 got {len(got)} of {expected}"
            records = c2.poll(timeout_s=0.5)
            got += records
            c2.commit_batch(records)
        assert held(c2) == {0, 1}
        with pytest.raises(CommitFailedError, match="max_poll_interval"):
            c1.commit(first[0])
        with pytest.raises(CommitFailedError):
            c1.commit_batch(first)
        # The late handler asks again: it joins, and fair balance gives it a partition. Both
        # poll every round: w2 left unpolled would give its partitions up in turn.
        def one_each() -> bool:
            holdings = held(c1), held(c2)
            return all(len(h) == 1 for h in holdings)

        wait_for(one_each, "one partition each")
        c1.commit_batch([])  # committing works again
        c1.close()
        c2.close()
    if mode == "amo":  # nothing twice: what w1 handed out counts as done
        counts = Counter((r.partition, r.offset) for r in [*first, *got])
        assert len(counts) == total and max(counts.values()) == 1
    else:
        assert {(r.partition, r.offset) for r in got} == {
            (p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)}


def test_a_hung_share_member_releases_its_records_with_their_delivery_counts(
        kafka_bootstrap: str, unique_name: str) -> None:
    topic, ctopic = unique_name, f"__marshal-{unique_name}"
    make_topic(kafka_bootstrap, topic, 1, 20)
    common: dict[str, Any] = dict(heartbeat_interval=HI, coordination_topic=ctopic)
    # Locks of 60 s, renewed while the member lives: without the bound, w2 would wait.
    settings: dict[str, Any] = dict(offset_reset="earliest", max_poll_interval=2.0,
                                    lock_duration=60.0, acknowledgement="explicit",
                                    batch_size=20)
    with Marshaler(kafka_bootstrap, f"{topic}.g", "w1", **common) as m1, \
            Marshaler(kafka_bootstrap, f"{topic}.g", "w2", **common) as m2:
        c1 = m1.consumer([topic], "share", **settings)
        first = first_records(c1)
        deadline = time.monotonic() + 30
        # w1's handler hangs on these records; w2 gets every record within seconds.
        c2 = m2.consumer([topic], "share", **settings)
        got: dict[int, int] = {}
        while len(got) < 20:
            assert time.monotonic() < deadline + 30, f"w2 got {sorted(got)}"
            for record in c2.poll(timeout_s=0.5):
                got[record.offset] = record.delivery_count
                c2.ack(record, "accept")
        assert {got[r.offset] for r in first} == {2}  # w1's attempt counted
        with pytest.raises(CommitFailedError, match="max_poll_interval"):
            c1.ack(first[0], "accept")
        assert c1.poll(timeout_s=0.2) == []  # joins again; nothing left to get
        c1.close()
        c2.close()


def test_a_hung_key_shared_member_releases_its_slots(kafka_bootstrap: str,
                                                     unique_name: str) -> None:
    topic, ctopic = unique_name, f"__marshal-{unique_name}"
    make_topic(kafka_bootstrap, topic, 1, 40)
    common: dict[str, Any] = dict(heartbeat_interval=HI, coordination_topic=ctopic)
    settings: dict[str, Any] = dict(offset_reset="earliest", max_poll_interval=2.0,
                                    commit_mode="explicit")
    with Marshaler(kafka_bootstrap, f"{topic}.g", "w1", **common) as m1, \
            Marshaler(kafka_bootstrap, f"{topic}.g", "w2", **common) as m2:
        c1 = m1.consumer([topic], "key-shared", **settings)
        first = first_records(c1)
        deadline = time.monotonic() + 30
        c2 = m2.consumer([topic], "key-shared", **settings)
        got: set[int] = set()
        while len(got) < 40:
            assert time.monotonic() < deadline + 30, f"w2 got {len(got)} of 40"
            for record in c2.poll(timeout_s=0.5):
                got.add(record.offset)
                c2.commit(record)
        assert {r.offset for r in first} <= got  # uncommitted: delivered again by w2
        with pytest.raises(CommitFailedError, match="max_poll_interval"):
            c1.commit(first[0])
        c1.poll(timeout_s=0.2)  # joins again
        c1.close()
        c2.close()


def test_a_hung_exactly_once_member_gives_its_partitions_up_and_its_late_batch_commits_nothing(
        kafka_bootstrap: str, unique_name: str) -> None:
    topic, ctopic, output = unique_name, f"__marshal-{unique_name}", f"{unique_name}-out"
    make_topic(kafka_bootstrap, topic, PARTITIONS, PER_PARTITION)
    create_topic(kafka_bootstrap, output, 1)
    common: dict[str, Any] = dict(heartbeat_interval=HI, coordination_topic=ctopic)
    settings: dict[str, Any] = dict(offset_reset="earliest", max_poll_interval=2.0)

    def copy(batch: Any) -> None:
        for record in batch:
            batch.send(output, record.value,
                       headers=[("src", f"{record.partition}/{record.offset}".encode())])

    with Marshaler(kafka_bootstrap, f"{topic}.g", "w1", **common) as m1, \
            Marshaler(kafka_bootstrap, f"{topic}.g", "w2", **common) as m2:
        c1 = m1.consumer([topic], "eos", **settings)
        assert isinstance(c1, ExactlyOnceConsumer)
        wait_for(lambda: len(c1.assignment()) == PARTITIONS, "w1 to hold both partitions")
        deadline = time.monotonic() + 30
        first = None
        while first is None:
            assert time.monotonic() < deadline, "no batch came"
            first = c1.poll_batch(timeout_s=0.5, max_records=5)
        copy(first)  # its output is in the open transaction when the handler "hangs"
        # w1 asks for nothing more; w2 gets both partitions from the committed offsets once
        # w1 has been silent for max_poll_interval, and copies every record. (w2's own bound
        # is generous: a transaction's commit on a loaded machine may take a while.)
        c2 = m2.consumer([topic], "eos", **{**settings, "max_poll_interval": 30.0})
        committed = 0
        total = PARTITIONS * PER_PARTITION
        while committed < total:
            assert time.monotonic() < deadline + 30, f"w2 committed {committed} of {total}"
            batch = c2.poll_batch(timeout_s=0.5)
            if batch is None:
                continue
            copy(batch)
            if batch.commit():
                committed += len(batch)
        assert first.commit() is False  # the late batch: aborted, nothing of it visible
        assert first.state == "aborted"

        # The late handler asks again: it joins, and fair balance gives it a partition.
        def one_each() -> bool:
            for consumer in (c1, c2):
                batch = consumer.poll_batch(timeout_s=0.05)
                assert batch is None, f"{batch!r} after every record was committed"
            return len(c1.assignment()) == 1 and len(c2.assignment()) == 1

        wait_for(one_each, "one partition each")
        c1.close()
        c2.close()
    copied = Counter(dict(r.headers)["src"].decode() for r in read_topic(
        kafka_bootstrap, output, 1))
    assert copied == Counter(f"{p}/{o}" for p in range(PARTITIONS)
                             for o in range(PER_PARTITION))
