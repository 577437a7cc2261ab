"""Compatibility mode's settings (PROTOCOL.md 13.1): a heartbeat interval other than the
original implementation's 60 s is warned of when the settings are checked, before any
connection -- ``Marshaler(..., compat="v1")`` and ``marshal consume --compat v1`` build these
settings first."""

from __future__ import annotations

import logging

import pytest

from marshal_py.client.settings import MarshalerConfig
from marshal_py.errors import ConfigurationError
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.original import ORIGINAL_HEARTBEAT_INTERVAL_S

LOGGER = "marshal_py.client.settings"


def settings(heartbeat_interval: float, compat: str | None = "v1",
             **extra: object) -> MarshalerConfig:
    return MarshalerConfig.from_seconds(
        group_id="mixed", client_id="c1", heartbeat_interval=heartbeat_interval,
        replay_window=3600, checkpoint_interval=300, offsets_retention=86_400, timeout=15,
        compat=compat, **extra)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING]


def test_the_original_interval_is_60_s() -> None:
    assert ORIGINAL_HEARTBEAT_INTERVAL_S == 60


@pytest.mark.parametrize("interval, who_takes", [
    (10, "this member takes a live original member's partitions"),
    (120, "the originals take this member's"),
])
def test_compat_warns_of_an_interval_other_than_the_originals(
        caplog: pytest.LogCaptureFixture, interval: float, who_takes: str) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    settings(interval)
    [warning] = warnings_of(caplog)
    assert warning.startswith(f"compat='v1' with heartbeat_interval {interval} s: the "
                              "original implementation uses 60 s"), warning
    assert who_takes in warning and "PROTOCOL.md 13.1" in warning


@pytest.mark.parametrize("interval, compat", [(60, "v1"), (10, None)])
def test_no_warning_at_the_originals_interval_nor_without_compat(
        caplog: pytest.LogCaptureFixture, interval: float, compat: str | None) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    settings(interval, compat)
    assert warnings_of(caplog) == []


def test_compat_refuses_keys_before_it_warns(caplog: pytest.LogCaptureFixture) -> None:
    """A signed compat member is an error, not a warning: the original reads no signed
    record."""
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with pytest.raises(ConfigurationError, match="cannot sign records"):
        settings(10, auth_keys=(GroupKey("k1", b"a-secret-of-thirty-two-bytes-000"),))
    assert warnings_of(caplog) == []
