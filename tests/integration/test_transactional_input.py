"""Input written by transactional producers, and compacted input, on a real broker.

Every mode (ALO and AMO with either fetcher, share, key-shared, exactly-once): under the default
``read_committed`` only records of committed transactions are handed out, and
``read_uncommitted`` hands out aborted ones too; an open transaction holds read_committed back
at the last stable offset until it commits; the committed offset (share mode: the SPSO) ends
past the last transaction marker, so lag is 0; share mode declares markers and aborted records
as gaps (no delivery counted) and accepts exactly the records it handed out; compaction gaps
are passed the same way.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from typing import Any

import pytest

from marshal_py import Marshaler
from marshal_py.protocol.ranges import offsets_in, parse_ranges
from tests.integration.consumer_support import run_marshal, tail_json
from tests.txn_input import (
    COMPACT_FAST,
    create_topic,
    present_offsets,
    read_all,
    transactional_producer,
    write_compacted,
    write_transactions,
)

HI = 1.0
PLAN = [("commit", 5), ("abort", 5), ("commit", 5), ("abort", 5), ("commit", 3)]


def consume(m: Marshaler, topic: str, mode: str, want: int, **settings: Any) -> list[Any]:
    """Read through a consumer of ``mode`` until ``want`` distinct records came (committing
    or acknowledging each), then close it; every record handed out, duplicates included."""
    consumer = m.consumer([topic], mode, offset_reset="earliest",  # type: ignore[call-overload]
                          **settings)
    got: list[Any] = []
    deadline = time.monotonic() + 60
    try:
        records = [None]
        # All records, then one poll that finds nothing (as a running consumer would make):
        # the fetch passes the markers after the last record.
        while len({r.offset for r in got}) < want or records:
            assert time.monotonic() < deadline, f"{len(got)} of {want} records came"
            records = consumer.poll(timeout_s=0.5)
            got += records
            if mode == "alo":
                consumer.commit_batch(records)
    finally:
        consumer.close()
    return got


def lag_json(bootstrap: str, ctopic: str, group: str) -> dict[str, Any]:
    result = run_marshal("lag", "--json", "--heartbeat-interval", str(HI), "--bootstrap-servers",
                         bootstrap, "--coordination-topic", ctopic, "--group", group)
    assert result.returncode == 0, result.stderr
    report: dict[str, Any] = json.loads(result.stdout)
    return report


def acks_of(bootstrap: str, ctopic: str) -> dict[str, set[int]]:
    """Offsets named by the share acknowledgements in the log, per kind."""
    out: dict[str, set[int]] = {}
    for row in tail_json(bootstrap, ctopic, HI):
        fields = str(row.get("record", "")).split("/")
        if fields[0] == "AcknowledgingRecords":
            ranges, kind = fields[-2], fields[-1]
            out.setdefault(kind, set()).update(offsets_in(parse_ranges(ranges)))
    return out


def lag_rows(bootstrap: str, ctopic: str, group: str) -> list[tuple[int, int, int]]:
    """(end offset, committed offset, lag) of each partition, as ``marshal lag`` says."""
    report = lag_json(bootstrap, ctopic, group)
    return [(row["end_offset"], row["committed_offset"], row["lag"])
            for row in report["partitions"]]


@pytest.mark.parametrize(("mode", "fetcher", "isolation"), [
    ("alo", "kafka-python", None),
    ("amo", "kafka-python", None),
    ("alo", "confluent", None),
    ("amo", "confluent", "read_uncommitted"),
    ("alo", "kafka-python", "read_uncommitted"),
    ("share", "kafka-python", None),
    ("share", "kafka-python", "read_uncommitted"),
    ("key-shared", "kafka-python", None),
    ("share", "confluent", None),
    ("share", "confluent", "read_uncommitted"),
    ("key-shared", "confluent", None),
])
def test_transactions_are_read_at_the_isolation_level_and_lag_ends_at_zero(
        kafka_bootstrap: str, unique_name: str, mode: str, fetcher: str,
        isolation: str | None) -> None:
    topic, ctopic, group = unique_name, f"__marshal-{unique_name}", f"{unique_name}.g"
    create_topic(kafka_bootstrap, topic)
    written = write_transactions(kafka_bootstrap, topic, PLAN)
    expected = written.every if isolation == "read_uncommitted" else written.committed
    settings = {} if isolation is None else {"isolation_level": isolation}
    with Marshaler(kafka_bootstrap, group, "w1", heartbeat_interval=HI,
                   coordination_topic=ctopic, fetcher=fetcher) as m:  # type: ignore[arg-type]
        got = consume(m, topic, mode, len(expected), **settings)
    assert sorted({r.value for r in got}) == sorted(expected)
    if mode != "alo":  # nothing twice (ALO may repeat, but has no reason to here)
        assert max(Counter(r.offset for r in got).values()) == 1
    assert lag_rows(kafka_bootstrap, ctopic, group) == [(written.end, written.end, 0)]
    if mode == "share":
        acks = acks_of(kafka_bootstrap, ctopic)
        delivered = {r.offset for r in got}
        assert acks.get("accept", set()) == delivered
        assert acks.get("gap", set()) == set(range(written.end)) - delivered
        assert {r.delivery_count for r in got} == {1}


@pytest.mark.parametrize("mode", ["alo", "share", "key-shared"])
def test_an_open_transaction_holds_read_committed_back_until_it_commits(
        kafka_bootstrap: str, unique_name: str, mode: str) -> None:
    topic, ctopic, group = unique_name, f"__marshal-{unique_name}", f"{unique_name}.g"
    create_topic(kafka_bootstrap, topic)
    first = write_transactions(kafka_bootstrap, topic, [("commit", 4)])
    producer = transactional_producer(kafka_bootstrap, f"open-{topic}")
    try:
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, f"open-{i}".encode(), partition=0)
        producer.flush()  # in the log, above the last stable offset
        with Marshaler(kafka_bootstrap, group, "w1", heartbeat_interval=HI,
                       coordination_topic=ctopic) as m:
            consumer = m.consumer([topic], mode, offset_reset="earliest")  # type: ignore[call-overload]
            try:
                got: list[Any] = []
                deadline = time.monotonic() + 60
                while len(got) < 4:
                    assert time.monotonic() < deadline
                    records = consumer.poll(timeout_s=0.5)
                    got += records
                    if mode == "alo":
                        consumer.commit_batch(records)
                # Nothing of the open transaction comes while it is open.
                for _ in range(3):
                    records = consumer.poll(timeout_s=0.3)
                    assert records == []
                producer.commit_transaction()
                while len(got) < 7 or records:
                    assert time.monotonic() < deadline
                    records = consumer.poll(timeout_s=0.5)
                    got += records
                    if mode == "alo":
                        consumer.commit_batch(records)
            finally:
                consumer.close()
    finally:
        producer.close()
    assert [r.value for r in got] == first.committed + [f"open-{i}".encode() for i in range(3)]
    assert lag_rows(kafka_bootstrap, ctopic, group) == [(9, 9, 0)]


def test_compacted_gaps_are_passed_in_every_mode(kafka_bootstrap: str, unique_name: str
                                                 ) -> None:
    topic, ctopic = unique_name, f"__marshal-{unique_name}"
    create_topic(kafka_bootstrap, topic, configs=COMPACT_FAST)
    latest = write_compacted(kafka_bootstrap, topic, keys=5, rounds=4)
    present = present_offsets(kafka_bootstrap, topic)
    end = present[-1] + 1
    assert len(present) < end  # the cleaner removed offsets: there are gaps
    for mode in ("alo", "amo", "share", "key-shared"):
        group = f"{unique_name}.{mode}"
        with Marshaler(kafka_bootstrap, group, "w1", heartbeat_interval=HI,
                       coordination_topic=ctopic) as m:
            got = consume(m, topic, mode, len(present))
        assert [r.offset for r in sorted(got, key=lambda r: r.offset)] == present, mode
        assert {r.key: r.value for r in sorted(got, key=lambda r: r.offset)} == latest, mode
        assert lag_rows(kafka_bootstrap, ctopic, group) == [(end, end, 0)], mode


@pytest.mark.parametrize(("mode", "isolation"), [("alo", None), ("share", "read_uncommitted")])
def test_marshal_consume_reads_at_its_isolation_level(kafka_bootstrap: str, unique_name: str,
                                                       mode: str, isolation: str | None) -> None:
    topic, ctopic, group = unique_name, f"__marshal-{unique_name}", f"{unique_name}.g"
    create_topic(kafka_bootstrap, topic)
    written = write_transactions(kafka_bootstrap, topic, PLAN)
    expected = written.every if isolation else written.committed
    result = run_marshal("consume", "--bootstrap-servers", kafka_bootstrap,
                         "--coordination-topic", ctopic, "--group", group, "--topic", topic,
                         "--mode", mode, "--offset-reset", "earliest", "--heartbeat-interval",
                         str(HI), "--print", "--max-records", str(len(expected)),
                         *(["--isolation-level", isolation] if isolation else []))
    assert result.returncode == 0, result.stderr
    values = [json.loads(line)["value"] for line in result.stdout.splitlines()]
    assert sorted(values) == sorted(v.decode() for v in expected)


def test_a_bad_isolation_level_is_one_line_and_exit_2(kafka_bootstrap: str) -> None:
    result = run_marshal("consume", "--bootstrap-servers", kafka_bootstrap, "--group", "g",
                         "--topic", "t", "--isolation-level", "committed")
    assert result.returncode == 2
    assert "Invalid value for '--isolation-level': 'committed' is not one of " \
           "'read_committed', 'read_uncommitted'" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("isolation", [None, "read_uncommitted"])
def test_exactly_once_copies_at_the_isolation_level_and_lag_ends_at_zero(
        kafka_bootstrap: str, unique_name: str, isolation: str | None) -> None:
    """``mode="eos"``: the copy holds the records of the isolation level, each once, and the
    offset its last transaction committed lies past the trailing marker."""
    topic, output = unique_name, f"{unique_name}.out"
    ctopic, group = f"__marshal-{unique_name}", f"{unique_name}.g"
    create_topic(kafka_bootstrap, topic)
    create_topic(kafka_bootstrap, output)
    written = write_transactions(kafka_bootstrap, topic, PLAN)
    expected = written.every if isolation == "read_uncommitted" else written.committed
    settings = {} if isolation is None else {"isolation_level": isolation}
    with Marshaler(kafka_bootstrap, group, "w1", heartbeat_interval=HI,
                   coordination_topic=ctopic) as m:
        consumer = m.consumer([topic], "eos", offset_reset="earliest", **settings)
        copied: list[Any] = []
        deadline = time.monotonic() + 60
        while True:
            assert time.monotonic() < deadline, f"{len(copied)} of {len(expected)} copied"
            batch = consumer.poll_batch(0.5)
            if batch is None:
                if len(copied) >= len(expected):
                    break  # one poll found nothing after everything: the fetch passed the end
                continue
            for record in batch:
                batch.send(output, record.value)
            assert batch.commit()
            copied += list(batch)
        consumer.close()
    assert sorted(r.value for r in copied) == sorted(expected)
    assert max(Counter(r.offset for r in copied).values()) == 1
    assert sorted(r.value for r in read_all(kafka_bootstrap, output, 0, "read_committed")) == \
        sorted(expected)
    assert lag_rows(kafka_bootstrap, ctopic, group) == [(written.end, written.end, 0)]
