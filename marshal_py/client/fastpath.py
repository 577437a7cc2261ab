"""The per-record work of an exclusive consumer: the C build when it was compiled, else the
same behaviour in Python.

``marshal_py.client._fastpath`` (``_fastpath.c``, built by ``pip install`` where a C compiler
is present; optional) holds three things an application meets once per record:

* ``ConfluentRecord`` and ``wrap``: the librdkafka fetcher's records
  (:mod:`marshal_py.client.confluent_fetcher` holds their Python build);
* ``CursorCore``: the fields of a :class:`~marshal_py.client.lease.CommitCursor` and its
  commit in order (:class:`PyCursorCore` here);
* ``Committer``: an at-least-once consumer's ``commit(record)`` in order, which finds the
  record's cursor and commits there, and hands every other case to the consumer's Python
  commit (:class:`PyCommitter` here just calls it).

The C code does only what the Python fast paths do; every rule with a branch (out-of-order
commits, gaps, rewinds, revoked leases, max_poll_interval) stays in Python.
``tests/unit/test_fastpath.py`` runs both builds on the same inputs. :data:`COMPILED` says
which is in use (``marshal_py.client.fastpath.COMPILED``); the environment variable
``MARSHAL_PY_PURE=1`` makes a process use the Python build although the C one is there.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any

from marshal_py.lazy import compiled_extension

__all__ = ["COMPILED", "Committer", "CursorCore", "PyCommitter", "PyCursorCore",
           "compiled_module"]


def compiled_module() -> ModuleType | None:
    """``marshal_py.client._fastpath``, or None when it was not built or ``MARSHAL_PY_PURE``
    is set (to anything but "" or "0")."""
    return compiled_extension("marshal_py.client._fastpath")


class PyCursorCore:
    """The fields of a commit cursor and its commit in order (Python build)."""

    __slots__ = ("_done", "committed", "end", "expect", "position", "revoked")

    expect: int
    end: int
    position: int
    committed: int
    _done: set[int]
    revoked: bool

    def __new__(cls, *args: Any, **kwargs: Any) -> PyCursorCore:
        # Fields set at creation, as the C type's tp_new does (subclasses set them again).
        self = super().__new__(cls)
        self.expect = self.end = self.position = self.committed = 0
        self._done = set()
        self.revoked = False
        return self

    def commit(self, offset: int) -> None:
        """The application is done with the handed-out record at ``offset``."""
        if offset == self.expect and offset < self.end and not self._done:
            nxt = offset + 1
            self.expect = nxt
            self.committed = nxt if nxt < self.end else self.position
            return
        self._commit_slow(offset)

    def _commit_slow(self, offset: int) -> None:
        raise NotImplementedError


class PyCommitter:
    """``commit(record)`` of an at-least-once consumer (Python build): ``slow(record)``,
    the consumer's own commit. ``held`` is kept for the C build's sake (its cache)."""

    __slots__ = ("held", "slow")

    def __init__(self, slow: Callable[[Any], bool]) -> None:
        self.slow = slow
        self.held: dict[Any, Any] = {}

    def __call__(self, record: Any) -> bool:
        return self.slow(record)


_compiled = compiled_module()
#: True when the C build is in use.
COMPILED = _compiled is not None
if TYPE_CHECKING:  # both builds have the Python build's interface
    CursorCore = PyCursorCore
    Committer = PyCommitter
else:
    CursorCore = _compiled.CursorCore if _compiled else PyCursorCore
    Committer = _compiled.Committer if _compiled else PyCommitter
