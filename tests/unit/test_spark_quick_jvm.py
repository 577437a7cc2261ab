"""Where the test drivers' class archive gets Spark's jars from (tests/spark/quick_jvm.py): a
home outside the checkout that every checkout's jars link to. A real JVM mapping the archive
from another checkout is tested in tests/spark/test_quick_jvm.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.spark import quick_jvm


def _spark(root: Path, sizes: dict[str, int]) -> Path:
    """A pyspark directory as pip leaves it: jars (and a directory of jars not on the class
    path) and bin."""
    home = root / "venv" / "pyspark"
    (home / "jars" / "connect-repl").mkdir(parents=True)
    for name, size in sizes.items():
        (home / "jars" / name).write_bytes(name[0].encode() * size)
    (home / "jars" / "connect-repl" / "repl.jar").write_bytes(b"r")
    (home / "bin").mkdir()
    (home / "bin" / "spark-class").write_text("#!/bin/sh\n")
    return home


SIZES = {"spark-core.jar": 30, "scala-library.jar": 20}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache = tmp_path / "cache"
    monkeypatch.setattr(quick_jvm, "default_cache_dir", lambda: cache)
    return cache


def test_two_checkouts_of_one_pyspark_share_one_home_of_its_jars(
        tmp_path: Path, cache: Path) -> None:
    first = _spark(tmp_path / "a", SIZES)
    second = _spark(tmp_path / "b", SIZES)
    shared = quick_jvm.shared_home(first)
    assert shared == quick_jvm.shared_home(second)
    assert shared.parent == cache / "spark"
    assert not quick_jvm._shares_jars(first, shared)
    left = shared.parent / f".{shared.name}.999999"  # a process killed while making it
    (left / "jars").mkdir(parents=True)

    quick_jvm._link_shared_home(first)
    quick_jvm._link_shared_home(second)

    assert sorted(p.name for p in (shared / "jars").iterdir()) == sorted(SIZES)
    assert (shared / "bin" / "spark-class").is_file()
    for home in (first, second):
        assert quick_jvm._shares_jars(home, shared)
        for name in SIZES:
            assert (home / "jars" / name).samefile(shared / "jars" / name)
            assert (home / "jars" / name).read_bytes() == name[0].encode() * SIZES[name]
        assert (home / "jars" / "connect-repl" / "repl.jar").is_file()
    assert not [p for p in (first / "jars").iterdir() if p.name.startswith(".")]
    assert not left.exists()


def test_the_archive_is_named_after_the_shared_home_once_a_checkout_links_to_it(
        tmp_path: Path, cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("")
    first = _spark(tmp_path / "a", SIZES)
    second = _spark(tmp_path / "b", SIZES)
    homes = {"now": first}
    monkeypatch.setattr(quick_jvm, "_java_and_home", lambda: (java, homes["now"]))
    own = quick_jvm.archive_path()
    quick_jvm._link_shared_home(first)
    shared = quick_jvm.archive_path()
    assert shared != own  # the class path's paths changed: the shared home's
    homes["now"] = second
    assert quick_jvm.archive_path() != shared  # not linked yet: its own paths
    quick_jvm._link_shared_home(second)
    assert quick_jvm.archive_path() == shared


def test_another_pyspark_gets_another_home_and_the_old_one_goes(
        tmp_path: Path, cache: Path) -> None:
    old = _spark(tmp_path / "a", SIZES)
    new = _spark(tmp_path / "b", {**SIZES, "spark-core.jar": 31})
    quick_jvm._link_shared_home(old)
    old_home = quick_jvm.shared_home(old)
    quick_jvm._link_shared_home(new)
    assert quick_jvm.shared_home(new) != old_home
    assert not old_home.exists()
    assert (old / "jars" / "spark-core.jar").read_bytes() == b"s" * 30  # still there
    assert quick_jvm._shares_jars(new, quick_jvm.shared_home(new))
