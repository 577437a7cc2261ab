"""The overhead suite's tables and plots (:mod:`bench.suite_overhead`)."""

from __future__ import annotations

import statistics

from bench import spark_rows
from bench.harness import BenchContext
from bench.overhead_readers import HI_S, PARTITIONS, READERS, ReaderKind, Run, process_counts
from bench.report import Measured, Plot, SuiteReport, Table, ratio


def _rates(runs: list[Run], records: int) -> Measured:
    return Measured([records / r.seconds for r in runs], "records/s")


def _steady_rates(runs: list[Run], records: int) -> Measured:
    """Records/s from the first record handed out to the last (joining left out)."""
    return Measured([records / max(1e-6, r.seconds - r.first_s) for r in runs], "records/s")


def report(ctx: BenchContext, records: int, python: dict[tuple[str, int], list[Run]],
            spark_runs: dict[str, dict[str, list[Run]]],
            readers: tuple[ReaderKind, ...] = READERS) -> SuiteReport:
    report = SuiteReport("overhead" if readers == READERS else "overhead-readers",
                         ctx.command)
    if python:
        _python_tables(ctx, records, python, report, readers)
    for master, runs in spark_runs.items():
        _spark_table(ctx, records, master, runs, report)
    report.raw = {"records": records,
                  "readers": {k.name: {"label": k.label, "client": k.client, "mode": k.mode,
                                       "loop": k.loop, "anchor": k.anchor} for k in readers},
                  "python": {f"{k}x{n}": [vars(r) for r in runs]
                             for (k, n), runs in python.items()},
                  "spark": {master: {name: [vars(r) for r in done] for name, done in runs.items()}
                            for master, runs in spark_runs.items()}}
    return report


def _python_tables(ctx: BenchContext, records: int, python: dict[tuple[str, int], list[Run]],
                   report: SuiteReport, readers: tuple[ReaderKind, ...]) -> None:
    counts = process_counts(ctx.quick)
    for n in counts:
        rates = {k.name: _rates(python[(k.name, n)], records) for k in readers}
        steady = {k.name: _steady_rates(python[(k.name, n)], records) for k in readers}
        rows = []
        for kind in readers:
            runs = python[(kind.name, n)]
            dups = [r.duplicates for r in runs]
            first = statistics.median(r.first_s for r in runs)
            if kind.anchor is None:
                anchor, versus, steady_versus = "—", "anchor", "anchor"
            else:
                anchor = kind.anchor
                versus = ratio(rates[kind.name].median, rates[kind.anchor].median)
                steady_versus = ratio(steady[kind.name].median, steady[kind.anchor].median)
            rows.append([kind.name, kind.label, rates[kind.name].cell(), anchor, versus,
                         f"{first:.2f}", f"{steady[kind.name].median:,.0f}", steady_versus,
                         f"{max(dups):,}", f"{max(r.lost for r in runs):,}"])
        processes = "1 process" if n == 1 else f"{n} processes"
        report.tables.append(Table(
            f"Exclusive consumers, {processes}, {records:,} records of 100 B over "
            f"{PARTITIONS} partitions (records/s, median (range) of {ctx.repeat})",
            ["reader", "what", "records/s", "anchor", "ours / anchor", "first record (s)",
             "records/s after the first", "ours / anchor after the first", "duplicates (max)",
             "lost to takeovers (max)"],
            rows,
            ["records/s: go to the last record handed out; first record: go to the first "
             "record handed out (median); after the first: from the first record to the "
             "last, joining left out. Marshal joining and claiming (fresh group, "
             f"HI {HI_S:g} s) included, Python start-up not. Separate processes; 2 cores "
             "also run the broker. Anchors: kp-iter (kafka-python iteration) for alo-iter "
             "and amo-iter; kp-poll (kafka-python poll) for alo-poll, alo-batch, amo-poll; "
             "ck (confluent-kafka consume, with the librdkafka settings of our confluent "
             "fetcher) for the ck-* readers, taking what is there or waiting for one message "
             "as our fetcher does. AMO at its defaults (windows of at most 10,000 records "
             "and about 0.1 s). Lost to takeovers: AMO records a member confirmed and then "
             "lost with its claim, starved past 2 HI (the coordination log's audit shows the "
             "takeover); at-most-once allows it, and a record missing without one fails the "
             "run."]))
    for client, title in (("kafka-python", "kafka-python fetching"),
                          ("confluent", "librdkafka (confluent-kafka) fetching")):
        kinds = [k for k in readers if k.client == client]
        if not kinds:
            continue
        report.plots.append(Plot(
            f"Exclusive consumers, {title}: records/s (median)", "bar", "processes",
            "records/s", [str(n) for n in counts],
            {k.name: [_rates(python[(k.name, n)], records).median for n in counts]
             for k in kinds}))


def _spark_table(ctx: BenchContext, records: int, master: str, runs: dict[str, list[Run]],
                 report: SuiteReport) -> None:
    rates = {name: Measured([r.delivered / r.seconds for r in done], "records/s")
             for name, done in runs.items()}
    readers = [r for r in spark_rows.readers_on(master) if r.batch_records is None]
    rows = []
    for reader in readers:
        versus = ("anchor" if reader.anchor is None
                  else ratio(rates[reader.name].median, rates[reader.anchor].median))
        rows.append([reader.label, rates[reader.name].cell(), reader.anchor or "—", versus])
    where = spark_rows.master_label(master)
    only = ("" if master == "local" else " Only the readers marked for the cluster run here "
            "(format(\"kafka\"), format(\"marshal\") ALO, read_stream ALO).")
    report.tables.append(Table(
        f"Spark source, the same {records:,} records, {where}, availableNow, noop sink "
        f"(records/s, median (range) of {ctx.repeat})",
        ["reader", "records/s", "anchor", "ours / anchor"], rows,
        ["start() to the query's end (joining the group, planning and every batch); the "
         "session start-up is outside. "
         + ("A smoke run: no warm-up queries. " if ctx.quick else
            "Every repetition starts with an untimed warm-up query of each source (Spark's "
            "Python workers up), and the readers' order turns by one each repetition. ")
         + "Our executors fetch with librdkafka (option fetcher=auto, "
         "confluent-kafka installed). read_stream rows: from read_stream() (joining the "
         "group) to the end of run(available_now=True), each batch written with "
         "df.write.format(\"noop\"). Keyed records: 10,000 distinct keys. Spark's Kafka "
         f"source is spark-sql-kafka-0-10_2.13:{spark_rows.SPARK_KAFKA_VERSION}.{only}"]))
    report.plots.append(Plot(
        f"Spark sources, {where}: records/s (median)", "bar", "source", "records/s",
        [r.name for r in readers], {"records/s": [rates[r.name].median for r in readers]}))
    small = [r for r in spark_rows.readers_on(master) if r.batch_records is not None]
    if small:
        _small_batch_table(ctx, records, where, small, runs, rates, report)


def _small_batch_table(ctx: BenchContext, records: int, where: str,
                       small: list[spark_rows.SparkReader], runs: dict[str, list[Run]],
                       rates: dict[str, Measured], report: SuiteReport) -> None:
    """The small-batch rows: records/s and the time each micro-batch took."""
    per_batch = {r.name: statistics.median(run.batch_ms for run in runs[r.name]) for r in small}
    rows = []
    for reader in small:
        batches = statistics.median(run.batches for run in runs[reader.name])
        if reader.anchor is None:
            versus, extra = "anchor", "—"
        else:
            versus = ratio(rates[reader.name].median, rates[reader.anchor].median)
            extra = f"{per_batch[reader.name] - per_batch[reader.anchor]:+.0f}"
        rows.append([reader.label, rates[reader.name].cell(), f"{batches:.0f}",
                     f"{per_batch[reader.name]:.0f}", reader.anchor or "—", versus, extra])
    small_records = spark_rows.records_of(small[0], records, ctx.quick)
    report.tables.append(Table(
        f"Spark, small batches: {small_records:,} records in batches of at most "
        f"{spark_rows.SMALL_BATCH:,}, {where}, availableNow, noop sink (median of "
        f"{ctx.repeat})",
        ["reader", "records/s", "batches", "ms per batch", "anchor", "ours / anchor",
         "ms per batch over the anchor"], rows,
        ["The fixed cost of a micro-batch: every reader limited to "
         f"{spark_rows.SMALL_BATCH:,} records per batch (format(\"kafka\"): "
         "maxOffsetsPerTrigger; ours: maxRecordsPerTrigger), its own topic of "
         f"{small_records:,} records over {PARTITIONS} partitions. records/s: start() or "
         "read_stream() to the end, joining included. ms per batch: the median time of a "
         "batch after the first (a query's triggerExecution: planning, running and "
         "committing it; read_stream: from one batch's process() call to the next)."]))
