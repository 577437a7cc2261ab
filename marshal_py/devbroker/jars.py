"""Resolve and cache the Apache Kafka broker jars with Maven.

The jars are fetched once with ``mvn dependency:copy-dependencies`` from the pom that pins the
chosen release (``kafka-pom.xml`` next to this module for the default, 4.x;
``kafka-3.9-pom.xml`` for 3.9: see :data:`KAFKA_VERSIONS`) and cached outside the repository,
in ``<cache>/kafka-<version>/lib``. A cache directory is only ever published whole: Maven copies
into a temporary sibling directory, a marker file is written into it, and the directory is then
renamed into place, so an interrupted run never leaves a half-filled cache. Concurrent
resolutions (two test runs, say) serialize on a file lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from marshal_py.errors import DevBrokerError

log = logging.getLogger(__name__)

KAFKA_VERSION: str = "4.3.1"
"""The Apache Kafka version the development broker runs by default; equal to the one
kafka-pom.xml pins."""

POM_PATH: Path = Path(__file__).with_name("kafka-pom.xml")
"""The Maven project that pins the default broker's jars."""

KAFKA_VERSIONS: dict[str, Path] = {
    KAFKA_VERSION: POM_PATH,
    "3.9.2": Path(__file__).with_name("kafka-3.9-pom.xml"),
}
"""Every Kafka release the development broker runs, each with the pom that pins its jars (the
default first). A release is asked for by its version or its series (``"3.9"``)."""

MARKER_NAME = ".marshal-complete"
"""File written into a lib directory once every jar is in it; holds the pom's sha256."""

MAVEN_TIMEOUT_S = 900.0
"""Longest a Maven resolution may take (a first download on a slow network)."""

_POM_NS = "{http://maven.apache.org/POM/4.0.0}"
_ANSI_RE = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_HELP_SUFFIX_RE = re.compile(r"\s*->\s*\[Help \d+\]\s*$")
_MAVEN_BOILERPLATE = (
    "[Help ",
    "To see the full stack trace",
    "Re-run Maven using",
    "For more information about the errors",
    "http://cwiki.apache.org",
    "https://cwiki.apache.org",
)


def default_cache_dir() -> Path:
    """Return the directory that caches the broker jars (outside the repository).

    ``$MARSHAL_CACHE_DIR`` when set, else ``$XDG_CACHE_HOME/marshal_py``, else
    ``~/.cache/marshal_py``.
    """
    explicit = os.environ.get("MARSHAL_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "marshal_py"


def pom_kafka_version(pom_path: Path = POM_PATH) -> str:
    """Return the ``kafka.version`` property a Kafka pom pins.

    Raises:
        DevBrokerError: the pom is missing, is not XML or has no ``kafka.version`` property.
    """
    try:
        root = ET.parse(pom_path).getroot()
    except (OSError, ET.ParseError) as exc:
        raise DevBrokerError(
            f"cannot read the Kafka pom {pom_path}: {exc}; restore it from the repository"
        ) from exc
    element = root.find(f"{_POM_NS}properties/{_POM_NS}kafka.version")
    if element is None:
        element = root.find("properties/kafka.version")
    version = (element.text or "").strip() if element is not None else ""
    if not version:
        raise DevBrokerError(
            f"the Kafka pom {pom_path} has no <kafka.version> property; restore it from the "
            "repository"
        )
    return version


def pinned_kafka_version(wanted: str | None = None) -> str:
    """Return the pinned release that ``wanted`` names: its exact version (``"3.9.2"``) or its
    series (``"3.9"``); :data:`KAFKA_VERSION` when None.

    Raises:
        DevBrokerError: no supported release matches.
    """
    if wanted is None:
        return KAFKA_VERSION
    text = wanted.strip()
    for version in KAFKA_VERSIONS:
        if text in (version, _series(version)):
            return version
    choices = ", ".join(f"{v} ({_series(v)})" for v in KAFKA_VERSIONS)
    raise DevBrokerError(
        f"Kafka version {wanted!r} is not one the development broker runs; choose one of "
        f"{choices}, the first being the default"
    )


def _series(version: str) -> str:
    return ".".join(version.split(".")[:2])


def find_maven() -> str:
    """Return the path of the ``mvn`` executable.

    Raises:
        DevBrokerError: Maven is not on ``PATH``.
    """
    mvn = shutil.which("mvn")
    if mvn is None:
        raise DevBrokerError(
            "Maven (mvn) is not on PATH; it is needed once to download the Kafka broker jars: "
            "install it (e.g. `apt-get install maven`) or add its bin directory to PATH"
        )
    return mvn


def resolve_kafka_jars(cache_dir: Path | None = None, *, pom_path: Path | None = None,
                       version: str | None = None) -> Path:
    """Return a directory holding every jar the Kafka broker needs, resolving it if needed.

    The directory is ``<cache_dir>/kafka-<version>/lib``; a complete one (its marker file
    matches the pom) is returned as is, without running Maven. Otherwise Maven resolves the
    jars into a temporary directory that is renamed into place once complete, under a file
    lock so that racing processes resolve only once.

    Args:
        cache_dir: the cache root; :func:`default_cache_dir` when None.
        pom_path: the Maven pom to resolve (a test hook); when None, the packaged pom of
            ``version``.
        version: the Kafka release (see :func:`pinned_kafka_version`); the default when None.

    Raises:
        DevBrokerError: the version is not supported, Maven is missing or the resolution
            failed.
    """
    pom = (pom_path or KAFKA_VERSIONS[pinned_kafka_version(version)]).resolve()
    version = pom_kafka_version(pom)
    root = (cache_dir or default_cache_dir()).expanduser().resolve()
    version_dir = root / f"kafka-{version}"
    lib = version_dir / "lib"
    fingerprint = hashlib.sha256(pom.read_bytes()).hexdigest()

    if _is_complete(lib, fingerprint):
        log.debug("reusing the cached Kafka %s jars in %s", version, lib)
        return lib

    try:
        version_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise DevBrokerError(
            f"cannot create the jar cache directory {version_dir}: {exc}; "
            "set MARSHAL_CACHE_DIR to a writable directory"
        ) from exc

    with _file_lock(version_dir / ".lock"):
        if _is_complete(lib, fingerprint):  # another process resolved it while we waited
            log.debug("another process resolved the Kafka %s jars into %s", version, lib)
            return lib
        _remove_stale_temp_dirs(version_dir)
        mvn = find_maven()
        tmp = Path(tempfile.mkdtemp(prefix="lib.tmp-", dir=version_dir))
        try:
            log.info("resolving the Kafka %s broker jars with Maven into %s", version, lib)
            _run_maven(mvn, pom, tmp)
            expected = tmp / f"kafka_2.13-{version}.jar"
            if not expected.is_file():
                raise DevBrokerError(
                    f"Maven finished but {expected.name} is missing from its output; "
                    f"check {pom} and run again"
                )
            (tmp / MARKER_NAME).write_text(fingerprint + "\n", encoding="utf-8")
            if lib.exists():  # an outdated or unmarked directory: replace it
                old = Path(tempfile.mkdtemp(prefix="lib.old-", dir=version_dir))
                os.rename(lib, old / "lib")
                shutil.rmtree(old, ignore_errors=True)
            os.rename(tmp, lib)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    log.info("cached the Kafka %s broker jars in %s", version, lib)
    return lib


def _is_complete(lib: Path, fingerprint: str) -> bool:
    try:
        return (lib / MARKER_NAME).read_text(encoding="utf-8").strip() == fingerprint
    except OSError:
        return False


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    with open(path, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _remove_stale_temp_dirs(version_dir: Path) -> None:
    """Remove what interrupted runs left behind (safe: called with the lock held)."""
    for child in version_dir.iterdir():
        if child.is_dir() and child.name.startswith(("lib.tmp-", "lib.old-")):
            shutil.rmtree(child, ignore_errors=True)


def _run_maven(mvn: str, pom: Path, output_dir: Path) -> None:
    command = [
        mvn,
        "-q",
        "-B",
        "-Dstyle.color=never",
        "-f",
        str(pom),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={output_dir}",
        "-DincludeScope=runtime",
    ]
    log.debug("running %s", " ".join(command))
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            timeout=MAVEN_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise DevBrokerError(
            f"resolving the Kafka jars with Maven took longer than {MAVEN_TIMEOUT_S:.0f} s; "
            "check the network connection to Maven Central and run again"
        ) from exc
    except OSError as exc:
        raise DevBrokerError(f"cannot run Maven ({mvn}): {exc}; reinstall Maven") from exc
    if result.returncode != 0:
        reason = _last_maven_error(result.stdout) or f"mvn exited with status {result.returncode}"
        raise DevBrokerError(
            f"resolving the Kafka jars with Maven failed: {reason} "
            f"(check the network connection to Maven Central and the pom {pom})"
        )


def _last_maven_error(output: str) -> str | None:
    """Return the last meaningful ``[ERROR]`` line of Maven's output, if any."""
    candidates: list[str] = []
    fallback: list[str] = []
    for raw in output.splitlines():
        line = _ANSI_RE.sub("", raw).strip()
        if not line:
            continue
        fallback.append(line)
        if not line.startswith("[ERROR]"):
            continue
        text = _HELP_SUFFIX_RE.sub("", line[len("[ERROR]") :]).strip()
        if text and not text.startswith(_MAVEN_BOILERPLATE):
            candidates.append(text)
    if candidates:
        return candidates[-1]
    return fallback[-1] if fallback else None
