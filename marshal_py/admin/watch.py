"""``marshal watch``: a live terminal view of the world state (rich).

:func:`build_frame` turns a rationalizer and the topics' end offsets into one frame (plain,
JSON-ready data; pure), :func:`render_frame` draws a frame as rich tables, and
:func:`run_watch` keeps a rationalizer caught up with the log and redraws in place.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from marshal_py.admin.groups import ago, group_rows, member_name
from marshal_py.admin.lag import exclusive_committed, lag_of
from marshal_py.protocol.ranges import format_ranges, ranges_of
from marshal_py.world.rationalizer import Rationalizer
from marshal_py.world.share import RecordState
from marshal_py.world.state import Owner, status_for_age

Frame = dict[str, Any]

_STATUS_STYLE = {"fresh": "green", "unknown": "yellow", "stale": "red", "unclaimed": "dim",
                 "stable": "green", "empty": "yellow", "dead": "red"}


def _wanted(group: str | None, topic: str | None, g: str, t: str) -> bool:
    return (group is None or g == group) and (topic is None or t == topic)


def build_frame(rationalizer: Rationalizer, now_ms: int,
                ends: Mapping[tuple[str, int], int], *, group: str | None = None,
                topic: str | None = None) -> Frame:
    """Everything one frame shows, as JSON-ready data (``ends``: Kafka's end offsets)."""
    groups = [row.as_dict() for row in group_rows(rationalizer, now_ms, group, topic)]
    partitions = []
    for claim in rationalizer.claims(group, topic):
        key = claim.key
        if rationalizer.share_partition(key.group, key.topic, key.partition) is not None:
            continue
        if rationalizer.key_shared_partition(key.group, key.topic, key.partition) is not None:
            continue
        age = claim.heartbeat_age_ms(now_ms)
        offset = exclusive_committed(claim)
        end = ends.get((key.topic, key.partition))
        partitions.append({
            "group": key.group, "topic": key.topic, "partition": key.partition,
            "mode": "amo" if claim.amo_claimed_offset is not None else "exclusive",
            "owner": claim.owner.client_id if claim.owner else None,
            "instance_id": claim.owner.instance_id if claim.owner else None,
            "status": claim.status(now_ms).value,
            "heartbeat_age_s": None if age is None else round(age / 1000, 1),
            "committed_offset": offset, "end_offset": end, "lag": lag_of(end, offset),
        })
    shares = []
    for key, share in rationalizer.share_partitions(group, topic):
        counts = share.counts(now_ms)
        end = ends.get((key.topic, key.partition))
        shares.append({
            "group": key.group, "topic": key.topic, "partition": key.partition,
            "spso": share.spso, "speo": share.speo,
            "available": counts.get(RecordState.AVAILABLE, 0),
            "acquired": counts.get(RecordState.ACQUIRED, 0),
            "acknowledged": counts.get(RecordState.ACKNOWLEDGED, 0),
            "archived": counts.get(RecordState.ARCHIVED, 0),
            "dead_letter": counts.get(RecordState.DEAD_LETTER, 0),
            "end_offset": end, "lag": lag_of(end, share.spso),
        })
    key_shared = []
    for key, keys in rationalizer.key_shared_partitions(group, topic):
        hi = rationalizer.config.heartbeat_interval_for(key.group)
        end = ends.get((key.topic, key.partition))
        slots: dict[Owner | None, list[int]] = {}
        commits: dict[Owner | None, list[int | None]] = {}
        for run in keys.runs():
            slots.setdefault(run.owner, []).extend(range(run.first, run.last + 1))
            commits.setdefault(run.owner, []).append(run.committed)
        for owner in sorted(slots, key=lambda o: (o is None, o)):
            offsets = commits[owner]
            lowest = None if any(c is None for c in offsets) else min(
                c for c in offsets if c is not None)
            seen = keys.last_seen.get(owner) if owner is not None else None
            status = ("unowned" if owner is None else "stale" if seen is None
                      else status_for_age(now_ms - seen, keys.intervals.get(owner, hi)).value)
            key_shared.append({
                "group": key.group, "topic": key.topic, "partition": key.partition,
                "owner": owner.client_id if owner else None,
                "instance_id": owner.instance_id if owner else None,
                "status": status, "slots": format_ranges(ranges_of(slots[owner])),
                "slot_count": len(slots[owner]), "committed_offset": lowest,
                "end_offset": end, "lag": lag_of(end, lowest),
            })
    return {"time_ms": now_ms, "groups": groups, "partitions": partitions, "shares": shares,
            "key_shared": key_shared,
            "ignored": rationalizer.ignored_count(), "skipped": rationalizer.skipped_count()}


def _styled(value: object) -> Text:
    text = "-" if value is None else str(value)
    return Text(text, style=_STATUS_STYLE.get(text, ""))


def _table(title: str, columns: list[str], rows: list[list[object]],
           styled: tuple[str, ...] = ()) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    for name in columns:
        table.add_column(name, justify="right" if name in (
            "partition", "committed", "end", "lag", "spso", "speo", "slots held",
            "available", "acquired", "acked", "archived", "dead letters", "age_s")
            else "left")
    for row in rows:
        table.add_row(*[_styled(v) if c in styled else Text("-" if v is None else str(v))
                        for c, v in zip(columns, row, strict=True)])
    return table


def render_frame(frame: Frame, title: str = "marshal watch") -> RenderableType:
    """The frame as rich tables: groups, partition ownership, share-partitions, key slots."""
    now = int(frame["time_ms"])
    parts: list[RenderableType] = []
    clock = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(now / 1000))
    parts.append(Text(f"{title} — {clock} UTC — ignored records {frame['ignored']}, "
                      f"undecodable {frame['skipped']}", style="bold"))
    groups = frame["groups"]
    if not groups:
        parts.append(Text("no groups in the coordination log (yet)"))
    else:
        rows: list[list[object]] = []
        for g in groups:
            members = ", ".join(member_name(Owner(m["instance_id"], m["client_id"]))
                                for m in g["members"]) or None
            expires = None
            if g["expires_at_ms"] is not None:
                expires = ago(g["expires_at_ms"], now)
            rows.append([g["group"], g["topic"], g["state"], g["group_state"], members,
                         ago(g["since_ms"], now), expires])
        parts.append(_table("Groups", ["group", "topic", "state", "group state", "members",
                                       "since", "offsets expire"], rows,
                            styled=("state", "group state")))
    if frame["partitions"]:
        parts.append(_table(
            "Partition ownership",
            ["group", "topic", "partition", "mode", "owner", "status", "age_s", "committed",
             "end", "lag"],
            [[p["group"], p["topic"], p["partition"], p["mode"], p["owner"], p["status"],
              p["heartbeat_age_s"], p["committed_offset"], p["end_offset"], p["lag"]]
             for p in frame["partitions"]], styled=("status",)))
    if frame["shares"]:
        parts.append(_table(
            "Share-partitions",
            ["group", "topic", "partition", "spso", "speo", "available", "acquired", "acked",
             "archived", "dead letters", "end", "lag"],
            [[s["group"], s["topic"], s["partition"], s["spso"], s["speo"], s["available"],
              s["acquired"], s["acknowledged"], s["archived"], s["dead_letter"], s["end_offset"],
              s["lag"]]
             for s in frame["shares"]]))
    if frame["key_shared"]:
        parts.append(_table(
            "Key-shared slots",
            ["group", "topic", "partition", "owner", "status", "slots", "slots held",
             "committed", "end", "lag"],
            [[k["group"], k["topic"], k["partition"], k["owner"], k["status"], k["slots"],
              k["slot_count"], k["committed_offset"], k["end_offset"], k["lag"]]
             for k in frame["key_shared"]], styled=("status",)))
    return Group(*parts)


def frame_topics(frame: Frame) -> list[str]:
    """The data topics a frame shows (whose end offsets it needs)."""
    return sorted({g["topic"] for g in frame["groups"]}
                  | {p["topic"] for k in ("partitions", "shares", "key_shared")
                     for p in frame[k]})


def run_watch(
    rationalizer: Rationalizer,
    catch_up: Callable[[], object],
    end_offsets: Callable[[list[str]], Mapping[tuple[str, int], int]],
    *,
    console: Console,
    emit_json: Callable[[Frame], None] | None = None,
    group: str | None = None,
    topic: str | None = None,
    refresh_s: float = 2.0,
    iterations: int | None = None,
    stop: threading.Event | None = None,
) -> int:
    """Redraw every ``refresh_s`` until ``stop`` is set or ``iterations`` frames were drawn;
    return how many were. ``catch_up`` brings the rationalizer to the log's end; on a
    terminal the frame is redrawn in place, elsewhere each frame is printed after the last
    (and with ``emit_json`` each is one JSON line)."""
    stop = stop or threading.Event()
    drawn = 0
    topics: list[str] = []

    def frame() -> Frame:
        nonlocal topics
        now = int(time.time() * 1000)
        ends = end_offsets(topics) if topics else {}
        current = build_frame(rationalizer, now, ends, group=group, topic=topic)
        shown = frame_topics(current)
        if shown != topics:  # new topics appeared: fetch their ends now, not a frame late
            topics = shown
            current = build_frame(rationalizer, now, end_offsets(topics), group=group,
                                  topic=topic)
        return current

    live: Live | None = None
    if emit_json is None and console.is_terminal:
        live = Live(console=console, auto_refresh=False, transient=False)
        live.start()
    try:
        while True:
            current = frame()
            if emit_json is not None:
                emit_json(current)
            elif live is not None:
                live.update(render_frame(current), refresh=True)
            else:
                console.print(render_frame(current))
                console.print()
            drawn += 1
            if iterations is not None and drawn >= iterations:
                break
            if stop.wait(refresh_s):
                break
            catch_up()
    finally:
        if live is not None:
            live.stop()
    return drawn
