"""The administration commands: ``marshal groups``, ``lag``, ``reset-offsets`` and ``watch``
(named in :data:`marshal_py.cli.app.COMMANDS`), and the ``--metrics-port`` option
of ``marshal consume``.

Mistakes (bad arguments, an unknown group, an unreachable broker, a missing topic) raise
:class:`~marshal_py.errors.MarshalError` or a click usage error, which the ``marshal`` group
prints as one line with exit status 2.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

import click

from marshal_py.admin.groups import GROUP_COLUMNS, group_rows, groups_json
from marshal_py.admin.lag import LAG_COLUMNS, lag_report, report_lines, require_group
from marshal_py.admin.world_view import WorldView, load_world
from marshal_py.cli.common import (
    Progress,
    current_group_keys,
    kafka_log_config,
    kafka_options,
    open_log,
    open_topics,
    parse_time,
    print_table,
    replay_options,
    require_topic,
)
from marshal_py.log.kafka import KafkaLog
from marshal_py.world.lifecycle import GroupState


def _load(log: KafkaLog, heartbeat_interval: float, replay_window: float,
          offsets_retention: float, group: str | None = None,
          topic: str | None = None) -> WorldView:
    """The world: one topic's coordination partition from ``group``'s newest checkpoint when
    both are given, else the replay window of one (``topic``) or every partition."""
    return load_world(log, heartbeat_interval_ms=int(heartbeat_interval * 1000),
                      window_ms=int(replay_window * 1000), topic=topic, group=group,
                      offsets_retention_ms=int(offsets_retention * 1000),
                      group_keys=current_group_keys(), progress=Progress())


def _check_topic(log: KafkaLog, topic: str | None) -> None:
    if topic is None:
        return
    with open_topics(log) as source:
        require_topic(source, topic, log.config.bootstrap_servers)


# -- marshal groups ----------------------------------------------------------------------------


@click.command("groups")
@kafka_options
@replay_options
@click.option("--group", help="Only this consumer group.")
@click.option("--topic", help="Only this topic (reads only its coordination partition).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list, one object per group.")
def groups(bootstrap_servers: str, coordination_topic: str, timeout: float,
           heartbeat_interval: float, replay_window: float, offsets_retention: float,
           group: str | None, topic: str | None, as_json: bool) -> None:
    """Every consumer group with its lifecycle per topic: stable (a member is live), empty
    (none is; its offsets expire after --offsets-retention) or dead (offsets expired)."""
    with open_log(bootstrap_servers, coordination_topic, timeout) as log:
        view = _load(log, heartbeat_interval, replay_window, offsets_retention, topic=topic)
    rows = group_rows(view.rationalizer, view.now_ms, group, topic)
    if group is not None and not rows:
        require_group(view.rationalizer, group, coordination_topic, topic)
    if as_json:
        click.echo(json.dumps(groups_json(rows), indent=2))
        return
    if rows:
        print_table(GROUP_COLUMNS, [row.cells(view.now_ms) for row in rows])
    else:
        click.echo(f"no groups in {coordination_topic} (replayed {view.applied} records)")
    overall: dict[str, GroupState] = {row.group: row.group_state for row in rows}
    counts = {s: sum(1 for v in overall.values() if v is s) for s in GroupState}
    click.echo(f"{len(overall)} group(s): {counts[GroupState.STABLE]} stable, "
               f"{counts[GroupState.EMPTY]} empty, {counts[GroupState.DEAD]} dead "
               f"({view.applied:,} coordination records replayed)", err=True)


# -- marshal lag -------------------------------------------------------------------------------


@click.command("lag")
@kafka_options
@replay_options
@click.option("--group", required=True, help="The consumer group.")
@click.option("--topic", help="Only this topic: reads one coordination partition, from the "
                              "group's newest checkpoint (fast on big logs).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def lag(bootstrap_servers: str, coordination_topic: str, timeout: float,
        heartbeat_interval: float, replay_window: float, offsets_retention: float, group: str,
        topic: str | None, as_json: bool) -> None:
    """Per partition of GROUP's topics: end offset, committed offset, lag and owners, with
    totals per topic and overall."""
    with open_log(bootstrap_servers, coordination_topic, timeout) as log:
        _check_topic(log, topic)
        view = _load(log, heartbeat_interval, replay_window, offsets_retention,
                     group=group if topic is not None else None, topic=topic)
        topics = require_group(view.rationalizer, group, coordination_topic, topic)
        with open_topics(log) as source:
            counts = {t: source.partition_count(t) for t in topics}
            ends = source.end_offsets([t for t in topics if counts[t]])
    report = lag_report(view.rationalizer, group, topics, counts, ends, view.now_ms)
    if as_json:
        click.echo(json.dumps(report.as_json(), indent=2))
        return
    print_table(LAG_COLUMNS, [row.cells() for row in report.rows])
    click.echo()
    for line in report_lines(report):
        click.echo(line)
    missing = [t for t in topics if not counts[t]]
    if missing:
        click.echo(f"topic(s) {', '.join(missing)} no longer exist on {bootstrap_servers}",
                   err=True)


# -- marshal reset-offsets ---------------------------------------------------------------------


@click.command("reset-offsets")
@kafka_options
@replay_options
@click.option("--group", required=True, help="The group (share, exclusive or key-shared).")
@click.option("--topic", required=True, help="The topic.")
@click.option("--to-earliest", is_flag=True, help="The oldest retained offset.")
@click.option("--to-latest", is_flag=True, help="The end of each partition.")
@click.option("--to-offset", type=click.IntRange(min=0), help="This offset on every partition.")
@click.option("--to-datetime", help="The first offset at or after this ISO 8601 time.")
@click.option("--dry-run", is_flag=True, help="Show the plan, change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def reset_offsets(bootstrap_servers: str, coordination_topic: str, timeout: float,
                  heartbeat_interval: float, replay_window: float, offsets_retention: float,
                  group: str, topic: str, to_earliest: bool, to_latest: bool,
                  to_offset: int | None, to_datetime: str | None, dry_run: bool,
                  as_json: bool) -> None:
    """Move an empty group's offsets on TOPIC: a share group's start offset (SPSO,
    discarding in-flight state), or an exclusive or key-shared group's committed offset of
    every partition. Refuses while the group has live members."""
    from marshal_py.admin.reset import reset_offsets as reset

    to = "earliest" if to_earliest else "latest" if to_latest else None
    chosen = [to_earliest, to_latest, to_offset is not None, to_datetime is not None]
    if sum(chosen) != 1:
        raise click.UsageError("give exactly one of --to-earliest, --to-latest, --to-offset, "
                               "--to-datetime")
    when_ms = parse_time(to_datetime, "--to-datetime") if to_datetime is not None else None
    with open_log(bootstrap_servers, coordination_topic, timeout) as log, \
            open_topics(log) as source:
        partitions = require_topic(source, topic, bootstrap_servers)

        def target(partition: int) -> int:
            beginning, end = source.offset_bounds(topic, partition)
            if to == "earliest":
                return beginning
            if to == "latest":
                return end
            if to_offset is not None:
                return min(max(to_offset, beginning), end)
            assert when_ms is not None
            found = source.offset_for_time(topic, partition, when_ms)
            return end if found is None else found

        result = reset(log, group, topic, target, partitions,
                       heartbeat_interval_ms=int(heartbeat_interval * 1000),
                       window_ms=int(replay_window * 1000),
                       offsets_retention_ms=int(offsets_retention * 1000),
                       group_keys=current_group_keys(), dry_run=dry_run,
                       progress=Progress())
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2))
    elif result.mode == "share":
        print_table(("partition", "current_spso", "new_spso", "in_flight_discarded"),
                    [[p.partition, p.current_spso, p.new_spso, p.in_flight]
                     for p in result.share_plans])
    else:
        print_table(("partition", "mode", "current_offset", "new_offset", "result"),
                    [[p.partition, result.mode, p.current_offset, p.new_offset,
                      "dry run" if p.applied is None else "applied" if p.applied
                      else "refused"] for p in result.plans])
    if result.refused:
        which = ", ".join(str(p) for p in result.refused)
        click.echo(f"marshal reset-offsets: error: the log refused the reset of partition(s) "
                   f"{which} (a member joined meanwhile?); run marshal groups and try again",
                   err=True)
        sys.exit(2)
    click.echo("dry run: nothing changed" if dry_run else "reset written to the log and "
               "applied", err=True)


# -- marshal watch -----------------------------------------------------------------------------


@click.command("watch")
@kafka_options
@replay_options
@click.option("--group", help="Only this consumer group (with --topic: replays from the "
                              "group's newest checkpoint).")
@click.option("--topic", help="Only this topic (reads only its coordination partition).")
@click.option("--refresh", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds between frames.")
@click.option("--iterations", type=click.IntRange(min=1),
              help="Draw this many frames, then exit (default: until Ctrl-C / SIGTERM).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per frame and line.")
def watch(bootstrap_servers: str, coordination_topic: str, timeout: float,
          heartbeat_interval: float, replay_window: float, offsets_retention: float,
          group: str | None, topic: str | None, refresh: float, iterations: int | None,
          as_json: bool) -> None:
    """A live view of the world, redrawn in place: group lifecycles, partition ownership and
    freshness, committed offsets and lag, share-partitions and key-shared slots."""
    from rich.console import Console

    from marshal_py.admin.watch import run_watch
    from marshal_py.replay.reading import catch_up

    stop = threading.Event()
    with open_log(bootstrap_servers, coordination_topic, timeout) as log, \
            open_topics(log) as source:
        if topic is not None:
            require_topic(source, topic, bootstrap_servers)
        view = _load(log, heartbeat_interval, replay_window, offsets_retention,
                     group=group if topic is not None else None, topic=topic)
        if group is not None:
            require_group(view.rationalizer, group, coordination_topic, topic)
        console = Console()
        if not console.is_terminal:
            console = Console(width=int(os.environ.get("COLUMNS", "200")))

        def emit(frame: dict[str, Any]) -> None:
            click.echo(json.dumps(frame))

        def end_offsets(topics: list[str]) -> dict[tuple[str, int], int]:
            return source.end_offsets([t for t in topics if source.partition_count(t)])

        previous = signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
        try:
            run_watch(view.rationalizer, lambda: catch_up(log, view.rationalizer,
                                                          view.partitions),
                      end_offsets, console=console, emit_json=emit if as_json else None,
                      group=group, topic=topic, refresh_s=refresh, iterations=iterations,
                      stop=stop)
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)


# -- marshal consume --metrics-port ------------------------------------------------------------


@click.command()
@kafka_options
@click.option("--partitions", type=click.IntRange(min=1), default=4, show_default=True,
              help="Partition count of the coordination topic (fixed for its lifetime).")
@click.option("--replication-factor", type=click.IntRange(min=1),
              help="Replication factor (default: min(3, brokers)).")
def init(bootstrap_servers: str, coordination_topic: str, timeout: float, partitions: int,
         replication_factor: int | None) -> None:
    """Create the coordination topic and its index with the settings the protocol needs, and
    record its layout (idempotent).

    Records are placed by the partition count recorded when the topic was created (md5
    placement, kept in the compacted index topic): partitions added later stay unused.
    """
    config = kafka_log_config(
        bootstrap_servers,
        coordination_topic,
        timeout,
        create_topic=True,
        partitions=partitions,
        replication_factor=replication_factor,
    )
    log = KafkaLog(config)
    try:
        extra = ""
        if log.metadata_partition_count > log.partition_count():
            extra = f" (and {log.metadata_partition_count - log.partition_count()} unused)"
        click.echo(f"{coordination_topic}: {log.partition_count()} partitions{extra}, "
                   "message.timestamp.type=LogAppendTime; layout kept in "
                   f"{config.index_name} (never add partitions)")
    finally:
        log.close()


def _metrics_port(ctx: click.Context, param: click.Parameter, value: int | None) -> int | None:
    if value is not None:
        try:
            importlib.import_module("prometheus_client")
        except ImportError as exc:
            raise click.BadParameter("needs prometheus_client, which is not installed: "
                                     "pip install marshal_py[metrics]", ctx, param) from exc
        ctx.meta["marshal.metrics_port"] = value
    return value


def _metrics_addr(ctx: click.Context, param: click.Parameter, value: str) -> str:
    ctx.meta["marshal.metrics_addr"] = value
    return value


def metrics_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--metrics-port`` and ``--metrics-addr`` for ``marshal consume``; they do not change
    its signature (read back by :func:`start_metrics`)."""
    func = click.option("--metrics-addr", default="127.0.0.1", show_default=True,
                        expose_value=False, callback=_metrics_addr,
                        help="Address the metrics endpoint listens on (0.0.0.0: every "
                             "interface).")(func)
    func = click.option("--metrics-port", type=click.IntRange(min=0, max=65535),
                        expose_value=False, callback=_metrics_port,
                        help="Serve Prometheus metrics on this port at /metrics "
                             "(pip install marshal_py[metrics]).")(func)
    return func


def start_metrics(marshaler: Any) -> None:
    """Serve ``marshaler``'s metrics when ``--metrics-port`` was given, until the command
    ends."""
    ctx = click.get_current_context()
    port = ctx.meta.get("marshal.metrics_port")
    if port is None:
        return
    from marshal_py.client.metrics import serve

    server = serve(marshaler, port, ctx.meta.get("marshal.metrics_addr", "127.0.0.1"))
    ctx.call_on_close(server.close)
    click.echo(f"marshal consume: metrics on {server.url}", err=True)
