"""The last ERROR of a JVM daemon's log, quoted in one line, for both daemons' line formats."""

from __future__ import annotations

from pathlib import Path

from marshal_py.devbroker import broker_log
from marshal_py.devbroker.jvm_log import read_log_tail
from marshal_py.spark import cluster_log


def test_a_spark_daemon_log_quotes_its_last_error_and_root_cause(tmp_path: Path) -> None:
    text = "\n".join([
        "26/01/01 00:00:00 INFO Master: Starting Spark master",
        "26/01/01 00:00:01 ERROR Master: Failed to start",
        "java.lang.IllegalStateException: outer",
        "\tat org.apache.spark.deploy.master.Master.main(Master.scala:1)",
        "Caused by: java.net.BindException: no such address",
        "26/01/01 00:00:02 INFO ShutdownHookManager: Shutdown hook called",
    ])
    (tmp_path / "master.log").write_text(text)
    error = cluster_log.startup_failure("master", 1, tmp_path / "master.log", master_port=None,
                                        webui_port=None)
    assert "last ERROR: 'Master: Failed to start'" in str(error)
    assert "java.net.BindException: no such address" in str(error)


def test_a_broker_log_without_an_error_quotes_its_last_line() -> None:
    text = "[2026-01-01 00:00:00,000] INFO starting (kafka.Kafka$)\nsome last words\n"
    assert broker_log.describe_last_error(text) == "last log line: 'some last words'"
    assert broker_log.describe_last_error("") == "the log is empty"


def test_the_tail_of_a_missing_log_is_empty(tmp_path: Path) -> None:
    assert read_log_tail(tmp_path / "absent.log") == ""
    (tmp_path / "x.log").write_text("abcdef")
    assert read_log_tail(tmp_path / "x.log", limit=3) == "def"

