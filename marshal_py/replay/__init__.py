"""Replay: reading a coordination log into a rationalizer.

The room between the log (records as bytes with positions) and the world (the rules): where
a replay begins (the window, the newest checkpoints), catching up to the log's end, and
following it. Members, tools and the audit all replay through here.
"""

from marshal_py.replay.reading import (
    DEFAULT_REPLAY_WINDOW_MS,
    catch_up,
    follow,
    replay_start,
    seek_to_window,
)

__all__ = [
    "DEFAULT_REPLAY_WINDOW_MS",
    "catch_up",
    "follow",
    "replay_start",
    "seek_to_window",
]
