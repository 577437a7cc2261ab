"""The broker JVM's class-data sharing archive: Kafka's classes mapped from one file.

A broker JVM spends most of its start loading, parsing and verifying the classes it needs from
Kafka's jars. The JDK can save the classes an application loaded into a *dynamic archive*
(``-XX:ArchiveClassesAtExit``, JDK 13+) and map them from it on later starts
(``-XX:SharedArchiveFile``). On a quiet 2-core machine (2026-11-28) a dev broker's start,
storage format included, took 1.8 CPU-seconds with the archive against 3.0 without it, and
1.5 s instead of 2.6 s.

One archive serves every broker of one Java and one Kafka jar directory: it lives beside the
jars (``<cache>/kafka-<version>/broker-classes-<digest>.jsa``, the digest naming the Java, its
base archive and the jars). While it does not exist, a broker is launched with
``-XX:ArchiveClassesAtExit`` to a temporary file, which is published (renamed into place) when
that broker exits after :meth:`~marshal_py.devbroker.broker.DevBroker.stop` asked it to; a
dump the broker did not finish (killed, crashed) is dropped. The JVM checks an archive before
mapping it and loads classes from the jars as usual when it may not use one, so the archive
changes how fast a broker starts, never what it does. ``-Xshare:off`` in
``KAFKA_JVM_PERFORMANCE_OPTS`` turns it off.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

PREFIX = "broker-classes-"
"""File names of the archives start with this (the rest is a digest, then ``.jsa``)."""

ABANDONED_AFTER_S = 3600.0
"""A dump this old that is still not published was abandoned (its broker was killed)."""

_dumps = itertools.count()


def archive_path(java: str, lib: Path) -> Path:
    """Where the archive of ``java`` running the jars in ``lib`` goes (it may not exist)."""
    return lib.parent / f"{PREFIX}{classes_digest(Path(java), lib.glob('*.jar'))}.jsa"


def classes_digest(java: Path, jars: Iterable[Path]) -> str:
    """16 hex digits naming a Java and the jars of a class path, as an archive depends on
    them: the JVM refuses an archive made on another base archive (another Java) or with
    other jars on the class path (their paths, sizes and times)."""
    digest = hashlib.sha256()
    binary = java.resolve()
    base = binary.parents[1] / "lib" / "server" / "classes.jsa"
    for path in (binary, base, *sorted(jars)):
        with contextlib.suppress(OSError):
            stat = path.stat()
            digest.update(f"{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:16]


class ClassArchive:
    """The archive one broker uses, or the dump it makes when there is none yet."""

    def __init__(self, path: Path) -> None:
        #: Where the published archive is (or will be).
        self.path = path
        self._dump: Path | None = None

    def options(self) -> list[str]:
        """JVM options that map the archive when it exists (none otherwise): for a program
        that should not make one, such as the storage format."""
        return [f"-XX:SharedArchiveFile={self.path}"] if self.path.is_file() else []

    def launch_options(self) -> list[str]:
        """JVM options for a broker's launch: map the archive, or dump one at exit."""
        self.exited(finished=False)  # an earlier launch's dump, if any, is not whole
        if self.path.is_file():
            return self.options()
        self._remove_abandoned_dumps()
        self._dump = self.path.with_name(
            f".{self.path.stem}-{os.getpid()}-{next(_dumps)}.tmp")
        return [f"-XX:ArchiveClassesAtExit={self._dump}"]

    def exited(self, *, finished: bool) -> None:
        """The launched JVM has exited: publish its dump when ``finished`` (it exited after
        being asked to stop, so the dump is whole), else drop it."""
        dump, self._dump = self._dump, None
        if dump is None:
            return
        try:
            if finished and dump.is_file() and dump.stat().st_size > 0:
                os.replace(dump, self.path)
                log.info("saved the broker's classes to %s (later starts map them)",
                         self.path)
                self._remove_stale()
            else:
                dump.unlink(missing_ok=True)
        except OSError as exc:  # a read-only or full cache: brokers start as before
            log.debug("could not keep the class archive %s: %s", dump, exc)
            with contextlib.suppress(OSError):
                dump.unlink(missing_ok=True)

    def _remove_abandoned_dumps(self) -> None:
        """Remove dumps of brokers killed while writing them (an hour old: a dump is written
        in seconds, while its broker exits)."""
        now = time.time()
        for dump in self.path.parent.glob(f".{PREFIX}*.tmp"):
            with contextlib.suppress(OSError):
                if now - dump.stat().st_mtime > ABANDONED_AFTER_S:
                    dump.unlink()

    def _remove_stale(self) -> None:
        """Remove the archives of other Javas or jars in the same directory."""
        for other in self.path.parent.glob(f"{PREFIX}*.jsa"):
            if other != self.path:
                with contextlib.suppress(OSError):
                    other.unlink()
