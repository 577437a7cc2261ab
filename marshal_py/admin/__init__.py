"""Read-side tools over the coordination log: world views for the CLI and audits."""

from marshal_py.admin.world_view import StateRow, WorldView, load_world, state_rows

__all__ = ["StateRow", "WorldView", "load_world", "state_rows"]
