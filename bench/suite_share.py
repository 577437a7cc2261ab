"""Suite ``share``: share consumers on one partition against Kafka's native share groups.

Configurations: 1, 2, 4 and 8 members on ONE partition, at 0 ms and 2 ms of simulated work
(``time.sleep``) per record, 100-byte records (``--quick``: 1 and 2 members at 0 ms, 2 members
at 2 ms). Per work setting one fresh topic holds N records (N = 50,000 at 0 ms and 5,000 at
2 ms; ``--quick``: 500), produced
once; every run uses a fresh group (and, for ours, a fresh coordination topic), so every run
reads all N from the beginning. Repetitions are interleaved: per repetition, per work
setting, per member count, ours then native; then, at 0 ms, the perf-test ceiling.

* **Ours** (:func:`bench.share.run_once`): members are ``python -m bench.share_member --worker``
  processes (a pool started once). Prepared (a ``Marshaler`` open on the run's coordination
  topic, HI 1 s) before *go*; on go each opens ``consumer([topic], "share",
  offset_reset="earliest", batch_size=100, acknowledgement="explicit")``, sleeps the work and
  ``ack(record, "accept")`` per record. Joining (replay, heartbeat, initializing the
  share-partition) is inside the measured time. The clock stops at the broker time of the
  coordination record that moved the SPSO to N (an observer replays the coordination
  partition). Coordination records per 1,000 consumed: the coordination partition's records
  from go to that record, per 1,000.
  At 0 ms the same members run again fetching with librdkafka (``fetcher="confluent"``), as
  the native anchor does: rows "N (ours with librdkafka)".
* **Native** (:func:`bench.native_share.run_once`): Kafka's KIP-932 share groups on the same
  broker through confluent-kafka's ``ShareConsumer`` (librdkafka), each member a ``python -m
  bench.native_share --worker`` process, explicit acknowledgement (``ACCEPT`` per record after
  the work, ``commit_async()`` after each batch). The group's ``share.auto.offset.reset`` is
  set to ``earliest`` before its members start. Members are constructed and subscribed
  before *go* (librdkafka starts joining then, in its background thread; go follows as soon
  as all are subscribed, so joining is inside the measured time too: about 5 s, one share
  group heartbeat interval at the broker's default). The clock stops when the broker has
  confirmed the acceptance of the last of the N offsets (the acknowledgement-commit
  callback, reported with the worker's wall-clock time).
* **Ceiling** (0 ms only): Kafka's own ``kafka-share-consumer-perf-test``
  (:func:`bench.native_share.perf_test`, Java, 1, 2, 4, 8 ``--threads`` in one JVM;
  ``--quick``: 1), implicit acknowledgement, N records, a fresh group set to earliest. Its
  clock runs from before ``subscribe`` to the N-th record *received*: an upper bound, not the
  same measurement.

Two rates per run: *from go* (N / go to the N-th acceptance: joining included) and *after
joining* (N / first record handed out to the N-th acceptance: ours from the first
AcquiringRecords that won records, native from the first record a member received, the
perf test from its first record). Every run checks that each of the N offsets was handed out;
duplicates are deliveries minus distinct offsets (redeliveries included).

Some rows only: ``MARSHAL_BENCH_SHARE_MEMBERS=1,8`` (member counts, also the perf test's threads)
and ``MARSHAL_BENCH_SHARE_WORK=0`` (work settings, ms), e.g. ``MARSHAL_BENCH_SHARE_MEMBERS=1,8
MARSHAL_BENCH_SHARE_WORK=0 python -m bench share``.

On 2 cores, 8 processes of a group plus the broker (and this process) share the machine: the
8-member figures measure the machine as much as the protocols (at zero work ours read with one
member and seven standing by; with work, every member shares).

Time (2 cores, estimated from single full-size native and perf-test runs and the earlier
``bench.share`` figures): one repetition is about 4 minutes (ours at 0 ms ~1.2 min and at 2 ms
~0.6 min; native ~1.5 min, each run paying the share group's ~5 s join; perf test ~0.8 min);
``--repeat 3`` about 13 to 15 minutes with the broker and producing. ``--quick``: about 40 s.
"""

from __future__ import annotations

import os
import statistics
from dataclasses import asdict, dataclass
from typing import Any

from bench import native_share, share, share_member
from bench.harness import BenchContext
from bench.report import Measured, Plot, SuiteReport, Table, ratio

HI_S = share.HI_S
#: Run some rows only: member counts (``1,8``) and work settings in ms (``0``), comma-separated.
MEMBERS_VAR, WORK_VAR = "MARSHAL_BENCH_SHARE_MEMBERS", "MARSHAL_BENCH_SHARE_WORK"


@dataclass(frozen=True)
class Sizes:
    members: dict[float, tuple[int, ...]]  # member counts per work setting (ms per record)
    records: dict[float, int]  # N per work setting
    perf_threads: tuple[int, ...]

    @property
    def works_ms(self) -> tuple[float, ...]:
        return tuple(self.members)

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        if quick:
            sizes = cls({0.0: (1, 2), 2.0: (2,)}, {0.0: 500, 2.0: 500}, (1,))
        else:
            sizes = cls({0.0: (1, 2, 4, 8), 2.0: (1, 2, 4, 8)}, {0.0: 50_000, 2.0: 5_000},
                        (1, 2, 4, 8))
        return sizes.only(os.environ.get(MEMBERS_VAR, ""), os.environ.get(WORK_VAR, ""))

    def only(self, members: str, works: str) -> Sizes:
        """These rows only: member counts and work settings as comma-separated text (empty:
        all)."""
        keep_m = {int(m) for m in members.split(",") if m.strip()}
        keep_w = {float(w) for w in works.split(",") if w.strip()}
        rows = {w: tuple(m for m in ms if not keep_m or m in keep_m)
                for w, ms in self.members.items() if not keep_w or w in keep_w}
        rows = {w: ms for w, ms in rows.items() if ms}
        if not rows:
            raise ValueError(f"{MEMBERS_VAR}={members!r} {WORK_VAR}={works!r} leave no row")
        return Sizes(rows, {w: self.records[w] for w in rows},
                     tuple(t for t in self.perf_threads if not keep_m or t in keep_m))


@dataclass
class Cell:
    """Every repetition of one (implementation, work, members) configuration."""

    rate: list[float]
    steady: list[float]
    to_first_s: list[float]
    duplicates: list[int]
    per_1000: list[float]
    split: str = ""  # records per member in the last repetition

    @classmethod
    def empty(cls) -> Cell:
        return cls([], [], [], [], [])

    def add(self, run: share.Run, records: int) -> None:
        """One repetition of our members."""
        self.rate.append(run.rate(records))
        self.steady.append(run.steady_rate(records))
        self.to_first_s.append(run.to_first_acquire_s)
        self.duplicates.append(run.duplicates)
        self.per_1000.append(run.per_1000(records))
        self.split = "/".join(str(n) for n in run.per_member)


def run(ctx: BenchContext) -> SuiteReport:
    sizes = Sizes.of(ctx.quick)
    repeat = 1 if ctx.quick else ctx.repeat
    ctx.say("resolving the kafka-tools jars (Maven, once)")
    native_share.tools_lib()
    topics: dict[float, str] = {}
    for work in sizes.works_ms:
        topics[work] = ctx.create_topic(f"bench-share-{ctx.tag()}", 1)
        ctx.produce(topics[work], sizes.records[work], 1, size=share.RECORD_BYTES)
    ours: dict[tuple[float, int], Cell] = {}
    #: 0 ms rows again with our members fetching through librdkafka, as the native anchor.
    ours_rdk: dict[int, Cell] = {}
    native: dict[tuple[float, int], Cell] = {}
    perf: dict[int, Cell] = {t: Cell.empty() for t in sizes.perf_threads}
    raw: dict[str, list[dict[str, Any]]] = {"ours": [], "native": [], "perf_test": []}
    most = max(max(counts) for counts in sizes.members.values())
    with share_member.worker_pool(most) as our_workers, native_share.worker_pool(most) as workers:
        for i in range(repeat):
            for work in sizes.works_ms:
                records, topic = sizes.records[work], topics[work]
                for members in sizes.members[work]:
                    key = (work, members)
                    ctx.say(f"repetition {i + 1}/{repeat}: {members} member(s), {work:g} ms, "
                            f"{records:,} records: ours")
                    mine = share.run_once(ctx.bootstrap, our_workers, members, topic, records,
                                          work, HI_S)
                    ours.setdefault(key, Cell.empty()).add(mine, records)
                    raw["ours"].append({"repetition": i, "work_ms": work, "members": members,
                                        "records": records, **asdict(mine)})
                    ctx.say(f"  ours {mine.rate(records):,.0f} records/s "
                            f"({mine.steady_rate(records):,.0f} after joining), "
                            f"{mine.duplicates} duplicates, "
                            f"{mine.per_1000(records):.1f} coordination records / 1,000")
                    if work == 0.0:
                        ctx.say(f"repetition {i + 1}/{repeat}: {members} member(s), 0 ms, "
                                f"{records:,} records: ours, fetching with librdkafka")
                        rdk = share.run_once(ctx.bootstrap, our_workers, members, topic,
                                             records, work, HI_S, fetcher="confluent")
                        ours_rdk.setdefault(members, Cell.empty()).add(rdk, records)
                        raw.setdefault("ours_librdkafka", []).append({
                            "repetition": i, "work_ms": work, "members": members,
                            "records": records, **asdict(rdk)})
                        ctx.say(f"  ours (librdkafka) {rdk.rate(records):,.0f} records/s "
                                f"({rdk.steady_rate(records):,.0f} after joining), "
                                f"{rdk.duplicates} duplicates")
                    ctx.say(f"repetition {i + 1}/{repeat}: {members} member(s), {work:g} ms, "
                            f"{records:,} records: native")
                    theirs = native_share.run_once(ctx.bootstrap, workers, members, topic,
                                                   records, work)
                    cell = native.setdefault(key, Cell.empty())
                    cell.rate.append(theirs.rate(records))
                    cell.steady.append(theirs.steady_rate(records))
                    cell.to_first_s.append(theirs.to_first_s)
                    cell.duplicates.append(theirs.duplicates)
                    cell.split = "/".join(str(n) for n in theirs.per_member)
                    raw["native"].append({"repetition": i, "work_ms": work, "members": members,
                                          "records": records, **asdict(theirs)})
                    ctx.say(f"  native {theirs.rate(records):,.0f} records/s "
                            f"({theirs.steady_rate(records):,.0f} after joining), "
                            f"{theirs.duplicates} duplicates, split "
                            f"{'/'.join(str(n) for n in theirs.per_member)}")
            if 0.0 in sizes.works_ms:
                records, topic = sizes.records[0.0], topics[0.0]
                for threads in sizes.perf_threads:
                    ctx.say(f"repetition {i + 1}/{repeat}: kafka-share-consumer-perf-test "
                            f"--threads {threads}, {records:,} records")
                    result = native_share.perf_test(ctx.bootstrap, topic, records, threads)
                    cell = perf[threads]
                    cell.rate.append(result.records_per_s)
                    if result.steady_per_s is not None:
                        cell.steady.append(result.steady_per_s)
                    raw["perf_test"].append({"repetition": i, "threads": threads,
                                             "records": records, **asdict(result)})
                    ctx.say(f"  perf test {result.records_per_s:,.0f} records/s "
                            f"({result.steady_per_s or float('nan'):,.0f} after the first)")
    return _report(ctx, sizes, ours, ours_rdk, native, perf, raw)


def _row(label: str, a: Cell, b: Cell) -> list[str]:
    return [
        label,
        Measured(a.rate).cell(), Measured(b.rate).cell(),
        ratio(statistics.median(a.rate), statistics.median(b.rate)),
        Measured(a.steady).cell(), Measured(b.steady).cell(),
        ratio(statistics.median(a.steady), statistics.median(b.steady)),
        f"{statistics.median(a.to_first_s):.2f} / {statistics.median(b.to_first_s):.2f}",
        str(sum(a.duplicates)), str(sum(b.duplicates)),
        Measured(a.per_1000).cell(1), f"{a.split} / {b.split}",
    ]


def _report(ctx: BenchContext, sizes: Sizes, ours: dict[tuple[float, int], Cell],
            ours_rdk: dict[int, Cell], native: dict[tuple[float, int], Cell],
            perf: dict[int, Cell], raw: dict[str, Any]) -> SuiteReport:
    tables, plots = [], []
    for work in sizes.works_ms:
        records = sizes.records[work]
        counts = sizes.members[work]
        rows = []
        for members in counts:
            rows.append(_row(str(members), ours[(work, members)], native[(work, members)]))
        if work == 0.0:
            for members in counts:
                rows.append(_row(f"{members} (ours with librdkafka)", ours_rdk[members],
                                 native[(work, members)]))
        notes = [
            f"{records:,} records of 100 bytes on one partition, {work:g} ms of work per record; "
            f"median (range) of {len(ours[(work, counts[0])].rate)} repetition(s). "
            "*From go*: N / (go to the N-th acceptance), joining included; *after joining*: "
            "from the first record handed out. Ours: marshal_py share mode (HI 1 s, batch "
            "100, explicit accept); native: Kafka share groups through confluent-kafka "
            "ShareConsumer (explicit ACCEPT, commit_async per batch, librdkafka defaults). "
            "Duplicates: summed over the repetitions.",
        ]
        if work == 0.0:
            notes.append("*ours with librdkafka*: the same members with `fetcher=\"confluent\"` "
                         "(records fetched by librdkafka, as the native anchor fetches them; "
                         "coordination unchanged).")
        if work == 0.0:
            for threads in sizes.perf_threads:
                cell = perf[threads]
                rows.append([
                    f"{threads} (perf test)", "—", Measured(cell.rate).cell(), "—", "—",
                    Measured(cell.steady).cell() if cell.steady else "—", "—", "—", "—", "—",
                    "—", "—",
                ])
            notes.append("*perf test*: Kafka's kafka-share-consumer-perf-test (Java "
                         "KafkaShareConsumer, --threads in one JVM, implicit acknowledgement): "
                         "its own figure, subscribe to the N-th record *received* (a ceiling, "
                         "not the same measurement), and after its first record.")
        if max(counts) >= 8:
            notes.append("On 2 cores, 8 member processes and the broker share the machine: "
                         "those rows measure the machine as much as the protocols.")
        tables.append(Table(
            f"Share mode, one partition, {work:g} ms per record: records/s, ours vs Kafka "
            "share groups",
            ["members", "ours records/s (from go)", "native records/s (from go)",
             "ours/native", "ours after joining", "native after joining", "ours/native",
             "to first record s (ours / native)", "ours duplicates", "native duplicates",
             "ours coordination records / 1,000", "records per member, last run (ours / native)"],
            rows, notes))
        series: dict[str, list[float | None]] = {
            "ours, from go": [statistics.median(ours[(work, m)].rate) for m in counts],
            "ours, after joining": [statistics.median(ours[(work, m)].steady)
                                    for m in counts],
            **({"ours with librdkafka, after joining": [
                statistics.median(ours_rdk[m].steady) for m in counts]} if work == 0.0 else {}),
            "native (confluent-kafka), from go": [statistics.median(native[(work, m)].rate)
                                                  for m in counts],
            "native (confluent-kafka), after joining": [
                statistics.median(native[(work, m)].steady) for m in counts],
        }
        if work == 0.0:
            series["perf test (Java, threads), from subscribe"] = [
                statistics.median(perf[m].rate) if m in perf and perf[m].rate else None
                for m in counts]
            series["perf test (Java, threads), after first record"] = [
                statistics.median(perf[m].steady) if m in perf and perf[m].steady else None
                for m in counts]
        plots.append(Plot(f"Share mode, one partition, {work:g} ms per record",
                          "line", "members", "records/s", list(counts), series,
                          log_y=True))
    return SuiteReport("share", ctx.command, tables, plots, raw)
