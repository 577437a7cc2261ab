"""Suite ``failover``: how long a dead member's partitions go unread, against Kafka's groups.

One measurement, the same for every configuration: 3 members, each its own OS process, share
a fresh 12-partition topic. Once every partition is held by exactly one member (4/4/4 when
the balance gets there in time) and a warm-up record per partition has been printed by
somebody (every fetch loop is running), the member holding the most partitions is killed
with SIGKILL and one marker record is produced into each of its partitions. Measured from
the kill, on the parent's monotonic clock, each member's stdout being timestamped as the
parent reads it: when a survivor printed the first marker and the last one, and when the
survivors own every partition again. Configurations:

* **marshal_py** at HI 1 s, 3 s and 10 s: ``marshal consume --mode alo --print`` processes
  (:func:`bench.failover_measure.failover_run`); ownership as an observer (a Marshaler of another
  group that only reads ``__marshal``) sees it. Also reported: when the dead member's claims
  went stale and when it stopped counting as live (2 HI after its last heartbeat / last
  record): the floor the protocol sets.
* **classic group**: kafka-python ``KafkaConsumer(group_id=..., subscribe)`` processes
  (:mod:`bench.group_member`) at kafka-python's defaults (read from the installed version:
  3.0.12 has session 45 s, heartbeat 3 s) and at the broker's minimum session timeout
  (``group.min.session.timeout.ms``, read from the broker, 6 s by default) with a heartbeat
  of a third of it. Ownership: the members' own assignments as they print them.
* **KIP-848 group**: confluent-kafka ``Consumer`` processes with ``group.protocol=consumer``
  at the broker's defaults (read from the broker: session 45 s, heartbeat 5 s unless changed)
  and at session 6 s / heartbeat 1 s,
  set for the group (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``
  through ``AdminClient.incremental_alter_configs``) before its members start; the bench
  broker lowers the KIP-848 minimums to 6 s / 1 s (``bench.harness.BROKER_PROPERTIES``).

Every member commits as its default does (auto-commit every 5 s; ``marshal consume`` commits
every record) and starts a partition with no committed offset at the earliest record.

The ratio column divides each configuration's median by the classic group's at the broker's
minimum session timeout: the fastest failover a classic group can be configured for on a
stock broker, and the natural alternative to marshal_py.

Sizes: a full run is ``ctx.repeat`` rounds, each running every configuration once, in turn
(interleaved). One round took about 3 minutes on 2 cores (measured once: marshal HI 1 s
10 s in all, HI 3 s 12 s, HI 10 s 25 s, classic 6 s 12 s, classic 45 s 51 s, KIP-848 6 s
10 s, KIP-848 45 s 57 s, start-up and warm-up included): about 10 minutes at ``--repeat 3``.
``--quick``: one round of marshal at HI 1 s, the classic group at the broker's minimum
session timeout and KIP-848 at 6 s (every anchor exercised once): about 35 s plus the
broker's start. ``BENCH_FAILOVER_ONLY=key,key`` runs only those configurations (keys:
marshal-1, marshal-3, marshal-10, classic-default, classic-min, kip848-default,
kip848-fast).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from kafka import KafkaConsumer, KafkaProducer

from bench.cli_process import CliProcess
from bench.common import MEMBERS, PARTITIONS, POLL_S
from bench.failover_measure import Observer, failover_run, split
from bench.harness import BenchContext, BenchError, wait_for
from bench.report import Measured, Plot, SuiteReport, Table, ratio
from bench.worker_process import worker_pool

CLASSIC_DEFAULT_SESSION_MS = int(KafkaConsumer.DEFAULT_CONFIG["session_timeout_ms"])
CLASSIC_DEFAULT_HEARTBEAT_MS = int(KafkaConsumer.DEFAULT_CONFIG["heartbeat_interval_ms"])
#: The broker settings the configurations depend on, read from the broker (these are Kafka's
#: defaults, used when it will not say).
BROKER_SETTINGS = {
    "group.min.session.timeout.ms": 6000,  # the classic group's floor
    "group.consumer.session.timeout.ms": 45000,  # KIP-848 defaults
    "group.consumer.heartbeat.interval.ms": 5000,
}
KIP848_FAST = (6000, 1000)  # session, heartbeat set per group
ANCHOR = "classic-min"


@dataclass(frozen=True)
class Config:
    key: str
    label: str  # table row
    short: str  # plot tick
    kind: str  # "marshal" | "classic" | "kip848"
    hi_s: float = 0.0  # marshal
    session_ms: int | None = None  # classic: client config (None: kafka-python's default)
    heartbeat_ms: int | None = None
    group_config: bool = False  # kip848: set session_ms / heartbeat_ms for the group

    @property
    def detect_s(self) -> float:
        """How long the group may take to notice a dead member (bounds the waits)."""
        if self.kind == "marshal":
            return 3 * self.hi_s
        if self.kind == "classic":
            return (self.session_ms or CLASSIC_DEFAULT_SESSION_MS) / 1000
        return (self.session_ms or BROKER_SETTINGS["group.consumer.session.timeout.ms"]) / 1000

    @property
    def beat_s(self) -> float:
        if self.kind == "marshal":
            return self.hi_s
        if self.kind == "classic":
            return (self.heartbeat_ms or CLASSIC_DEFAULT_HEARTBEAT_MS) / 1000
        return (self.heartbeat_ms
                or BROKER_SETTINGS["group.consumer.heartbeat.interval.ms"]) / 1000


def configs(broker: dict[str, int]) -> list[Config]:
    min_session_ms = broker["group.min.session.timeout.ms"]
    classic_hb = min_session_ms // 3
    kip_session_ms = broker["group.consumer.session.timeout.ms"]
    kip_heartbeat_ms = broker["group.consumer.heartbeat.interval.ms"]
    return [
        Config("marshal-1", "marshal_py, HI 1 s", "marshal\nHI 1 s", "marshal", hi_s=1.0),
        Config("marshal-3", "marshal_py, HI 3 s", "marshal\nHI 3 s", "marshal", hi_s=3.0),
        Config("marshal-10", "marshal_py, HI 10 s", "marshal\nHI 10 s", "marshal", hi_s=10.0),
        Config("classic-default",
               f"classic group (kafka-python defaults: session "
               f"{CLASSIC_DEFAULT_SESSION_MS / 1000:g} s, heartbeat "
               f"{CLASSIC_DEFAULT_HEARTBEAT_MS / 1000:g} s)",
               f"classic\n{CLASSIC_DEFAULT_SESSION_MS / 1000:g} s", "classic"),
        Config(ANCHOR,
               f"classic group (kafka-python, broker minimum session "
               f"{min_session_ms / 1000:g} s, heartbeat {classic_hb / 1000:g} s)",
               f"classic\n{min_session_ms / 1000:g} s", "classic",
               session_ms=min_session_ms, heartbeat_ms=classic_hb),
        Config("kip848-default",
               f"KIP-848 group (confluent-kafka, broker defaults: session "
               f"{kip_session_ms / 1000:g} s, heartbeat {kip_heartbeat_ms / 1000:g} s)",
               f"KIP-848\n{kip_session_ms / 1000:g} s", "kip848",
               session_ms=kip_session_ms, heartbeat_ms=kip_heartbeat_ms),
        Config("kip848-fast",
               f"KIP-848 group (confluent-kafka, group configs: session "
               f"{KIP848_FAST[0] / 1000:g} s, heartbeat {KIP848_FAST[1] / 1000:g} s)",
               f"KIP-848\n{KIP848_FAST[0] / 1000:g} s", "kip848",
               session_ms=KIP848_FAST[0], heartbeat_ms=KIP848_FAST[1], group_config=True),
    ]


QUICK_KEYS = ("marshal-1", ANCHOR, "kip848-fast")


@dataclass
class Run:
    config: str
    split: str
    victim_held: int
    owned_s: float  # survivors own every partition again
    first_s: float  # first marker printed by a survivor
    last_s: float  # every marker printed
    stale_s: float | None = None  # marshal: the dead claims went stale
    expired_s: float | None = None  # marshal: the dead member stopped counting as live


# -- the anchors: plain consumer-group members as processes -------------------------------------


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

        owned_at: float | None = None
        patience_s = 60 + 3 * config.detect_s
        deadline = killed_at + patience_s
        while True:
            check_alive()
            if owned_at is None:
                held = {p for m in survivors for p in m.assigned()}
                if len(held) == PARTITIONS:
                    owned_at = time.monotonic()
            printed = [min((t for t in (m.printed_at(v) for m in survivors) if t is not None),
                           default=None) for v in markers]
            if owned_at is not None and all(t is not None for t in printed):
                break
            if time.monotonic() >= deadline:
                raise BenchError(
                    f"{patience_s:.0f} s after kill -9 of a {config.key} member: survivors "
                    f"own {'all' if owned_at else 'not all'} partitions, printed "
                    f"{sum(t is not None for t in printed)}/{len(printed)} markers; "
                    + "; ".join(f"{m.client_id}: {m.stderr_tail()}" for m in survivors))
            time.sleep(POLL_S)
        times = [t for t in printed if t is not None]
        return Run(config.key, split(owned, names), len(dead), owned_at - killed_at,
                   min(times) - killed_at, max(times) - killed_at)


# -- ours ---------------------------------------------------------------------------------------


class Ours:
    """marshal_py runs: one observer per heartbeat interval (it judges staleness by it)."""

    def __init__(self, ctx: BenchContext, producer: KafkaProducer) -> None:
        self.ctx = ctx
        self.producer = producer
        self.admin = ctx.admin()
        self.observers: dict[float, Observer] = {}

    def run(self, config: Config) -> Run:
        observer = self.observers.get(config.hi_s)
        if observer is None:
            observer = self.observers[config.hi_s] = Observer(self.ctx.bootstrap, config.hi_s)
        balance_s = (15.0 if self.ctx.quick else 30.0) * config.hi_s
        r = failover_run(self.ctx.bootstrap, self.admin, self.producer, observer, balance_s)
        return Run(config.key, r.split, r.victim_held, r.owned_s, r.first_record_s,
                   r.last_record_s, r.stale_s, r.expired_s)

    def close(self) -> None:
        for closing in (*(o.close for o in self.observers.values()), self.admin.close):
            with contextlib.suppress(Exception):
                closing()


# -- the suite ----------------------------------------------------------------------------------


def run(ctx: BenchContext) -> SuiteReport:
    broker = broker_settings(ctx.bootstrap)
    every = configs(broker)
    only = [k for k in os.environ.get("BENCH_FAILOVER_ONLY", "").split(",") if k]
    unknown = set(only) - {c.key for c in every}
    if unknown:
        raise BenchError(f"BENCH_FAILOVER_ONLY names no configuration {sorted(unknown)}; "
                         f"choose from {', '.join(c.key for c in every)}")
    if only:
        chosen = [c for c in every if c.key in only]
    else:
        chosen = [c for c in every if not ctx.quick or c.key in QUICK_KEYS]
    runs: dict[str, list[Run]] = {c.key: [] for c in chosen}
    producer = KafkaProducer(bootstrap_servers=ctx.bootstrap, acks=1, linger_ms=0)
    ours = Ours(ctx, producer)
    began = time.monotonic()
    try:
        for i in range(ctx.repeat):
            for config in chosen:
                ctx.say(f"failover, {config.label}: repetition {i + 1}/{ctx.repeat}")
                started = time.monotonic()
                r = ours.run(config) if config.kind == "marshal" else anchor_run(
                    ctx, config, producer)
                runs[config.key].append(r)
                ctx.say(f"  split {r.split}, victim held {r.victim_held}: owned again "
                        f"{r.owned_s:.2f} s, first marker {r.first_s:.2f} s, last "
                        f"{r.last_s:.2f} s after the kill ({time.monotonic() - started:.0f} s "
                        "in all)")
    finally:
        ours.close()
        with contextlib.suppress(Exception):
            producer.close()
    elapsed = time.monotonic() - began
    return report(ctx, chosen, runs, broker, elapsed)


def report(ctx: BenchContext, chosen: list[Config], runs: dict[str, list[Run]],
           broker: dict[str, int], elapsed_s: float) -> SuiteReport:
    def measured(key: str, field: str) -> Measured:
        return Measured([float(getattr(r, field)) for r in runs[key]], "s")

    anchor_first = measured(ANCHOR, "first_s").median if ANCHOR in runs else float("nan")
    anchor_last = measured(ANCHOR, "last_s").median if ANCHOR in runs else float("nan")
    anchor_label = next(c.label for c in configs(broker) if c.key == ANCHOR)
    rows = []
    for c in chosen:
        first, last = measured(c.key, "first_s"), measured(c.key, "last_s")
        rows.append([c.label, ", ".join(sorted({r.split for r in runs[c.key]})),
                     measured(c.key, "owned_s").cell(2), first.cell(2), last.cell(2),
                     ratio(first.median, anchor_first), ratio(last.median, anchor_last)])
    main = Table(
        f"Failover after kill -9 of one of {MEMBERS} members ({PARTITIONS} partitions): "
        f"seconds from the kill, median (range) of {ctx.repeat}",
        ["configuration", "split before the kill", "survivors own every partition",
         "first marker printed", "last marker printed", "first vs anchor", "last vs anchor"],
        rows,
        [f"Anchor (the ratio columns): the {anchor_label}: the fastest a classic group "
         "goes on a stock broker. Ratios below 1 mean marshal_py's (or that group's) "
         "dead partitions are read again sooner.",
         "The victim is the member holding the most partitions; one marker record is "
         "produced into each of its partitions right after the kill. Times are when a "
         "survivor's process printed the record, read by the benchmark as it is written.",
         "\"Survivors own every partition\": for marshal_py as an observer replaying "
         "`__marshal` sees it; for the Kafka groups as the members' own assignments say "
         "(polled every 0.1 s).",
         f"kafka-python {CLASSIC_DEFAULT_SESSION_MS / 1000:g} s / "
         f"{CLASSIC_DEFAULT_HEARTBEAT_MS / 1000:g} s are the installed kafka-python's own "
         "defaults; the broker's group.min.session.timeout.ms is "
         f"{broker['group.min.session.timeout.ms']} ms. "
         "KIP-848 timeouts are the group's (broker defaults, or per-group configs set "
         "before the members start); the bench broker lowers the KIP-848 minimums to "
         "6 s / 1 s.",
         f"Configurations interleaved, {ctx.repeat} round(s), {elapsed_s:.0f} s in all."])
    tables = [main]
    ours_keys = [c for c in chosen if c.kind == "marshal"]
    if ours_keys:
        tables.append(Table(
            "marshal_py after kill -9: the protocol's floor and what the survivors did "
            f"(seconds from the kill, median (range) of {ctx.repeat})",
            ["heartbeat interval", "dead claims stale (2 HI after last heartbeat)",
             "dead member no longer live", "survivors own every partition",
             "last marker printed"],
            [[f"{c.hi_s:g} s", measured(c.key, "stale_s").cell(2),
              measured(c.key, "expired_s").cell(2), measured(c.key, "owned_s").cell(2),
              measured(c.key, "last_s").cell(2)] for c in ours_keys],
            ["A survivor may take a dead member's partition once its claim is stale and the "
             "dead member no longer counts toward the fair share; the gap to \"own every "
             "partition\" is the survivors noticing (their next heartbeat round) and "
             "claiming."]))
    plot = Plot("Failover after kill -9: time to the last marker (median)", "bar",
                "configuration", "seconds after the kill", [c.short for c in chosen],
                {"last marker printed": [measured(c.key, "last_s").median for c in chosen]})
    raw: dict[str, Any] = {
        "runs": {k: [asdict(r) for r in v] for k, v in runs.items()},
        "configs": [asdict(c) for c in chosen],
        "broker_settings": broker,
        "kafka_python_defaults": {"session_timeout_ms": CLASSIC_DEFAULT_SESSION_MS,
                                  "heartbeat_interval_ms": CLASSIC_DEFAULT_HEARTBEAT_MS},
        "elapsed_s": elapsed_s,
    }
    return SuiteReport("failover", ctx.command, tables, [plot], raw)
