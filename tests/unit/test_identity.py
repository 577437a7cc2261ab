"""Instance ids: 8 hex chars, fresh for every process."""

from __future__ import annotations

from marshal_py.identity import INSTANCE_ID_PATTERN, new_instance_id


def test_instance_ids_are_8_hex_chars_and_fresh() -> None:
    ids = {new_instance_id() for _ in range(1000)}
    assert all(INSTANCE_ID_PATTERN.fullmatch(i) for i in ids)
    assert len(ids) > 990
