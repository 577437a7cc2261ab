"""A formatted storage kept as a template: a new dev broker's log directory without a JVM.

Formatting a KRaft log directory (``kafka.tools.StorageTool format``) starts a JVM that
writes two small files: ``bootstrap.checkpoint`` (the metadata version and feature levels of
the release, which the same release and settings always give) and ``meta.properties`` (the
node id, the cluster id and a random id of the directory). On a quiet 2-core machine
(2026-11-29) that JVM took 0.7 s and 0.7 CPU-s of a dev broker's 2 s start.

The first format of a plain broker (no SCRAM users or other format arguments) is kept beside
the jars (``<cache>/kafka-<version>/storage-<digest>/``, the digest naming the broker's
settings with its ports and paths left out); later brokers with the same settings get a copy
of ``bootstrap.checkpoint`` and a ``meta.properties`` with a cluster id and a directory id of
their own. A template is kept only when the format wrote exactly those two files (a
storage of any other shape is formatted by Kafka every time), and it is published whole
(renamed into place) or not at all. What a broker reads from the directory is the same
either way: the template changes how fast its storage is made, never what is in it.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from marshal_py.devbroker.properties import replace_values

log = logging.getLogger(__name__)

PREFIX = "storage-"
"""Template directories start with this (the rest is a digest of the settings)."""

FILES = ("bootstrap.checkpoint", "meta.properties")
"""What a format of a single KRaft directory with a static quorum writes."""

_ADDRESS = re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d+")


def template_dir(lib: Path, properties_text: str, data_dir: Path,
                 extra_args: Sequence[str]) -> Path | None:
    """Where the template for these settings lives (it may not exist yet), or None when
    this format cannot use one (arguments beyond the properties, such as SCRAM users with
    their secrets). The broker's ports and its data directory are not part of the
    settings: they change nothing in what the format writes."""
    if extra_args:
        return None
    settings = _ADDRESS.sub(r"\1:PORT", properties_text.replace(str(data_dir), "DATA_DIR"))
    digest = hashlib.sha256(settings.encode("utf-8")).hexdigest()[:16]
    return lib.parent / f"{PREFIX}{digest}"


def copy_template(template: Path, log_dir: Path, cluster_id: str,
                  new_id: Callable[[], str]) -> bool:
    """Make ``log_dir`` a formatted storage from ``template`` with ``cluster_id`` and a
    fresh directory id (``new_id()``); False (and ``log_dir`` left without a
    ``meta.properties``) when there is no usable template."""
    try:
        checkpoint = (template / FILES[0]).read_bytes()
        meta = (template / FILES[1]).read_text(encoding="utf-8")
    except OSError:
        return False
    lines, found = replace_values(meta, {"cluster.id": cluster_id, "directory.id": new_id()})
    if not checkpoint or len(found) < 2 or \
            not any(line.startswith("node.id=") for line in lines):
        log.debug("the storage template %s is not one this release wrote", template)
        return False
    log_dir.mkdir(parents=True, exist_ok=True)
    (log_dir / FILES[0]).write_bytes(checkpoint)
    # meta.properties last: a directory holding it is formatted (storage.is_formatted).
    (log_dir / FILES[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    log.debug("formatted %s from the storage template %s", log_dir, template)
    return True


def save_template(template: Path, log_dir: Path) -> None:
    """Keep what a format wrote in ``log_dir`` as ``template``, when it is the two files a
    template holds and no other broker published one first."""
    try:
        if template.exists() or sorted(p.name for p in log_dir.iterdir()) != sorted(FILES):
            return
        scratch = Path(tempfile.mkdtemp(prefix=f".{template.name}-", dir=template.parent))
        try:
            for name in FILES:
                shutil.copyfile(log_dir / name, scratch / name)
            os.rename(scratch, template)
        except OSError:
            shutil.rmtree(scratch, ignore_errors=True)
            return
        log.debug("kept the formatted storage of %s as the template %s", log_dir, template)
    except OSError as exc:  # a read-only or full cache: brokers format as before
        log.debug("could not keep a storage template in %s: %s", template.parent, exc)
