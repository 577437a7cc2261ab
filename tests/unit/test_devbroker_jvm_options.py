"""The dev broker's JVM takes Kafka's ``KAFKA_JVM_PERFORMANCE_OPTS`` (split as a shell would)."""

from __future__ import annotations

import pytest

from marshal_py.devbroker.broker_config import JVM_PERFORMANCE_OPTS, performance_options
from marshal_py.errors import DevBrokerError


def test_unset_or_empty_adds_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(JVM_PERFORMANCE_OPTS, raising=False)
    assert performance_options() == []
    monkeypatch.setenv(JVM_PERFORMANCE_OPTS, "  ")
    assert performance_options() == []


def test_options_are_split_as_a_shell_would(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_PERFORMANCE_OPTS,
                       "-XX:TieredStopAtLevel=1  -XX:+UseSerialGC '-Dname=a b'")
    assert performance_options() == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                                     "-Dname=a b"]


def test_unbalanced_quotes_are_one_line_naming_the_variable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(JVM_PERFORMANCE_OPTS, "-Dname='a b")
    with pytest.raises(DevBrokerError) as info:
        performance_options()
    message = str(info.value)
    assert "$KAFKA_JVM_PERFORMANCE_OPTS" in message and "quote" in message
    assert "\n" not in message
