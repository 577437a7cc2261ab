"""Shared fixtures. The integration suite runs on a real Kafka broker that it starts itself."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from marshal_py.devbroker import DevBroker


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """bootstrap.servers of a real broker: the dev broker, started once per test session.

    ``MARSHAL_TEST_BOOTSTRAP_SERVERS`` points the suite at an already running broker instead.
    """
    external = os.environ.get("MARSHAL_TEST_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    broker = DevBroker()
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()


@pytest.fixture
def unique_name() -> str:
    """A topic or group name no other test uses."""
    return f"t-{uuid.uuid4().hex[:12]}"
