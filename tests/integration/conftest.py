"""Fixtures of the real-broker tests."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from marshal_py.devbroker import DevBroker


@pytest.fixture(scope="package")
def kafka39_bootstrap() -> Iterator[str]:
    """bootstrap.servers of a Kafka 3.9 dev broker, started by the first test that asks for it
    and stopped when the process leaves tests/integration: the core real-broker tests run on
    it too (see ``tests.integration.consumer_support.ON_EVERY_BROKER``), as most clusters
    still run 3.x. Under ``bin/test`` its files are one part (``tests/scheduling.py``), so it
    starts once in the run, and stops when that part's worker moves on to tests elsewhere
    (right after the part, in that order) instead of idling to the end.

    ``MARSHAL_TEST_KAFKA39_BOOTSTRAP_SERVERS`` points them at an already running broker instead.
    """
    external = os.environ.get("MARSHAL_TEST_KAFKA39_BOOTSTRAP_SERVERS")
    if external:
        yield external
        return
    broker = DevBroker(kafka_version="3.9", heap="512m")
    broker.start()
    try:
        yield broker.bootstrap_servers
    finally:
        broker.stop()
