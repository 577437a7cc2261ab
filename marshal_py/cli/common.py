"""What the commands share: Kafka and replay options, opening the log, progress, tables,
one-line failures."""

from __future__ import annotations

import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, NoReturn, TypeVar

import click

from marshal_py.admin.moments import MomentError
from marshal_py.client.source import KafkaPartitionSource
from marshal_py.config.group_keys import load_group_keys
from marshal_py.config.kafka_properties import KafkaProperties, load_properties
from marshal_py.errors import (
    BrokerUnavailableError,
    ConfigurationError,
    MarshalError,
    TopicNotFoundError,
)
from marshal_py.log.kafka import DEFAULT_COORDINATION_TOPIC, KafkaLog, KafkaLogConfig
from marshal_py.protocol.auth import GroupKey
from marshal_py.replay.reading import DEFAULT_REPLAY_WINDOW_MS
from marshal_py.world.lifecycle import DEFAULT_OFFSETS_RETENTION_MS

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
BOOTSTRAP_ENV = "MARSHAL_BOOTSTRAP_SERVERS"
COMMAND_CONFIG_ENV = "MARSHAL_COMMAND_CONFIG"
_KAFKA_CONFIG = "marshal.kafka_config"


def _load_command_config(ctx: click.Context, param: click.Parameter,
                         value: str | None) -> None:
    if value:
        try:
            ctx.meta[_KAFKA_CONFIG] = load_properties(value)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc


def current_kafka_config() -> KafkaProperties:
    """The kafka-python settings of ``--command-config`` of the running command (empty
    without the option); their ``source`` names the file."""
    ctx = click.get_current_context(silent=True)
    settings = None if ctx is None else ctx.meta.get(_KAFKA_CONFIG)
    return settings if isinstance(settings, KafkaProperties) else KafkaProperties()


def command_config_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """--command-config FILE (read with :func:`current_kafka_config`)."""
    return click.option(
        "--command-config", type=click.Path(dir_okay=False), envvar=COMMAND_CONFIG_ENV,
        expose_value=False, callback=_load_command_config,
        show_envvar=True,
        help="Kafka client properties file (as Kafka tools' --command-config): "
             "security.protocol, sasl.mechanism, sasl.jaas.config, ssl.truststore.location "
             "(PEM), ..."
    )(func)


_INDEX_TOPIC = "marshal.index_topic"


def _note_index_topic(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        if not value.strip():
            raise click.BadParameter("is empty", ctx=ctx, param=param)
        ctx.meta[_INDEX_TOPIC] = value


def current_index_topic() -> str | None:
    """``--index-topic`` of the running command (None: the default, COORDINATION-index)."""
    ctx = click.get_current_context(silent=True)
    value = None if ctx is None else ctx.meta.get(_INDEX_TOPIC)
    return value if isinstance(value, str) else None


def kafka_log_config(bootstrap_servers: str, coordination_topic: str, timeout: float,
                     **options: Any) -> KafkaLogConfig:
    """The coordination log's configuration with the ``--command-config`` and
    ``--index-topic`` settings; ``options``: other :class:`KafkaLogConfig` fields."""
    settings = current_kafka_config()
    options.setdefault("index_topic", current_index_topic())
    return KafkaLogConfig(bootstrap_servers=bootstrap_servers, topic=coordination_topic,
                          timeout_s=timeout, kafka_config=dict(settings),
                          config_source=settings.source, **options)


def kafka_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--bootstrap-servers, --coordination-topic, --timeout, --command-config and
    --index-topic (as every Kafka command)."""
    func = click.option(
        "--index-topic", expose_value=False, callback=_note_index_topic,
        help="The compacted topic that keeps the coordination topic's layout "
             "[default: COORDINATION_TOPIC-index].")(func)
    func = command_config_option(func)
    func = click.option(
        "--timeout", type=click.FloatRange(min=0.1), default=15.0, show_default=True,
        help="Seconds to wait for the broker before giving up.")(func)
    func = click.option(
        "--coordination-topic", default=DEFAULT_COORDINATION_TOPIC, show_default=True,
        help="Name of the coordination topic.")(func)
    func = click.option(
        "--bootstrap-servers", envvar=BOOTSTRAP_ENV, default=DEFAULT_BOOTSTRAP,
        show_default=f"${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP}",
        help="Kafka bootstrap servers, HOST:PORT[,HOST:PORT].")(func)
    return func


_GROUP_KEYS = "marshal.group_keys"


def _load_auth_keys(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None:
        try:
            ctx.meta[_GROUP_KEYS] = load_group_keys(value)
        except ConfigurationError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc


def current_group_keys() -> dict[str, tuple[GroupKey, ...]]:
    """The keys of ``--auth-keys`` of the running command (empty without the option)."""
    ctx = click.get_current_context(silent=True)
    keys: dict[str, tuple[GroupKey, ...]] = {} if ctx is None else ctx.meta.get(_GROUP_KEYS, {})
    return keys


def auth_keys_option(func: Callable[..., Any]) -> Callable[..., Any]:
    """--auth-keys FILE (read with :func:`current_group_keys`)."""
    return click.option(
        "--auth-keys", type=click.Path(dir_okay=False), expose_value=False,
        callback=_load_auth_keys,
        help="File of the keys of authenticated groups (GROUP KEY_ID BASE64-SECRET per line): "
             "verify their records as their members do, and sign what this command writes."
    )(func)


def replay_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """--heartbeat-interval, --replay-window, --offsets-retention and --auth-keys."""
    func = auth_keys_option(func)
    func = click.option(
        "--offsets-retention", type=click.FloatRange(min=60), show_default=True,
        default=DEFAULT_OFFSETS_RETENTION_MS / 1000,
        help="Seconds an Empty group's offsets outlive it (must match its consumers').")(func)
    func = click.option(
        "--replay-window", type=click.FloatRange(min=0), show_default=True,
        default=DEFAULT_REPLAY_WINDOW_MS / 1000,
        help="Seconds of coordination log to replay (0: everything retained).")(func)
    func = click.option(
        "--heartbeat-interval", type=click.FloatRange(min=0.001), default=10.0,
        show_default=True,
        help="Seconds: the heartbeat interval of members that announce none (older "
             "marshal_py, Go); others are judged by the one they announce.")(func)
    return func


@contextmanager
def open_log(bootstrap_servers: str, coordination_topic: str,
             timeout: float) -> Iterator[KafkaLog]:
    """The coordination log, never created (a missing topic is a one-line error), with the
    security settings of ``--command-config``."""
    log = KafkaLog(kafka_log_config(bootstrap_servers, coordination_topic, timeout,
                                    create_topic=False))
    try:
        yield log
    finally:
        log.close()


@contextmanager
def open_topics(log: KafkaLog) -> Iterator[KafkaPartitionSource]:
    """Partition counts and offsets of data topics, on the log's cluster."""
    try:
        source = KafkaPartitionSource(log.config, refresh_s=5.0)
    except MarshalError:
        raise
    except Exception as exc:  # kafka-python's NoBrokersAvailable and friends
        raise BrokerUnavailableError(
            f"cannot reach Kafka at {log.config.bootstrap_servers} to read topic offsets "
            f"({type(exc).__name__})") from exc
    try:
        yield source
    finally:
        source.close()


def require_topic(source: KafkaPartitionSource, topic: str, bootstrap: str) -> int:
    """The partition count of ``topic``; a one-line error when it does not exist."""
    count = source.partition_count(topic)
    if count is None:
        raise TopicNotFoundError(f"topic {topic!r} does not exist on {bootstrap}; check the "
                                 "name (marshal groups lists the topics groups consume)")
    return count


class Progress:
    """Prints replay progress to stderr about once a second on long replays (on a terminal)."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.last = time.monotonic()

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.enabled and now - self.last >= 1.0:
            self.last = now
            click.echo(f"replayed {done:,}/{total:,} coordination records", err=True)


def cell(value: object) -> str:
    """How a table cell shows a value ("-" for none)."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def table_lines(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> list[str]:
    """A plain, left-aligned text table."""
    cells = [[cell(v) for v in row] for row in rows]
    widths = [max([len(c), *(len(r[i]) for r in cells)]) for i, c in enumerate(columns)]
    out = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    for r in cells:
        out.append("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
    return out


def print_table(columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """Print :func:`table_lines` to stdout."""
    for line in table_lines(columns, rows):
        click.echo(line)


def parse_time(value: str, option: str) -> int:
    """An ISO 8601 time (UTC when it names no zone) in ms; a usage error when unreadable."""
    try:
        moment = datetime.fromisoformat(value)
    except ValueError as exc:
        raise click.BadParameter(f"{value!r} is not an ISO 8601 time",
                                 param_hint=option) from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


T = TypeVar("T")


def fail(command: str, message: str) -> NoReturn:
    """Print ``marshal COMMAND: error: MESSAGE`` on stderr and exit 2."""
    click.echo(f"marshal {command}: error: {message}", err=True)
    sys.exit(2)


def resolve_moment(resolve: Callable[[], T]) -> T:
    """``resolve()``, its :class:`MomentError` as a usage error of the option (exit 2)."""
    try:
        return resolve()
    except MomentError as exc:
        raise click.BadParameter(str(exc), param_hint=exc.option) from exc


def iso(ms: int | None) -> str:
    """A time in milliseconds as ISO 8601 UTC (``-`` for None)."""
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


@contextmanager
def serving(consumer: Any) -> Iterator[None]:
    """Run a command's consume loop: SIGTERM and Ctrl-C stop ``consumer`` (it finishes the
    record or batch in hand), and whatever ends the loop, the previous signal handlers come
    back and the consumer is closed (committing and releasing what it holds)."""
    previous = {sig: signal.signal(sig, lambda signum, frame: consumer.stop())
                for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        consumer.close()


class ProgressLine:
    """``<verb> N records`` on stderr at most every ``every_s`` seconds (unless disabled:
    records printed on stdout say enough)."""

    def __init__(self, verb: str, enabled: bool, every_s: float = 5.0) -> None:
        self.verb = verb
        self.enabled = enabled
        self.every_s = every_s
        self._last = time.monotonic()

    def update(self, count: int) -> None:
        """Report ``count`` if the last report is old enough."""
        now = time.monotonic()
        if self.enabled and now - self._last >= self.every_s:
            self._last = now
            click.echo(f"{self.verb} {count:,} records", err=True)
