"""ConfluentFetcher drops the records below the position asked for of a partition assigned or
sought since it last gave records: librdkafka can lose a seek made right after an assign and
fetch from the beginning (seen under load)."""

from __future__ import annotations

from types import SimpleNamespace

from marshal_py.client.confluent_fetcher import ConfluentFetcher


def fetcher_at(position: int | None, *, messages: bool = False) -> ConfluentFetcher:
    fetcher = ConfluentFetcher.__new__(ConfluentFetcher)  # no consumer: only the rule
    fetcher._positions = {("t", 0): position}
    fetcher._messages = messages
    return fetcher


def test_records_from_before_the_sought_position_are_dropped() -> None:
    records = [SimpleNamespace(offset=o) for o in range(25)]
    kept = fetcher_at(20)._from_position("t", 0, records)
    assert [r.offset for r in kept] == [20, 21, 22, 23, 24]


def test_records_from_the_position_on_pass_whole_and_messages_too() -> None:
    records = [SimpleNamespace(offset=o) for o in range(20, 25)]
    assert fetcher_at(20)._from_position("t", 0, records) is records
    messages = [SimpleNamespace(offset=lambda o=o: o) for o in range(18, 22)]
    kept = fetcher_at(20, messages=True)._from_position("t", 0, messages)
    assert [m.offset() for m in kept] == [20, 21]


def test_a_partition_without_a_known_position_keeps_everything() -> None:
    records = [SimpleNamespace(offset=o) for o in range(3)]
    assert fetcher_at(None)._from_position("t", 0, records) is records
