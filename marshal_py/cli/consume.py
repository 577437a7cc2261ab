"""``marshal consume``: run a member of a group until SIGTERM or Ctrl-C (every mode)."""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import click

from marshal_py.cli.admin import metrics_options, start_metrics
from marshal_py.cli.common import (
    ProgressLine,
    auth_keys_option,
    current_group_keys,
    current_index_topic,
    current_kafka_config,
    kafka_log_config,
    kafka_options,
    serving,
)
from marshal_py.cli.mirror import check_topics_exist, mirror
from marshal_py.client.consumer import Consumer
from marshal_py.client.engine_types import Balance, Mode, OffsetReset
from marshal_py.client.eos_consumer import DEFAULT_TRANSACTION_TIMEOUT_MS
from marshal_py.client.fetchers import FETCHER_KINDS, FetcherKind
from marshal_py.client.holdings import DEFAULT_AMO_WINDOW_MS, DEFAULT_AMO_WINDOW_RECORDS
from marshal_py.client.key_shared_consumer import KeySharedConsumer
from marshal_py.client.member_base import DEFAULT_MAX_POLL_INTERVAL_MS, Compat
from marshal_py.client.settings import ISOLATION_LEVELS, IsolationLevel
from marshal_py.client.share_consumer import ShareConsumer, ShareRecord
from marshal_py.errors import CommitFailedError


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


@click.command()
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
              help="the client that fetches records (every mode): kafka-python, or confluent "
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
    count = 0
    progress = ProgressLine("consumed", enabled=not print_records)
    with serving(consumer):
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
            progress.update(count)
            if max_records is not None and count >= max_records:
                break
    return count
