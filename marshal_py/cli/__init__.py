"""The ``marshal`` command line (click): one module per family of commands.

:mod:`~marshal_py.cli.app` (the group and how errors print), :mod:`~marshal_py.cli.inspect`
(``state``, ``tail``), :mod:`~marshal_py.cli.consume` (``consume``),
:mod:`~marshal_py.cli.admin` (``init``, ``groups``, ``lag``, ``reset-offsets``, ``watch``),
:mod:`~marshal_py.cli.audit` (``audit``), :mod:`~marshal_py.cli.dev_broker`
(``dev-broker``), and :mod:`~marshal_py.cli.common` (the options every command shares).
"""

from __future__ import annotations

from typing import Any

__all__ = ["main"]


def __getattr__(name: str) -> Any:
    # ``main`` is imported on first use: ``python -m marshal_py.cli.dev_broker`` then runs
    # that module without the package having imported it first (runpy warns otherwise).
    if name == "main":
        from marshal_py.cli.app import main

        return main
    raise AttributeError(f"module 'marshal_py.cli' has no attribute {name!r}")
