"""``marshal dev-broker``: run the development Kafka broker in the foreground.

The first line of standard output is ``bootstrap.servers=127.0.0.1:PORT``, printed once the
broker answers; progress goes to standard error. SIGINT or SIGTERM stops the broker and the
command exits 0. ``--security sasl-ssl`` starts a secured broker (see
:mod:`marshal_py.devbroker.security`) and prints ``client.properties=PATH`` (admin's client
properties file, for ``--command-config``) as the second line. ``--resolve-only`` only
fetches and caches the broker jars (``bin/setup`` uses it) and prints their directory.
``--brokers N`` (2 to 5) starts a KRaft cluster of N nodes instead (see
:class:`~marshal_py.devbroker.cluster.DevCluster`) and prints every node's address, comma
separated; a node exiting by itself ends the command with an error naming it and its log.
``--kafka-version`` picks the Kafka release (4.3.1 by default, or 3.9.2; also by series: 3.9),
for the broker, the cluster and ``--resolve-only`` alike.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import TextIO

import click

from marshal_py.devbroker.broker import DevBroker
from marshal_py.devbroker.cluster import MAX_NODES, DevCluster
from marshal_py.devbroker.jars import (
    KAFKA_VERSION,
    KAFKA_VERSIONS,
    pinned_kafka_version,
    resolve_kafka_jars,
)
from marshal_py.devbroker.security import ADMIN_USER, SecureDevBroker
from marshal_py.errors import DevBrokerError

# Under the devbroker package's logger, whose handler prints every line of the command.
log = logging.getLogger("marshal_py.devbroker.command")

PROG = "marshal dev-broker"


class _StopRequested(Exception):
    """Raised by the signal handler when SIGINT/SIGTERM arrives before the broker is ready."""


@click.command("dev-broker")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="PLAINTEXT port on 127.0.0.1 (default: a free port).",
)
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, dir_okay=True, path_type=Path),
    default=None,
    help="Keep the broker's data here and re-use it next time (default: a temporary "
    "directory removed on exit).",
)
@click.option(
    "--resolve-only",
    is_flag=True,
    default=False,
    help="Only download and cache the Kafka broker jars, print their directory and exit.",
)
@click.option(
    "--security",
    type=click.Choice(["none", "sasl-ssl"]),
    default="none",
    show_default=True,
    help="sasl-ssl: SASL_SSL with SCRAM-SHA-512 users admin (super user), alice and bob, a "
    "test CA, and ACLs on; writes a client properties file per user into DATA_DIR/security "
    "and prints admin's as client.properties=PATH.",
)
@click.option(
    "--brokers",
    type=click.IntRange(1, MAX_NODES),
    default=1,
    show_default=True,
    help="Nodes (each broker and controller): 3 starts a KRaft cluster on loopback whose "
    "topics get replication 3 and min.insync.replicas 2.",
)
@click.option(
    "--kafka-version",
    default=KAFKA_VERSION,
    show_default=True,
    metavar="VERSION",
    help=f"The Kafka release to run (or resolve): {' or '.join(KAFKA_VERSIONS)}, or its "
    "series (e.g. 3.9).",
)
def dev_broker(port: int | None, data_dir: Path | None, resolve_only: bool,
               security: str, brokers: int, kafka_version: str) -> None:
    """Run a single-node Apache Kafka broker (or with --brokers N a cluster) on 127.0.0.1
    until SIGINT or SIGTERM.

    Prints bootstrap.servers=127.0.0.1:PORT as the first line of standard output once the
    broker answers (with --security sasl-ssl, client.properties=PATH as the second);
    progress goes to standard error.
    """
    try:
        with _progress_to_stderr():
            version = pinned_kafka_version(kafka_version)
            if resolve_only:
                click.echo(str(resolve_kafka_jars(version=version)))
                return
            if brokers > 1 and (port is not None or security != "none"):
                raise click.UsageError("--brokers above 1 picks free ports itself and has no "
                                       "--security yet; drop --port / --security")
            _serve(port, data_dir, security, brokers, version)
    except DevBrokerError as exc:
        click.echo(f"{PROG}: error: {exc}", err=True)
        click.get_current_context().exit(2)


def _serve(port: int | None, data_dir: Path | None, security: str = "none",
           brokers: int = 1, kafka_version: str = KAFKA_VERSION) -> None:
    """Start the broker, announce it, and keep it running until a stop signal."""
    stop_requested = threading.Event()
    state = {"starting": True}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop_requested.set()
        if state["starting"]:
            raise _StopRequested(signal.Signals(signum).name)

    previous = {}
    if threading.current_thread() is threading.main_thread():  # signal() works only there
        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    broker: DevBroker | DevCluster | None = None
    try:
        if brokers > 1:
            broker = DevCluster(brokers, data_dir=data_dir, kafka_version=kafka_version)
        elif security == "sasl-ssl":
            broker = SecureDevBroker(port=port, data_dir=data_dir, kafka_version=kafka_version)
        else:
            broker = DevBroker(port=port, data_dir=data_dir, kafka_version=kafka_version)
        try:
            broker.start()
        except _StopRequested as stop:
            log.info("%s received before the broker was ready; stopping", stop)
            return
        state["starting"] = False
        if isinstance(broker, DevCluster):
            log.info("serving (broker pids %s); stop with Ctrl+C or SIGTERM",
                     ",".join(str(n.pid) for n in broker.nodes.values()))
        else:
            log.info("serving (broker pid %s); stop with Ctrl+C or SIGTERM", broker.pid)
        click.echo(f"bootstrap.servers={broker.bootstrap_servers}")
        if isinstance(broker, SecureDevBroker):
            click.echo(f"client.properties={broker.properties_path(ADMIN_USER)}")
            for user in broker.users:
                log.info("client properties of %s: %s", user, broker.properties_path(user))
        sys.stdout.flush()
        while not stop_requested.is_set():
            if not broker.is_running():
                raise DevBrokerError(_exited_unexpectedly(broker))
            stop_requested.wait(1.0)
        log.info("stop requested; stopping the %s",
                 "cluster" if isinstance(broker, DevCluster) else "broker")
    finally:
        state["starting"] = False
        if broker is not None:
            broker.stop()
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _exited_unexpectedly(broker: DevBroker | DevCluster) -> str:
    """The error when the served broker, or a node of the served cluster, has exited."""
    if isinstance(broker, DevCluster):
        stopped = broker.stopped_nodes()
        if stopped:
            node = stopped[0]
            return f"{node.name} exited unexpectedly; see its log {node.log_path}"
    return f"the Kafka broker exited unexpectedly; see its log {broker.log_path}"


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a record is emitted."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


@contextmanager
def _progress_to_stderr() -> Iterator[None]:
    """Send this package's INFO messages to standard error while the command runs."""
    package_logger = logging.getLogger("marshal_py.devbroker")
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(f"{PROG}: %(message)s"))
    saved = (package_logger.level, package_logger.propagate)
    package_logger.addHandler(handler)
    package_logger.setLevel(logging.INFO)
    package_logger.propagate = False  # no duplicates through handlers on the root logger
    try:
        yield
    finally:
        package_logger.removeHandler(handler)
        package_logger.setLevel(saved[0])
        package_logger.propagate = saved[1]


if __name__ == "__main__":
    # Run the command from its importable module so that its logger is not named "__main__".
    from marshal_py.cli.dev_broker import dev_broker as _dev_broker

    _dev_broker(prog_name=PROG)
