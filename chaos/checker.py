"""The offline checker of one campaign run (pure: it gets everything as arguments).

Inputs (:class:`RunData`): the data topic as it stands after the run (every record:
partition, offset, key -- the truth), the producer's acknowledged records, every consumer
process incarnation's journal (hand-outs ``d`` with the wall-clock interval ``[t0, t1]`` in
which the consumer decided to hand the record out, and completions ``x``, each written before
the record was committed or acknowledged), the runner's fault journal and every record of
the run's coordination topic, which :func:`chaos.logview.build_view` replays with the
rationalizer into ownership stints (partitions, or key slots) and share-record histories.

Times: the journals use the machine's wall clock; the coordination log's broker timestamps
(LogAppendTime, in ms) come from the same clock, since the broker runs on the same machine. A
hand-out happened at some moment in ``[t0, t1]``; a check reports a hand-out as too late only
when ``t0`` is at or after the end of what allowed it (plus 1 ms: the broker truncates to
whole ms), and as too early only when ``t1`` is before its start, so the stamping cannot
cause a false report.

Definitions. A record is *handed out* when the consumer returns it to the application (a
``d`` event), *processed* when the application finished it (an ``x`` event). A *stint* is one
member instance's uninterrupted ownership of a partition (``alo``, ``amo``) or of a key slot
of a partition (``key-shared``), from the applied claim that gave it to the release, the
takeover by another member (claim of a stale owner), the reclaim by a restarted process of the
same client id, or the end of the log. Each hand-out is assigned to the stint of its instance
that was open during it; *succ(o)* is the next record after ``o`` of the same partition
(exclusive modes) or of the same key (key-shared) in the topic.

Rules, per mode (each violation has a kind, in parentheses):

``alo`` (at-least-once):
  * every record of the topic is processed at least once (``lost``); duplicates are counted;
  * every hand-out lies inside a stint of the handing instance on the record's partition: a
    process never hands out a record of a partition it does not own, in particular not after
    waking up from SIGSTOP with its partitions gone (``without_ownership``);
  * within a stint, each hand-out is succ() of the previous one (``order_within_stint``);
  * the first hand-out of a stint is at most succ() of the last hand-out of the previous stint
    that handed anything out (the first ever: the partition's first record): a successor may
    start earlier (re-delivery, counted) but never skip (``skip_across_handover``).

``amo`` (at-most-once):
  * no record is handed out twice (``delivered_twice``); records never handed out below the
    final position of their partition in the log (``max(committed, confirmed + 1)``) are
    counted as lost, those at or above it as unconsumed;
  * ownership (``without_ownership``) and order within a stint (``order_within_stint``) as
    for ``alo``.

``key-shared`` (per-key order, at-least-once); stints are key-slot stints:
  * every record processed at least once (``lost``);
  * ownership: every hand-out lies in a stint of the handing instance on the record's key
    slot (``without_ownership``). Slot stints never overlap in the log, so no two processes
    hand out one key at overlapping times;
  * order: within a stint, each hand-out of a key is succ() of the previous hand-out of that
    key (``order_within_stint``); the first hand-out of a key in a stint is at most succ() of
    its last hand-out in an earlier stint (``skip_across_handover``); if it is earlier
    (a re-delivery: the new owner restarts from a committed offset at or below the last
    processed record), the stint of that last hand-out must have ended by a takeover or a
    reclaim, i.e. its owner crashed, stalled or lost the broker -- never by a release
    (``redelivered_after_release``);
  * a record handed out in a stint that ended by a release is processed before the release
    (``completed_after_release``); after a takeover a stalled process may finish a record it
    was handed before the stall (counted as a late completion: no lease can stop a process
    that is already processing).

``eos`` (exactly-once consume -> transform -> produce; the output topic read read_committed
after the run, each output record naming its input in a header):
  * every record of the topic has exactly one output record (``lost``: none;
    ``output_twice``: more than one), and every output names a record of the topic
    (``unknown_record``); hand-outs (which repeat after an aborted transaction, counted as
    re-deliveries) lie inside a stint of the handing instance (``without_ownership``).

``share`` (every record accepted exactly once, from the final state of the log):
  * every record of the topic is accepted exactly once (``accepted_twice``, ``not_accepted``)
    and is Acknowledged in the final state (``not_acknowledged``), unless it was archived after
    reaching the delivery limit (counted as archived; archived below it: ``archived_early``);
  * a record accepted by a member was processed by that member (``accepted_unprocessed``);
  * a hand-out with delivery count c is the c-th acquisition of the record in the log, by the
    handing instance, and happened after it (``delivery_without_acquisition``) and before the
    record's next acquisition (``delivered_after_reacquired``); no acquisition is handed out
    twice (``acquisition_delivered_twice``).

Every mode: a hand-out of a record the topic does not hold, or with another key
(``unknown_record``), and every invariant the audit checks on the log (``log_<invariant>``:
overlapping owners, AMO regressions and re-confirmations, share records accepted twice).
Signed runs (``--signed``): nobody but the run's members writes, so any record of the group
the log rejects refused a genuine one (a sequence number out of order after a retry or a
broker restart, a broken signature): ``genuine_record_rejected``.

Counted without being violations: duplicates (records handed out more than once) and
re-deliveries (hand-outs beyond the first), late completions, consumer errors (a consumer
raised; its process was replaced), acknowledged records missing from the topic (the broker
lost them), archived and unconsumed records; and, per broker restart, the time from the
broker answering again to the next hand-out by any consumer (and to the next record the
producer got acknowledged: hand-outs cannot resume before records flow again).
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable

from chaos.eos_check import check_outputs
from chaos.logview import RELEASED, LogView, Stint, build_view
from chaos.run_data import (
    TP,
    Delivery,
    Done,
    RunData,
    RunMeta,
    RunResult,
    Truth,
    Violation,
)
from marshal_py.protocol import key_slot

MODES = ("alo", "amo", "eos", "share", "key-shared")
#: The broker truncates its timestamps to whole milliseconds.
TRUNCATION_MS = 1.0


def _ms(seconds: float) -> float:
    return seconds * 1000.0


def _fmt_stint(s: Stint) -> str:
    end = "open" if s.end_ms is None else f"{s.end_ms} ({s.end_reason})"
    return f"{s.client_id}/{s.instance_id} [{s.start_ms}, {end}]"


def find_stint(view: LogView, partition: int, unit: int, instance: str, t0: float,
               t1: float) -> Stint | None:
    """The stint of ``instance`` on the unit open during a hand-out in ``[t0, t1]`` (seconds);
    the latest such stint if several qualify (a hand-out stalled across two of them)."""
    found = None
    for stint in view.stints.get((partition, unit, instance), ()):
        if stint.start_ms <= _ms(t1) and (stint.end_ms is None
                                          or _ms(t0) < stint.end_ms + TRUNCATION_MS):
            found = stint
    return found


def _describe(d: Delivery) -> str:
    return f"p{d.partition}@{d.offset} (key {d.key}) by {d.inc} [{d.t0:.3f}, {d.t1:.3f}]"


# -- the checker ------------------------------------------------------------------------------


def check(data: RunData, view: LogView | None = None) -> RunResult:
    """Check one run; ``view`` (the replayed log) is built from ``data`` when not given."""
    meta = data.meta
    if meta.mode not in MODES:
        raise ValueError(f"unknown mode {meta.mode!r}")
    if view is None:
        view = build_view(data.coordination, mode=meta.mode, group=meta.group,
                          topic=meta.topic, partitions=meta.partitions,
                          coordination_partitions=meta.coordination_partitions,
                          heartbeat_interval_ms=meta.heartbeat_interval_ms,
                          auth_key=meta.auth_key)
    result = RunResult(meta.mode)
    truth = Truth(data.topic_records)
    result.records = len(truth.key)
    result.incarnations = len(data.incarnations)
    for event in data.faults:
        kind = event.get("e")
        if kind in ("kill", "stop", "broker_kill"):
            result.faults[{"broker_kill": "broker"}.get(str(kind), str(kind))] += 1
    for inc in data.incarnations:
        for error in inc.errors:
            result.consumer_errors += 1
            result.warnings.append(f"consumer {inc.name} raised: {error}")
    missing = [tp for tp in data.produced if tp not in truth]
    result.broker_lost = len(missing)
    if missing:
        result.warnings.append(
            f"{len(missing)} acknowledged records are missing from the topic (the broker lost "
            f"them), e.g. {', '.join(f'p{p}@{o}' for p, o in missing[:5])}")
    for invariant, detail in view.violations:
        result.violations.append(Violation(f"log_{invariant}", detail))
    rejected = view.verdicts.get("rejected", 0)
    if meta.auth_key and rejected:
        # Nobody but the run's members writes: every rejection refused a genuine record
        # (a sequence number out of order, a broken signature).
        result.violations.append(Violation(
            "genuine_record_rejected", f"{rejected} records of the signed group rejected"))

    deliveries = [d for inc in data.incarnations for d in inc.deliveries]
    dones = [x for inc in data.incarnations for x in inc.dones]
    result.handed_out = len(deliveries)
    hand_out_times = sorted(d.t1 for d in deliveries)
    produced_times = sorted(data.produced_at)
    for event in data.faults:
        if event.get("e") == "broker_up":
            up = float(event["t"])
            for times, into in ((hand_out_times, result.resumed_after_broker_s),
                                (produced_times, result.producer_resumed_after_broker_s)):
                after = bisect.bisect_right(times, up)
                if after < len(times):
                    into.append(times[after] - up)
    handed = Counter((d.partition, d.offset) for d in deliveries)
    result.duplicated = sum(1 for n in handed.values() if n > 1)
    result.redeliveries = sum(n - 1 for n in handed.values())
    processed = {(x.partition, x.offset) for x in dones}
    result.processed = len(processed & truth.key.keys())
    known = []
    for d in deliveries:
        tp = (d.partition, d.offset)
        if tp not in truth:
            result.violations.append(Violation(
                "unknown_record", f"{_describe(d)}: the topic holds no such record"))
        elif truth.key[tp] != d.key:
            result.violations.append(Violation(
                "unknown_record", f"{_describe(d)}: the topic's record has key {truth.key[tp]}"))
        else:
            known.append(d)

    if meta.mode == "eos":
        _assign(known, view, _partition_unit, result)
        check_outputs(data.outputs, truth.key, result)
    elif meta.mode in ("alo", "amo"):
        _check_exclusive(meta.mode, known, dones, truth, view, result)
    elif meta.mode == "key-shared":
        _check_key_shared(known, dones, truth, view, result)
    else:
        _check_share(meta, known, dones, truth, view, result)
    if meta.mode in ("alo", "key-shared"):
        lost = sorted(tp for tp in truth.key if tp not in processed)
        result.lost = len(lost)
        for p, o in lost:
            result.violations.append(Violation(
                "lost", f"p{p}@{o} (key {truth.key[(p, o)]}) was never processed"))
    return result


def _assign(deliveries: Iterable[Delivery], view: LogView, unit_of: Callable[[Delivery], int],
            result: RunResult) -> dict[Stint, list[Delivery]]:
    """Each hand-out's stint; hand-outs outside every stint are violations."""
    by_stint: dict[Stint, list[Delivery]] = defaultdict(list)
    for d in deliveries:
        unit = unit_of(d)
        stint = find_stint(view, d.partition, unit, d.instance, d.t0, d.t1)
        if stint is None:
            around = [s for s in view.unit_stints.get((d.partition, unit), ())
                      if s.start_ms <= _ms(d.t1) + 5000
                      and (s.end_ms is None or s.end_ms >= _ms(d.t0) - 5000)]
            what = "partition" if unit_of is _partition_unit else f"slot {unit} of partition"
            result.violations.append(Violation(
                "without_ownership",
                f"{_describe(d)}: no stint of instance {d.instance} on {what} {d.partition} "
                f"covers it; stints around: "
                f"{'; '.join(_fmt_stint(s) for s in around) or 'none'}"))
            continue
        by_stint[stint].append(d)
    for rows in by_stint.values():
        rows.sort(key=lambda d: (d.inc, d.index))
    return by_stint


def _partition_unit(d: Delivery) -> int:
    return d.partition


def _slot_unit(d: Delivery) -> int:
    return key_slot(None if d.key is None else d.key.encode())


def _check_order(stints: list[Stint], by_stint: dict[Stint, list[Delivery]],
                 sequence_for: Callable[[Delivery], tuple[Hashable, list[int]]],
                 label: Callable[[Delivery], str], truth: Truth, mode: str,
                 result: RunResult) -> None:
    """Order within stints and across hand-overs, for one unit's stints (by start).

    ``sequence_for(d)`` names the sequence a hand-out belongs to (a partition, or a key of a
    partition) and gives that sequence's offsets in the topic."""
    last: dict[Hashable, tuple[int, Stint]] = {}  # sequence -> (index of last hand-out, stint)
    for stint in stints:
        previous: dict[Hashable, int] = {}
        for d in by_stint.get(stint, ()):
            name, sequence = sequence_for(d)
            idx = truth.index(sequence, d.offset)
            if name in previous:
                before = previous[name]
                if idx != before + 1:
                    expected = sequence[before + 1] if before + 1 < len(sequence) else None
                    result.violations.append(Violation(
                        "order_within_stint",
                        f"{_describe(d)} follows {label(d)} offset {sequence[before]} in stint "
                        f"{_fmt_stint(stint)}; expected {expected}"))
            else:
                before_idx, before_stint = last.get(name, (-1, None))
                if mode != "amo" and idx > before_idx + 1:
                    result.violations.append(Violation(
                        "skip_across_handover",
                        f"{_describe(d)} is the first hand-out of {label(d)} in stint "
                        f"{_fmt_stint(stint)}, but offset {sequence[before_idx + 1]} comes "
                        "first" + (f" (last handed out: {sequence[before_idx]} in stint "
                                   f"{_fmt_stint(before_stint)})"
                                   if before_stint is not None else "")))
                elif (mode == "key-shared" and before_stint is not None and idx <= before_idx
                      and before_stint.end_reason == RELEASED):
                    result.violations.append(Violation(
                        "redelivered_after_release",
                        f"{_describe(d)} re-delivers {label(d)} (last handed out: "
                        f"{sequence[before_idx]}) after stint {_fmt_stint(before_stint)} "
                        "ended by a release"))
            previous[name] = idx
            last[name] = (idx, stint)


def _check_exclusive(mode: str, deliveries: list[Delivery], dones: list[Done], truth: Truth,
                     view: LogView, result: RunResult) -> None:
    by_stint = _assign(deliveries, view, _partition_unit, result)
    for _unit, stints in sorted(view.unit_stints.items()):
        _check_order(stints, by_stint,
                     lambda d: (d.partition, truth.by_partition[d.partition]),
                     lambda d: f"partition {d.partition}", truth, mode, result)
    _count_late(by_stint, dones, result, violation_if_released=False)
    if mode == "amo":
        counts = Counter((d.partition, d.offset) for d in deliveries)
        for (p, o), n in sorted(counts.items()):
            if n > 1:
                who = ", ".join(_describe(d) for d in deliveries
                                if (d.partition, d.offset) == (p, o))
                result.violations.append(Violation(
                    "delivered_twice", f"p{p}@{o} was handed out {n} times: {who}"))
        for p, o in sorted(truth.key):
            if (p, o) in counts:
                continue
            if o < view.final_position.get(p, 0):
                result.lost += 1
            else:
                result.unconsumed += 1


def _count_late(by_stint: dict[Stint, list[Delivery]], dones: list[Done], result: RunResult,
                violation_if_released: bool) -> None:
    """Completions after the end of the hand-out's stint."""
    stint_of: dict[tuple[str, int, int], list[tuple[int, Stint]]] = defaultdict(list)
    for stint, rows in by_stint.items():
        for d in rows:
            stint_of[(d.inc, d.partition, d.offset)].append((d.index, stint))
    for x in dones:
        candidates = [(i, s) for i, s in stint_of.get((x.inc, x.partition, x.offset), ())
                      if i < x.index]
        if not candidates:
            continue
        stint = max(candidates, key=lambda c: c[0])[1]
        if stint.end_ms is None or _ms(x.t) < stint.end_ms + TRUNCATION_MS:
            continue
        if violation_if_released and stint.end_reason == RELEASED:
            result.violations.append(Violation(
                "completed_after_release",
                f"p{x.partition}@{x.offset} processed by {x.inc} at {x.t:.3f}, after its "
                f"stint {_fmt_stint(stint)} ended by a release"))
        else:
            result.late_completions += 1


def _check_key_shared(deliveries: list[Delivery], dones: list[Done], truth: Truth,
                      view: LogView, result: RunResult) -> None:
    by_stint = _assign(deliveries, view, _slot_unit, result)
    for _unit, stints in sorted(view.unit_stints.items()):
        _check_order(stints, by_stint,
                     lambda d: ((d.partition, d.key), truth.by_key[(d.partition, d.key)]),
                     lambda d: f"key {d.key}", truth, "key-shared", result)
    _count_late(by_stint, dones, result, violation_if_released=True)


def _check_share(meta: RunMeta, deliveries: list[Delivery], dones: list[Done], truth: Truth,
                 view: LogView, result: RunResult) -> None:
    processed_by: dict[str, set[TP]] = defaultdict(set)
    for x in dones:
        processed_by[x.instance].add((x.partition, x.offset))
    seen: dict[tuple[int, int, int], Delivery] = {}
    for d in deliveries:
        key = (d.partition, d.offset, d.count)
        if key in seen:
            result.violations.append(Violation(
                "acquisition_delivered_twice",
                f"{_describe(d)} with delivery count {d.count}, already handed out as "
                f"{_describe(seen[key])}"))
            continue
        seen[key] = d
        history = view.share.get((d.partition, d.offset))
        acquisitions = history.acquisitions if history is not None else []
        if not 1 <= d.count <= len(acquisitions):
            result.violations.append(Violation(
                "delivery_without_acquisition",
                f"{_describe(d)} has delivery count {d.count}, the log acquired it "
                f"{len(acquisitions)} times"))
            continue
        acquired = acquisitions[d.count - 1]
        if acquired.instance_id != d.instance or _ms(d.t1) < acquired.ts:
            result.violations.append(Violation(
                "delivery_without_acquisition",
                f"{_describe(d)} with delivery count {d.count}: that acquisition is by "
                f"{acquired.client_id}/{acquired.instance_id} at {acquired.ts} ms"))
            continue
        if d.count < len(acquisitions):
            again = acquisitions[d.count]
            if _ms(d.t0) >= again.ts + TRUNCATION_MS:
                result.violations.append(Violation(
                    "delivered_after_reacquired",
                    f"{_describe(d)} with delivery count {d.count}, after "
                    f"{again.client_id}/{again.instance_id} acquired it again at {again.ts} ms"))
    for (p, o) in sorted(truth.key):
        history = view.share.get((p, o))
        accepts = history.accepts if history is not None else []
        acquired_times = len(history.acquisitions) if history is not None else 0
        final = "acknowledged" if o < view.spso.get(p, 0) else view.in_flight.get(
            (p, o), "available")
        if len(accepts) > 1:
            result.violations.append(Violation(
                "accepted_twice", f"p{p}@{o} was accepted {len(accepts)} times: {accepts}"))
        if accepts:
            if final != "acknowledged":
                result.violations.append(Violation(
                    "not_acknowledged", f"p{p}@{o} was accepted but is {final} at the end"))
            for _ts, instance in accepts:
                if (p, o) not in processed_by.get(instance, set()):
                    result.violations.append(Violation(
                        "accepted_unprocessed",
                        f"p{p}@{o} was accepted by instance {instance}, whose journal does not "
                        "show it processed"))
            continue
        limit = view.delivery_limit.get(p, meta.delivery_limit)
        if o < view.spso.get(p, 0):  # done without an accept: archived
            if acquired_times >= limit:
                result.archived += 1
            else:
                result.violations.append(Violation(
                    "archived_early", f"p{p}@{o} was archived after {acquired_times} "
                    f"acquisitions (delivery limit {limit}) without being accepted"))
        else:
            result.lost += 1
            result.violations.append(Violation(
                "not_accepted", f"p{p}@{o} is {final} at the end of the run (acquired "
                f"{acquired_times} times), never accepted"))
