"""Journals: append-only files of JSON lines, one per process and run.

Every event is one ``os.write`` of one line on a file opened with ``O_APPEND``, so it is in
the operating system's hands when :meth:`Journal.write` returns: a ``kill -9`` of the writer
cannot lose it (only a crash of the machine could, unless ``fsync=True``). A worker writes the
event of a record *before* it commits or acknowledges the record to marshal_py, so the journal
never misses a record the coordination log counts as processed.

Event kinds (key ``e``), with their other keys:

worker journals (``worker-<client>-<n>.jsonl``, one per process incarnation):
  * ``start``: ``client``, ``instance``, ``pid``, ``inc`` (the incarnation's name), ``mode``,
    ``t``: the consumer is open.
  * ``d`` (delivered): ``p``, ``o``, ``k`` (the key as text), ``c`` (delivery count, 1 outside
    share mode), ``t0``, ``t1``: the consumer handed the record out at some moment between
    ``t0`` and ``t1`` (wall clock, seconds).
  * ``x`` (processed): ``p``, ``o``, ``t``: written before the record is committed or acked.
  * ``ack_refused``: ``p``, ``o``, ``c``: a share acknowledgement returned False.
  * ``error``: ``msg``, ``tb`` (the traceback): the consumer raised; the process exits.
  * ``closing`` / ``closed``: ``t``: the consumer stopped iterating / closed gracefully.

producer journal (``producer.jsonl``):
  * ``p``: ``s`` (sequence number), ``p``, ``o``, ``k``: the broker acknowledged the record.
  * ``f``: ``s``, ``err``: a send failed (it is sent again).

faults journal (``faults.jsonl``, written by the runner): ``spawn``, ``ready``, ``kill``,
``stop``, ``cont``, ``broker_kill``, ``broker_up``, ``exit`` (a worker exited by itself),
each with ``t`` and, for a worker, ``inc``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Event = dict[str, Any]


class Journal:
    """An append-only journal file; every :meth:`write` reaches the OS before it returns."""

    def __init__(self, path: Path, fsync: bool = False) -> None:
        self.path = path
        self.fsync = fsync
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: str, **fields: Any) -> None:
        """Append one event (``e`` = ``event``) as one line, in one system call."""
        line = json.dumps({"e": event, **fields}, separators=(",", ":")) + "\n"
        data = line.encode()
        written = os.write(self._fd, data)
        while written < len(data):  # a regular file takes it all; be safe anyway
            written += os.write(self._fd, data[written:])
        if self.fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def now() -> float:
    """The wall clock in seconds: the clock the broker stamps records with (LogAppendTime)."""
    return time.time()


def parse_lines(data: bytes) -> Iterator[Event]:
    """The events of complete lines; a torn last line (the writer was killed mid-write, which
    one ``write`` of a few dozen bytes makes unlikely) is ignored."""
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            event = json.loads(raw)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


def read_journal(path: Path) -> list[Event]:
    """Every event of a journal file, in the order written."""
    return list(parse_lines(path.read_bytes()))


class JournalTail:
    """Reads a growing journal incrementally: :meth:`poll` returns the events appended since
    the previous call (complete lines only)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def poll(self) -> list[Event]:
        """Events written since the last call."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        data = self._partial + data
        cut = data.rfind(b"\n") + 1
        self._partial = data[cut:]
        return list(parse_lines(data[:cut]))


def write_jsonl(path: Path, rows: list[Event]) -> None:
    """Write ``rows`` as JSON lines (a dump, not a journal)."""
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, separators=(",", ":")) + "\n")
