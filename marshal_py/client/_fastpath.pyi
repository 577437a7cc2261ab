"""Types of the C extension marshal_py.client._fastpath (see _fastpath.c)."""

from typing import Any

class ConfluentRecord:
    topic: str
    partition: int
    offset: int
    message: Any
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp: int | None
    timestamp_type: int | None
    serialized_key_size: int
    serialized_value_size: int
    def __new__(cls, topic: str, partition: int, offset: int, message: Any
                ) -> ConfluentRecord: ...

def split(messages: list[Any], one_topic: bool
          ) -> list[tuple[str, int, list[ConfluentRecord]]] | None: ...

def share_batch(records: list[Any], waiting: dict[int, int], owed: dict[int, Any],
                expiries: dict[int, int], shift: float, drops: int, append: Any,
                share_type: type) -> list[tuple[Any, int]]: ...

class CursorCore:
    expect: int
    end: int
    position: int
    committed: int
    _done: set[int]
    revoked: bool
    def commit(self, offset: int) -> None: ...
    def _commit_slow(self, offset: int) -> None: ...

class Committer:
    held: dict[Any, Any]
    def __init__(self, slow: Any) -> None: ...
    def __call__(self, record: Any) -> bool: ...

def decode_records(buffer: Any, pos: int, index: int, count: int, base_offset: int,
                   first_timestamp: int, log_append_time: bool, max_timestamp: int,
                   start: int, limit: int,
                   prefix: tuple[str, int, int], record_type: type
                   ) -> tuple[list[Any], int, int]: ...
