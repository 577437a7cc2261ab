"""Process identity: the instance id every process makes fresh when it starts."""

from __future__ import annotations

import re
import secrets

INSTANCE_ID_PATTERN = re.compile(r"[0-9a-f]{8}")


def new_instance_id() -> str:
    """A fresh instance id: 8 lowercase hex characters (32 random bits), as the protocol uses
    to tell a restarted process from its predecessor under the same client id."""
    return secrets.token_hex(4)
