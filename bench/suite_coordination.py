"""Suite ``coordination``: what the coordination path costs, against Kafka's own, on one broker.

Seven measurements, each repeated ``ctx.repeat`` times (interleaved where there is an anchor):

1. **Claim latency** (ours): members join a fresh 12-partition topic one after the other,
   each taking one partition (``max_claims=1``, HI 1 s): the engine's
   ``stats.claim_latencies_ms``, from proposing a claim (an ``acks=all`` append) to reading the
   win back (:func:`bench.claim_latency.claim_latency`). Anchor: the nearest Kafka operation, an
   offset commit confirmed by the group coordinator (kafka-python ``commit({tp: offset})``,
   synchronous, one partition, after one warm-up commit), on the same broker. p50 and p99 per
   repetition; median of the repetitions.
2. **Rationalizer apply rate** (ours): records/s ``Rationalizer.apply_all`` takes from raw
   record bytes to world state over :func:`bench.rationalizer.build_log` (100 partitions,
   heartbeats, claims, races, releases, garbage). There is no anchor doing the same work;
   the reference is "can the rationalizer keep up with the log": the records/s a plain
   kafka-python consumer reads the very same records (produced to a one-partition topic)
   from this broker, first record to last. The ratio is apply / read.
3. **Start-up catch-up** (ours): :func:`bench.replay.measure`, a one-partition coordination
   topic of 1,000,000 records (``--quick``: 20,000) of ``repeat`` interleaved groups; one
   consumer joins each group without a checkpoint (reads everything, applies its group's
   records), then again after 10,000 more records (``--quick``: 2,000) from the group's
   checkpoint (found through the index); the time ``Marshaler.consumer`` takes. Anchor: a
   plain kafka-python consumer reading the same partition from the beginning to the same
   record (what any replay must at least do).
4. **Coordination records per 1,000 consumed** (ours): one in-process member of a fresh
   group with a fresh coordination topic (``coordination_topic=``), default HI (10 s),
   reads N records (12 partitions, 100 bytes, 1,000 keys; N = 20,000, ``--quick`` 2,000)
   from the beginning, in each mode: ``alo`` (``commit`` after every record), ``amo``
   (default ``amo_batch_size`` 100), ``share`` (default batch 100, implicit accept),
   ``key-shared`` (implicit commit). Counted: every record in the coordination topic when
   the N-th record is received (joining included, closing not). Anchor: a plain kafka-python
   consumer group (classic protocol, ``subscribe``, auto-commit off) reading the same data,
   committing every 1,000 records (``commit()``: every consumed partition) and every record
   (``commit({tp: offset + 1})``, on the first min(N, 5,000) records); counted: the records
   the broker appended to ``__consumer_offsets`` meanwhile (commits and group metadata).
5. **Peak RSS holding 100 partitions**: ours is a ``marshal consume --mode alo --print``
   process (a fresh group, ``offset_reset`` earliest) alone on a 100-partition topic of
   100,000 records of 100 bytes (``--quick``: 2,000); the anchor is a plain kafka-python
   ``KafkaConsumer`` process assigned the same 100 partitions reading the same data. Both
   are read (VmHWM in ``/proc/<pid>/status``) once they have received every record, then
   stopped.
6. **A new group among neighbours** and 7. **steady state with neighbours**
   (:mod:`bench.neighbours`): a brand-new group's time to its first record with 1,000,000
   (``--quick``: 20,000) records of 10 other groups on its coordination partition, against
   the same on a quiet one; an ALO member's records/s while 20,000 coordination records/s of
   other groups are written to its coordination partition, against the same load written
   elsewhere (500,000 records read; ``--quick``: 10,000).
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass
from typing import Any

from kafka import KafkaProducer, TopicPartition

from bench import neighbours, replay
from bench.claim_latency import claim_latency
from bench.coordination_costs import (
    Count,
    anchor_count,
    anchor_rss,
    commit_latencies,
    ensure_offsets_topic,
    ours_count,
    ours_rss,
    plain_consumer,
)
from bench.harness import BenchContext, BenchError, percentile
from bench.rationalizer import COORD, HI_MS, build_log
from bench.report import Measured, Plot, SuiteReport, Table, ratio
from marshal_py.world import Rationalizer, RationalizerConfig

DATA_PARTITIONS = 12
RSS_PARTITIONS = 100
MODES = ("alo", "amo", "share", "key-shared")


@dataclass(frozen=True)
class Sizes:
    joins: int  # per repetition, claim latency
    commits: int  # per repetition, the commit anchor
    apply_records: int
    replay_records: int
    replay_after: int
    consumed: int  # records per 1,000 measurement
    per_record_anchor: int  # records the commit-every-record anchor reads
    rss_per_partition: int
    neighbour_records: int  # other groups' records before a new group joins
    steady_records: int  # records the steady-state member reads
    neighbour_rate: int = 20_000  # coordination records/s of other groups meanwhile

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        if quick:
            return cls(3, 20, 5_000, 20_000, 2_000, 2_000, 2_000, 20, 20_000, 10_000)
        scale = float(os.environ.get("BENCH_COORDINATION_SCALE", "1"))
        return cls(10, 100, int(200_000 * scale), int(1_000_000 * scale),
                   int(10_000 * scale), int(20_000 * scale), int(5_000 * scale),
                   max(1, int(1_000 * scale)), int(1_000_000 * scale),
                   int(500_000 * scale))


def read_plain(bootstrap: str, topic: str, partitions: int, count: int,
               started: float | None = None) -> tuple[float, float]:
    """Read ``count`` records from the beginning of ``topic``: (seconds from ``started``, or
    from the first record, to the last; seconds from creating the consumer to the first)."""
    created = time.perf_counter()
    consumer = plain_consumer(bootstrap, auto_offset_reset="earliest")
    first: float | None = None
    seen = 0
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        consumer.seek_to_beginning()
        deadline = created + 120 + count / 2_000
        while seen < count:
            for batch in consumer.poll(timeout_ms=500, max_records=2_000).values():
                if first is None and batch:
                    first = time.perf_counter()
                seen += len(batch)
            if time.perf_counter() > deadline:
                raise BenchError(f"plain kafka-python read {seen:,}/{count:,} records of {topic}")
        ended = time.perf_counter()
    finally:
        consumer.close()
    assert first is not None
    return ended - (first if started is None else started), first - created


# -- the suite ----------------------------------------------------------------------------------


def _ms(values: list[float]) -> Measured:
    return Measured(values, "ms")


def run(ctx: BenchContext) -> SuiteReport:
    sizes = Sizes.of(ctx.quick)
    raw: dict[str, Any] = {"sizes": asdict(sizes)}
    tables: list[Table] = []
    plots: list[Plot] = []
    admin = ctx.admin()
    try:
        # 1. claim latency vs an offset commit
        commit_topic = ctx.create_topic(f"bench-commit-{ctx.tag()}", 1)
        claims: list[list[int]] = []
        commits: list[list[float]] = []

        def latency(i: int) -> None:
            claims.append(claim_latency(ctx.bootstrap, admin, sizes.joins,
                                        max_claims=1).latencies_ms)
            commits.append(commit_latencies(ctx.bootstrap, commit_topic, sizes.commits))

        ctx.repeated("claim latency and commit latency", latency)
        raw["claim_latencies_ms"], raw["commit_latencies_ms"] = claims, commits
        rows = []
        for q in (50, 99):
            ours = _ms([float(percentile(c, q)) for c in claims])
            anchor = _ms([percentile(c, q) for c in commits])
            rows.append([f"p{q}", ours.cell(1), anchor.cell(1), ratio(ours.median, anchor.median)])
        tables.append(Table(
            f"Claim latency (propose to win read back) vs an offset commit, "
            f"{sizes.joins} joins and {sizes.commits} commits per repetition, "
            f"median of {ctx.repeat}",
            ["percentile", "ours: claim (ms)", "anchor: kafka-python commit (ms)",
             "ours / anchor"], rows,
            ["Ours: a member joining a 12-partition topic with `max_claims=1` (HI 1 s), "
             "`stats.claim_latencies_ms`: an `acks=all` append to `__marshal`, then one "
             "Fetch reading it back and applying it. Anchor: "
             "`KafkaConsumer.commit({tp: offset})` to the group coordinator (one round "
             "trip; the broker appends to `__consumer_offsets`)."]))
        plots.append(Plot("Claim latency vs offset commit", "bar", "percentile", "ms",
                          ["p50", "p99"],
                          {"ours: claim": [_ms([float(percentile(c, q)) for c in claims]).median
                                           for q in (50, 99)],
                           "kafka-python commit": [_ms([percentile(c, q) for c in commits]).median
                                                   for q in (50, 99)]}))

        # 2. rationalizer apply rate vs a plain read of the same records
        log = build_log(sizes.apply_records, 100)
        log_topic = ctx.create_topic(f"bench-coordlog-{ctx.tag()}", 1)
        producer = KafkaProducer(bootstrap_servers=ctx.bootstrap, acks="all", linger_ms=20,
                                 batch_size=256 * 1024)
        try:
            for record in log:
                producer.send(log_topic, value=record.value, partition=0)
            producer.flush(timeout=120)
        finally:
            producer.close()
        applied: list[float] = []
        read: list[float] = []

        def apply_and_read(i: int) -> None:
            seconds, _ = read_plain(ctx.bootstrap, log_topic, 1, len(log))
            read.append(len(log) / seconds)
            rationalizer = Rationalizer(RationalizerConfig(COORD, HI_MS))
            started = time.perf_counter()
            rationalizer.apply_all(log)
            applied.append(len(log) / (time.perf_counter() - started))

        ctx.repeated("rationalizer apply rate and plain read", apply_and_read)
        raw["apply_records_per_s"], raw["plain_read_records_per_s"] = applied, read
        ours_m, anchor_m = Measured(applied, "records/s"), Measured(read, "records/s")
        tables.append(Table(
            f"Rationalizer apply rate vs reading the same {len(log):,} records "
            f"(median of {ctx.repeat})",
            ["", "records/s", "apply / read"],
            [["ours: `Rationalizer.apply_all` (decoding included, in memory)", ours_m.cell(),
              ratio(ours_m.median, anchor_m.median)],
             ["reference: plain kafka-python reading them from one partition", anchor_m.cell(),
              "1.00x"]],
            ["No anchor does the rationalizer's work; the reference answers whether it keeps "
             "up with the log: above 1 it applies records faster than one consumer can "
             "fetch them."]))

        # 3. start-up catch-up with and without checkpoints
        groups = [f"orders.g{i:03d}" for i in range(ctx.repeat)]
        ctx.say(f"catch-up: filling a coordination partition with {sizes.replay_records:,} "
                "records")
        result = replay.measure(ctx.bootstrap, sizes.replay_records, sizes.replay_after,
                                groups, ctx.say)
        plain_replay: list[float] = []
        for i in range(ctx.repeat):
            ctx.say(f"catch-up anchor: repetition {i + 1}/{ctx.repeat}")
            started = time.perf_counter()
            seconds, _ = read_plain(ctx.bootstrap, result.coordination_topic, 1,
                                    sizes.replay_records, started=started)
            plain_replay.append(seconds)
        raw["replay"] = {"without": [asdict(j) for j in result.without],
                         "with_checkpoints": [asdict(j) for j in result.with_checkpoints],
                         "plain_read_s": plain_replay}
        without = Measured([j.seconds for j in result.without], "s")
        with_cp = Measured([j.seconds for j in result.with_checkpoints], "s")
        plain_m = Measured(plain_replay, "s")
        replayed = {k: statistics.median(j.replayed for j in joins) for k, joins in
                    (("without", result.without), ("with", result.with_checkpoints))}
        tables.append(Table(
            f"Start-up catch-up on a coordination partition of {sizes.replay_records:,} "
            f"records (one join per group, {ctx.repeat} groups)",
            ["start-up", "time (s)", "records read", "vs plain read"],
            [["ours: `Marshaler.consumer`, no checkpoint (reads the partition from the "
              "group's first record, applies the group's records)",
              without.cell(2), f"{replayed['without']:,.0f}",
              ratio(without.median, plain_m.median)],
             ["ours: `Marshaler.consumer` from the group's newest checkpoint",
              with_cp.cell(2), f"{replayed['with']:,.0f}",
              ratio(with_cp.median, plain_m.median)],
             ["anchor: plain kafka-python reading the same partition to the same record",
              plain_m.cell(2), f"{sizes.replay_records:,}", "1.00x"]],
            [f"The {ctx.repeat} groups' records are interleaved, so a join without a "
             f"checkpoint applies 1/{ctx.repeat} of what it reads (its group's) and reads "
             "past the rest without decoding them. With checkpoints the join reads the "
             "checkpoint the index points at, then the "
             f"{sizes.replay_after:,} records written after it; the ratio with / without is "
             f"{ratio(with_cp.median, without.median)}."]))
        plots.append(Plot("Start-up catch-up", "bar", "start-up", "seconds",
                          ["no checkpoint", "checkpoint", "plain read"],
                          {"seconds": [without.median, with_cp.median, plain_m.median]},
                          log_y=True))

        # 4. coordination records per 1,000 consumed
        data_topic = ctx.create_topic(f"bench-coord-data-{ctx.tag()}", DATA_PARTITIONS)
        ctx.produce(data_topic, sizes.consumed, DATA_PARTITIONS,
                    key=lambda i: f"key-{i % 1000}".encode())
        ensure_offsets_topic(ctx.bootstrap, commit_topic)
        counts: dict[str, list[Count]] = {}

        def count_all(i: int) -> None:
            for mode in MODES:
                counts.setdefault(mode, []).append(
                    ours_count(ctx.bootstrap, data_topic, mode, sizes.consumed))
            for every, n in ((1000, sizes.consumed), (1, sizes.per_record_anchor)):
                counts.setdefault(f"every {every}", []).append(
                    anchor_count(ctx.bootstrap, data_topic, n, every))

        ctx.repeated("coordination records per 1,000 consumed", count_all)
        raw["records_per_1000"] = {k: [asdict(c) | {"per_1000": c.per_1000} for c in v]
                                   for k, v in counts.items()}
        per = {k: Measured([c.per_1000 for c in v]) for k, v in counts.items()}
        a1000, a1 = per["every 1000"].median, per["every 1"].median
        rows = []
        for mode in MODES:
            last = counts[mode][-1]
            kinds = ", ".join(f"{k} {v}" for k, v in sorted(last.by_type.items(),
                                                           key=lambda kv: -kv[1]))
            rows.append([f"ours: {mode}", per[mode].cell(2), ratio(per[mode].median, a1000),
                         ratio(per[mode].median, a1),
                         Measured([c.seconds for c in counts[mode]]).cell(1), kinds])
        for every in (1000, 1):
            key = f"every {every}"
            rows.append([f"anchor: kafka-python group, commit every {every:,}",
                         per[key].cell(2), ratio(per[key].median, a1000),
                         ratio(per[key].median, a1),
                         Measured([c.seconds for c in counts[key]]).cell(1),
                         f"{counts[key][-1].consumed:,} records read"])
        tables.append(Table(
            f"Coordination records written per 1,000 records consumed ({sizes.consumed:,} "
            f"records, {DATA_PARTITIONS} partitions, one member, median of {ctx.repeat})",
            ["consumer", "records per 1,000", "vs commit every 1,000", "vs commit every record",
             "time (s)", "what was written (last repetition)"], rows,
            ["Ours: records in the run's own coordination topic when the N-th record arrived "
             "(joining included: member heartbeat, claims, first heartbeats, checkpoint). "
             "Anchors: records appended to `__consumer_offsets` (commits, group metadata). "
             "Ours at the default HI of 10 s: heartbeats are written per partition every "
             "0.6-0.8 HI whatever the rate, so a slower reader writes more per 1,000."]))
        plots.append(Plot("Coordination records per 1,000 consumed", "bar", "consumer",
                          "records per 1,000", [*MODES, "kp every 1,000", "kp every record"],
                          {"records per 1,000": [per[k].median for k in
                                                 (*MODES, "every 1000", "every 1")]},
                          log_y=True))

        # 5. peak RSS holding 100 partitions
        rss_topic = ctx.create_topic(f"bench-rss-{ctx.tag()}", RSS_PARTITIONS)
        rss_records = RSS_PARTITIONS * sizes.rss_per_partition
        ctx.produce(rss_topic, rss_records, RSS_PARTITIONS)
        ours_kib: list[float] = []
        anchor_kib: list[float] = []

        def rss(i: int) -> None:
            ours_kib.append(ours_rss(ctx.bootstrap, rss_topic, rss_records))
            anchor_kib.append(anchor_rss(ctx.bootstrap, rss_topic, RSS_PARTITIONS,
                                         rss_records))

        ctx.repeated("peak RSS", rss)
        raw["rss_kib"] = {"ours": ours_kib, "anchor": anchor_kib}
        ours_mib = Measured([k / 1024 for k in ours_kib], "MiB")
        anchor_mib = Measured([k / 1024 for k in anchor_kib], "MiB")
        tables.append(Table(
            f"Peak RSS of a consumer process holding {RSS_PARTITIONS} partitions "
            f"({rss_records:,} records of 100 bytes read; median of {ctx.repeat})",
            ["process", "VmHWM (MiB)", "ours / anchor"],
            [["ours: `marshal consume --mode alo --print`", ours_mib.cell(1),
              ratio(ours_mib.median, anchor_mib.median)],
             ["anchor: kafka-python `KafkaConsumer`, 100 partitions assigned", anchor_mib.cell(1),
              "1.00x"]],
            ["VmHWM from /proc/<pid>/status once every record was received."]))
        plots.append(Plot(f"Peak RSS holding {RSS_PARTITIONS} partitions", "bar", "process",
                          "MiB", ["marshal consume (ALO)", "kafka-python"],
                          {"VmHWM": [ours_mib.median, anchor_mib.median]}))

        # 6. and 7. neighbours: a new group among them, and a member while they write
        neighbour_tables, raw["neighbours"] = neighbours.run(
            ctx, sizes.neighbour_records, sizes.steady_records, sizes.neighbour_rate)
        tables += neighbour_tables
    finally:
        admin.close()
    return SuiteReport("coordination", ctx.command, tables, plots, raw)
