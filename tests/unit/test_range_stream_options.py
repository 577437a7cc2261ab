"""read_stream's options and the Kafka reader options it builds (pure: no Spark started)."""

from __future__ import annotations

import json

import pytest

from marshal_py.client.batch_member import PlannedRange
from marshal_py.errors import ConfigurationError
from marshal_py.spark.connector import connector_coordinates, connector_version
from marshal_py.spark.range_stream import (
    checked_reader_options,
    kafka_ranges_options,
    stream_options,
)

BASE = {"bootstrap.servers": "127.0.0.1:9092", "group": "g", "topics": "events"}


@pytest.mark.parametrize("mode", ["alo", "amo"])
def test_alo_and_amo_are_accepted(mode: str) -> None:
    assert stream_options({**BASE, "mode": mode}).mode == mode


@pytest.mark.parametrize("mode", ["share", "key-shared"])
def test_share_and_key_shared_are_refused_in_one_line_pointing_at_the_source(mode: str) -> None:
    with pytest.raises(ConfigurationError, match="format") as caught:
        stream_options({**BASE, "mode": mode})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("name", ["fetcher", "fetch.timeout", "maxRecordsPerPartition",
                                  "inflight.limit", "Lock.Duration"])
def test_options_of_python_executors_or_share_mode_are_refused_by_name(name: str) -> None:
    with pytest.raises(ConfigurationError, match="only, not to read_stream"):
        stream_options({**BASE, name: "1"})


def test_bad_values_are_refused_as_by_the_source() -> None:
    with pytest.raises(ConfigurationError, match=r"offset\.reset"):
        stream_options({**BASE, "offset.reset": "middle"})


def test_reader_options_the_stream_sets_itself_are_refused() -> None:
    with pytest.raises(ConfigurationError, match="startingOffsets"):
        checked_reader_options({"startingOffsets": "earliest"})
    assert checked_reader_options({"kafka.security.protocol": "SSL"}) == {
        "kafka.security.protocol": "SSL"}


def test_ranges_become_assign_and_exact_starting_and_ending_offsets() -> None:
    options = kafka_ranges_options([PlannedRange("a", 0, 10, 20), PlannedRange("a", 3, 0, 5),
                                    PlannedRange("b", 1, 7, 8)])
    assert json.loads(options["assign"]) == {"a": [0, 3], "b": [1]}
    assert json.loads(options["startingOffsets"]) == {"a": {"0": 10, "3": 0}, "b": {"1": 7}}
    assert json.loads(options["endingOffsets"]) == {"a": {"0": 20, "3": 5}, "b": {"1": 8}}


def test_connector_version_follows_pyspark_with_pinned_exceptions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MARSHAL_SPARK_KAFKA_VERSION", raising=False)
    assert connector_version("4.3.0") == "4.2.0"
    assert connector_version("4.2.1") == "4.2.0"
    assert connector_version("5.0.0") == "5.0.0"
    monkeypatch.setenv("MARSHAL_SPARK_KAFKA_VERSION", "4.1.0")
    assert connector_version("4.3.0") == "4.1.0"
    assert connector_coordinates("4.2.0") == "org.apache.spark:spark-sql-kafka-0-10_2.13:4.2.0"
