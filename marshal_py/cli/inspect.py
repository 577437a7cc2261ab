"""``marshal state`` and ``marshal tail``: the world every member computes, and the log with
the verdict of each record (at a past moment too)."""

from __future__ import annotations

import json
import signal
import threading
import time

import click

from marshal_py.admin.moments import (
    IsoTime,
    PartitionOffset,
    moment_at_time,
    state_moment,
)
from marshal_py.admin.world_view import (
    RECORD_COLUMNS,
    SHARE_COLUMNS,
    STATE_COLUMNS,
    WorldView,
    load_world,
    record_rows,
    share_rows,
    state_rows,
)
from marshal_py.cli.common import (
    Progress,
    current_group_keys,
    iso,
    kafka_options,
    open_log,
    print_table,
    replay_options,
    resolve_moment,
)
from marshal_py.protocol.codec import DecodeError, decode
from marshal_py.replay.reading import catch_up, follow, seek_to_window
from marshal_py.world.rationalizer import Outcome, Rationalizer, RationalizerConfig


@click.command()
@kafka_options
@replay_options
@click.option("--group", help="Only this consumer group.")
@click.option("--topic", help="Only this topic (reads only its coordination partition).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects.")
@click.option("--shares", is_flag=True,
              help="With --json: the share-partitions instead of the claims.")
@click.option("--records", is_flag=True,
              help="Show every in-flight record of the share-partitions.")
@click.option("--at", "at_ms", type=IsoTime(),
              help="Show the world as it was at this time (ISO-8601, UTC without a zone).")
@click.option("--at-position", type=PartitionOffset(),
              help="Show the world as a reader of coordination partition PARTITION that had "
                   "read every record below OFFSET saw it (judged at the last one's time, "
                   "or at --at).")
def state(bootstrap_servers: str, coordination_topic: str, timeout: float,
          heartbeat_interval: float, replay_window: float, offsets_retention: float,
          group: str | None,
          topic: str | None, as_json: bool, shares: bool, records: bool,
          at_ms: int | None, at_position: tuple[int, int] | None) -> None:
    """Print the rationalized world state: who owns which partition, and what is committed.

    With --at or --at-position, as it was at that moment (replayed from the newest
    checkpoint before it when --group and --topic are given, else from the replay window
    before it)."""
    with open_log(bootstrap_servers, coordination_topic, timeout) as log:
        moment = resolve_moment(lambda: state_moment(log, topic, at_ms, at_position))
        view = load_world(
            log,
            heartbeat_interval_ms=int(heartbeat_interval * 1000),
            window_ms=int(replay_window * 1000),
            topic=topic,
            group=None if moment is None else group,
            offsets_retention_ms=int(offsets_retention * 1000),
            group_keys=current_group_keys(),
            now_ms=None if moment is None else moment.at_ms,
            progress=Progress(),
            until=None if moment is None else moment.until,
        )
    rows = state_rows(view, group=group, topic=topic)
    share_table = share_rows(view, group=group, topic=topic)
    record_table = record_rows(view, group=group, topic=topic) if records else []
    if as_json:
        chosen: list[dict[str, object]]
        if records:
            chosen = record_table
        elif shares:
            chosen = share_table
        else:
            chosen = [r.as_dict() for r in rows]
        click.echo(json.dumps(chosen, indent=2))
        _print_counters(view, group)
        return
    if rows:
        print_table(STATE_COLUMNS, [[getattr(r, c) for c in STATE_COLUMNS] for r in rows])
    if share_table:
        if rows:
            click.echo()
        print_table(SHARE_COLUMNS, [[r[c] for c in SHARE_COLUMNS] for r in share_table])
    if record_table:
        click.echo()
        print_table(RECORD_COLUMNS, [[r[c] for c in RECORD_COLUMNS] for r in record_table])
    if not rows and not share_table:
        click.echo(f"no claims in {coordination_topic} (replayed {view.applied} records)")
    _print_counters(view, group)


def _print_counters(view: WorldView, group: str | None) -> None:
    """The replay's counters on stderr, with the rejections of authenticated groups."""
    counters = view.rationalizer
    click.echo(
        f"records replayed: {view.applied}, ignored by the rules: {counters.ignored_count()}, "
        f"undecodable or unknown: {counters.skipped_count()}",
        err=True,
    )
    for authenticated in sorted(set(counters.rejected) | set(counters.config.group_keys)):
        if group is None or authenticated == group:
            click.echo(f"rejected (unsigned, badly signed or replayed) records of "
                       f"authenticated group {authenticated}: "
                       f"{counters.rejected[authenticated]}", err=True)


def _tail_line(outcome: Outcome) -> dict[str, object]:
    record = outcome.record
    raw = record.value
    if outcome.message is not None:
        text = raw.decode("utf-8", "replace") if raw is not None else ""
    elif raw is None:
        text = "<tombstone>"
    else:
        try:
            decode(raw)
            text = raw.decode("utf-8", "replace")
        except DecodeError as exc:
            text = f"<undecodable: {exc}> {raw[:120]!r}"
    return {
        "partition": record.partition,
        "position": record.position,
        "time": iso(record.timestamp_ms),
        "verdict": outcome.verdict.value,
        "record": text,
    }


@click.command()
@kafka_options
@replay_options
@click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Coordination partition(s) to show (default: all).")
@click.option("-n", "--lines", type=click.IntRange(min=0), default=50, show_default=True,
              help="How many of the newest records per partition to print first.")
@click.option("-f", "--follow", "follow_log", is_flag=True,
              help="Keep printing new records until stopped.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--from", "from_ms", type=IsoTime(),
              help="Print every record from this time on (ISO-8601, UTC without a zone) "
                   "instead of the newest --lines.")
@click.option("--to", "to_ms", type=IsoTime(),
              help="Stop at this time: records stamped after it are not read (not with "
                   "--follow).")
def tail(bootstrap_servers: str, coordination_topic: str, timeout: float,
         heartbeat_interval: float, replay_window: float, offsets_retention: float,
         partitions: tuple[int, ...],
         lines: int, follow_log: bool, as_json: bool,
         from_ms: int | None, to_ms: int | None) -> None:
    """Print the decoded coordination log with each record's verdict.

    The whole replay window is rationalized so that every verdict (claim_won, not_owner, ...)
    is the one every client reaches; only the newest --lines records are printed (with
    --from: every record from that time on; with --to: up to that time, the window before
    the moment being replayed).
    """
    if to_ms is not None and follow_log:
        raise click.UsageError("--to and --follow exclude each other")
    if from_ms is not None and to_ms is not None and from_ms > to_ms:
        raise click.BadParameter(f"{iso(from_ms)} is after --to {iso(to_ms)}",
                                 param_hint="--from")
    def emit(outcome: Outcome) -> None:
        line = _tail_line(outcome)
        if as_json:
            click.echo(json.dumps(line))
        else:
            where = f"p{line['partition']}@{line['position']}"
            click.echo(f"{where:<10} {line['time']}  "
                       f"{line['verdict']:<16} {line['record']}")

    stop = threading.Event()
    with open_log(bootstrap_servers, coordination_topic, timeout) as log:
        count = log.partition_count()
        chosen = tuple(sorted(set(partitions))) or tuple(range(count))
        bad = [p for p in chosen if p >= count]
        if bad:
            raise click.BadParameter(
                f"{coordination_topic} places records on partitions 0..{count - 1} (its "
                f"layout), not {bad[0]}",
                param_hint="--partition",
            )
        now = int(time.time() * 1000)
        until = None if to_ms is None else resolve_moment(
            lambda: moment_at_time(log, chosen, to_ms, now, "--to")).until
        ends = until or {p: log.end_position(p) for p in chosen}
        firsts = {p: end - lines for p, end in ends.items()}
        if from_ms is not None:
            resolve_moment(lambda: moment_at_time(log, chosen, from_ms, now, "--from"))
            firsts = {p: log.position_for_time(p, from_ms) for p in chosen}
        rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=count, heartbeat_interval_ms=int(heartbeat_interval * 1000),
            offsets_retention_ms=int(offsets_retention * 1000),
            group_keys=current_group_keys()))

        def observe(outcome: Outcome) -> None:
            if outcome.record.position >= firsts[outcome.record.partition]:
                emit(outcome)

        rationalizer.observe(observe)
        anchor = from_ms if from_ms is not None else to_ms if to_ms is not None else now
        seek_to_window(log, rationalizer, chosen, anchor, int(replay_window * 1000))
        catch_up(log, rationalizer, chosen, progress=Progress(), until=until)
        if not follow_log:
            return
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        try:
            for _ in follow(log, rationalizer, chosen, stop):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
