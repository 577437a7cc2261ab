"""What every JVM this project starts needs: a Java, free loopback ports, no orphans.

The development broker (:mod:`marshal_py.devbroker`) and the Spark runtime
(:mod:`marshal_py.spark.session`, :mod:`marshal_py.spark.cluster`) both launch Java processes
on 127.0.0.1; the checks and helpers they share live here so that they fail the same way.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from marshal_py.errors import MarshalError

LOOPBACK = "127.0.0.1"
"""The only interface the JVMs this project starts listen on."""

MIN_JAVA_VERSION = 17
"""Oldest Java major version Kafka 4 and Spark 4 run on."""

_JAVA_VERSION_RE = re.compile(r'version "([^"]+)"')
_PR_SET_PDEATHSIG = 1
_MAX_QUOTE = 300
_INSTALL_JDK = "install a JDK (e.g. `apt-get install openjdk-17-jre-headless`)"


def find_java(needed_by: str, error: type[MarshalError]) -> tuple[str, int]:
    """Return the ``java`` executable to run and its major version.

    ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set (as Kafka's and Spark's launchers do),
    else ``java`` on ``PATH``. ``needed_by`` names what needs it in the error messages
    ("Spark", "the Kafka 4.3.1 broker"); ``error`` is the exception type raised.

    Raises:
        error: no Java, ``JAVA_HOME`` without ``bin/java``, ``java -version`` fails, or the
            Java is older than :data:`MIN_JAVA_VERSION`.
    """
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        java = str(Path(java_home) / "bin" / "java")
        if not os.access(java, os.X_OK):
            raise error(
                f"JAVA_HOME is {java_home}, which has no bin/java; {needed_by} needs Java "
                f"{MIN_JAVA_VERSION} or newer: point JAVA_HOME at a JDK or unset it"
            )
    else:
        found = shutil.which("java")
        if found is None:
            raise error(
                f"Java is not installed (no java on PATH, JAVA_HOME unset); {needed_by} needs "
                f"Java {MIN_JAVA_VERSION} or newer: {_INSTALL_JDK} or set JAVA_HOME"
            )
        java = found
    major = java_major_version(java, error)
    if major < MIN_JAVA_VERSION:
        raise error(
            f"{java} is Java {major}, but {needed_by} needs Java {MIN_JAVA_VERSION} or newer: "
            f"{_INSTALL_JDK} and put it first on PATH or set JAVA_HOME"
        )
    return java, major


def java_major_version(java: str, error: type[MarshalError] = MarshalError) -> int:
    """Run ``java -version`` (once per executable) and return its major version."""
    try:
        returncode, output = _java_version_output(java)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise error(
            f"cannot run `{java} -version` ({exc}); reinstall Java {MIN_JAVA_VERSION} or newer "
            "or point JAVA_HOME at a working one"
        ) from exc
    major = parse_java_major_version(output)
    if returncode != 0 or major is None:
        first = output.strip().splitlines()[0][:_MAX_QUOTE] if output.strip() else "no output"
        raise error(
            f"cannot tell the version of {java} (`java -version` said: {first}); install Java "
            f"{MIN_JAVA_VERSION} or newer or point JAVA_HOME at one"
        )
    return major


@functools.lru_cache(maxsize=8)
def _java_version_output(java: str) -> tuple[int, str]:
    result = subprocess.run(
        [java, "-version"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
        check=False,
    )
    return result.returncode, result.stderr + result.stdout


def parse_java_major_version(output: str) -> int | None:
    """Return the major version in ``java -version`` output (``1.8.0_292`` gives 8)."""
    match = _JAVA_VERSION_RE.search(output)
    if match is None:
        return None
    parts = re.split(r"[.\-+_]", match.group(1))
    try:
        major = int(parts[0])
        if major == 1 and len(parts) > 1:
            major = int(parts[1])
    except ValueError:
        return None
    return major


def free_port(exclude: frozenset[int] = frozenset()) -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((LOOPBACK, 0))
            port: int = sock.getsockname()[1]
        if port not in exclude:
            return port
    raise MarshalError("cannot find a free TCP port on 127.0.0.1; free some ports and retry")


def die_with_parent(parent_pid: int) -> Callable[[], None] | None:
    """Return a ``preexec_fn`` that makes the child die with its parent (Linux), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        return None
    sigkill = int(signal.SIGKILL)

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sigkill, 0, 0, 0)
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec
