"""Read-side tools over the coordination log: world views for the CLI and audits.

The names below are imported on first use (PEP 562), so that importing one module of this
package does not import all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.lazy import lazy_names

if TYPE_CHECKING:
    from marshal_py.admin.world_view import StateRow, WorldView, load_world, state_rows

#: Public name -> the module that defines it (imported when first used).
_LAZY: dict[str, str] = {
    "StateRow": "marshal_py.admin.world_view",
    "WorldView": "marshal_py.admin.world_view",
    "load_world": "marshal_py.admin.world_view",
    "state_rows": "marshal_py.admin.world_view",
}

__all__ = ["StateRow", "WorldView", "load_world", "state_rows"]


__getattr__, __dir__ = lazy_names(__name__, _LAZY, globals(), __all__)
