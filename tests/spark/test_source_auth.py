"""Authenticated groups in the ``marshal`` Spark source (option ``auth.keys``) on the real
broker and real (local[2]) Spark: the query signs every record it writes and verifies the
group's records as members do; in share mode its workers declare the offsets that held no
record as gaps, signed with the driver's holder key (PROTOCOL.md 7.1 and 12.1), so no
delivery is counted for a transaction marker or an aborted record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from marshal_py import Marshaler
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.ranges import offsets_in, parse_ranges
from tests.integration.consumer_support import HI, Cluster, run_marshal, tail_json
from tests.integration.test_auth import key_file
from tests.integration.test_transactional_input import PLAN
from tests.spark.test_source_integration import Query, all_rows, marshal_spark, offsets_of
from tests.spark.test_transactional_input import offsets, world_of
from tests.txn_input import write_transactions

pytestmark = pytest.mark.integration

__all__ = ["marshal_spark"]  # a fixture, imported to be used here

KEY = GroupKey("2026-11", b"spark-source-test-secret-0123456")


def group_records(world: Any) -> list[str]:
    """The text of every coordination record about the world's group."""
    return [str(row["record"]) for row in tail_json(world.bootstrap, world.ctopic)
            if f"/{world.group}/" in str(row["record"])]


def rejected_line(world: Any, keys: Path, *extra: str) -> str:
    """``marshal state``'s count of the group's rejected records, verified with ``keys``."""
    result = run_marshal("state", "--bootstrap-servers", world.bootstrap, "--coordination-topic",
                         world.ctopic, "--heartbeat-interval", str(HI), "--group", world.group,
                         "--auth-keys", str(keys), *extra)
    assert result.returncode == 0, result.stderr
    return next(line for line in result.stderr.splitlines() if line.startswith("rejected"))


def signed_acks(records: list[str]) -> list[tuple[int, str, set[int]]]:
    """(sequence number, kind, offsets) of each signed share acknowledgement."""
    out = []
    for record in records:
        _, _, _, seq, _, *body = record.split("/")
        if body[0] == "AcknowledgingRecords":
            out.append((int(seq), body[-1], set(offsets_in(parse_ranges(body[-2])))))
    return out


def test_signed_share_query_signs_every_record_and_its_workers_declare_the_gaps(
        marshal_spark: SparkSession, kafka_bootstrap: str, unique_name: str,
        tmp_path: Path) -> None:
    world = world_of(kafka_bootstrap, unique_name)
    written = write_transactions(kafka_bootstrap, world.topic, PLAN)
    keys = key_file(tmp_path / "keys", world.group, (KEY,))
    Query(marshal_spark, world, tmp_path, 1, mode="share",  # type: ignore[arg-type]
          options={"auth.keys": str(keys)}).wait()
    rows = all_rows(tmp_path / "out")
    assert sorted(o for _, o, _ in rows) == offsets(kafka_bootstrap, world.topic,
                                                    "read_committed")
    records = group_records(world)
    assert records and all(r.startswith(f"Signed/3/{KEY.key_id}/") for r in records)
    # The workers declared the markers and aborted records gaps (numbered 0, signed with the
    # driver's holder key); the driver accepted the records it delivered (numbered by its
    # counter). Every record the log holds was accepted: none was rejected.
    delivered = set(offsets(kafka_bootstrap, world.topic, "read_committed"))
    acks = signed_acks(records)
    assert {kind for _, kind, _ in acks} == {"accept", "gap"}
    assert all((seq == 0) == (kind == "gap") for seq, kind, _ in acks)
    assert set().union(*(o for _, kind, o in acks if kind == "accept")) == delivered
    assert set().union(*(o for _, kind, o in acks if kind == "gap")) == \
        set(range(written.end)) - delivered
    assert rejected_line(world, keys).endswith(f"group {world.group}: 0")
    result = run_marshal("state", "--shares", "--json", "--bootstrap-servers", world.bootstrap,
                         "--coordination-topic", world.ctopic, "--group", world.group,
                         "--heartbeat-interval", str(HI), "--auth-keys", str(keys))
    assert result.returncode == 0, result.stderr
    assert [row["spso"] for row in json.loads(result.stdout)] == [written.end]


def test_a_signed_group_is_refused_without_auth_keys_and_read_with_them(
        marshal_spark: SparkSession, kafka_bootstrap: str, unique_name: str,
        tmp_path: Path) -> None:
    world = Cluster(kafka_bootstrap, unique_name, tmp_path, partitions=2)
    try:
        produced = world.producer.send(400)
        # A Python member of the signed group consumes some, commits and leaves.
        with Marshaler(world.bootstrap, world.group, client_id="python-member",
                       heartbeat_interval=HI, coordination_topic=world.ctopic,
                       auth_keys=(KEY,)) as m:
            consumer = m.consumer([world.topic], offset_reset="earliest")
            by_python = []
            for record in consumer:
                by_python.append((record.partition, record.offset))
                consumer.commit(record)
                if len(by_python) == 100:
                    break
        (tmp_path / "unsigned").mkdir()
        unsigned = Query(marshal_spark, world, tmp_path / "unsigned", 1)
        with pytest.raises(StreamingQueryException,
                           match=r"is authenticated .* option auth\.keys"):
            unsigned.query.awaitTermination(timeout=180)
        keys = key_file(tmp_path / "keys", world.group, (KEY,))
        Query(marshal_spark, world, tmp_path, 2, options={"auth.keys": str(keys)}).wait()
        by_spark = offsets_of(all_rows(tmp_path / "out", 2))
        assert sorted(by_spark + by_python) == sorted(produced), "every record once"
        assert all(r.startswith("Signed/3/") for r in group_records(world))
        assert rejected_line(world, keys).endswith(f"group {world.group}: 0")
        state = run_marshal("state", "--json", "--bootstrap-servers", world.bootstrap,
                            "--coordination-topic", world.ctopic, "--group", world.group,
                            "--heartbeat-interval", str(HI), "--auth-keys", str(keys))
        assert state.returncode == 0, state.stderr
        committed = {r["partition"]: r["committed_offset"] for r in json.loads(state.stdout)}
        assert committed == world.producer.ends()
    finally:
        world.close()


def test_a_key_file_without_the_group_fails_the_query_at_load(
        marshal_spark: SparkSession, tmp_path: Path) -> None:
    keys = key_file(tmp_path / "keys", "another.group", (KEY,))
    with pytest.raises(Exception, match=r"option 'auth.keys': the key file .* lists no key "
                                        r"for group 'g'"):
        (marshal_spark.readStream.format("marshal").option("bootstrap.servers", "x:1")
         .option("group", "g").option("topics", "t").option("auth.keys", str(keys)).load())
