"""The rules of share mode, key-shared mode and offset resets, as the rationalizer applies
them to a pair's state. Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.protocol.messages import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingKeyRanges,
    InitializingSharePartition,
    KeyRangesHeartbeat,
    KeySharedMessage,
    ReleasingKeyRanges,
    RenewingLocks,
    ResettingSharePartition,
    ShareMessage,
)
from marshal_py.protocol.ranges import OffsetRange, parse_ranges
from marshal_py.world.key_shared import KeySharedPartition, KeySharedResult
from marshal_py.world.share import SharePartition, ShareResult
from marshal_py.world.verdicts import (
    KEY_RANGES_CLAIMED,
    KEY_RANGES_HEARTBEAT,
    KEY_RANGES_IGNORED,
    KEY_RANGES_RELEASED,
    LOCKS_RENEWED,
    OFFSETS_RESET,
    RECORDS_ACKNOWLEDGED,
    RECORDS_ACQUIRED,
    RESET_IGNORED,
    SHARE_IGNORED,
    SHARE_INITIALIZED,
    SHARE_RESET,
    UNKNOWN_TYPE,
)

if TYPE_CHECKING:
    from marshal_py.world.lifecycle import GroupLife
    from marshal_py.world.pairs import Pair
    from marshal_py.world.state import Owner


def ranges_text(ranges: tuple[OffsetRange, ...]) -> str:
    """The canonical text of ascending, disjoint ``ranges`` (as the rules produce them)."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


class Modes:
    """Share-partitions, key-shared partitions and resets (a part of the rationalizer)."""

    share_ignored_offsets: int
    #: Whether the record being applied needs its outcome's detail (False when replaying
    #: without outcomes).
    _want_detail: bool

    def _share(self, pair: Pair, partition: int, sender: Owner, message: ShareMessage,
               ts: int) -> tuple[int, str]:
        share = pair.shares.get(partition)
        if isinstance(message, InitializingSharePartition):
            if share is not None:
                return SHARE_IGNORED, "already initialized"
            pair.shares[partition] = SharePartition(
                message.start_offset, message.delivery_limit, message.inflight_limit,
                message.dead_letter_topic)
            return SHARE_INITIALIZED, f"SPSO {message.start_offset}"
        if share is None:
            return SHARE_IGNORED, "share-partition not initialized"
        if isinstance(message, ResettingSharePartition):
            assert pair.life is not None
            live = pair.life.live(ts, pair.hi)
            if live:
                return SHARE_IGNORED, f"group has {len(live)} live member(s)"
            share.reset(message.start_offset)
            return SHARE_RESET, f"SPSO {message.start_offset}"
        share.expire(ts)
        result: ShareResult
        if isinstance(message, AcquiringRecords):
            result = share.acquire(sender, parse_ranges(message.ranges), message.lock_ms, ts)
            code = RECORDS_ACQUIRED
        elif isinstance(message, AcknowledgingRecords):
            result = share.acknowledge(sender, parse_ranges(message.ranges), message.kind, ts)
            code = RECORDS_ACKNOWLEDGED
        elif isinstance(message, RenewingLocks):
            result = share.renew(sender, parse_ranges(message.ranges), message.lock_ms, ts)
            code = LOCKS_RENEWED
        else:
            return UNKNOWN_TYPE, ""
        self.share_ignored_offsets += result.ignored
        if not result.applied:
            return SHARE_IGNORED, f"{result.ignored} offsets did not apply"
        detail = ranges_text(result.applied)
        if result.ignored:
            detail += f" ({result.ignored} offsets did not apply)"
        return code, detail

    def _key_ranges(self, pair: Pair, partition: int, sender: Owner,
                    message: KeySharedMessage, ts: int,
                    announced: int | None) -> tuple[int, str]:
        state = pair.keyed.get(partition)
        if state is None:
            state = pair.keyed[partition] = KeySharedPartition()
        result: KeySharedResult
        if isinstance(message, ClaimingKeyRanges):
            result = state.claim(sender, parse_ranges(message.slots), ts, pair.hi, announced)
            code = KEY_RANGES_CLAIMED
        elif isinstance(message, KeyRangesHeartbeat):
            if not self._want_detail:
                # Its detail names every slot the sender owns: read only for an outcome.
                if state.beat(sender, message.offset, ts, announced):
                    return KEY_RANGES_HEARTBEAT, ""
                return KEY_RANGES_IGNORED, ""
            result = state.heartbeat(sender, message.offset, ts, announced)
            code = KEY_RANGES_HEARTBEAT
        elif isinstance(message, ReleasingKeyRanges):
            result = state.release(sender, parse_ranges(message.slots), message.offset)
            code = KEY_RANGES_RELEASED
        else:
            return UNKNOWN_TYPE, ""
        if not result.applied:
            return KEY_RANGES_IGNORED, "sender owns none of these slots"
        detail = "slots " + ranges_text(result.applied)
        if result.ignored:
            detail += f" ({result.ignored} slots did not apply)"
        return code, detail

    def _reset_offsets(self, pair: Pair, partition: int, offset: int, ts: int,
                       life: GroupLife) -> tuple[int, str]:
        live = life.live(ts, pair.hi)
        if live:
            return RESET_IGNORED, f"group has {len(live)} live member(s)"
        claim = pair.claim(partition)
        pair.index.freed(partition, claim.owner)
        claim.owner = None
        claim.released_by = None
        claim.heartbeat_interval_ms = None
        claim.committed_offset = offset
        claim.transactional = False  # any mode may consume it again
        if claim.amo_claimed_offset is not None:
            claim.amo_claimed_offset = offset - 1
        keys = pair.keyed.get(partition)
        if keys is not None:
            keys.reset(offset)
        # An administrator's reset restarts the empty group's retention clock.
        life.gone(ts)
        return OFFSETS_RESET, f"offset {offset}"
