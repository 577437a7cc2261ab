"""A campaign (:func:`run_campaign`: every run of every mode on one broker or cluster) and how
its runs and totals are reported."""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench.common import BenchError
from chaos.run import Run
from chaos.settings import FAULT_KINDS, Options, RunError, RunOutcome
from marshal_py.errors import MarshalError

log = logging.getLogger("chaos")


def run_campaign(options: Options, report: Callable[[RunOutcome], None] | None = None,
                 broker: Any = None) -> list[RunOutcome]:
    """Run the campaign: ``options.runs`` runs of every mode of ``options.modes``.

    Starts a broker of its own on a data directory inside the campaign directory unless
    ``broker`` (a started :class:`~marshal_py.devbroker.DevBroker` with an explicit data
    directory, which the campaign kills and restarts) is given. ``report`` is called after
    each run.
    """
    from marshal_py.devbroker import DevBroker

    base = options.directory or Path(tempfile.mkdtemp(prefix="chaos-"))
    base.mkdir(parents=True, exist_ok=True)
    own_broker = broker is None
    outcomes: list[RunOutcome] = []
    if own_broker:
        if options.brokers > 1:
            from chaos.cluster import LeaderKiller

            broker = LeaderKiller(options.brokers, base / "cluster")
            log.info("starting a %d-node cluster (data in %s)", options.brokers,
                     base / "cluster")
        else:
            broker = DevBroker(data_dir=base / "broker", heap="512m")
            log.info("starting the broker (data in %s)", base / "broker")
        broker.start()
    try:
        number = 0
        for mode in options.modes:
            for _ in range(options.runs):
                number += 1
                seed = options.seed + number
                directory = base / f"run-{number:03d}-{mode}"
                directory.mkdir(parents=True, exist_ok=True)
                began = time.monotonic()
                run = Run(options, broker, mode, number, seed, directory)
                outcome = RunOutcome(number, mode, seed, None, directory, 0.0)
                try:
                    if not broker.is_running():
                        broker.start()
                    outcome.result = run.execute()
                except (RunError, BenchError, MarshalError, OSError) as exc:
                    outcome.error = str(exc)
                    log.error("run %d failed: %s", number, exc)
                except Exception as exc:  # a Kafka client error, or a bug: report, go on
                    outcome.error = f"{type(exc).__name__}: {exc}"
                    log.exception("run %d failed", number)
                if outcome.error is not None:
                    _keep_broker_logs(broker, directory)
                outcome.notes = run.notes
                outcome.seconds = time.monotonic() - began
                if (outcome.result is not None and outcome.result.ok and not outcome.notes
                        and not options.keep):
                    shutil.rmtree(directory, ignore_errors=True)
                    outcome.directory = None
                outcomes.append(outcome)
                if report is not None:
                    report(outcome)
    finally:
        if own_broker:
            broker.stop()
            shutil.rmtree(base / "broker", ignore_errors=True)
            shutil.rmtree(base / "cluster", ignore_errors=True)
            if options.directory is None and not any(base.iterdir()):
                base.rmdir()
    return outcomes


def _keep_broker_logs(broker: object, directory: Path) -> None:
    """Copy the broker's log (and the one its last restart set aside) into a failed run's
    directory: the broker's next restart would set it aside again and the evidence of why
    the run failed (say, a restart that never answered) would be gone."""
    log_path = getattr(broker, "log_path", None)
    if not isinstance(log_path, Path):
        return
    for source in (log_path, log_path.with_name(log_path.name + ".1")):
        try:
            shutil.copy(source, directory / source.name)
        except OSError:
            continue


# -- reporting -------------------------------------------------------------------------------


def _faults_text(faults: Counter[str]) -> str:
    return " ".join(f"{kind} {faults.get(kind, 0)}" for kind in FAULT_KINDS)


def run_line(outcome: RunOutcome, total_runs: int) -> str:
    """One run, as the campaign prints it."""
    head = f"run {outcome.index}/{total_runs} {outcome.mode} (seed {outcome.seed})"
    if outcome.result is None:
        return f"{head}: FAILED after {outcome.seconds:.0f} s: {outcome.error}"
    r = outcome.result
    extra = ""
    if r.mode == "amo":
        extra = f", unconsumed {r.unconsumed}"
    if r.mode == "share":
        extra = f", archived {r.archived}"
    text = (f"{head}: faults {_faults_text(r.faults)}; {r.records:,} records, lost {r.lost}, "
            f"duplicated {r.duplicated} ({r.redeliveries} re-deliveries){extra}, late "
            f"completions {r.late_completions}, consumer errors {r.consumer_errors}, "
            f"violations {len(r.violations)} ({outcome.seconds:.0f} s)")
    if r.resumed_after_broker_s:
        text += ("\n  hand-outs resumed " + ", ".join(f"{s:.1f}" for s in
                                                     r.resumed_after_broker_s)
                 + " s after the broker restarted (producer: " + ", ".join(
                     f"{s:.1f}" for s in r.producer_resumed_after_broker_s) + " s)")
    for kind, count in sorted(r.violation_counts().items()):
        example = next(v.detail for v in r.violations if v.kind == kind)
        text += f"\n  {kind}: {count}, e.g. {example}"
    for note in outcome.notes:
        text += f"\n  note: {note}"
    if outcome.directory is not None:
        text += f"\n  journals kept in {outcome.directory}"
    return text


def totals(outcomes: Sequence[RunOutcome]) -> dict[str, Any]:
    """The campaign's totals."""
    results = [o.result for o in outcomes if o.result is not None]
    faults: Counter[str] = Counter()
    for r in results:
        faults.update(r.faults)
    return {
        "runs": len(outcomes), "failed_runs": sum(1 for o in outcomes if o.result is None),
        "faults": {kind: faults.get(kind, 0) for kind in FAULT_KINDS},
        "records": sum(r.records for r in results), "lost": sum(r.lost for r in results),
        "duplicated": sum(r.duplicated for r in results),
        "redeliveries": sum(r.redeliveries for r in results),
        "archived": sum(r.archived for r in results),
        "unconsumed": sum(r.unconsumed for r in results),
        "late_completions": sum(r.late_completions for r in results),
        "consumer_errors": sum(r.consumer_errors for r in results),
        "violations": sum(len(r.violations) for r in results),
        "resumed_after_broker_s": sorted(round(x, 2) for r in results
                                         for x in r.resumed_after_broker_s),
        "seconds": round(sum(o.seconds for o in outcomes), 1),
    }


def total_line(total: dict[str, Any]) -> str:
    """The campaign's totals, as printed."""
    faults = total["faults"]
    resumed = total["resumed_after_broker_s"]
    return (f"total: {total['runs']} runs ({total['failed_runs']} failed), faults "
            f"{sum(faults.values())} ({' '.join(f'{k} {v}' for k, v in faults.items())}), "
            f"records {total['records']:,}, lost {total['lost']}, duplicated "
            f"{total['duplicated']} ({total['redeliveries']} re-deliveries), archived "
            f"{total['archived']}, unconsumed {total['unconsumed']}, late completions "
            f"{total['late_completions']}, consumer errors {total['consumer_errors']}, "
            f"violations {total['violations']} ({total['seconds']:.0f} s)"
            + (f"; hand-outs resumed {resumed[len(resumed) // 2]:.1f} s (median; max "
               f"{resumed[-1]:.1f} s) after a broker restart" if resumed else ""))


def exit_status(outcomes: Sequence[RunOutcome]) -> int:
    """0 clean, 1 a violation, 3 a run that could not be completed (and no violation)."""
    if any(o.result is not None and not o.result.ok for o in outcomes):
        return 1
    if any(o.result is None for o in outcomes):
        return 3
    return 0


def outcome_dict(outcome: RunOutcome) -> dict[str, Any]:
    """One run as JSON."""
    return {"run": outcome.index, "mode": outcome.mode, "seed": outcome.seed,
            "seconds": round(outcome.seconds, 1), "error": outcome.error or None,
            "notes": outcome.notes,
            "directory": None if outcome.directory is None else str(outcome.directory),
            "result": None if outcome.result is None else outcome.result.to_dict()}
