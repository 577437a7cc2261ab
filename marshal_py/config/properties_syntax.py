"""The syntax of the files :func:`~marshal_py.config.kafka_properties.load_properties` reads,
without their meaning: a Java properties file as ``java.util.Properties`` reads it (comments,
continuation lines, ``\\`` escapes, ``=``, ``:`` or blanks between key and value), and a
one-module ``sasl.jaas.config`` value (``Module flag key="value" ...;``)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from marshal_py.errors import ConfigurationError

__all__ = ["Entry", "parse_jaas", "read_entries"]


@dataclass(frozen=True)
class Entry:
    """One key and value of a properties file, with the line it begins on."""

    key: str
    value: str
    line: int


# -- java.util.Properties syntax ----------------------------------------------------------------

_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, logical line) pairs: comments and blank lines dropped, lines
    ending in an odd number of backslashes joined with the next (leading blanks dropped)."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if pending:
            line = line.lstrip(" \t\f")
        else:
            stripped = line.lstrip(" \t\f")
            if not stripped or stripped[0] in "#!":
                continue
            line, start = stripped, number
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2 == 1:
            pending.append(line[:-1])
            continue
        pending.append(line)
        out.append((start, "".join(pending)))
        pending = []
    if pending:
        out.append((start, "".join(pending)))
    return out


def _unescape(raw: str, where: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(raw):
        char = raw[i]
        if char != "\\" or i + 1 >= len(raw):
            out.append(char)
            i += 1
            continue
        nxt = raw[i + 1]
        if nxt == "u":
            digits = raw[i + 2:i + 6]
            if not re.fullmatch(r"[0-9a-fA-F]{4}", digits):
                raise ConfigurationError(f"{where}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(nxt, nxt))
        i += 2
    return "".join(out)


def read_entries(text: str, source: str = "") -> list[Entry]:
    """The entries of a properties file, in order (a key may come again: the last wins).
    ``source`` names the file in errors."""
    entries = []
    for number, line in _logical_lines(text):
        i = 0
        while i < len(line) and line[i] not in "=: \t\f":
            i += 2 if line[i] == "\\" else 1
        key_raw = line[:i]
        rest = line[i:].lstrip(" \t\f")
        if rest[:1] in ("=", ":"):
            rest = rest[1:].lstrip(" \t\f")
        where = f"{source}:{number}" if source else f"line {number}"
        entries.append(Entry(_unescape(key_raw, where), _unescape(rest, where), number))
    return entries


# -- sasl.jaas.config ---------------------------------------------------------------------------

_CONTROL_FLAGS = ("required", "requisite", "sufficient", "optional")
_JAAS_TOKEN = re.compile(r'\s*(?:"(?P<quoted>(?:[^"\\]|\\.)*)"|(?P<word>[^\s=;"]+)|(?P<sym>[=;]))')


def _jaas_tokens(value: str) -> list[tuple[str, str]] | None:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(value):
        if not value[pos:].strip():
            break
        match = _JAAS_TOKEN.match(value, pos)
        if match is None:
            return None
        pos = match.end()
        if match.group("quoted") is not None:
            tokens.append(("str", re.sub(r"\\(.)", r"\1", match.group("quoted"))))
        elif match.group("word") is not None:
            tokens.append(("word", match.group("word")))
        else:
            tokens.append(("sym", match.group("sym")))
    return tokens


def parse_jaas(value: str) -> tuple[str, dict[str, str]] | None:
    """``(login module, options)`` of a one-module ``sasl.jaas.config`` value, or None when
    it is not of the form ``Module flag key="value" ...;``."""
    tokens = _jaas_tokens(value)
    if not tokens or len(tokens) < 3 or tokens[0][0] != "word" or tokens[-1] != ("sym", ";"):
        return None
    module, flag = tokens[0][1], tokens[1]
    if flag[0] != "word" or flag[1].lower() not in _CONTROL_FLAGS:
        return None
    options: dict[str, str] = {}
    body = tokens[2:-1]
    if len(body) % 3:
        return None
    for i in range(0, len(body), 3):
        key, equals, val = body[i:i + 3]
        if key[0] != "word" or equals != ("sym", "=") or val[0] == "sym":
            return None
        options[key[1]] = val[1]
    return module, options
