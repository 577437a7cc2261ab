"""A campaign's settings, the record of one run, and the names every room of the runner
shares (:mod:`chaos.runner` describes a campaign)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.run_data import RunResult

FAULT_KINDS = ("kill", "stop", "broker")
RESTART_IDS = ("mixed", "same", "new")
READY_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
SLOW_STOP_S = 5.0
TICK_S = 0.2
#: Modes whose runs produce transactional input.
TRANSACTIONAL_MODES = frozenset({"share", "eos"})


class RunError(Exception):
    """A run could not be completed (not a violation: the harness or the broker failed)."""


@dataclass
class Options:
    """A campaign's settings (the command line's options)."""

    modes: list[str]
    runs: int = 1
    seed: int = 0
    consumers: int = 3
    records: int = 5000
    rate: int = 250
    partitions: int = 4
    keys: int = 64
    heartbeat_interval: float = 1.0
    faults: tuple[str, ...] = FAULT_KINDS
    faults_per_run: int = 4
    restart_ids: str = "mixed"
    lock_duration: float = 3.0
    delivery_limit: int = 10
    work_ms: float = 1.0
    drain_timeout: float = 120.0
    directory: Path | None = None
    keep: bool = False
    fsync: bool = False
    kafka_config: dict[str, Any] = field(default_factory=dict)
    #: Run authenticated groups: every coordination record signed with a per-run key.
    signed: bool = False
    #: Kafka nodes: 1 (the broker fault kills the broker) or more (a DevCluster; the broker
    #: fault kills the node leading the run's coordination partition).
    brokers: int = 1
    #: How the consumers fetch data records (Marshaler ``fetcher``).
    fetcher: str = "kafka-python"


@dataclass
class RunOutcome:
    """One run: its checker result (None when the run failed), where its files are, time."""

    index: int
    mode: str
    seed: int
    result: RunResult | None
    directory: Path | None
    seconds: float
    error: str = ""
    notes: list[str] = field(default_factory=list)
