"""A development broker's JVM process: launching it with its log, killing it, and asking it
whether it answers (DescribeCluster).

The :class:`~marshal_py.devbroker.broker.DevBroker` owns the process and its life cycle; the
steps here know nothing of the broker but what they are given.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from marshal_py.devbroker.broker_config import HOST
from marshal_py.devbroker.jvm import die_with_parent
from marshal_py.errors import DevBrokerError

log = logging.getLogger(__name__)


def launch_jvm(command: list[str], log_path: Path, cwd: Path) -> subprocess.Popen[bytes]:
    """Run ``command`` (``command[0]`` is the ``java``) in a session of its own, its stdout and
    stderr going to ``log_path`` (the previous log is kept as ``broker.log.1``), with a
    parent-death signal tied to the calling thread.

    Raises:
        DevBrokerError: the JVM cannot be launched.
    """
    if log_path.exists():
        with contextlib.suppress(OSError):
            os.replace(log_path, log_path.with_name("broker.log.1"))
    try:
        # The child keeps its own descriptor of the log; the parent's closes right away.
        with open(log_path, "wb") as log_file:
            return subprocess.Popen(
                command,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(os.getpid()),
            )
    except OSError as exc:
        raise DevBrokerError(
            f"cannot launch the Kafka broker with {command[0]} ({exc}); check the Java "
            "installation"
        ) from exc


def kill_jvm(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL ``proc`` if it still runs and wait (up to 30 s) until it is reaped."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=30)


def describe_cluster(
    name: str, bootstrap_servers: str, port: int,
    client_config: Callable[[], dict[str, object]],
) -> dict[str, object] | None:
    """The DescribeCluster answer of the broker ``name`` (listening on ``port`` of 127.0.0.1;
    a client uses ``bootstrap_servers`` and the settings ``client_config()`` returns), or None
    while it does not give one (its port is closed, it does not answer yet)."""
    try:
        with socket.create_connection((HOST, port), timeout=1.0):
            pass
    except OSError:
        return None
    from kafka import KafkaAdminClient

    from marshal_py.log.kafka_config import new_client

    try:
        admin = new_client(
            KafkaAdminClient,
            bootstrap_servers=bootstrap_servers,
            client_id="marshal-devbroker-probe",
            **client_config(),
            # A broker opens its client port only once it can serve, so it answers at once;
            # short timeouts keep a silent listener from delaying the fail-fast checks.
            request_timeout_ms=2000,
            bootstrap_timeout_ms=1000,
        )
    except Exception as exc:
        log.debug("%s not ready yet: %s", name, exc)
        return None
    try:
        cluster = admin.describe_cluster()
    except Exception as exc:
        log.debug("%s not ready yet: %s", name, exc)
        return None
    finally:
        with contextlib.suppress(Exception):
            admin.close()
    return cluster if isinstance(cluster, dict) else None
