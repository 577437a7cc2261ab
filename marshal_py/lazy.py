"""Public names of a package imported on first use (PEP 562), so that importing one corner
of ``marshal_py`` (a Spark worker, the CLI's ``--help``) does not import all of it.

A package lists its public names and the module defining each, then::

    __getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from types import ModuleType
from typing import Any


def compiled_extension(name: str) -> ModuleType | None:
    """The optional C extension ``name`` (e.g. ``marshal_py.client._fastpath``), or None when
    it was not built or the environment variable ``MARSHAL_PY_PURE`` is set (to anything but
    "" or "0"): then the caller uses its Python build of the same behaviour."""
    if os.environ.get("MARSHAL_PY_PURE", "") not in ("", "0"):
        return None
    try:
        return import_module(name)
    except ImportError:
        return None


def lazy_names(package: str, defined_in: Mapping[str, str], namespace: dict[str, Any],
               public: Sequence[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package``: a name of
    ``defined_in`` is imported from its module when first asked for and kept in
    ``namespace`` (the package's globals), so later lookups do not come back here."""

    def __getattr__(name: str) -> Any:
        module = defined_in.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__
