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
import time
from dataclasses import asdict
from typing import Any

from kafka import KafkaProducer

from bench.common import MEMBERS, PARTITIONS
from bench.failover_anchors import anchor_run, broker_settings
from bench.failover_configs import (
    ANCHOR,
    CLASSIC_DEFAULT_HEARTBEAT_MS,
    CLASSIC_DEFAULT_SESSION_MS,
    QUICK_KEYS,
    Config,
    Run,
    configs,
)
from bench.failover_measure import Observer, failover_run
from bench.harness import BenchContext, BenchError
from bench.report import Measured, Plot, SuiteReport, Table, ratio

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
