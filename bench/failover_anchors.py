"""The failover suite's anchors: plain consumer-group members (classic and KIP-848) as
processes, one killed, and how long its partitions go unread (see :mod:`bench.suite_failover`)."""

from __future__ import annotations

import contextlib
import threading
import time

from kafka import KafkaProducer

from bench.cli_process import CliProcess
from bench.common import MEMBERS, PARTITIONS
from bench.failover_configs import BROKER_SETTINGS, Config, Run
from bench.failover_measure import await_recovery, split
from bench.harness import BenchContext, BenchError, wait_for
from bench.worker_process import worker_pool


class GroupMember(CliProcess):
    """One ``python -m bench.group_member`` process: what it printed, and when."""

    def __init__(self, config: Config, bootstrap: str, group: str, topic: str,
                 client_id: str) -> None:
        self.client_id = client_id
        self.ready = threading.Event()
        self._lock = threading.Lock()
        self._printed: dict[str, float] = {}
        self._assigned: frozenset[int] = frozenset()
        args = ["--client", "kafka-python" if config.kind == "classic" else "confluent",
                "--bootstrap-servers", bootstrap, "--group", group, "--topic", topic,
                "--client-id", client_id]
        if config.kind == "classic":
            if config.session_ms is not None:
                args += ["--session-ms", str(config.session_ms)]
            if config.heartbeat_ms is not None:
                args += ["--heartbeat-ms", str(config.heartbeat_ms)]
        super().__init__(client_id, args, module="bench.group_member")

    def on_stdout(self, raw: bytes, at: float) -> None:
        parts = raw.decode("utf-8", "replace").rstrip("\n").split(" ", 4)
        if len(parts) < 2:
            return
        with self._lock:
            if parts[1] == "ready":
                self.ready.set()
            elif parts[1] == "assigned" and len(parts) == 3:
                self._assigned = frozenset() if parts[2] == "-" else frozenset(
                    int(p) for p in parts[2].split(","))
            elif parts[1] == "record" and len(parts) == 5:
                self._printed.setdefault(parts[4], at)

    def assigned(self) -> frozenset[int]:
        with self._lock:
            return self._assigned

    def printed_at(self, value: str) -> float | None:
        with self._lock:
            return self._printed.get(value)


def group_members(config: Config, bootstrap: str, group: str,
                  topic: str) -> contextlib.AbstractContextManager[list[GroupMember]]:
    """The Kafka group's members, one process each, stopped on exit."""
    return worker_pool(lambda k: GroupMember(config, bootstrap, group, topic, f"member-{k}"),
                       MEMBERS)


def set_kip848_group_config(bootstrap: str, group: str, session_ms: int,
                            heartbeat_ms: int) -> dict[str, str]:
    """Set the group's session timeout and heartbeat interval (before it exists) and read
    them back."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    wanted = {"consumer.session.timeout.ms": str(session_ms),
              "consumer.heartbeat.interval.ms": str(heartbeat_ms)}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
        for k, v in wanted.items()])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)
    got: dict[str, str] = {}

    def read_back() -> bool:  # the alteration reaches the broker's metadata a moment later
        nonlocal got
        described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
        entries = next(iter(described.values())).result(timeout=30)
        got = {k: entries[k].value for k in wanted if k in entries}
        return got == wanted

    wait_for(f"group {group}'s configs to read back as set", read_back, 15, interval_s=0.1,
             detail=lambda: f"read {got}, not {wanted}")
    return got


def broker_settings(bootstrap: str) -> dict[str, int]:
    """:data:`BROKER_SETTINGS` as the broker has them (Kafka's defaults where it won't say)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported
        AdminClient,
        ConfigResource,
        ResourceType,
    )

    settings = dict(BROKER_SETTINGS)
    with contextlib.suppress(Exception):
        admin = AdminClient({"bootstrap.servers": bootstrap})
        broker = next(iter(admin.list_topics(timeout=10).brokers))
        described = admin.describe_configs([ConfigResource(ResourceType.BROKER, str(broker))])
        entries = next(iter(described.values())).result(timeout=30)
        for name in settings:
            if name in entries and entries[name].value is not None:
                settings[name] = int(entries[name].value)
    return settings


def anchor_run(ctx: BenchContext, config: Config, producer: KafkaProducer) -> Run:
    tag = ctx.tag()
    topic, group = f"bench-failover-{tag}", f"bench.failover.{config.key}.{tag}"
    ctx.create_topic(topic, PARTITIONS)
    if config.group_config:
        assert config.session_ms is not None and config.heartbeat_ms is not None
        set_kip848_group_config(ctx.bootstrap, group, config.session_ms, config.heartbeat_ms)
    settle_s = 60 + 6 * config.beat_s
    warm = [f"warm-{tag}-{p}" for p in range(PARTITIONS)]
    with group_members(config, ctx.bootstrap, group, topic) as procs:
        names = [m.client_id for m in procs]

        def check_alive() -> None:
            for m in procs:
                if not m.killed and not m.alive():
                    raise BenchError(f"{config.key} {m.client_id} exited with "
                                     f"{m.proc.returncode}: {m.stderr_tail()}")

        def holders() -> dict[int, str]:
            owned: dict[int, str] = {}
            for m in procs:
                for p in m.assigned():
                    owned[p] = m.client_id
            return owned

        def all_held() -> dict[int, str] | None:
            check_alive()
            assignments = [m.assigned() for m in procs]
            if sum(len(a) for a in assignments) != PARTITIONS:
                return None  # a partition unassigned or (mid-rebalance) assigned twice
            owned = holders()
            return owned if len(owned) == PARTITIONS else None

        def detail() -> str:
            return (f"assigned {split(holders(), names)}; "
                    + "; ".join(f"{m.client_id}: {m.stderr_tail()}" for m in procs))

        def started() -> bool:
            check_alive()
            return all(m.ready.is_set() for m in procs)

        def warmed_up() -> bool:
            check_alive()
            return all(any(m.printed_at(v) is not None for m in procs) for v in warm)

        wait_for(f"{MEMBERS} {config.key} members to start", started, 60, detail=detail)
        wait_for(f"the {config.key} members to be assigned all {PARTITIONS} partitions",
                 all_held, settle_s, detail=detail)
        ideal = "/".join([str(PARTITIONS // MEMBERS)] * MEMBERS)
        with contextlib.suppress(BenchError):
            wait_for(f"a {ideal} split", lambda: (held := all_held()) is not None
                     and split(held, names) == ideal, settle_s)

        for p, value in enumerate(warm):
            producer.send(topic, value=value.encode(), partition=p)
        producer.flush(timeout=30)
        wait_for(f"the {config.key} members to print the warm-up records", warmed_up, 30,
                 detail=detail)
        owned = wait_for(f"all {PARTITIONS} partitions assigned before the kill", all_held,
                         settle_s, detail=detail)
        counts = {n: sum(1 for h in owned.values() if h == n) for n in names}
        victim = next(m for m in procs if m.client_id == max(names, key=lambda n: counts[n]))
        survivors = [m for m in procs if m is not victim]
        dead = sorted(p for p, h in owned.items() if h == victim.client_id)
        markers = [f"marker-{tag}-{p}" for p in dead]

        killed_at = time.monotonic()
        victim.kill9()
        for p, value in zip(dead, markers, strict=True):
            producer.send(topic, value=value.encode(), partition=p)
        producer.flush(timeout=30)

        def survivors_own_all() -> bool:
            return len({p for m in survivors for p in m.assigned()}) == PARTITIONS

        owned_s, first_s, last_s = await_recovery(
            survivors, markers, survivors_own_all, check_alive, killed_at,
            60 + 3 * config.detect_s, f"kill -9 of a {config.key} member")
        return Run(config.key, split(owned, names), len(dead), owned_s, first_s, last_s)
