"""Which tier of the suite runs: ``bin/test --fast`` (the edit-test loop) or the full run.

``bin/test --fast`` sets ``MARSHAL_TESTS_FAST=1``. In that tier the tests that replay large
generated corpora take a fixed subset of them (:func:`sized`) and property tests run a tenth
of their examples (``tests/conftest.py``); every test still asserts what it names. The full
run (``bin/test``, CI) always takes the whole corpus and every example.
"""

from __future__ import annotations

import os

#: True under ``bin/test --fast``.
FAST = os.environ.get("MARSHAL_TESTS_FAST") == "1"


def sized(full: int, fast: int) -> int:
    """``full`` in the full run, ``fast`` (a fixed, smaller amount) under ``bin/test --fast``."""
    return fast if FAST else full
