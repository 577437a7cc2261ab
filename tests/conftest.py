"""Shared fixtures. The integration suite runs on a real Kafka broker that it starts itself.

Order: the pure tests (unit, property, simulation: no broker, no clock) run first, while the
background jobs (:mod:`tests.background`) start; everything else keeps pytest's order.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from marshal_py.devbroker import DevBroker
from tests.background import BackgroundJobs

# No per-example deadline: the suite shares 2 cores with brokers and background jobs, and a
# slow example is not a failure of the property (the tests that care time themselves).
settings.register_profile("marshal", deadline=None)
settings.load_profile("marshal")

HERE = Path(__file__).resolve().parent
#: Directories whose tests need no broker and no real time, run first.
PURE_FIRST = ("unit", "property", "simulation")

_BACKGROUND = pytest.StashKey[BackgroundJobs]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_BACKGROUND] = BackgroundJobs()


def pytest_unconfigure(config: pytest.Config) -> None:
    jobs = config.stash.get(_BACKGROUND, None)
    if jobs is not None:
        jobs.stop()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Pure tests first (stable: the order within each part is kept)."""

    def rank(item: pytest.Item) -> int:
        for position, name in enumerate(PURE_FIRST):
            if item.path.is_relative_to(HERE / name):
                return position
        return len(PURE_FIRST)

    items.sort(key=rank)


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[_BACKGROUND].start([item.nodeid for item in session.items])


@pytest.fixture(scope="session")
def background(request: pytest.FixtureRequest) -> BackgroundJobs:
    """The session's background jobs (see :mod:`tests.background`)."""
    return request.config.stash[_BACKGROUND]


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
