"""Suite ``growth``: how the cost of coordinating grows with the work (pure simulation).

No broker is involved: everything runs on :class:`~marshal_py.log.MemoryLog` with a
:class:`~marshal_py.log.VirtualClock`, and there is no external anchor. The comparison is
against linear growth: for every cost the fitted exponent *k* of ``cost ~ size^k``
(least squares on log-log) is reported; k = 1 is linear, k > 1 grows faster.

1. **Settling** (``marshal_py.client.engine.MemberEngine``, ALO, fair balance, HI 10 s, a
   coordinator tick of 1 s as :class:`~marshal_py.Marshaler` uses at that HI). M members
   start at random instants within the first HI (as an orchestrator starting M replicas) on
   a topic of P partitions; each then ticks every 1 s (+ 0 to 20 ms) from its own start. The
   group is **settled** when every partition is held, every live member holds exactly its
   fair share (the engine's own rule: P // M each, the first P mod M members by client id one
   more), and no claim was won or lost and no partition released for 2 HI. Reported: the
   time from the first start to the last claim or release (in HI), the coordination records
   written by then (and how many were claims and releases), and the cost per member once
   settled: the CPU of its coordination steps (``tick``) per HI plus applying one HI of the
   group's records to its own rationalizer (records per HI / the apply rate of a fresh
   rationalizer replaying the run's whole log, CPU time); the group's total (M times that)
   and its fitted exponent; whether the group settled within 2 HI; and the rationalizer's
   memory once settled (``tracemalloc``: what a fresh rationalizer retains after replaying
   the run's log), from which the memory per member (the slope against M) and per
   partition (the rest, over P) are derived. Sizes: M = 10, 100, 1,000, 10,000 on
   P = 10,000 (``--quick``: M = 10, 100 on P = 100); every repetition is a different seed.

   Writes are visible at once (no network), as in ``tests/simulation``. To make 1,000 members
   affordable, all engines share ONE rationalizer: members run one after the other and every
   engine catches up before it decides, so each sees exactly what its own caught-up
   rationalizer would. The suite checks that on every run by simulating 10 members with one
   rationalizer each and comparing the two logs byte for byte.

2. **The rationalizer with share groups** (``marshal_py.world.Rationalizer``). One share
   group of 8 members on a topic of P share-partitions, each holding I = 2,000 in-flight
   records (acquired in blocks of 100 under one-hour locks), for P = 100, 1,000, 10,000
   (``--quick``: 100 and 1,000 with I = 200). Memory: ``tracemalloc``'s traced memory
   retained by the rationalizer after the fill (the state, not the log's bytes; not the
   process's RSS, which would hold tracemalloc's own bookkeeping); apply rate: records/s
   applying steady-state share traffic (accept the oldest block and acquire the next, renew
   locks, member heartbeats; decoding included) onto that state, ``repeat`` consecutive
   chunks; and the checkpoint text (``Rationalizer.snapshot``) of the group: size and time.
   A second sweep varies I (200, 2,000, 10,000 at P = 100) to show where the per-record
   cost comes from. Each size runs in a fresh child process
   (``python -m bench.suite_growth --share-worker ...``) so memory is measured in a clean
   interpreter and given back. The largest (10,000 x 2,000 = 20 M in-flight records) peaks
   at about 11 GB of RSS (3.3 GB of state plus tracemalloc's bookkeeping) and takes about
   6 minutes.

``BENCH_GROWTH_MEMBERS``, ``BENCH_GROWTH_PARTITIONS``, ``BENCH_GROWTH_SHARE_PARTITIONS``,
``BENCH_GROWTH_INFLIGHT`` and ``BENCH_GROWTH_INFLIGHT_SWEEP`` (comma-separated) override the
sizes for a reduced run.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from bench.growth_settling import (
    GIVE_UP_HI,
    HI_MS,
    QUIET_HI,
    TICK_MS,
    SettleRun,
    Settling,
    check_shared_view,
    per_member_and_partition,
)
from bench.harness import BenchContext, BenchError
from bench.rationalizer import COORD, build_share_log
from bench.report import Measured, Plot, SuiteReport, Table
from marshal_py.devbroker.jvm import die_with_parent
from marshal_py.world import Rationalizer, RationalizerConfig

ROOT = Path(__file__).resolve().parent.parent
def _sizes(name: str, default: list[int]) -> list[int]:
    text = os.environ.get(name)
    return [int(x) for x in text.split(",")] if text else default


# -- 2. the rationalizer with share-partitions --------------------------------------------------


def share_worker(partitions: int, inflight: int, steady: int, repeat: int) -> dict[str, object]:
    """In a fresh process: fill a rationalizer, measure its memory, then time chunks of
    steady-state traffic and the group's checkpoint text."""
    fill, traffic = build_share_log(partitions, inflight, steady * repeat)
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    rationalizer = Rationalizer(RationalizerConfig(COORD, HI_MS))
    started = time.perf_counter()
    rationalizer.apply_all(fill)
    fill_s = time.perf_counter() - started
    retained = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    rates = []
    for i in range(repeat):
        chunk = traffic[i * steady:(i + 1) * steady if i < repeat - 1 else None]
        started = time.perf_counter()
        rationalizer.apply_all(chunk)
        rates.append(len(chunk) / max(1e-9, time.perf_counter() - started))
    started = time.perf_counter()
    text = rationalizer.snapshot("team.share", "events")
    snapshot_s = time.perf_counter() - started
    shares = rationalizer.share_partitions("team.share", "events")
    held = sum(s.speo - s.spso for _, s in shares)
    if len(shares) != partitions or held != partitions * inflight:
        raise BenchError(f"the share state holds {held:,} in-flight records in {len(shares)} "
                         f"partitions, not {partitions * inflight:,} in {partitions}")
    return {"partitions": partitions, "inflight": inflight, "fill_records": len(fill),
            "fill_s_traced": fill_s, "traced_bytes": retained,
            "rates": rates, "snapshot_bytes": len(text.encode()), "snapshot_s": snapshot_s,
            "ignored_offsets": rationalizer.share_ignored_offsets}


def run_share_worker(ctx: BenchContext, partitions: int, inflight: int, steady: int
                     ) -> dict[str, object]:
    ctx.say(f"rationalizer: {partitions:,} share-partitions x {inflight:,} in flight")
    # fill (~20,000 in-flight records/s at worst) plus the steady chunks (>= 500 records/s)
    timeout = 120 + partitions * inflight / 20_000 + steady * ctx.repeat / 500
    proc = subprocess.Popen(
        [sys.executable, "-m", "bench.suite_growth", "--share-worker", str(partitions),
         str(inflight), str(steady), str(ctx.repeat)], cwd=ROOT, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, preexec_fn=die_with_parent(os.getpid()))
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise BenchError(f"the rationalizer worker ({partitions} share-partitions x "
                         f"{inflight} in flight) did not finish in {timeout:.0f} s") from None
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0:
        raise BenchError(f"the rationalizer worker failed ({proc.returncode}): "
                         f"{err.strip().splitlines()[-1:] or 'no output'}")
    result: dict[str, object] = json.loads(out.strip().splitlines()[-1])
    return result


# -- fits and the report ------------------------------------------------------------------------


def exponent(sizes: Sequence[float], costs: Sequence[float]) -> float:
    """k of cost ~ size^k, least squares on log-log (nan with fewer than 2 points)."""
    pts = [(math.log(s), math.log(c)) for s, c in zip(sizes, costs, strict=True)
           if s > 0 and c > 0 and c == c]
    if len(pts) < 2:
        return float("nan")
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / sxx if sxx else float("nan")


def _k(value: float) -> str:
    return "—" if value != value else f"{value:.2f}"


def _mb(value: float) -> str:
    return f"{value / 1e6:,.1f}"


def settling(ctx: BenchContext, members_sizes: list[int], partitions: int,
             raw: dict[str, object]) -> tuple[Table, list[Plot]]:
    """Part 1: the settling table and its plots (group size, CPU, then the state)."""
    settle: dict[int, list[SettleRun]] = {m: [] for m in members_sizes}
    for rep in range(ctx.repeat):
        seed = 1000 + rep
        ctx.say(f"settling: checking the shared view against one rationalizer per member "
                f"(seed {seed})")
        check_shared_view(partitions, seed)
        for m in members_sizes:
            ctx.say(f"settling: {m:,} members on {partitions:,} partitions, repetition "
                    f"{rep + 1}/{ctx.repeat}")
            result = Settling(m, partitions, seed).run()
            if not result.settled:
                raise BenchError(f"{m} members on {partitions} partitions did not settle "
                                 f"within {GIVE_UP_HI} HI (seed {seed})")
            settle[m].append(result)
            ctx.say(f"  settled in {result.settle_hi:.2f} HI, {result.records:,} records, "
                    f"simulated in {result.sim_s:.1f} s")
            if not result.within_2hi:
                ctx.say(f"  NOTE: {m} members took {result.settle_hi:.2f} HI to settle "
                        "(the target is 2 HI)")
    raw["settle"] = {str(m): [{k: v for k, v in asdict(r).items() if k != "log_digest"}
                              | {"member_ms_per_hi": r.member_ms_per_hi,
                                 "within_2hi": r.within_2hi} for r in runs]
                     for m, runs in settle.items()}

    def measured(m: int, pick: str, unit: str = "") -> Measured:
        return Measured([float(getattr(r, pick)) for r in settle[m]], unit)

    per_member = {m: Measured([r.member_ms_per_hi for r in settle[m]], "ms") for m in settle}
    group_cpu = {m: Measured([m * r.member_ms_per_hi for r in settle[m]], "ms")
                 for m in settle}
    rows = []
    for m in members_sizes:
        within = sum(r.within_2hi for r in settle[m])
        rows.append([f"{m:,}", measured(m, "owned_hi").cell(2), measured(m, "settle_hi").cell(2),
                     f"{within} of {len(settle[m])}",
                     measured(m, "records").cell(), measured(m, "claims").cell(),
                     measured(m, "releases").cell(), measured(m, "tick_us_settled").cell(),
                     measured(m, "apply_rate").cell(), per_member[m].cell(2),
                     group_cpu[m].cell(0), _mb(measured(m, "state_bytes").median),
                     measured(m, "sim_s").cell(1)])
    xs = [float(m) for m in members_sizes]
    costs: dict[str, Callable[[int], float]] = {
        "settle_hi": lambda m: measured(m, "settle_hi").median,
        "records": lambda m: measured(m, "records").median,
        "tick_us": lambda m: measured(m, "tick_us_settled").median,
        "apply_s_per_record": lambda m: 1 / measured(m, "apply_rate").median,
        "member_ms_per_hi": lambda m: per_member[m].median,
        "group_ms_per_hi": lambda m: group_cpu[m].median,
        "state_bytes": lambda m: measured(m, "state_bytes").median,
        "sim_s": lambda m: measured(m, "sim_s").median,
    }
    fits = {name: exponent(xs, [f(m) for m in members_sizes]) for name, f in costs.items()}
    raw["settle_exponents"] = fits
    per_member_bytes, per_partition_bytes = per_member_and_partition(
        members_sizes, partitions, [measured(m, "state_bytes").median for m in members_sizes])
    raw["state_bytes_per_member"] = per_member_bytes
    raw["state_bytes_per_partition"] = per_partition_bytes
    rows.append(["exponent k (cost ~ M^k)", "", _k(fits["settle_hi"]), "", _k(fits["records"]),
                 "", "", _k(fits["tick_us"]), _k(-fits["apply_s_per_record"]),
                 _k(fits["member_ms_per_hi"]), _k(fits["group_ms_per_hi"]),
                 _k(fits["state_bytes"]), _k(fits["sim_s"])])
    settle_table = Table(
        f"Settling: M members starting within one HI on {partitions:,} partitions (MemoryLog, "
        f"virtual clock, HI {HI_MS // 1000} s, tick {TICK_MS / 1000:g} s; median of "
        f"{ctx.repeat} seeds, range in brackets)",
        ["members", "all owned (HI)", "settled (HI)", "within 2 HI", "records to settle",
         "of which claims", "releases", "µs per tick, settled", "apply rate (records/s)",
         "CPU per member per HI (ms)", "group CPU per HI (ms)", "rationalizer state (MB)",
         "simulated in (s)"],
        rows,
        [f"*Settled*: every partition held, each member at its fair share, no claim or "
         f"release for {QUIET_HI} HI; the time is that of the last claim or release. "
         "*CPU per member per HI*: its coordination steps (10 per HI) plus applying one HI of "
         "the group's records (records per HI once settled / the apply rate of a fresh "
         "rationalizer replaying the run's log, per CPU second). *Group CPU*: M times that. "
         "Exponents are fitted to the medians; for the apply rate it is that of records/s "
         "(negative: it falls). The ticks include applying about 1/M of the records (the "
         "engines share one rationalizer), which the apply part counts again: at most 1/M "
         "too much. *Rationalizer state*: what a fresh rationalizer retains after replaying "
         f"the run's log (tracemalloc): about {per_member_bytes:,.0f} bytes per member (the "
         f"slope against M) and {per_partition_bytes:,.0f} per partition (the rest, over P).",
         "Zero network latency: no two members' claims ever overlap in time, so no claim "
         "is lost to a race; on a real broker a claim takes tens of ms to read back "
         "(the coordination suite measures it)."])

    plots = [
        Plot("Settling against group size", "line", "members", "cost", xs,
             {"HI to settle": [measured(m, "settle_hi").median for m in members_sizes],
              "records to settle / 1,000": [measured(m, "records").median / 1000
                                            for m in members_sizes]},
             log_x=True, log_y=True),
        Plot("Coordination CPU once settled", "line", "members", "ms per HI", xs,
             {"one member": [per_member[m].median for m in members_sizes],
              "the whole group": [group_cpu[m].median for m in members_sizes],
              f"the group if linear from {members_sizes[0]} members": [
                  members_sizes[0] * per_member[members_sizes[0]].median * m / members_sizes[0]
                  for m in members_sizes]},
             log_x=True, log_y=True),
        Plot(f"Rationalizer state once settled ({partitions:,} partitions)", "line", "members",
             "MB (tracemalloc)", xs,
             {"state": [measured(m, "state_bytes").median / 1e6 for m in members_sizes]},
             log_x=True, log_y=True),
    ]
    return settle_table, plots


def run(ctx: BenchContext) -> SuiteReport:
    quick = ctx.quick
    members_sizes = _sizes("BENCH_GROWTH_MEMBERS",
                           [10, 100] if quick else [10, 100, 1000, 10_000])
    partitions = _sizes("BENCH_GROWTH_PARTITIONS", [100] if quick else [10_000])[0]
    share_sizes = _sizes("BENCH_GROWTH_SHARE_PARTITIONS",
                         [100, 1000] if quick else [100, 1000, 10_000])
    inflight = _sizes("BENCH_GROWTH_INFLIGHT", [200] if quick else [2000])[0]
    sweep = _sizes("BENCH_GROWTH_INFLIGHT_SWEEP", [200, 2000] if quick else [200, 2000, 10_000])
    steady = 2_000 if quick else 20_000
    raw: dict[str, object] = {"hi_ms": HI_MS, "tick_ms": TICK_MS, "settle": {}, "share": {},
                              "inflight_sweep": {}}
    settle_table, settle_plots = settling(ctx, members_sizes, partitions, raw)

    # 2. the rationalizer with share-partitions
    share = {p: run_share_worker(ctx, p, inflight, steady) for p in share_sizes}
    swept = {i: (share[100] if i == inflight and 100 in share
                 else run_share_worker(ctx, 100, i, steady)) for i in sweep}
    raw["share"] = {str(p): v for p, v in share.items()}
    raw["inflight_sweep"] = {str(i): v for i, v in swept.items()}

    def rate(v: dict[str, object]) -> Measured:
        rates = v["rates"]
        assert isinstance(rates, list)
        return Measured([float(x) for x in rates], "records/s")

    def num(v: dict[str, object], key: str) -> float:
        value = v[key]
        assert isinstance(value, int | float)
        return float(value)

    share_rows = []
    for p, v in share.items():
        records = p * inflight
        share_rows.append([f"{p:,}", f"{records:,}", _mb(num(v, "traced_bytes")),
                           f"{num(v, 'traced_bytes') / records:,.0f}", rate(v).cell(),
                           _mb(num(v, "snapshot_bytes")), f"{num(v, 'snapshot_s'):.2f}"])
    ps = [float(p) for p in share]
    share_fits = {
        "traced_bytes": exponent(ps, [num(v, "traced_bytes") for v in share.values()]),
        "s_per_record": exponent(ps, [1 / rate(v).median for v in share.values()]),
        "snapshot_bytes": exponent(ps, [num(v, "snapshot_bytes") for v in share.values()]),
        "snapshot_s": exponent(ps, [num(v, "snapshot_s") for v in share.values()]),
    }
    raw["share_exponents"] = share_fits
    share_rows.append(["exponent k (cost ~ P^k)", "", _k(share_fits["traced_bytes"]), "",
                       _k(-share_fits["s_per_record"]), _k(share_fits["snapshot_bytes"]),
                       _k(share_fits["snapshot_s"])])
    share_table = Table(
        f"The rationalizer holding P share-partitions of {inflight:,} in-flight records each "
        f"(median of {ctx.repeat} chunks of {steady:,} records for the rate)",
        ["share-partitions P", "in-flight records", "state (MB, tracemalloc)",
         "bytes per in-flight record", "apply rate (records/s)",
         "checkpoint text (MB)", "snapshot (s)"],
        share_rows,
        ["*State*: memory traced by tracemalloc and still held by the rationalizer after the "
         "fill (not its peak; the log's own bytes excluded). *Apply rate*: steady-state "
         "share traffic (70 % accept-one-block-acquire-the-next pairs, 15 % lock renewals, 5 % "
         "member heartbeats), decoding included. *Checkpoint text*: "
         "`Rationalizer.snapshot` of the group, what a Checkpoint record would carry."])
    sweep_rows = []
    for i, v in swept.items():
        sweep_rows.append([f"{i:,}", rate(v).cell(), f"{1e6 / rate(v).median:,.0f}",
                           _mb(num(v, "traced_bytes"))])
    sweep_fit = exponent([float(i) for i in swept], [1 / rate(v).median for v in swept.values()])
    raw["inflight_exponent_s_per_record"] = sweep_fit
    sweep_rows.append(["exponent k (µs per record ~ I^k)", "", _k(sweep_fit), ""])
    sweep_table = Table(
        "Per-record cost against the in-flight records of a share-partition (P = 100)",
        ["in flight per partition I", "apply rate (records/s)", "µs per record", "state (MB)"],
        sweep_rows)

    plots = [
        *settle_plots[:2],
        Plot("Rationalizer state and apply time against share-partitions", "line",
             "share-partitions", "cost", ps,
             {"state (MB)": [num(v, "traced_bytes") / 1e6 for v in share.values()],
              "µs per record applied": [1e6 / rate(v).median for v in share.values()],
              "checkpoint text (MB)": [num(v, "snapshot_bytes") / 1e6 for v in share.values()]},
             log_x=True, log_y=True),
        Plot("Per-record apply cost against in-flight records (P = 100)", "line",
             "in-flight records per share-partition", "µs per record",
             [float(i) for i in swept], {"µs per record": [1e6 / rate(v).median
                                                           for v in swept.values()]},
             log_x=True, log_y=True),
        *settle_plots[2:],
    ]
    return SuiteReport("growth", ctx.command, [settle_table, share_table, sweep_table], plots,
                       raw)


def settling_only(repeat: int) -> None:
    """``--settling``: part 1 alone (no broker, no share workers), for a run that fits a
    busy machine. Writes ``bench/results/growth-settling.{md,json}`` and the settling plots
    under the numbers the full suite gives them (``docs/bench/growth-1``, ``-2``, ``-5``)."""
    from bench.harness import machine_line
    from bench.report import PLOTS_DIR, RESULTS_DIR, draw

    members_sizes = _sizes("BENCH_GROWTH_MEMBERS", [10, 100, 1000, 10_000])
    partitions = _sizes("BENCH_GROWTH_PARTITIONS", [10_000])[0]
    sizes = " ".join(f"{k}={os.environ[k]}" for k in ("BENCH_GROWTH_MEMBERS",
                                                      "BENCH_GROWTH_PARTITIONS")
                     if k in os.environ)
    command = f"{sizes + ' ' if sizes else ''}python -m bench.suite_growth --settling {repeat}"
    ctx = BenchContext("", repeat=repeat, command=command)
    raw: dict[str, object] = {"hi_ms": HI_MS, "tick_ms": TICK_MS, "settle": {}}
    table, plots = settling(ctx, members_sizes, partitions, raw)
    machine = machine_line()
    report = SuiteReport("growth-settling", ctx.command, [table], plots, raw)
    (RESULTS_DIR / "growth-settling.md").write_text(report.markdown(machine))
    (RESULTS_DIR / "growth-settling.json").write_text(
        json.dumps({"command": ctx.command, "machine": machine, "raw": raw}, indent=2,
                   default=str) + "\n")
    for plot, n in zip(plots, (1, 2, 5), strict=True):
        draw(plot, PLOTS_DIR / f"growth-{n}.png")
    print(table.markdown(), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description="growth suite worker (run `python -m bench "
                                                 "growth` instead)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--share-worker", nargs=4, type=int,
                      metavar=("PARTITIONS", "INFLIGHT", "STEADY", "REPEAT"))
    mode.add_argument("--settling", type=int, metavar="REPEAT",
                      help="run the settling part alone, REPEAT seeds")
    args = parser.parse_args()
    if args.settling is not None:
        settling_only(args.settling)
        return
    print(json.dumps(share_worker(*args.share_worker)), flush=True)


if __name__ == "__main__":
    main()
