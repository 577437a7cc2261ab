"""A development broker's storage: formatting its KRaft log directory once, and refusing a
directory that a newer Kafka release formatted (it cannot be read by an older one)."""

from __future__ import annotations

import contextlib
import logging
import subprocess
from collections.abc import Sequence
from pathlib import Path

from marshal_py.devbroker.jars import KAFKA_VERSION
from marshal_py.errors import DevBrokerError

log = logging.getLogger(__name__)

FORMAT_TIMEOUT_S = 120.0
"""Longest the storage format step may take."""

VERSION_FILE = "kafka.version"
"""The release that formatted a data directory (a broker cannot read a newer one's)."""

_MAX_QUOTE = 300


def series(version: str) -> tuple[int, ...]:
    """``"3.9.2"`` -> ``(3, 9)``: the release series, which decides compatibility."""
    return tuple(int(part) for part in version.split(".")[:2] if part.isdigit())


def is_formatted(kafka_log_dir: Path) -> bool:
    """True once ``kafka_log_dir`` holds a formatted KRaft storage."""
    return (kafka_log_dir / "meta.properties").is_file()


def check_formatted_by(data_dir: Path, kafka_version: str) -> None:
    """Refuse a data directory a newer Kafka release formatted (its metadata version is one
    this release cannot read: the broker would exit with a long stack trace)."""
    try:
        formatted_by = (data_dir / VERSION_FILE).read_text(encoding="ascii").strip()
    except OSError:
        formatted_by = KAFKA_VERSION  # formatted before releases were noted: by a 4.x
    if series(formatted_by) > series(kafka_version):
        raise DevBrokerError(
            f"{data_dir} holds the data of a Kafka {formatted_by} broker, which Kafka "
            f"{kafka_version} cannot read; choose another data directory or run "
            f"Kafka {formatted_by}")


def format_storage(java_command: Sequence[str], *, cluster_id: str, properties: Path,
                   data_dir: Path, kafka_log_dir: Path, kafka_version: str,
                   extra_args: Sequence[str] = ()) -> None:
    """Run ``kafka.tools.StorageTool format`` (``java_command``: java, its options and the
    class path) and note the release that formatted ``data_dir``."""
    log.info("formatting %s (cluster id %s)", kafka_log_dir, cluster_id)
    command = [*java_command, "kafka.tools.StorageTool", "format", "-t", cluster_id,
               "-c", str(properties), *extra_args]
    try:
        result = subprocess.run(command, cwd=data_dir, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace", timeout=FORMAT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise DevBrokerError(
            f"formatting the broker storage in {kafka_log_dir} failed ({exc}); "
            "check the Java installation and retry") from exc
    if result.returncode != 0:
        lines = [line.strip() for line in result.stdout.splitlines() if line.strip()]
        reason = next((line for line in lines if "Exception" in line or "Error" in line),
                      lines[-1] if lines else f"exit status {result.returncode}")
        raise DevBrokerError(
            f"formatting the broker storage in {kafka_log_dir} failed: "
            f"{reason[:_MAX_QUOTE]}; remove that directory (it may belong to another "
            "cluster) or choose another data directory")
    note_formatted_by(data_dir, kafka_version)


def note_formatted_by(data_dir: Path, kafka_version: str) -> None:
    """Note in ``data_dir`` the release that formatted it (for :func:`check_formatted_by`)."""
    with contextlib.suppress(OSError):
        (data_dir / VERSION_FILE).write_text(kafka_version + "\n", encoding="ascii")
