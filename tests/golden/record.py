"""A record of what the frozen reference showed over one golden log, to check against later.

The golden test compares the rationalizer under test with the frozen reference after every
record (:mod:`tests.golden.test_golden_corpus`). The reference never changes, nor do the
logs it reads, so what it shows over a log is the same in every run: about three fifths of
the test's CPU went to computing it again (the frozen rules' queries are the slow, simple
ones). A replay in which the two agree therefore leaves a digest of the rationalizer's side
of every comparison (one BLAKE2 chain over the ``repr`` of each value, in order), in
``<cache>/golden/<key>.digest``; the next replay of the same log computes only the
rationalizer's side and checks that its values chain to the same digest: values written
alike are equal, and these were equal to the reference's. The key is a digest
of everything the reference's values depend on: the frozen code, the views, the comparisons
(this module and the test), the log itself (records, restores, settings) and the Python
version.

The record can only make an agreeing replay quicker, never decide a failure: when the chain
differs (a change in the rationalizer's behaviour, or in how it writes a value that still
compares equal), the replay runs again with the reference live and asserts value by
value, as it always did, naming the first record where they differ. ``MARSHAL_GOLDEN_LIVE=1``
always runs the reference. The cache directory is ``$MARSHAL_CACHE_DIR`` (else
``$XDG_CACHE_HOME/marshal_py``, else ``~/.cache/marshal_py``), as for Kafka's jars.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from marshal_py.devbroker.jars import default_cache_dir

HERE = Path(__file__).resolve().parent
#: The files whose code decides the reference's values and the order they are compared in.
_CODE = (HERE / "views.py", HERE / "record.py", HERE / "test_golden_corpus.py")


@functools.cache
def _code_digest() -> bytes:
    """The digest of the code (read once per process)."""
    h = hashlib.blake2b(digest_size=16)
    frozen = sorted((HERE / "frozen").rglob("*.py"))
    for path in [*frozen, *_CODE]:
        h.update(str(path.relative_to(HERE)).encode())
        h.update(path.read_bytes())
    h.update(repr(sys.version_info[:2]).encode())
    return h.digest()


def log_key(log: Any) -> str:
    """The record's name for ``log`` (a :class:`~tests.golden.corpus.GoldenLog`) as the code
    stands."""
    h = hashlib.blake2b(_code_digest(), digest_size=16)
    h.update(repr(log.settings).encode())
    for record in log.records:
        h.update(repr((record.partition, record.position, record.timestamp_ms,
                       record.value)).encode())
    h.update(repr(log.restores).encode())
    return h.hexdigest()


class Chain:
    """The digest of a sequence of compared values."""

    def __init__(self) -> None:
        self._hash = hashlib.blake2b(digest_size=32)

    def add(self, value: Any) -> None:
        text = repr(value).encode()
        self._hash.update(len(text).to_bytes(8, "little"))
        self._hash.update(text)

    def hexdigest(self) -> str:
        return self._hash.hexdigest()


def live_only() -> bool:
    """Whether the reference runs live in every replay (``MARSHAL_GOLDEN_LIVE=1``)."""
    return os.environ.get("MARSHAL_GOLDEN_LIVE", "0") == "1"


def _path(key: str) -> Path:
    return default_cache_dir() / "golden" / f"{key}.digest"


def recorded(key: str) -> str | None:
    """The digest recorded for ``key``, None when there is none."""
    if live_only():
        return None
    try:
        return _path(key).read_text(encoding="ascii").strip() or None
    except OSError:
        return None


def keep(key: str, digest: str) -> None:
    """Record ``digest`` for ``key`` (atomically; a cache that cannot be written is skipped:
    the next replay runs the reference live again)."""
    path = _path(key)
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".digest-")
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(digest + "\n")
        os.replace(tmp, path)
    except OSError:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
