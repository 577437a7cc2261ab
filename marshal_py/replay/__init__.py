"""Replay: reading a coordination log into a rationalizer.

The room between the log (records as bytes with positions) and the world (the rules): where
a replay begins (the window, the newest checkpoints), catching up to the log's end, and
following it. Members, tools and the audit all replay through here.

The names below are imported on first use (PEP 562), so that importing one module of this
package does not import all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.lazy import lazy_names

if TYPE_CHECKING:
    from marshal_py.replay.reading import (
        DEFAULT_REPLAY_WINDOW_MS,
        catch_up,
        follow,
        replay_start,
        seek_to_window,
    )

#: Public name -> the module that defines it (imported when first used).
_LAZY: dict[str, str] = {
    "DEFAULT_REPLAY_WINDOW_MS": "marshal_py.replay.reading",
    "catch_up": "marshal_py.replay.reading",
    "follow": "marshal_py.replay.reading",
    "replay_start": "marshal_py.replay.reading",
    "seek_to_window": "marshal_py.replay.reading",
}

__all__ = [
    "DEFAULT_REPLAY_WINDOW_MS",
    "catch_up",
    "follow",
    "replay_start",
    "seek_to_window",
]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
