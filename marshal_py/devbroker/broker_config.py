"""What a development broker is started with: its ports, ``server.properties``,
``log4j2.properties``, its JVM options and its formatted storage.

:class:`BrokerConfiguration` is the base of :class:`~marshal_py.devbroker.broker.DevBroker`:
it holds the configuration hooks that subclasses extend (the properties, the format arguments,
the client settings), while :mod:`marshal_py.devbroker.broker` runs the process.
"""

from __future__ import annotations

import base64
import errno
import logging
import os
import shlex
import socket
from pathlib import Path

from marshal_py.devbroker import jvm
from marshal_py.devbroker.class_archive import ClassArchive
from marshal_py.devbroker.storage import (
    check_formatted_by,
    format_storage,
    is_formatted,
    note_formatted_by,
    series,
)
from marshal_py.devbroker.storage_template import copy_template, save_template, template_dir
from marshal_py.errors import DevBrokerError

log = logging.getLogger(__name__)

HOST = jvm.LOOPBACK
"""The only interface the development broker listens on."""

JVM_PERFORMANCE_OPTS = "KAFKA_JVM_PERFORMANCE_OPTS"
"""The environment variable whose JVM options (compiler, garbage collector) are added to the
broker's, as Kafka's own start scripts take them (for example ``-XX:TieredStopAtLevel=1
-XX:+UseSerialGC``: less CPU for a short-lived broker, less speed for a long one)."""


_SERVER_PROPERTIES = """\
# Written by marshal_py.devbroker on every start; edits are overwritten.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{host}:{controller_port}
listeners=PLAINTEXT://{host}:{port},CONTROLLER://{host}:{controller_port}
advertised.listeners=PLAINTEXT://{host}:{port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
log.dirs={log_dirs}
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=false
# The log cleaner looks for work every 5 s (Kafka's default: 15 s), so that compacted test
# topics are cleaned within seconds; an idle controller writes its no-op metadata record every
# 30 s (Kafka's default: 0.5 s, which costs an idle broker about a third of its CPU). With 1 s
# and 5 s instead, an idle broker used 1.5-2.2 CPU-s a minute; with these, 1.2-1.6.
log.cleaner.backoff.ms=5000
metadata.max.idle.interval.ms=30000
# One partition each for the group and transaction coordinators' topics (Kafka's default: 50,
# for spreading coordinators over many brokers, which one node cannot do). Creating and loading
# 50 cost a broker 1.1-1.7 CPU-s at the first consumer group and again at the first
# transaction; one costs 0.4. A --data-dir made with 50 keeps them: the coordinators use the
# topic's own count (20 groups' offsets and a transactional id found after such a restart).
offsets.topic.num.partitions=1
transaction.state.log.num.partitions=1
# A dead node is fenced, and a node killed -9 and started again on its data registers, only
# once the controller lets its session time out: 3 s here (a DevCluster's failover tests, a
# fault campaign's broker restarts) instead of Kafka's 9 s, which made each such restart 11 s.
broker.session.timeout.ms=3000
broker.heartbeat.interval.ms=500
"""

_SHARE_COORDINATOR_PROPERTIES = """\
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
"""
"""Kafka 4's share coordinator (KIP-932, native share groups); 3.x has none."""

_LOG4J2_PROPERTIES = """\
# Written by marshal_py.devbroker: the broker logs INFO and above to stdout (broker.log).
status = warn
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""


def new_cluster_id() -> str:
    """Return a fresh KRaft cluster id (base64url of 16 random bytes, without padding).

    Never starting with ``-``: the storage tool would read such an id as an option (Kafka's
    own id generator avoids it the same way)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(os.urandom(16)).rstrip(b"=").decode("ascii")
        if not cluster_id.startswith("-"):
            return cluster_id


def port_is_free(port: int) -> bool:
    """True when ``port`` on 127.0.0.1 can be bound (a TIME_WAIT leftover does not count as
    busy); raises OSError when binding fails for another reason than the port being taken."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # The JVM binds with SO_REUSEADDR too, so TIME_WAIT leftovers do not count as busy.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            if exc.errno in (errno.EADDRINUSE, errno.EACCES):
                return False
            raise
    return True


def check_port_free(port: int, what: str) -> None:
    """Raise DevBrokerError when ``port`` on 127.0.0.1 cannot be bound."""
    try:
        free = port_is_free(port)
    except OSError as exc:
        raise DevBrokerError(
            f"cannot bind {what} {HOST}:{port} ({exc}); choose another port"
        ) from exc
    if not free:
        raise DevBrokerError(
            f"{what} {HOST}:{port} is already in use: stop whatever listens there "
            f"(see `ss -ltnp 'sport = :{port}'`) or choose another port"
        )


class BrokerConfiguration:
    """The configuration side of a :class:`~marshal_py.devbroker.broker.DevBroker`: the files
    written into its data directory on every start, its JVM options, the storage format and
    the settings its clients need. Subclasses extend :meth:`_server_properties`,
    :meth:`_format_extra_args` and :meth:`client_config` (a secured broker, a cluster node).
    """

    #: The KRaft data directory and the broker's log (set by the broker's constructor).
    data_dir: Path
    #: The client port on 127.0.0.1.
    port: int
    #: The controller port on 127.0.0.1 (picked when the broker is prepared).
    controller_port: int | None
    #: The Kafka release the broker runs.
    kafka_version: str
    #: The KRaft cluster id the storage is formatted with (a new one when None).
    cluster_id: str | None
    #: The class-data sharing archive of the Java and jars last prepared (None before).
    _class_archive: ClassArchive | None

    @property
    def _kafka_log_dir(self) -> Path:
        return self.data_dir / "logs"

    def _server_properties(self) -> str:
        """The broker's ``server.properties`` (subclasses may extend or replace it)."""
        assert self.controller_port is not None
        text = _SERVER_PROPERTIES.format(
            host=HOST,
            port=self.port,
            controller_port=self.controller_port,
            log_dirs=self._kafka_log_dir,
        )
        if series(self.kafka_version) >= (4,):
            text += _SHARE_COORDINATOR_PROPERTIES
        return text

    def client_config(self) -> dict[str, object]:
        """kafka-python settings a client needs to talk to this broker (beyond
        ``bootstrap_servers``); empty for the plain broker, security settings for a secured
        one."""
        return {}

    def _write_config(self) -> Path:
        properties = self.data_dir / "server.properties"
        properties.write_text(self._server_properties(), encoding="utf-8")
        (self.data_dir / "log4j2.properties").write_text(_LOG4J2_PROPERTIES, encoding="utf-8")
        return properties

    def _format_if_needed(self, java: str, lib: Path, properties: Path) -> None:
        if is_formatted(self._kafka_log_dir):
            log.debug("%s is already formatted", self._kafka_log_dir)
            check_formatted_by(self.data_dir, self.kafka_version)
            return
        cluster_id = self.cluster_id or new_cluster_id()
        extra_args = self._format_extra_args()
        template = template_dir(lib, properties.read_text(encoding="utf-8"), self.data_dir,
                                extra_args) if self._keeps_storage_template() else None
        if template is not None and copy_template(template, self._kafka_log_dir, cluster_id,
                                                  new_id=new_cluster_id):
            log.info("formatted %s (cluster id %s) from %s", self._kafka_log_dir, cluster_id,
                     template)
            note_formatted_by(self.data_dir, self.kafka_version)
            return
        archive = self._class_archive.options() if self._class_archive is not None else []
        format_storage([java, *archive, *self._jvm_options(), "-cp", f"{lib}/*"],
                       cluster_id=cluster_id, properties=properties,
                       data_dir=self.data_dir, kafka_log_dir=self._kafka_log_dir,
                       kafka_version=self.kafka_version, extra_args=extra_args)
        if template is not None:
            save_template(template, self._kafka_log_dir)

    def _keeps_storage_template(self) -> bool:
        """Whether a format of this broker's storage may be kept and copied (see
        :mod:`marshal_py.devbroker.storage_template`); a secured broker's may not."""
        return True

    def _format_extra_args(self) -> list[str]:
        """More arguments of ``kafka.tools.StorageTool format`` (subclasses: e.g. SCRAM users
        with ``--add-scram``); none for the plain broker."""
        return []

    def _jvm_options(self) -> list[str]:
        return [
            f"-Dlog4j2.configurationFile={self.data_dir / 'log4j2.properties'}",
            "-Djava.awt.headless=true",
            *performance_options(),
        ]


def performance_options() -> list[str]:
    """The options in ``$KAFKA_JVM_PERFORMANCE_OPTS`` (none when it is unset or empty)."""
    value = os.environ.get(JVM_PERFORMANCE_OPTS, "")
    try:
        return shlex.split(value)
    except ValueError as exc:
        raise DevBrokerError(f"${JVM_PERFORMANCE_OPTS} cannot be read as JVM options "
                             f"({exc}): {value!r}; quote it as a shell would") from None
