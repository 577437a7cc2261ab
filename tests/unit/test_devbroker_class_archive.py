"""The broker JVM's class-data sharing archive (marshal_py/devbroker/class_archive.py): where
it goes, when a broker dumps one, and which dumps are published. The JVM's side (a broker
writing the dump at exit, the next one mapping it) is tested on real brokers in
tests/integration/test_devbroker.py."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from marshal_py.devbroker.class_archive import (
    ABANDONED_AFTER_S,
    PREFIX,
    ClassArchive,
    archive_path,
)


@pytest.fixture
def lib(tmp_path: Path) -> Path:
    lib = tmp_path / "kafka-9.9.9" / "lib"
    lib.mkdir(parents=True)
    for name in ("kafka_2.13-9.9.9.jar", "kafka-clients-9.9.9.jar"):
        (lib / name).write_bytes(b"jar")
    return lib


def _dumped(options: list[str]) -> Path:
    (option,) = options
    assert option.startswith("-XX:ArchiveClassesAtExit=")
    return Path(option.split("=", 1)[1])


def test_the_archive_sits_beside_the_jars_and_is_named_after_java_and_the_jars(
        lib: Path) -> None:
    java = "/usr/bin/java"
    path = archive_path(java, lib)
    assert path.parent == lib.parent
    assert path.name.startswith(PREFIX) and path.suffix == ".jsa"
    assert archive_path(java, lib) == path  # the same Java and jars: the same archive
    (lib / "kafka-clients-9.9.9.jar").write_bytes(b"another jar")
    assert archive_path(java, lib) != path  # the JVM would refuse the old one


def test_without_an_archive_the_broker_dumps_one_and_a_finished_dump_is_published(
        lib: Path) -> None:
    archive = ClassArchive(archive_path("/usr/bin/java", lib))
    assert archive.options() == []  # nothing to map yet, and the format JVM makes none
    dump = _dumped(archive.launch_options())
    assert dump.parent == lib.parent and not dump.exists()
    dump.write_bytes(b"classes")  # what the JVM writes as it exits
    archive.exited(finished=True)
    assert archive.path.read_bytes() == b"classes" and not dump.exists()
    assert archive.options() == [f"-XX:SharedArchiveFile={archive.path}"]
    assert archive.launch_options() == archive.options()  # mapped now, not dumped again


def test_a_dump_of_a_broker_that_did_not_finish_is_dropped(lib: Path) -> None:
    archive = ClassArchive(archive_path("/usr/bin/java", lib))
    dump = _dumped(archive.launch_options())
    dump.write_bytes(b"half of the classes")  # killed while writing it
    archive.exited(finished=False)
    assert not dump.exists() and not archive.path.exists()
    empty = _dumped(archive.launch_options())
    empty.write_bytes(b"")
    archive.exited(finished=True)
    assert not empty.exists() and not archive.path.exists()


def test_a_relaunch_drops_the_last_launch_s_unpublished_dump(lib: Path) -> None:
    archive = ClassArchive(archive_path("/usr/bin/java", lib))
    first = _dumped(archive.launch_options())
    first.write_bytes(b"classes")
    second = _dumped(archive.launch_options())
    assert second != first and not first.exists()


def test_publishing_removes_the_archives_of_other_javas_or_jars(lib: Path) -> None:
    stale = lib.parent / f"{PREFIX}0123456789abcdef.jsa"
    stale.write_bytes(b"old")
    archive = ClassArchive(archive_path("/usr/bin/java", lib))
    _dumped(archive.launch_options()).write_bytes(b"classes")
    archive.exited(finished=True)
    assert not stale.exists() and archive.path.is_file()


def test_dumps_abandoned_an_hour_ago_are_removed_at_the_next_launch(lib: Path) -> None:
    old = lib.parent / f".{PREFIX}0123456789abcdef-1-0.tmp"
    young = lib.parent / f".{PREFIX}0123456789abcdef-2-0.tmp"
    for dump in (old, young):
        dump.write_bytes(b"classes")
    past = time.time() - ABANDONED_AFTER_S - 60
    os.utime(old, (past, past))
    ClassArchive(archive_path("/usr/bin/java", lib)).launch_options()
    assert not old.exists() and young.exists()  # another broker may still be exiting


def test_a_cache_it_cannot_write_loses_the_dump_only(lib: Path) -> None:
    archive = ClassArchive(lib.parent / "no-such-dir" / f"{PREFIX}x.jsa")
    dump = _dumped(archive.launch_options())
    assert not dump.parent.exists()
    archive.exited(finished=True)  # the JVM could not write it either: nothing to publish
    assert not archive.path.exists()
