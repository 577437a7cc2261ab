"""``marshal groups``: every group's lifecycle (KIP-211) per topic, flattened into rows. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from marshal_py.world.lifecycle import GroupLifecycle, GroupState
from marshal_py.world.rationalizer import Rationalizer
from marshal_py.world.state import Owner

#: Columns of ``marshal groups`` (text).
GROUP_COLUMNS = ("group", "topic", "state", "group_state", "members", "since", "expires")


def member_name(member: Owner) -> str:
    """How a member is named to people: ``client-id (instance ab12cd34)``."""
    return f"{member.client_id} (instance {member.instance_id})"


def iso(ms: int | None) -> str | None:
    """A time in ms as ISO 8601 UTC (None stays None)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def overall_state(states: list[GroupState]) -> GroupState:
    """A group's state over its topics: Stable if any pair is, else Empty if any is, else
    Dead."""
    if GroupState.STABLE in states:
        return GroupState.STABLE
    if GroupState.EMPTY in states:
        return GroupState.EMPTY
    return GroupState.DEAD


def ago(ms: int | None, now_ms: int) -> str | None:
    """``12s ago`` / ``in 3d4h``: a time relative to now, to the two largest units."""
    if ms is None:
        return None
    delta = now_ms - ms
    text = duration(abs(delta))
    return f"{text} ago" if delta >= 0 else f"in {text}"


def duration(ms: int) -> str:
    """``950ms``, ``12s``, ``3m05s``, ``2h10m``, ``6d23h``."""
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


@dataclass(frozen=True)
class GroupRow:
    """One (group, topic) pair as ``marshal groups`` shows it."""

    lifecycle: GroupLifecycle
    group_state: GroupState

    @property
    def group(self) -> str:
        return self.lifecycle.group

    @property
    def topic(self) -> str:
        return self.lifecycle.topic

    def cells(self, now_ms: int) -> list[object]:
        """The row's text cells, in :data:`GROUP_COLUMNS` order."""
        life = self.lifecycle
        members = ", ".join(member_name(m) for m in life.members) or None
        expires = None
        if life.expires_at_ms is not None:
            expires = ("offsets expired " if life.state is GroupState.DEAD
                       else "offsets expire ") + (ago(life.expires_at_ms, now_ms) or "")
        return [life.group, life.topic, life.state.value, self.group_state.value, members,
                ago(life.since_ms, now_ms), expires]

    def as_dict(self) -> dict[str, object]:
        """The row as JSON: times in ms (broker clock) and ISO 8601."""
        life = self.lifecycle
        return {
            "group": life.group,
            "topic": life.topic,
            "state": life.state.value,
            "group_state": self.group_state.value,
            "members": [{"client_id": m.client_id, "instance_id": m.instance_id,
                         "heartbeat_interval_s": None if hi is None else hi / 1000}
                        for m, hi in zip(life.members, life.intervals or
                                         (None,) * len(life.members), strict=True)],
            "since_ms": life.since_ms,
            "since": iso(life.since_ms),
            "expires_at_ms": life.expires_at_ms,
            "expires_at": iso(life.expires_at_ms),
        }


def group_rows(rationalizer: Rationalizer, now_ms: int, group: str | None = None,
               topic: str | None = None) -> list[GroupRow]:
    """Every (group, topic) pair the log knows, sorted, with its group's overall state."""
    lives: list[GroupLifecycle] = []
    for g, t in rationalizer.groups():
        if (group is not None and g != group) or (topic is not None and t != topic):
            continue
        life = rationalizer.group_state(g, t, now_ms)
        if life is not None:
            lives.append(life)
    by_group: dict[str, list[GroupState]] = {}
    for life in lives:
        by_group.setdefault(life.group, []).append(life.state)
    return [GroupRow(life, overall_state(by_group[life.group])) for life in lives]


def groups_json(rows: list[GroupRow]) -> list[dict[str, object]]:
    """``marshal groups --json``: one object per group, its topics inside."""
    out: list[dict[str, object]] = []
    current: dict[str, object] | None = None
    for row in rows:
        if current is None or current["group"] != row.group:
            current = {"group": row.group, "state": row.group_state.value, "topics": []}
            out.append(current)
        pair = row.as_dict()
        del pair["group"], pair["group_state"]
        topics = current["topics"]
        assert isinstance(topics, list)
        topics.append(pair)
    return out
