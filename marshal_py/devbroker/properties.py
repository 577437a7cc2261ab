"""Java properties files as the dev broker writes and rewrites them (one ``key=value`` a line,
``#`` comments)."""

from __future__ import annotations

from collections.abc import Mapping


def replace_values(text: str, values: Mapping[str, str]) -> tuple[list[str], set[str]]:
    """The lines of ``text`` with the value of each key named in ``values`` replaced
    (comments and other lines as they are), and the keys that were found."""
    lines, found = [], set()
    for line in text.splitlines():
        key = line.split("=", 1)[0].strip()
        if not line.lstrip().startswith("#") and key in values:
            line = f"{key}={values[key]}"
            found.add(key)
        lines.append(line)
    return lines, found
