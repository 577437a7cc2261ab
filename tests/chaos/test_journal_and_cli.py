"""Journals (append, read back, follow a growing file), run directories, and the chaos command
line's usage errors and ``check`` subcommand -- no broker needed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chaos.journal import Journal, JournalTail, read_journal, write_jsonl
from chaos.rundir import COORDINATION, FAULTS, META, PRODUCER, TOPIC, coordination_row
from chaos.runner import main
from marshal_py.protocol import ClaimingPartition, Heartbeat, coordination_partition, encode
from marshal_py.world import CoordinationRecord

T0 = 1_700_000_000_000


def test_journal_lines_are_in_the_file_when_write_returns(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    journal = Journal(path)
    journal.write("d", p=0, o=1, k="k1", c=1, t0=1.5, t1=1.6)
    # Not closed, nothing flushed by hand: the line is already in the file.
    assert read_journal(path) == [{"e": "d", "p": 0, "o": 1, "k": "k1", "c": 1, "t0": 1.5,
                                   "t1": 1.6}]
    journal.close()
    journal.close()  # idempotent


def test_journal_appends_across_writers_and_fsync(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    with Journal(path, fsync=True) as first:
        first.write("start", inc="a")
    with Journal(path) as second:
        second.write("closed")
    assert [e["e"] for e in read_journal(path)] == ["start", "closed"]


def test_a_torn_last_line_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_bytes(b'{"e":"x","p":0,"o":1}\n{"e":"x","p":0,"o"')
    assert read_journal(path) == [{"e": "x", "p": 0, "o": 1}]


def test_journal_tail_returns_only_complete_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    tail = JournalTail(path)
    assert tail.poll() == []  # not there yet
    with open(path, "wb") as handle:
        handle.write(b'{"e":"a"}\n{"e":')
        handle.flush()
        assert tail.poll() == [{"e": "a"}]
        handle.write(b'"b"}\n')
        handle.flush()
        assert tail.poll() == [{"e": "b"}]
        assert tail.poll() == []


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize("args, says", [
    (["--runs", "2"], "--mode"),
    (["--mode", "exactly-once"], "unknown mode"),
    (["--mode", "alo", "--runs", "0"], "at least 1"),
    (["--mode", "alo", "--faults", "kill,flood"], "unknown fault kind"),
    (["--mode", "alo", "--heartbeat-interval", "-1"], "more than 0"),
    (["--mode", "alo", "--delivery-limit", "11"], "--delivery-limit"),
    (["--mode", "alo", "--bogus"], "unrecognized arguments"),
    (["--mode", "alo", "--kafka-config", "retries"], "is not KEY=VALUE"),
    (["check"], "required"),
])
def test_usage_errors_are_one_line_and_exit_2(args: list[str], says: str,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert err.startswith("chaos: error: ")
    assert says in err


def test_check_of_a_directory_that_is_no_run(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(tmp_path)]) == 2
    assert "is not a complete run directory" in capsys.readouterr().err


def write_run(directory: Path, handed_out: list[int]) -> None:
    """A tiny alo run: one member owning partition 0 of a 3-record topic."""
    directory.mkdir()
    (directory / META).write_text(json.dumps({
        "mode": "alo", "group": "g", "topic": "t", "partitions": 1,
        "coordination_partitions": 4, "heartbeat_interval_ms": 1000}))
    home = coordination_partition("t", 4)
    messages = [ClaimingPartition(0, "aaaa0001", "A", "g", "t", 0),
                Heartbeat(0, "aaaa0001", "A", "g", "t", 0, 0)]
    write_jsonl(directory / COORDINATION, [
        coordination_row(CoordinationRecord(home, i, T0 + i, encode(m)))
        for i, m in enumerate(messages)])
    write_jsonl(directory / TOPIC, [{"p": 0, "o": o, "k": "k1"} for o in range(3)])
    write_jsonl(directory / PRODUCER, [{"e": "p", "s": o, "p": 0, "o": o, "k": "k1"}
                                       for o in range(3)])
    write_jsonl(directory / FAULTS, [{"e": "kill", "inc": "A-1", "t": 0}])
    with Journal(directory / "worker-A-1.jsonl") as journal:
        journal.write("start", client="A", instance="aaaa0001", inc="A-1")
        for o in handed_out:
            t = (T0 + 100 + o) / 1000
            journal.write("d", p=0, o=o, k="k1", c=1, t0=t, t1=t)
            journal.write("x", p=0, o=o, t=t)


def test_check_of_a_clean_and_of_a_violating_run(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    write_run(tmp_path / "clean", [0, 1, 2])
    assert main(["check", str(tmp_path / "clean")]) == 0
    out = capsys.readouterr().out
    assert "3 records, lost 0" in out and "violations 0" in out and "kill 1" in out
    write_run(tmp_path / "lossy", [0, 1])
    assert main(["check", str(tmp_path / "lossy"), "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["lost"] == 1
    assert summary["violation_kinds"] == {"lost": 1}
    assert summary["examples"]["lost"] == ["p0@2 (key k1) was never processed"]
