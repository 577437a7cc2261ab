"""The audit's invariants: when a row breaks one, and the detail both engines write for it.

Invariants checked (the ``violations`` table):

* ``overlapping_owners`` — ownership stints of one partition must not overlap. A stint ended
  by a release ends at the release; one ended by a takeover or a same-client reclaim may still
  hand out records until its last sign of life + HI (its lease), so the next stint must not
  begin before that. (A takeover needs the owner stale for more than 2 HI, so only a reclaim
  while the old instance was alive can violate it: two live processes of one client id.)
* ``amo_regressed`` — the AMO-confirmed offset never decreases, except by the owner's release
  with offset ``o``, which lowers it to exactly ``o - 1`` (rule 6). Guaranteed by the
  rationalizer; checked end to end.
* ``amo_reconfirmed`` — let C0 be the AMO-confirmed offset when an ownership stint began (the
  earlier owners' confirmations, lowered only by a release). Every ``ClaimingMessages`` the
  stint's owner gets applied proposes a last offset above C0; a proposal at or below C0
  confirms offsets an earlier owner was allowed to process: at-most-once is broken.
* ``share_accepted_twice`` — no share record is accepted twice. The rationalizer never accepts
  an Acknowledged record again within a share-partition's life; only a
  ``ResettingSharePartition`` that moves the SPSO back can make it happen, and the audit
  reports that too.
"""

from __future__ import annotations

from marshal_py.audit.tables import OPEN, RELEASED, RecordRow, StintRow
from marshal_py.world.rationalizer import Verdict


def overlap_detail(prev_client: str, prev_instance: str, until_ms: int, client: str,
                   instance: str) -> str:
    """Detail of an ``overlapping_owners`` violation."""
    return (f"{client}/{instance} began while {prev_client}/{prev_instance} "
            f"could hand out records until {until_ms}")


def amo_regressed_detail(before: int | None, after: int | None, verdict: str) -> str:
    """Detail of an ``amo_regressed`` violation."""
    return f"AMO-confirmed offset fell from {before} to {after} on {verdict}"


def amo_reconfirmed_detail(client: str, instance: str, proposed: int, floor: int) -> str:
    """Detail of an ``amo_reconfirmed`` violation."""
    return (f"{client}/{instance} confirmed up to {proposed}, at or below {floor} "
            "confirmed before its stint began")


def accepted_twice_detail(offset: int, client: str, instance: str) -> str:
    """Detail of a ``share_accepted_twice`` violation."""
    return f"offset {offset} accepted again by {client}/{instance}"


def lease_end_ms(row: StintRow) -> int | None:
    """Until when a stint's owner could hand out records: its release, or its last sign of
    life + HI when it was taken over or reclaimed; None while open."""
    if row.end_reason == RELEASED:
        return row.end_ms
    if row.end_reason == OPEN:
        return None
    return row.last_heartbeat_ms + row.hi_ms


def amo_regressed(row: RecordRow) -> bool:
    """True when ``row`` lowered the AMO-confirmed offset other than by rule 6."""
    if row.amo_before is None:
        return False
    if row.amo_after is not None and row.amo_after >= row.amo_before:
        return False
    return not (row.verdict == Verdict.RELEASED.value and row.offset is not None
                and row.amo_after == row.offset - 1)


def amo_reconfirmed(row: RecordRow) -> bool:
    """True when an applied ClaimingMessages proposed at or below its stint's C0."""
    return (row.verdict == Verdict.MESSAGES_CLAIMED.value and row.amo_floor is not None
            and row.offset is not None and row.offset <= row.amo_floor)
