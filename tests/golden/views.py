"""Everything a rationalizer shows, as plain values: two rationalizers agree when these agree.

Written against the rationalizer's public API only (queries, views, counters, snapshots), so
the same function reads the frozen reference and the implementation under test.
"""

from __future__ import annotations

from itertools import groupby
from typing import Any

KEY_SLOTS = 1024


def owner(o: Any) -> tuple[str, str] | None:
    return None if o is None else (o.instance_id, o.client_id)


def outcome(o: Any, encode: Any) -> tuple[Any, ...]:
    """An outcome: the record, the verdict, the message (as its wire bytes and type name),
    the detail and the expiry flag."""
    r = o.record
    message = o.message
    wire = None if message is None else (type(message).__name__, encode(message))
    return ((r.partition, r.position, r.timestamp_ms, r.value), o.verdict.value, wire, o.detail,
            o.expired)


def claim(c: Any, now: int) -> tuple[Any, ...]:
    k = c.key
    return (k.group, k.topic, k.partition, owner(c.owner), c.claimed_at_ms,
            c.last_heartbeat_ms, c.committed_offset, c.last_release_ms, owner(c.released_by),
            c.amo_claimed_offset, c.heartbeat_interval_ms, c.transactional, c.status(now).value,
            c.heartbeat_age_ms(now), c.is_held(now))


def in_flight(r: Any) -> tuple[Any, ...]:
    return (r.offset, r.state.value, r.delivery_count, owner(r.holder), r.lock_expiry_ms,
            r.duty, r.owed_since_ms, r.duties)


def counters(r: Any) -> dict[str, int]:
    return {v.value: n for v, n in r.counters.items() if n}


def pair_view(r: Any, group: str, topic: str, now: int, hi: int) -> dict[str, Any]:
    """What the rationalizer shows of one (group, topic) pair at ``now``."""
    return pair_static(r, group, topic) | pair_at(r, group, topic, now, hi)


def pair_static(r: Any, group: str, topic: str) -> dict[str, Any]:
    """The part of :func:`pair_view` that no query time changes (the queries are pure: a
    caller comparing several times computes it once)."""
    seen = r.member_last_seen(group, topic)
    shares = []
    for key, share in r.share_partitions(group, topic):
        shares.append((key.partition, share.spso, share.speo, share.delivery_limit,
                       share.inflight_limit, share.dead_letter_topic,
                       [in_flight(x) for x in share.in_flight()],
                       [in_flight(x) for x in share.stored_records()],
                       list(share.exhausted),
                       in_flight(share.record(share.spso - 1)),
                       in_flight(share.record(share.speo))))
    keyed = []
    for key, state in r.key_shared_partitions(group, topic):
        owners = state.owners()
        keyed.append((
            key.partition,
            [(run.first, run.last, owner(run.owner), run.committed) for run in state.runs()],
            sorted((owner(o), ts) for o, ts in state.last_seen.items()),
            sorted((owner(o), iv) for o, iv in state.intervals.items()),
            state.lowest_committed(),
            sorted((owner(o), state.slots_of(o)) for o in {x for x in owners if x is not None}),
            _slot_runs(owners), _slot_runs(state.committed_offsets()),
            [owner(state.owner(s)) for s in (0, 511, 1023)],
            [state.committed(s) for s in (0, 511, 1023)],
        ))
    return {
        "last_checkpoint_ms": r.last_checkpoint_ms(group, topic),
        "seen": sorted((owner(m), ts) for m, ts in seen.items()),
        "per_member": sorted((owner(m), r.member_interval(group, topic, m),
                              r.announced_interval(group, topic, m),
                              r.member_capacity(group, topic, m)) for m in seen),
        "sequenced": r.sequenced(group, topic),
        "shares": shares,
        "keys": keyed,
    }


def pair_at(r: Any, group: str, topic: str, now: int, hi: int) -> dict[str, Any]:
    """The part of :func:`pair_view` that depends on the query time ``now``."""
    life = r.group_state(group, topic, now)
    members = r.members(group, topic, now)
    seen = r.member_last_seen(group, topic)
    shares = []
    for key, share in r.share_partitions(group, topic):
        acquired = sorted(
            (owner(m), [in_flight(x) for x in r.acquired_by(m, group, topic, key.partition, now)])
            for m in seen)
        shares.append((key.partition, [in_flight(x) for x in share.in_flight(now)],
                       sorted((s.value, n) for s, n in share.counts(now).items()), acquired))
    return {
        "claims": [claim(c, now) for c in r.claims(group, topic)],
        "members": [owner(m) for m in members],
        "life": None if life is None else (
            life.group, life.topic, life.state.value, [owner(m) for m in life.members],
            life.since_ms, life.expires_at_ms, life.intervals),
        "group_interval": _interval(r.group_interval(group, topic, now)),
        "group_interval_excluding": [
            _interval(r.group_interval(group, topic, now, excluding_client=m.client_id))
            for m in members],
        "shares_at": shares,
        "keys_at": [(key.partition, _slot_runs(state.live_owners(now, hi)))
                    for key, state in r.key_shared_partitions(group, topic)],
    }


def _interval(found: Any) -> Any:
    return None if found is None else (owner(found[0]), found[1])


def _slot_runs(values: list[Any]) -> list[tuple[int, int, Any]]:
    """A per-slot list (owners or offsets) as runs of equal values (compact to compare).
    Runs of one object are found in C (``groupby`` on ``id``); neighbouring runs whose
    values are equal once plain are then merged."""
    out: list[tuple[int, int, Any]] = []
    start = 0
    for _, group in groupby(values, key=id):
        run = list(group)
        end = start + len(run) - 1
        value = owner(run[0]) if hasattr(run[0], "client_id") else run[0]
        if out and out[-1][2] == value:
            out[-1] = (out[-1][0], end, value)
        else:
            out.append((start, end, value))
        start = end + 1
    return out


def global_view(r: Any, now: int, coordination_partitions: int) -> dict[str, Any]:
    """The counters, positions and tables that are not about one pair."""
    return global_static(r, coordination_partitions) | global_at(r, now)


def global_static(r: Any, coordination_partitions: int) -> dict[str, Any]:
    """The part of :func:`global_view` that no query time changes."""
    return {
        "counters": counters(r),
        "positions": [(r.next_position(p), r.last_timestamp_ms(p))
                      for p in range(coordination_partitions)],
        "groups": r.groups(),
        "rejected": dict(r.rejected),
        "rejected_count": r.rejected_count(),
        "ignored": r.ignored_count(),
        "skipped": r.skipped_count(),
        "signed_groups": sorted(r.signed_groups),
        "unsequenced": dict(r.unsequenced_ms),
        "expired_groups": r.expired_groups,
        "share_ignored_offsets": r.share_ignored_offsets,
    }


def global_at(r: Any, now: int) -> dict[str, Any]:
    """The part of :func:`global_view` that depends on the query time ``now``."""
    return {"claims": [claim(c, now) for c in r.claims()]}


def world(r: Any, now: int, hi_of: Any, coordination_partitions: int) -> dict[str, Any]:
    """Everything: the global view and every pair's view at ``now``."""
    return world_static(r, coordination_partitions) | world_at(r, now, hi_of)


def world_static(r: Any, coordination_partitions: int) -> dict[str, Any]:
    """The part of :func:`world` that no query time changes."""
    return global_static(r, coordination_partitions) | {
        "pairs": {f"{g}|{t}": pair_static(r, g, t) for g, t in r.groups()}}


def world_at(r: Any, now: int, hi_of: Any) -> dict[str, Any]:
    """The part of :func:`world` that depends on the query time ``now``."""
    return global_at(r, now) | {
        "pairs_at": {f"{g}|{t}": pair_at(r, g, t, now, hi_of(g)) for g, t in r.groups()}}


def snapshots(r: Any) -> dict[str, str]:
    """The checkpoint text of every pair."""
    return {f"{g}|{t}": r.snapshot(g, t) for g, t in r.groups()}
