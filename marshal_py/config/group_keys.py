"""Reading the keys of authenticated groups from a file.

The file has one key per line, ``GROUP KEY_ID SECRET``, where SECRET is the key's bytes in
base64 (at least 16 bytes; e.g. ``openssl rand -base64 32``). Blank lines and lines starting
with ``#`` are ignored. A group's first key signs what its members write; every key listed for
it verifies. To rotate: add the new key as the group's second line on every member and admin
host, then move it first, then remove the old one::

    # group       key id   secret
    orders.team   2026-11  q0Vd7kQpK3hq3m3JxUoH7E8v1q2z0u8sOQm2y8Pn0jQ=
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from pathlib import Path

from marshal_py.errors import ConfigurationError
from marshal_py.protocol.auth import GroupKey
from marshal_py.protocol.messages import id_problem

__all__ = ["load_group_keys"]


def load_group_keys(path: str | os.PathLike[str]) -> dict[str, tuple[GroupKey, ...]]:
    """The keys of each authenticated group listed in ``path`` (see the module docstring).

    Raises :class:`~marshal_py.errors.ConfigurationError` naming the file and line of the
    first problem; never shows a secret.
    """
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
        mode = file.stat().st_mode
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"cannot read the key file {file}: {exc}") from exc
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigurationError(
            f"the key file {file} is readable by other users; run `chmod 600 {file}`")
    keys: dict[str, list[GroupKey]] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        where = f"{file}:{number}"
        parts = stripped.split()
        if len(parts) != 3:
            raise ConfigurationError(
                f"{where}: expected 'GROUP KEY_ID SECRET', found {len(parts)} fields")
        group, key_id, encoded = parts
        problem = id_problem("group_id", group)
        if problem is not None:
            raise ConfigurationError(f"{where}: {problem}")
        try:
            secret = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ConfigurationError(f"{where}: the secret is not base64") from exc
        try:
            key = GroupKey(key_id, secret)
        except ValueError as exc:
            raise ConfigurationError(f"{where}: {exc}") from exc
        if any(k.key_id == key_id for k in keys.get(group, [])):
            raise ConfigurationError(f"{where}: group {group!r} lists key id {key_id!r} twice")
        keys.setdefault(group, []).append(key)
    if not keys:
        raise ConfigurationError(f"the key file {file} lists no key")
    return {group: tuple(group_keys) for group, group_keys in keys.items()}
