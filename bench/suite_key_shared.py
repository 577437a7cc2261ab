"""Suite ``key-shared``: key-shared processes on the Parallel Consumer's published setup.

The Confluent Parallel Consumer (PC) README publishes an "illustrative" table (section
*Illustrative Performance Example*): 10,000 messages, one partition, a random processing time
between 0 and 5 ms per message, one PC instance with its default options (16 threads,
``maxConcurrency`` 100), durations per ordering mode and key count. This suite runs that
setup with our key-shared mode and with a plain serial consumer on one broker, and quotes the
published PC figures beside ours, labelled as published (not measured here).

Measured, per key count (20 and 1,000; ``--quick``: 20), ``ctx.repeat`` times, interleaved
(each repetition: the serial anchor, then ours with 1, 4 and 8 processes):

* **Ours**: :func:`bench.key_shared.run_once` — N separate worker processes
  (``python -m bench.key_shared --worker``), each a ``Marshaler`` (HI 1 s, a fresh group and
  coordination topic per run) and ``Marshaler.consumer([topic], "key-shared",
  offset_reset="earliest")`` (implicit commit). Every record costs a sleep of its own random
  work: uniform 0-5 ms drawn by :func:`bench.key_shared.random_work` from one fixed seed in
  offset order, so a record costs the same whichever process handles it, and the same in the
  anchor. The clock starts when the parent sends *go* to the ready processes (Python start-up
  and opening the ``Marshaler`` are outside; joining, claims and hand-overs are inside) and
  stops when the last record's work has ended. Checked on every run: every offset handed out
  (else the run fails), duplicates (hand-outs beyond the first of an offset), and per-key
  order: every worker reports, per key, the offsets it started in order with the wall time it
  started each; merged over the processes, the first hand-out of each offset of a key must
  start in offset order (redeliveries after a hand-over are duplicates, not order errors).
* **Anchor (measured)**: a plain kafka-python ``KafkaConsumer`` in the suite's process,
  partition 0 assigned, from the beginning, handling the same records one after the other
  with the same work — what one consumer per partition does, the PC's "Partition" baseline.
  The clock starts when the consumer is created and stops when the last record's work ends.
* **Bound (computed, not measured)**: from the same seeded work, the shortest time N processes
  could take keeping per-key order: max(total work / min(N, keys), the heaviest key's total
  work) — no fetching, joining or hand-over; ours / bound shows what the rest costs. Beside
  it, the work the busiest process actually did (its trace summed over the seeded work): keys
  are split by hash range, so with 20 keys over 8 processes one process may hold 5 keys
  while another holds 1, and that process sets the time.

Published figures are constants below, quoted from the PC README with its URL; the PC table
gives one instance only, so the comparable figure is its speed-up over its own serial
("Partition" ordering) run, beside our speed-up over our serial anchor. Its group-size charts
are images without numbers in the text, so nothing is quoted for 4 or 8 PC instances.

Sizes: full 10,000 records of 100 bytes (key + value); the serial anchor takes ~29 s (10,000 x
2.5 ms plus sleep overshoot), ours ~30 s with 1 process and ~8-14 s with 4 or 8 (measured
while probing: 8 processes, 13.7 s with 20 keys, 7.9 s with 1,000), plus 5-8 s starting the
processes outside the clock; per repetition about 2 x (29 + 35 + 15 + 20) s, so ~10 minutes
at ``--repeat 3`` on 2 cores (estimate, plus ~20 s producing). ``--quick``: 1,000 records,
20 keys, 1 and 4 processes, once: ~20 s of suite (~30 s with the broker).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from bench.harness import BenchContext, BenchError
from bench.key_shared import HI_S, RECORD_BYTES, Run, produce, random_work, run_once
from bench.report import Measured, Plot, SuiteReport, Table, ratio

WORK_MAX_MS = 5.0
SEED = 20_240_601  # the random work; fixed so every run and the bound share it

# -- published, not measured here ---------------------------------------------------------------

PUBLISHED_URL = ("https://github.com/confluentinc/parallel-consumer"
                 "#illustrative-performance-example")
PUBLISHED_SOURCE = ("confluentinc/parallel-consumer README.adoc, section \"Illustrative "
                    "Performance Example\" (same table at commits 00a6a9e and 9c5cbae)")
PUBLISHED_SETUP = ("one PC instance, default ParallelConsumerOptions (maxUncommittedMessages"
                   "ToHandle 1000, maxConcurrency 100, numberOfThreads 16), 10,000 messages, "
                   "one partition, random processing time 0-5 ms; hardware, Kafka and PC "
                   "versions not stated; the README calls the figures \"based on real "
                   "performance measurement results\" but \"for illustrative purposes\" "
                   "(measured by its VolumeTests.java)")
PUBLISHED_RECORDS = 10_000
#: Durations in seconds, as published: (ordering, keys) -> s.
PUBLISHED_S: dict[tuple[str, int | None], float] = {
    ("Partition", None): 22.221,  # "20 (not relevant)": the serial baseline
    ("Key", 1): 26.743,
    ("Key", 20): 2.242,
    ("Key", 1000): 2.056,
    ("Unordered", None): 2.829,
}


@dataclass(frozen=True)
class Sizes:
    records: int
    keys: tuple[int, ...]
    processes: tuple[int, ...]

    @classmethod
    def of(cls, quick: bool) -> Sizes:
        if quick:
            return cls(1_000, (20,), (1, 4))
        return cls(10_000, (20, 1_000), (1, 4, 8))


# -- the anchor and the bound ---------------------------------------------------------------------


@dataclass
class Serial:
    seconds: float
    to_first_s: float


def serial_anchor(bootstrap: str, topic: str, records: int, work: list[float]) -> Serial:
    """A plain kafka-python consumer handles partition 0 of ``topic`` from the beginning, one
    record after the other, sleeping ``work[offset]`` per record; it checks every offset
    arrives once and in order."""
    started = time.perf_counter()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None,
                             enable_auto_commit=False, auto_offset_reset="earliest",
                             client_id="bench-serial-anchor")
    first: float | None = None
    expected = 0
    try:
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        deadline = started + 60 + 2 * sum(work)
        while expected < records:
            for batch in consumer.poll(timeout_ms=500).values():
                for record in batch:
                    if first is None:
                        first = time.perf_counter()
                    if record.offset != expected:
                        raise BenchError(f"serial anchor: offset {record.offset} arrived where "
                                         f"{expected} was expected")
                    time.sleep(work[record.offset])
                    expected += 1
            if time.perf_counter() > deadline:
                raise BenchError(f"serial anchor handled {expected:,}/{records:,} records of "
                                 f"{topic} in time")
        ended = time.perf_counter()
    finally:
        consumer.close()
    assert first is not None
    return Serial(ended - started, first - started)


def bound_s(work: list[float], keys: int, processes: int) -> float:
    """Computed lower bound on the time ``processes`` key-ordered workers need for ``work``
    (record i has key i % keys): max(total / min(processes, keys), heaviest key's total)."""
    per_key = [0.0] * keys
    for offset, seconds in enumerate(work):
        per_key[offset % keys] += seconds
    return max(sum(work) / min(processes, keys), max(per_key))


def busiest_work_s(traces: list[dict[str, list[list[float]]]], work: list[float]) -> float:
    """Seconds of work the busiest process did (every hand-out it started, redeliveries
    included): the floor its split of the keys set, whatever the rest costs."""
    return max((sum(work[int(offset)] for entries in trace.values() for offset, _ in entries)
                for trace in traces), default=0.0)


def order_violations(traces: list[dict[str, list[list[float]]]]) -> tuple[int, int]:
    """(violations, keys) over the workers' per-key traces: merged by start time, the first
    hand-out of each offset of a key must come in offset order."""
    merged: dict[str, list[tuple[float, int]]] = {}
    for trace in traces:
        for key, entries in trace.items():
            merged.setdefault(key, []).extend((start, int(offset)) for offset, start in entries)
    violations = 0
    for handed in merged.values():
        seen: set[int] = set()
        highest = -1
        for _start, offset in sorted(handed):
            if offset in seen:
                continue  # a redelivery: counted as a duplicate
            seen.add(offset)
            if offset < highest:
                violations += 1
            highest = max(highest, offset)
    return violations, len(merged)


# -- the suite -----------------------------------------------------------------------------------


def run(ctx: BenchContext) -> SuiteReport:
    sizes = Sizes.of(ctx.quick)
    records = sizes.records
    work = random_work(SEED, records, WORK_MAX_MS)
    ctx.say(f"key-shared: {records:,} records, keys {sizes.keys}, processes {sizes.processes}, "
            f"random work 0-{WORK_MAX_MS:g} ms (total {sum(work):.1f} s of work)")

    admin = ctx.admin()
    producer = KafkaProducer(bootstrap_servers=ctx.bootstrap, acks="all", linger_ms=20,
                             batch_size=256 * 1024)
    try:
        topics = {keys: produce(ctx.bootstrap, admin, producer, records, keys)
                  for keys in sizes.keys}
    finally:
        for closing in (producer.close, admin.close):
            with contextlib.suppress(Exception):
                closing()

    ours: dict[int, dict[int, list[Run]]] = {k: {p: [] for p in sizes.processes}
                                             for k in sizes.keys}
    serial: dict[int, list[Serial]] = {k: [] for k in sizes.keys}
    orders: dict[int, dict[int, list[tuple[int, int]]]] = {k: {p: [] for p in sizes.processes}
                                                          for k in sizes.keys}

    def repetition(i: int) -> None:
        for keys in sizes.keys:
            anchor = serial_anchor(ctx.bootstrap, topics[keys], records, work)
            serial[keys].append(anchor)
            ctx.say(f"  {keys:,} keys, serial anchor: {records / anchor.seconds:,.0f} "
                    f"records/s ({anchor.seconds:.2f} s)")
            for processes in sizes.processes:
                result = run_once(ctx.bootstrap, topics[keys], processes, records, 0.0, HI_S,
                                  work_max_ms=WORK_MAX_MS, work_seed=SEED, trace=True)
                checked = order_violations(result.traces)
                ours[keys][processes].append(result)
                orders[keys][processes].append(checked)
                ctx.say(f"  {keys:,} keys, {processes} process(es): "
                        f"{result.rate(records):,.0f} records/s ({result.seconds:.2f} s, first "
                        f"after {result.to_first_s:.2f} s), split "
                        f"{'/'.join(str(n) for n in result.per_member)}, "
                        f"{result.duplicates} duplicates, {checked[0]} order violations over "
                        f"{checked[1]} keys")

    ctx.repeated("key-shared vs serial", repetition)

    tables: list[Table] = []
    raw: dict[str, object] = {
        "records": records, "record_bytes": RECORD_BYTES, "work_max_ms": WORK_MAX_MS,
        "seed": SEED, "total_work_s": sum(work), "hi_s": HI_S,
        "published": {"url": PUBLISHED_URL, "source": PUBLISHED_SOURCE,
                      "setup": PUBLISHED_SETUP, "records": PUBLISHED_RECORDS,
                      "durations_s": {f"{o} {k if k is not None else '(not relevant)'}": s
                                      for (o, k), s in PUBLISHED_S.items()}},
        "by_keys": {},
    }
    rates_by_keys: dict[int, list[float | None]] = {}
    serial_medians: list[float] = []
    published_serial = PUBLISHED_RECORDS / PUBLISHED_S[("Partition", None)]
    for keys in sizes.keys:
        anchor_m = Measured([records / s.seconds for s in serial[keys]], "records/s")
        serial_medians.append(anchor_m.median)
        rows = []
        rates: list[float | None] = []
        for processes in sizes.processes:
            runs = ours[keys][processes]
            ours_m = Measured([r.rate(records) for r in runs], "records/s")
            rates.append(ours_m.median)
            bound = records / bound_s(work, keys, processes)
            violations = sum(v for v, _ in orders[keys][processes])
            busiest = Measured([busiest_work_s(r.traces, work) for r in runs], "s")
            rows.append([
                str(processes), ours_m.cell(), anchor_m.cell(),
                ratio(ours_m.median, anchor_m.median), f"{bound:,.0f}",
                ratio(ours_m.median, bound), busiest.cell(2),
                str(sum(r.duplicates for r in runs)), str(violations),
                Measured([r.to_first_s for r in runs], "s").cell(2)])
        rates_by_keys[keys] = rates
        published_key = PUBLISHED_S.get(("Key", keys))
        if published_key is not None:
            published_rate = PUBLISHED_RECORDS / published_key
            rows.append([
                "published PC: 1 instance, 16 threads, KEY ordering (not measured here)",
                f"{published_rate:,.0f} ({published_key:g} s)",
                f"{published_serial:,.0f} ({PUBLISHED_S[('Partition', None)]:g} s, PC "
                "PARTITION ordering)", ratio(published_rate, published_serial),
                "—", "—", "—", "—", "—", "—"])
        notes = [
            f"Ours: key-shared worker processes (HI {HI_S:g} s), clock from *go* to the end of "
            "the last record's work (joining and hand-overs inside). Anchor (measured, same "
            "run, same broker and topic): one plain kafka-python consumer handling the "
            "records serially with the same work. Bound (computed, not measured): max(total "
            "work / min(processes, keys), heaviest key's work) from the same seeded work "
            f"(total {sum(work):.2f} s). Medians of {ctx.repeat}; ranges in brackets; "
            "duplicates and order violations summed over the repetitions.",
            "Busiest process's work: the seconds of work the most loaded process did in the "
            "run (from its trace and the seeded work). Keys are split by hash range, so with "
            "few keys the split is uneven and the busiest process, not total work / "
            "processes, sets the time; the rest of the gap to it is joining (see the first "
            "record), fetching and hand-overs.",
        ]
        if published_key is not None:
            notes.append(
                f"Published, not measured here: {PUBLISHED_URL} — {PUBLISHED_SETUP}. Records/s "
                "derived by us as 10,000 / the published duration; its ratio is KEY over its "
                "own PARTITION (serial) run. No published figures for 4 or 8 PC instances "
                "(only charts without numbers).")
        else:
            notes.append(f"The Parallel Consumer README ({PUBLISHED_URL}) publishes no figure "
                         f"for {keys:,} keys.")
        tables.append(Table(
            f"Key-shared on one partition, {keys:,} keys: {records:,} records of "
            f"{RECORD_BYTES} bytes, random work 0-{WORK_MAX_MS:g} ms per record",
            ["processes", "ours (records/s)", "serial anchor (records/s)", "ours / serial",
             "computed bound (records/s)", "ours / bound", "busiest process's work (s)",
             "duplicates",
             "per-key order violations", "to first record (s)"], rows, notes))
        raw_by_keys = raw["by_keys"]
        assert isinstance(raw_by_keys, dict)
        raw_by_keys[str(keys)] = {
            "topic": topics[keys],
            "serial": [asdict(s) for s in serial[keys]],
            "ours": {str(p): [{**{k: v for k, v in asdict(r).items() if k != "traces"},
                               "rate": r.rate(records),
                               "order_violations": orders[keys][p][i][0],
                               "busiest_work_s": busiest_work_s(r.traces, work),
                               "keys_traced": orders[keys][p][i][1]}
                              for i, r in enumerate(ours[keys][p])]
                     for p in sizes.processes},
            "bound_records_per_s": {str(p): records / bound_s(work, keys, p)
                                    for p in sizes.processes},
        }

    tables.append(Table(
        "Published by the Parallel Consumer (not measured here)",
        ["ordering", "keys", "duration (s)", "records/s (10,000 / duration)",
         "vs PARTITION ordering"],
        [[o, f"{k:,}" if k is not None else "(not relevant)", f"{s:g}",
          f"{PUBLISHED_RECORDS / s:,.0f}",
          ratio(PUBLISHED_S[("Partition", None)], s)]
         for (o, k), s in PUBLISHED_S.items()],
        [f"Quoted from {PUBLISHED_SOURCE}: {PUBLISHED_URL}. Setup: {PUBLISHED_SETUP}. The "
         "published table also has rows for 2, 5, 10, 50, 100 and 10,000 keys (not quoted)."]))

    serial_flat = sum(serial_medians) / len(serial_medians)
    series: dict[str, list[float | None]] = {
        f"ours, {keys:,} keys": rates_by_keys[keys] for keys in sizes.keys}
    series["serial kafka-python (measured)"] = [serial_flat for _ in sizes.processes]
    series[f"bound (computed, {min(sizes.keys):,} keys)"] = [
        records / bound_s(work, min(sizes.keys), p) for p in sizes.processes]
    plots = [Plot(f"Key-shared on one partition: {records:,} records, random 0-"
                  f"{WORK_MAX_MS:g} ms work", "line", "processes", "records/s",
                  list(sizes.processes), series)]
    return SuiteReport("key-shared", ctx.command, tables, plots, raw)
