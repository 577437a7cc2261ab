"""The ``marshal`` command line (click): one module per family of commands.

:mod:`~marshal_py.cli.main` (the group and how errors print), :mod:`~marshal_py.cli.inspect`
(``state``, ``tail``), :mod:`~marshal_py.cli.consume` (``consume``),
:mod:`~marshal_py.cli.admin` (``init``, ``groups``, ``lag``, ``reset-offsets``, ``watch``),
:mod:`~marshal_py.cli.audit` (``audit``), :mod:`~marshal_py.cli.dev_broker`
(``dev-broker``), and :mod:`~marshal_py.cli.common` (the options every command shares).
"""

from marshal_py.cli.main import main

__all__ = ["main"]
