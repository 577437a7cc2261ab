"""The ``marshal`` command line: inspect the coordination log and run a dev broker."""

from __future__ import annotations

import base64
import json
import logging
import signal
import sys
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, NoReturn, cast

import click

from marshal_py.admin.admin_commands import metrics_options, start_metrics
from marshal_py.admin.cli_common import (
    Progress,
    auth_keys_option,
    current_group_keys,
    current_index_topic,
    current_kafka_config,
    kafka_log_config,
    kafka_options,
    open_log,
    print_table,
    replay_options,
)
from marshal_py.admin.mirror import check_topics_exist, mirror
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
from marshal_py.client.consumer import Consumer
from marshal_py.client.engine_types import Balance, Mode, OffsetReset
from marshal_py.client.eos_consumer import DEFAULT_TRANSACTION_TIMEOUT_MS
from marshal_py.client.fetchers import FETCHER_KINDS, FetcherKind
from marshal_py.client.holdings import DEFAULT_AMO_WINDOW_MS, DEFAULT_AMO_WINDOW_RECORDS
from marshal_py.client.key_shared_consumer import KeySharedConsumer
from marshal_py.client.member_base import DEFAULT_MAX_POLL_INTERVAL_MS, Compat
from marshal_py.client.settings import ISOLATION_LEVELS, IsolationLevel
from marshal_py.client.share_consumer import ShareConsumer, ShareRecord
from marshal_py.errors import CommitFailedError, MarshalError
from marshal_py.log.kafka import KafkaLog
from marshal_py.log.replay import catch_up, follow, seek_to_window
from marshal_py.protocol.codec import DecodeError, decode
from marshal_py.world.rationalizer import Outcome, Rationalizer, RationalizerConfig


def _fail(command: str, message: str) -> NoReturn:
    click.echo(f"marshal {command}: error: {message}", err=True)
    sys.exit(2)


def _iso(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


class MarshalGroup(click.Group):
    """A click group whose errors are one line on stderr and exit status 2."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            return super().main(argv, prog_name or "marshal", complete_var,
                                standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("marshal: aborted", err=True)
            sys.exit(130)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else "marshal"
            click.echo(f"{where}: error: {exc.format_message()} (see {where} --help)", err=True)
            sys.exit(2)
        except MarshalError as exc:
            click.echo(f"marshal: error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=MarshalGroup)
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """marshal_py: leaderless Kafka consumer coordination through __marshal."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)


@main.command()
@kafka_options
@replay_options
@click.option("--group", help="Only this consumer group.")
@click.option("--topic", help="Only this topic (reads only its coordination partition).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of objects.")
@click.option("--shares", is_flag=True,
              help="With --json: the share-partitions instead of the claims.")
@click.option("--records", is_flag=True,
              help="Show every in-flight record of the share-partitions.")
def state(bootstrap_servers: str, coordination_topic: str, timeout: float,
          heartbeat_interval: float, replay_window: float, offsets_retention: float,
          group: str | None,
          topic: str | None, as_json: bool, shares: bool, records: bool) -> None:
    """Print the rationalized world state: who owns which partition, and what is committed."""
    with open_log(bootstrap_servers, coordination_topic, timeout) as log:
        view = load_world(
            log,
            heartbeat_interval_ms=int(heartbeat_interval * 1000),
            window_ms=int(replay_window * 1000),
            topic=topic,
            offsets_retention_ms=int(offsets_retention * 1000),
            group_keys=current_group_keys(),
            progress=Progress(),
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
        "time": _iso(record.timestamp_ms),
        "verdict": outcome.verdict.value,
        "record": text,
    }


@main.command()
@kafka_options
@replay_options
@click.option("--partition", "partitions", type=click.IntRange(min=0), multiple=True,
              help="Coordination partition(s) to show (default: all).")
@click.option("-n", "--lines", type=click.IntRange(min=0), default=50, show_default=True,
              help="How many of the newest records per partition to print first.")
@click.option("-f", "--follow", "follow_log", is_flag=True,
              help="Keep printing new records until stopped.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def tail(bootstrap_servers: str, coordination_topic: str, timeout: float,
         heartbeat_interval: float, replay_window: float, offsets_retention: float,
         partitions: tuple[int, ...],
         lines: int, follow_log: bool, as_json: bool) -> None:
    """Print the decoded coordination log with each record's verdict.

    The whole replay window is rationalized so that every verdict (claim_won, not_owner, ...)
    is the one every client reaches; only the newest --lines records are printed.
    """
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
        ends = {p: log.end_position(p) for p in chosen}
        rationalizer = Rationalizer(RationalizerConfig(
            coordination_partitions=count, heartbeat_interval_ms=int(heartbeat_interval * 1000),
            offsets_retention_ms=int(offsets_retention * 1000),
            group_keys=current_group_keys()))

        def observe(outcome: Outcome) -> None:
            if outcome.record.position >= ends[outcome.record.partition] - lines:
                emit(outcome)

        rationalizer.observe(observe)
        seek_to_window(log, rationalizer, chosen, int(time.time() * 1000),
                       int(replay_window * 1000))
        catch_up(log, rationalizer, chosen, progress=Progress())
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


@main.command()
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


def _record_json(record: Any) -> dict[str, object]:
    out: dict[str, object] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
    }
    for name, raw in (("key", record.key), ("value", record.value)):
        if raw is None:
            out[name] = None
            continue
        try:
            out[name] = raw.decode("utf-8")
        except UnicodeDecodeError:
            out[f"{name}_b64"] = base64.b64encode(raw).decode("ascii")
    out["delivery_count"] = getattr(record, "delivery_count", 1)
    return out


@main.command()
@kafka_options
@click.option("--group", required=True, help="Consumer group id.")
@click.option("--topic", "topics", required=True, multiple=True, help="Topic(s) to consume.")
@click.option("--mode", type=click.Choice(["alo", "amo", "eos", "share", "key-shared"]),
              default="alo", show_default=True,
              help="at-least-once, at-most-once, eos (exactly-once copy to --output-topic), "
                   "share (queue semantics, implicit accept), or key-shared (any number of "
                   "members per partition, per-key order, implicit commit).")
@click.option("--output-topic",
              help="eos: copy every record (key, value, headers) to this topic, in Kafka "
                   "transactions that also commit the input offsets: read_committed readers "
                   "of it see each input record once.")
@click.option("--transaction-timeout", type=click.FloatRange(min=0.1, max=900),
              default=DEFAULT_TRANSACTION_TIMEOUT_MS / 1000, show_default=True,
              help="eos: seconds a transaction may stay open (Kafka's transaction.timeout.ms).")
@click.option("--client-id", help="Stable name of this consumer (default: HOST-PID).")
@click.option("--heartbeat-interval", type=click.FloatRange(min=0.01), default=10.0,
              show_default=True,
              help="Seconds; the same for every member of the group (a member whose interval "
                   "differs from the group's live members' exits 2).")
@click.option("--offset-reset", type=click.Choice(["latest", "earliest"]), default="latest",
              show_default=True, help="Where a partition with no committed offset starts.")
@click.option("--balance", type=click.Choice(["fair", "greedy"]), default="fair",
              show_default=True, help="Hold a fair share, or every free partition.")
@click.option("--max-claims", type=click.IntRange(min=1), help="Hold at most N partitions.")
@click.option("--release-lag", type=click.IntRange(min=1),
              help="Hand a partition lagging by more than N records to a less busy member.")
@click.option("--lock-duration", type=click.FloatRange(min=1, max=3600), default=30.0,
              show_default=True, help="share: seconds a member holds acquired records.")
@click.option("--delivery-limit", type=click.IntRange(min=2, max=10), default=5,
              show_default=True, help="share: delivery attempts before a record is archived.")
@click.option("--start-datetime",
              help="share: a new share group starts at the first record at or after this "
                   "ISO 8601 time (instead of --offset-reset).")
@click.option("--dead-letter-topic",
              help="share: copy records archived at the delivery limit to this topic.")
@click.option("--release-offsets", default="",
              help="share (testing): comma-separated offsets this member always releases.")
@click.option("--batch-size", type=click.IntRange(min=1),
              help="share: records acquired at a time (default 100); amo: at most this many "
                   f"records per confirmed window (default {DEFAULT_AMO_WINDOW_RECORDS:,}).")
@click.option("--amo-window", type=click.FloatRange(min=0.001, max=60),
              default=DEFAULT_AMO_WINDOW_MS / 1000, show_default=True,
              help="amo: seconds of consumption one confirmed window covers (a crash loses "
                   "at most two windows).")
@click.option("--fetcher", type=click.Choice(list(FETCHER_KINDS)), default="kafka-python",
              show_default=True,
              help="alo/amo: the client that fetches records: kafka-python, or confluent "
                   "(librdkafka, several times faster; pip install 'marshal_py[librdkafka]').")
@click.option("--isolation-level", type=click.Choice(list(ISOLATION_LEVELS)),
              help="read_committed: only records of committed transactions, up to the last "
                   "stable offset; read_uncommitted: every record, aborted ones too.  "
                   "[default: --command-config's isolation.level, else read_committed]")
@click.option("--max-poll-interval", type=click.FloatRange(min=0.001),
              default=DEFAULT_MAX_POLL_INTERVAL_MS / 1000, show_default=True,
              help="Seconds the record handling may take before this member gives its work "
                   "up to the others (as Kafka's max.poll.interval.ms).")
@click.option("--compat", type=click.Choice(["v1"]),
              help="v1: the group is shared with members of the original Marshal (Go): "
                   "write only its record types and form (alo/amo; use "
                   "--heartbeat-interval 60).")
@click.option("--max-records", type=click.IntRange(min=1),
              help="Stop (commit and release) after N records.")
@click.option("--print", "print_records", is_flag=True,
              help="Write each record as one JSON line on stdout.")
@auth_keys_option
@metrics_options
def consume(bootstrap_servers: str, coordination_topic: str, timeout: float, group: str,
            topics: tuple[str, ...], mode: str, output_topic: str | None,
            transaction_timeout: float, client_id: str | None,
            heartbeat_interval: float, offset_reset: str, balance: str,
            max_claims: int | None, release_lag: int | None, lock_duration: float,
            delivery_limit: int, start_datetime: str | None, dead_letter_topic: str | None,
            release_offsets: str, batch_size: int | None, amo_window: float, fetcher: str,
            isolation_level: str | None, max_poll_interval: float, compat: str | None,
            max_records: int | None, print_records: bool) -> None:
    """Consume topics as a member of GROUP until SIGTERM / Ctrl-C, then commit and release."""
    from marshal_py.client.marshaler import Marshaler

    if (mode == "eos") != (output_topic is not None):
        raise click.UsageError("--mode eos copies records to --output-topic, and "
                               "--output-topic needs --mode eos")
    marshaler = Marshaler(bootstrap_servers, group, client_id, heartbeat_interval,
                          coordination_topic=coordination_topic, timeout=timeout,
                          kafka_config=current_kafka_config(),
                          index_topic=current_index_topic(),
                          auth_keys=current_group_keys().get(group, ()),
                          fetcher=cast(FetcherKind, fetcher),
                          compat=cast(Compat | None, compat))
    try:
        start_metrics(marshaler)  # --metrics-port: serves until the command ends
        reset = cast(OffsetReset, offset_reset)
        isolation = cast(IsolationLevel | None, isolation_level)
        consumer: Consumer | ShareConsumer | KeySharedConsumer
        if mode == "eos":
            assert output_topic is not None
            check_topics_exist(kafka_log_config(bootstrap_servers, coordination_topic,
                                                timeout), [output_topic])
            eos = marshaler.consumer(list(topics), "eos", offset_reset=reset,
                                     balance=cast(Balance, balance), max_claims=max_claims,
                                     release_lag=release_lag, isolation_level=isolation,
                                     max_poll_interval=max_poll_interval,
                                     transaction_timeout=transaction_timeout)
            _started(marshaler, group, topics)
            count = mirror(eos, output_topic, print_records, max_records)
            click.echo(f"marshal consume: copied {count:,} records to {output_topic} "
                       "exactly once; released", err=True)
            return
        if mode == "key-shared":
            consumer = marshaler.consumer(list(topics), "key-shared", offset_reset=reset,
                                          isolation_level=isolation,
                                          max_poll_interval=max_poll_interval)
        elif mode == "share":
            start_time = None
            if start_datetime is not None:
                try:
                    start_time = datetime.fromisoformat(start_datetime)
                except ValueError as exc:
                    raise click.BadParameter(f"{start_datetime!r} is not an ISO 8601 time",
                                             param_hint="--start-datetime") from exc
                if start_time.tzinfo is None:
                    start_time = start_time.replace(tzinfo=UTC)
            consumer = marshaler.consumer(list(topics), "share", offset_reset=reset,
                                          lock_duration=lock_duration,
                                          delivery_limit=delivery_limit,
                                          batch_size=batch_size or 100,
                                          dead_letter_topic=dead_letter_topic,
                                          acknowledgement="explicit", start_time=start_time,
                                          isolation_level=isolation,
                                          max_poll_interval=max_poll_interval)
        else:
            consumer = marshaler.consumer(list(topics), cast(Mode, mode), offset_reset=reset,
                                          balance=cast(Balance, balance),
                                          max_claims=max_claims, release_lag=release_lag,
                                          amo_batch_size=batch_size or DEFAULT_AMO_WINDOW_RECORDS,
                                          amo_window=amo_window, isolation_level=isolation,
                                          max_poll_interval=max_poll_interval)
        _started(marshaler, group, topics)
        try:
            poison = {int(o) for o in release_offsets.split(",") if o.strip()}
        except ValueError as exc:
            raise click.BadParameter("give offsets like 5,17", param_hint="--release-offsets") \
                from exc
        count = _consume_loop(consumer, print_records, max_records, poison)
        click.echo(f"marshal consume: consumed {count:,} records; committed and released",
                   err=True)
    finally:
        marshaler.close()


def _started(marshaler: Any, group: str, topics: Sequence[str]) -> None:
    click.echo(f"marshal consume: member {marshaler.client_id} "
               f"(instance {marshaler.instance_id}) of {group} on {', '.join(topics)}",
               err=True)


def _consume_loop(consumer: Consumer | ShareConsumer | KeySharedConsumer, print_records: bool,
                  max_records: int | None, poison: set[int]) -> int:
    previous = {sig: signal.signal(sig, lambda signum, frame: consumer.stop())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    count = 0
    last_report = time.monotonic()
    try:
        for record in consumer:
            if print_records:
                line = _record_json(record)
                if isinstance(consumer, KeySharedConsumer):
                    line["at_ms"] = round(time.time() * 1000, 3)  # handed out (wall clock)
                sys.stdout.write(json.dumps(line) + "\n")
                sys.stdout.flush()
            if isinstance(consumer, Consumer):
                try:
                    consumer.commit(record)
                except CommitFailedError as exc:  # stdout blocked past --max-poll-interval
                    click.echo(f"marshal consume: {exc}", err=True)
            elif isinstance(consumer, ShareConsumer) and isinstance(record, ShareRecord):
                try:
                    consumer.ack(record, "release" if record.offset in poison else "accept")
                except CommitFailedError as exc:
                    click.echo(f"marshal consume: {exc}", err=True)
            count += 1
            now = time.monotonic()
            if not print_records and now - last_report >= 5:
                last_report = now
                click.echo(f"consumed {count:,} records", err=True)
            if max_records is not None and count >= max_records:
                break
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        consumer.close()
    return count


def _register_commands() -> None:
    from marshal_py.admin.admin_commands import COMMANDS
    from marshal_py.admin.audit_command import audit
    from marshal_py.devbroker.command import dev_broker

    main.add_command(dev_broker, "dev-broker")
    main.add_command(audit)
    for command in COMMANDS:  # groups, lag, reset-offsets, watch
        main.add_command(command)


_register_commands()

if __name__ == "__main__":
    main()
