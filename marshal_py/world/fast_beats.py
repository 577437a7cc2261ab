"""The C build of the record loop's commonest case, owners' heartbeats (``_feed.c``), set up
with the classes whose slots it reads. Pure.

:data:`run_beats` is None when the extension was not built or ``MARSHAL_PY_PURE`` is set: the
loop in :mod:`marshal_py.world.engine` then applies those records itself, as it always can.
"""

from __future__ import annotations

from collections.abc import Callable

from marshal_py.lazy import compiled_extension
from marshal_py.protocol.records import CoordinationRecord
from marshal_py.world.checkpoint import ClaimState
from marshal_py.world.lifecycle import GroupLife
from marshal_py.world.pairs import Pair, Route

_compiled = compiled_extension("marshal_py.world._feed")
if _compiled is not None:
    _compiled.configure(CoordinationRecord, Route, Pair, GroupLife, ClaimState)

#: ``run_beats(records, i, at_p, at_next, sent_ok, routes) -> (i, at_next, ts, sent_ok,
#: beats, duplicates)``: applies the run of duplicates and owners' heartbeats of coordination
#: partition ``at_p`` from ``records[i]`` on (see ``_feed.c``).
run_beats: Callable[..., tuple[int, int, int, bytes, int, int]] | None = (
    None if _compiled is None else _compiled.run)
