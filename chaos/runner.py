"""The campaign runner: ``python -m chaos --runs N --mode MODE`` (``bin/chaos``).

One campaign starts its own development broker (Kafka 4.3.1, KRaft, 127.0.0.1) on a data
directory of its own, so that the broker can be killed with SIGKILL and restarted on the same
data. Each run then uses a fresh data topic, coordination topic and group:

1. it starts ``--consumers`` consumer processes (:mod:`chaos.worker`, client ids ``c0``,
   ``c1``, ...) and waits until each has opened its consumer;
2. it starts the producer process (:mod:`chaos.producer`): ``--records`` records at about
   ``--rate`` records/s, keyed ``k0000`` .. (``--keys`` keys); in ``share`` and ``eos`` runs as
   transactions, one per batch, every fourth aborted (its records sent again), so the
   partitions hold commit and abort markers and aborted records, which the consumers
   (read_committed, the default) must never hand out and whose offsets must still be passed;
3. while the records flow it injects ``--faults-per-run`` faults, one after the other, each
   after a random pause of 0.5 to 1.5 times (production time / (faults + 1)). The plan
   repeats the chosen kinds (``--faults``) in turn -- so each kind occurs once the number
   of faults reaches the number of kinds -- shuffled by the run's random generator:

   * ``kill``: SIGKILL of a random running consumer; after 0 to 2 heartbeat intervals a
     replacement starts. With ``--restart-ids mixed`` (default) the replacement reuses the
     dead process's client id (the restart path: it takes the partitions back after 1.25 HI)
     or, with even odds, gets a new one (``c1-r3``): the survivors take over after 2 HI and
     balance with the newcomer; ``same`` and ``new`` force one of the two;
   * ``stop``: SIGSTOP of a random running consumer for 2.5 to 4 heartbeat intervals, then
     SIGCONT: a zombie, whose partitions (or slots, or share locks) move while it is frozen;
   * ``broker``: SIGKILL of the broker, 0 to 2 heartbeat intervals down, then a restart on
     the same data directory and ports (the restart itself takes some seconds); with
     ``--brokers 3`` (a three-node :class:`~marshal_py.devbroker.cluster.DevCluster`,
     replication 3) SIGKILL of the node leading the run's coordination partition, which the
     cluster replaces while it is down (:mod:`chaos.cluster`).

   A consumer that raises (e.g. while the broker is down) exits; the runner journals it and
   starts a replacement with the same client id, and the report counts it.
4. once the producer is done and every fault is over, it waits (at most ``--drain-timeout``)
   until the run is complete -- ``alo`` and ``key-shared``: every record journalled as
   processed; ``amo``: every partition's committed offset in the log at its end; ``eos``:
   every partition's committed offset past its last committed record (``eos`` workers copy
   the topic to ``<topic>-out`` in transactions, each output naming its input); ``share``:
   every share-partition's SPSO at its end -- then stops the consumers gracefully;
5. it dumps the data topic (read_committed: aborted records are not records to process),
   in ``eos`` runs the output topic (read_committed), and the coordination topic into the
   run directory and runs the
   checker (:mod:`chaos.checker`) on it.

The run's random generator is seeded with ``--seed`` + the run's number: it decides the fault
plan, the victims and the durations (not the timing of the processes), so a seed reproduces
a campaign's faults.

Exit status: 0 when no run violated a guarantee of its mode, 1 when one did, 2 on a usage
error (one line), 3 when a run could not be completed (the broker or a process failed in a
way the runner could not recover from).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from chaos.campaign import exit_status, outcome_dict, run_campaign, run_line, total_line, totals
from chaos.checker import MODES, check
from chaos.rundir import load_run
from chaos.settings import FAULT_KINDS, RESTART_IDS, Options, RunOutcome
from marshal_py.errors import MarshalError


class UsageError(Exception):
    """A bad argument: one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} must be at least 0")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{value} must be more than 0 seconds")
    return value


def _modes(text: str) -> list[str]:
    modes = [m.strip() for m in text.split(",") if m.strip()]
    if text.strip() == "all":
        return list(MODES)
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise argparse.ArgumentTypeError(
            f"unknown mode {', '.join(bad) or text!r}; choose from {', '.join(MODES)} "
            "(comma-separated, or all)")
    return modes


def _kinds(text: str) -> tuple[str, ...]:
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    bad = [k for k in kinds if k not in FAULT_KINDS]
    if bad:
        raise argparse.ArgumentTypeError(
            f"unknown fault kind {', '.join(bad)}; choose from {', '.join(FAULT_KINDS)}")
    return kinds


def _setting(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE")
    parsed: Any = value
    for kind in (int, float):
        try:
            parsed = kind(value)
            break
        except ValueError:
            continue
    return key.strip(), parsed


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m chaos``."""
    p = _Parser(prog="bin/chaos", description="Fault campaigns against a real Kafka broker: "
                "consumers of one mode as separate processes, random kill -9, SIGSTOP and "
                "broker crashes, then an offline check of every guarantee of the mode. "
                "`bin/chaos check RUN_DIR` checks a kept run again.")
    p.add_argument("--mode", type=_modes, required=True,
                   help="alo, amo, eos, share, key-shared (comma-separated, or all)")
    p.add_argument("--runs", type=_positive_int, default=1, help="runs per mode (default 1)")
    p.add_argument("--seed", type=int, default=None,
                   help="campaign seed; run n uses seed + n (default: from the clock, printed)")
    p.add_argument("--consumers", type=_positive_int, default=3,
                   help="consumer processes (default 3)")
    p.add_argument("--records", type=_positive_int, default=5000,
                   help="records produced per run (default 5000)")
    p.add_argument("--rate", type=_positive_int, default=250,
                   help="records produced per second (default 250)")
    p.add_argument("--partitions", type=_positive_int, default=4,
                   help="partitions of the data topic (default 4)")
    p.add_argument("--keys", type=_positive_int, default=64, help="distinct keys (default 64)")
    p.add_argument("--heartbeat-interval", type=_seconds, default=1.0,
                   help="heartbeat interval of the group in seconds (default 1)")
    p.add_argument("--faults", type=_kinds, default=FAULT_KINDS,
                   help="fault kinds, comma-separated (default kill,stop,broker)")
    p.add_argument("--faults-per-run", type=_non_negative_int, default=4,
                   help="faults injected per run (default 4)")
    p.add_argument("--restart-ids", choices=RESTART_IDS, default="mixed",
                   help="client id of a killed consumer's replacement: the same, a new one, "
                        "or either at random (default mixed)")
    p.add_argument("--lock-duration", type=_seconds, default=3.0,
                   help="share mode: acquisition lock in seconds (default 3)")
    p.add_argument("--delivery-limit", type=int, default=10, choices=range(2, 11),
                   metavar="2..10", help="share mode: delivery limit (default 10)")
    p.add_argument("--work-ms", type=float, default=1.0,
                   help="simulated processing per record in ms (default 1)")
    p.add_argument("--drain-timeout", type=_seconds, default=120.0,
                   help="longest wait for a run to complete after its faults (default 120 s)")
    p.add_argument("--dir", type=Path, default=None,
                   help="campaign directory (default: a new one under the temp directory)")
    p.add_argument("--keep", action="store_true",
                   help="keep every run's journals (default: only runs with violations, "
                        "failures or notes)")
    p.add_argument("--fsync", action="store_true",
                   help="fsync every journal line (default: written to the OS only, which a "
                        "kill -9 of the writer cannot lose)")
    p.add_argument("--kafka-config", type=_setting, action="append", default=[],
                   metavar="KEY=VALUE",
                   help="a kafka-python setting for the consumers' clients (Marshaler "
                        "kafka_config), e.g. reconnect_backoff_max_ms=1000; repeatable")
    p.add_argument("--brokers", type=int, default=1, choices=range(1, 6), metavar="1..5",
                   help="Kafka nodes (default 1); with 3, the broker fault kills the node "
                        "leading the run's coordination partition (a DevCluster)")
    p.add_argument("--signed", action="store_true",
                   help="authenticated groups: every coordination record signed with a key of "
                        "the run (a genuine record rejected is a violation)")
    p.add_argument("--fetcher", choices=("kafka-python", "confluent"), default="kafka-python",
                   help="how the consumers fetch data records (Marshaler fetcher; default "
                        "kafka-python)")
    p.add_argument("--json", action="store_true", help="print one JSON document at the end")
    p.add_argument("-v", "--verbose", action="count", default=0,
                   help="more logging on stderr (-vv: debug)")
    return p


def check_main(argv: Sequence[str]) -> int:
    """``python -m chaos check RUN_DIR [--json]``: check a kept run directory again."""
    p = _Parser(prog="bin/chaos check", description="Check a kept run directory again.")
    p.add_argument("directory", type=Path)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    try:
        data = load_run(args.directory)
    except (OSError, ValueError, KeyError) as exc:
        raise UsageError(f"{args.directory} is not a complete run directory ({exc})") from exc
    result = check(data)
    if args.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        outcome = RunOutcome(1, data.meta.mode, 0, result, None, 0.0)
        print(run_line(outcome, 1))
    return 0 if result.ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; returns the exit status."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list[:1] == ["check"]:
            return check_main(args_list[1:])
        args = parser().parse_args(args_list)
        if args.faults_per_run and not args.faults:
            raise UsageError("--faults names no fault kind")
        if args.work_ms < 0:
            raise UsageError("--work-ms must be at least 0")
    except UsageError as exc:
        print(f"chaos: error: {exc} (see bin/chaos --help)", file=sys.stderr)
        return 2
    level = [logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose + 1, 2)]
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.verbose < 2:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)
        logging.getLogger("marshal_py").setLevel(logging.WARNING)
    seed = args.seed if args.seed is not None else int(time.time()) % 1_000_000
    options = Options(
        modes=args.mode, runs=args.runs, seed=seed, consumers=args.consumers,
        records=args.records, rate=args.rate, partitions=args.partitions, keys=args.keys,
        heartbeat_interval=args.heartbeat_interval, faults=args.faults,
        faults_per_run=args.faults_per_run, restart_ids=args.restart_ids,
        lock_duration=args.lock_duration, delivery_limit=args.delivery_limit,
        work_ms=args.work_ms, drain_timeout=args.drain_timeout, directory=args.dir,
        keep=args.keep, fsync=args.fsync, kafka_config=dict(args.kafka_config),
        signed=args.signed, brokers=args.brokers, fetcher=args.fetcher)
    total_runs = len(options.modes) * options.runs
    if not args.json:
        print(f"chaos: seed {seed}, {total_runs} run(s) of {', '.join(options.modes)}, "
              f"{options.consumers} consumers, {options.records:,} records at "
              f"{options.rate}/s, faults {','.join(options.faults)} x "
              f"{options.faults_per_run} per run, HI {options.heartbeat_interval:g} s, "
              f"fetcher {options.fetcher}",
              flush=True)

    def report(outcome: RunOutcome) -> None:
        if not args.json:
            print(run_line(outcome, total_runs), flush=True)

    # SIGTERM unwinds like Ctrl-C: the finally blocks stop the processes and the broker.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    try:
        outcomes = run_campaign(options, report)
    except MarshalError as exc:
        print(f"chaos: error: {exc}", file=sys.stderr)
        return 3
    except KeyboardInterrupt:
        print("chaos: interrupted", file=sys.stderr)
        return 130
    total = totals(outcomes)
    if args.json:
        print(json.dumps({"seed": seed, "runs": [outcome_dict(o) for o in outcomes],
                          "total": total}, indent=2))
    else:
        print(total_line(total), flush=True)
    return exit_status(outcomes)
