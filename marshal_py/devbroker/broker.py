"""A real single-node Apache Kafka broker (KRaft mode) that the project starts by itself.

:class:`DevBroker` resolves the broker jars (see :mod:`marshal_py.devbroker.jars`), writes a
``server.properties`` into its data directory, formats the storage once (both in
:mod:`marshal_py.devbroker.broker_config`), launches the JVM and waits until the broker
answers a DescribeCluster request (:mod:`marshal_py.devbroker.broker_process`).

No JVM outlives its Python parent: the JVM runs in its own session with a Linux parent-death
signal (SIGKILL), and every started broker is stopped by an ``atexit`` hook. The parent-death
signal fires when the *thread* that started the broker exits, so call :meth:`DevBroker.start`
from a thread that lives as long as the broker (the main thread, typically).
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from marshal_py.devbroker import jvm
from marshal_py.devbroker.broker_config import HOST as HOST
from marshal_py.devbroker.broker_config import (
    BrokerConfiguration,
    check_port_free,
    port_is_free,
)
from marshal_py.devbroker.broker_config import new_cluster_id as new_cluster_id
from marshal_py.devbroker.broker_log import read_log_tail, startup_failure
from marshal_py.devbroker.broker_process import describe_cluster, kill_jvm, launch_jvm
from marshal_py.devbroker.class_archive import ClassArchive, archive_path
from marshal_py.devbroker.jars import KAFKA_VERSION, pinned_kafka_version, resolve_kafka_jars
from marshal_py.devbroker.jvm import free_port
from marshal_py.errors import DevBrokerError

log = logging.getLogger(__name__)

def find_java(kafka_version: str = KAFKA_VERSION) -> tuple[str, int]:
    """The ``java`` to run the broker with and its major version (see
    :func:`marshal_py.devbroker.jvm.find_java`); raises :class:`DevBrokerError`."""
    return jvm.find_java(f"the Kafka {kafka_version} broker", DevBrokerError)


def await_ready(brokers: list[DevBroker], deadline: float, timeout: float) -> None:
    """Wait until every launched broker answers, checking all of them in turn so that one
    exiting fails at once (naming it, quoting its log) rather than after the timeout."""
    pending = list(brokers)
    while True:
        pending = [b for b in pending if not b._ready_step()]
        if not pending:
            return
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise pending[0]._not_ready_error(timeout)
        pending[0]._wait_for_exit(min(0.25, remaining))


class DevBroker(BrokerConfiguration):
    """A single-node Kafka broker for development and tests, listening on 127.0.0.1.

    Use as a context manager (``with DevBroker() as broker: ...``) or call :meth:`start` and
    :meth:`stop`. ``port=None`` picks a free port; ``data_dir=None`` uses a temporary directory
    that :meth:`stop` removes, while an explicit ``data_dir`` is kept and re-used on the next
    start (formatted only the first time). The broker's output goes to :attr:`log_path`.
    """

    def __init__(
        self,
        port: int | None = None,
        data_dir: Path | None = None,
        cache_dir: Path | None = None,
        heap: str = "1g",
        *,
        kafka_version: str | None = None,
    ) -> None:
        """Prepare a broker (nothing is launched until :meth:`start`).

        Args:
            port: the PLAINTEXT port on 127.0.0.1; a free port when None.
            data_dir: where the broker keeps its data and log; a temporary directory
                (removed by :meth:`stop`) when None.
            cache_dir: the jar cache root; :func:`~marshal_py.devbroker.jars.default_cache_dir`
                when None.
            heap: the JVM's maximum heap (``-Xmx``), e.g. ``"1g"`` or ``"512m"``.
            kafka_version: the Kafka release to run, by version or series (``"3.9"``; see
                :data:`~marshal_py.devbroker.jars.KAFKA_VERSIONS`); the default when None.

        Raises:
            DevBrokerError: a setting is invalid (the port, the heap, an unsupported version).
        """
        #: The Kafka release this broker runs (e.g. ``"4.3.1"``).
        self.kafka_version: str = pinned_kafka_version(kafka_version)
        if port is not None and not 1 <= port <= 65535:
            raise DevBrokerError(f"port {port} is out of range; choose a port in 1..65535")
        if not re.fullmatch(r"\d+[kKmMgG]?", heap):
            raise DevBrokerError(f"heap {heap!r} is not a JVM heap size; use e.g. '1g' or '512m'")
        self.port: int = port if port is not None else free_port()
        self._owns_data_dir = data_dir is None
        if data_dir is None:
            self.data_dir: Path = Path(tempfile.mkdtemp(prefix="marshal-devbroker-"))
        else:
            self.data_dir = Path(data_dir).expanduser().resolve()
        self.cache_dir: Path | None = cache_dir
        self.heap: str = heap
        self.controller_port: int | None = None
        #: The KRaft cluster id the storage is formatted with (a new one when None; the nodes
        #: of a cluster share one).
        self.cluster_id: str | None = None
        #: What messages and log lines call this broker ("node 2 of the Kafka cluster" for a
        #: node of a :class:`~marshal_py.devbroker.cluster.DevCluster`).
        self.name: str = "the Kafka broker"
        self._terminated = False
        self._proc: subprocess.Popen[bytes] | None = None
        self._keep_for_inspection = False
        self._atexit_registered = False
        self._class_archive = None

    # -- public properties ------------------------------------------------------------------

    @property
    def bootstrap_servers(self) -> str:
        """The ``bootstrap.servers`` value clients use: ``"127.0.0.1:PORT"``."""
        return f"{HOST}:{self.port}"

    @property
    def pid(self) -> int | None:
        """The JVM's process id while the broker is started, else None."""
        return self._proc.pid if self._proc is not None else None

    @property
    def log_path(self) -> Path:
        """The file the broker's stdout and stderr go to (inside :attr:`data_dir`)."""
        return self.data_dir / "broker.log"

    def is_running(self) -> bool:
        """True while the JVM launched by :meth:`start` is alive."""
        return self._proc is not None and self._proc.poll() is None

    def __repr__(self) -> str:
        return f"DevBroker(bootstrap_servers={self.bootstrap_servers!r}, pid={self.pid})"

    # -- lifecycle --------------------------------------------------------------------------

    def start(self, timeout: float = 120.0) -> DevBroker:
        """Resolve the jars, format the storage if needed, launch the JVM and await readiness.

        Returns self once the broker answers a DescribeCluster request. Starting a running
        broker does nothing. Call it from a thread that outlives the broker (the main thread,
        typically): the JVM gets SIGKILL when the thread that launched it exits.

        Raises:
            DevBrokerError: Java or Maven is missing, the jars cannot be resolved, the port is
                busy, the broker exits during startup or does not answer within ``timeout``
                seconds (the JVM is stopped in those cases).
        """
        if self.is_running():
            return self
        deadline = time.monotonic() + timeout
        self._launch_node()
        self._await_node(deadline, timeout)
        log.info(
            "%s is ready on %s (Kafka %s, pid %s, log %s)",
            self.name,
            self.bootstrap_servers,
            self.kafka_version,
            self.pid,
            self.log_path,
        )
        return self

    def _launch_node(self) -> None:
        """Everything :meth:`start` does up to launching the JVM (a cluster launches all its
        nodes before awaiting any: a KRaft quorum answers only once most voters run)."""
        self._launch(*self._prepare_node())

    def _prepare_node(self) -> tuple[str, Path, Path]:
        """Everything before the launch: Java, the jars, the ports, ``server.properties`` and
        the storage format. Returns (java, jar directory, properties path). It starts no
        long-lived process, so a cluster prepares its nodes in parallel threads; the launch
        itself must happen on the thread that outlives the broker."""
        if self._proc is not None:  # it died since the last start: clean up first
            self._reap()
        self._keep_for_inspection = False
        java, major = find_java(self.kafka_version)
        log.debug("using %s (Java %d)", java, major)
        lib = resolve_kafka_jars(self.cache_dir, version=self.kafka_version)
        self._class_archive = ClassArchive(archive_path(java, lib))

        check_port_free(self.port, self._port_label)
        if self.controller_port is None or not port_is_free(self.controller_port):
            # A restart keeps the controller port when it can (the quorum's address).
            self.controller_port = free_port(exclude=frozenset({self.port}))

        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            properties = self._write_config()
        except OSError as exc:
            raise DevBrokerError(
                f"cannot write the broker configuration into {self.data_dir} ({exc}); "
                "choose a writable data directory"
            ) from exc
        self._format_if_needed(java, lib, properties)
        return java, lib, properties

    def _await_node(self, deadline: float, timeout: float) -> None:
        """Wait until the launched JVM answers; on failure stop it (keeping its log)."""
        try:
            self._await_ready(deadline, timeout)
        except DevBrokerError:
            self._keep_for_inspection = True  # a temporary data dir survives stop(): the log
            self._reap()  # kills the JVM
            raise
        except BaseException:
            self._reap()
            raise

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the broker: SIGTERM, wait up to ``timeout`` seconds, then SIGKILL.

        Removes the data directory if it was a temporary one, unless the broker failed (exited
        by itself or did not start), in which case it is kept for its log. Calling it again, or
        on a broker that never started, does nothing harmful.
        """
        proc = self._proc
        if proc is not None and proc.poll() is None:
            log.info("stopping %s (pid %d)", self.name, proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
                self._archive_exited(finished=True)
            except subprocess.TimeoutExpired:
                log.warning(
                    "%s (pid %d) ignored SIGTERM for %.0f s; killing it",
                    self.name,
                    proc.pid,
                    timeout,
                )
                self._kill()
        elif proc is not None and self._terminated:
            self._archive_exited(finished=True)  # terminate() asked it to exit, and it did
        elif proc is not None:
            log.warning(
                "%s (pid %d) had exited with status %s", self.name, proc.pid, proc.poll()
            )
            self._keep_for_inspection = True
        self._reap()
        self._terminated = False
        if self._owns_data_dir and self.data_dir.exists():
            if self._keep_for_inspection:
                log.warning(
                    "kept %s (the failed broker's data and log); remove it when done", self.data_dir
                )
            else:
                shutil.rmtree(self.data_dir, ignore_errors=True)

    def terminate(self) -> None:
        """Send SIGTERM without waiting (:meth:`stop` then waits and cleans up)."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            self._terminated = True
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL the broker, as a crash would, and keep its data directory and ports:
        :meth:`start` brings it back on the same data (a fault-injection tool)."""
        proc = self._proc
        if proc is None:
            return
        log.info("killing %s (pid %d) with SIGKILL", self.name, proc.pid)
        self._kill()
        self._archive_exited(finished=False)
        self._proc = None
        with contextlib.suppress(OSError):
            self._pid_path.unlink()

    def __enter__(self) -> DevBroker:
        """Start the broker (see :meth:`start`)."""
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        """Stop the broker (see :meth:`stop`)."""
        self.stop()

    # -- internals --------------------------------------------------------------------------

    @property
    def _port_label(self) -> str:
        """What the client port is called in errors."""
        return "port"

    @property
    def _pid_path(self) -> Path:
        return self.data_dir / "broker.pid"

    def _launch(self, java: str, lib: Path, properties: Path) -> None:
        command = [
            java,
            f"-Xmx{self.heap}",
            "-XX:+ExitOnOutOfMemoryError",
            *(self._class_archive.launch_options() if self._class_archive is not None else []),
            *self._jvm_options(),
            "-cp",
            f"{lib}/*",
            "kafka.Kafka",
            str(properties),
        ]
        log.info("starting %s on %s (Kafka %s)", self.name, self.bootstrap_servers,
                 self.kafka_version)
        log.debug("running %s", " ".join(command))
        self._proc = launch_jvm(command, self.log_path, self.data_dir)
        if not self._atexit_registered:
            atexit.register(self.stop)
            self._atexit_registered = True
        with contextlib.suppress(OSError):
            self._pid_path.write_text(f"{self._proc.pid}\n", encoding="ascii")

    def _await_ready(self, deadline: float, timeout: float) -> None:
        await_ready([self], deadline, timeout)

    def _ready_step(self) -> bool:
        """One readiness check of the launched JVM: True once it answers, False while it
        does not yet; raises DevBrokerError (quoting its log) when it has exited."""
        proc = self._proc
        assert proc is not None
        returncode = proc.poll()
        if returncode is not None:
            raise self._startup_failure(returncode)
        return self._answers()

    def _wait_for_exit(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds, returning at once if the JVM exits."""
        if self._proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=timeout)

    def _not_ready_error(self, timeout: float) -> DevBrokerError:
        return DevBrokerError(
            f"{self.name} on {self.bootstrap_servers} did not answer within {timeout:.0f} s; "
            f"see its log {self.log_path} or start it with a longer timeout"
        )

    def _answers(self) -> bool:
        """True when the broker accepts a connection and answers DescribeCluster."""
        cluster = self._describe_cluster()
        if cluster is None:
            return False
        brokers = cluster.get("brokers")
        controller = cluster.get("controller_id")
        return bool(brokers) and controller not in (None, -1)

    def _describe_cluster(self) -> dict[str, object] | None:
        """This broker's DescribeCluster answer, or None while it does not give one."""
        return describe_cluster(self.name, self.bootstrap_servers, self.port,
                                self.client_config)

    def _startup_failure(self, returncode: int) -> DevBrokerError:
        text = read_log_tail(self.log_path)
        self._reap()
        return startup_failure(text, returncode, name=self.name, host=HOST, port=self.port,
                               controller_port=self.controller_port, log_path=self.log_path)

    def _kill(self) -> None:
        if self._proc is not None:
            kill_jvm(self._proc)

    def _archive_exited(self, *, finished: bool) -> None:
        """The JVM has exited: its class dump, if it made one, is kept when ``finished``."""
        if self._class_archive is not None:
            self._class_archive.exited(finished=finished)

    def _reap(self) -> None:
        """Forget the JVM: make sure it is dead and reaped, drop the pid file and atexit hook."""
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                self._kill()
            self._proc = None
        self._archive_exited(finished=False)  # a dump not published by now is not whole
        with contextlib.suppress(OSError):
            self._pid_path.unlink()
        if self._atexit_registered:
            atexit.unregister(self.stop)
            self._atexit_registered = False

