"""What the rationalizer did with a record: :class:`Verdict` and :class:`Outcome`. Pure.

Inside the rationalizer a verdict is a small int (its position in :class:`Verdict`), so that
counting one is a list increment: an enum member's hash is computed in Python.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any

from marshal_py.protocol.codec import DecodeErrorKind, decode_signed

if TYPE_CHECKING:
    from marshal_py.protocol.messages import Message
    from marshal_py.protocol.records import CoordinationRecord


class Verdict(enum.Enum):
    """What the rationalizer did with one record."""

    # Applied.
    CLAIM_WON = "claim_won"
    CLAIM_RENEWED = "claim_renewed"
    CLAIM_RECLAIMED = "claim_reclaimed"
    HEARTBEAT = "heartbeat"
    RELEASED = "released"
    MESSAGES_CLAIMED = "messages_claimed"
    MEMBER_HEARTBEAT = "member_heartbeat"
    MEMBER_LEFT = "member_left"
    SHARE_INITIALIZED = "share_initialized"
    RECORDS_ACQUIRED = "records_acquired"
    RECORDS_ACKNOWLEDGED = "records_acknowledged"
    LOCKS_RENEWED = "locks_renewed"
    SHARE_RESET = "share_reset"
    KEY_RANGES_CLAIMED = "key_ranges_claimed"
    KEY_RANGES_HEARTBEAT = "key_ranges_heartbeat"
    KEY_RANGES_RELEASED = "key_ranges_released"
    CHECKPOINT = "checkpoint"
    OFFSETS_RESET = "offsets_reset"
    TRANSACTION_COMMITTED = "transaction_committed"
    # Valid messages the rules ignore.
    CLAIM_LOST = "claim_lost"
    NOT_OWNER = "not_owner"
    SHARE_IGNORED = "share_ignored"
    KEY_RANGES_IGNORED = "key_ranges_ignored"
    BEFORE_CHECKPOINT = "before_checkpoint"
    RESET_IGNORED = "reset_ignored"
    MISPLACED = "misplaced"
    #: A record about an authenticated group that is unsigned, badly signed, or replayed.
    REJECTED = "rejected"
    # Records that were skipped.
    DUPLICATE = "duplicate"
    TOMBSTONE = "tombstone"
    MALFORMED = "malformed"
    UNKNOWN_TYPE = "unknown_type"
    UNKNOWN_VERSION = "unknown_version"

    @property
    def applied(self) -> bool:
        """True when the record changed (or confirmed) the world state."""
        return self in _APPLIED

    @property
    def skipped(self) -> bool:
        """True when the record could not be read as a message at all."""
        return self in _SKIPPED


_APPLIED = frozenset(
    {
        Verdict.CLAIM_WON,
        Verdict.CLAIM_RENEWED,
        Verdict.CLAIM_RECLAIMED,
        Verdict.HEARTBEAT,
        Verdict.RELEASED,
        Verdict.MESSAGES_CLAIMED,
        Verdict.MEMBER_HEARTBEAT,
        Verdict.MEMBER_LEFT,
        Verdict.SHARE_INITIALIZED,
        Verdict.RECORDS_ACQUIRED,
        Verdict.RECORDS_ACKNOWLEDGED,
        Verdict.LOCKS_RENEWED,
        Verdict.SHARE_RESET,
        Verdict.KEY_RANGES_CLAIMED,
        Verdict.KEY_RANGES_HEARTBEAT,
        Verdict.KEY_RANGES_RELEASED,
        Verdict.CHECKPOINT,
        Verdict.OFFSETS_RESET,
        Verdict.TRANSACTION_COMMITTED,
    }
)
_SKIPPED = frozenset(
    {Verdict.TOMBSTONE, Verdict.MALFORMED, Verdict.UNKNOWN_TYPE, Verdict.UNKNOWN_VERSION}
)

#: Every verdict by its code, and the codes.
VERDICTS: tuple[Verdict, ...] = tuple(Verdict)
CODE = {v: i for i, v in enumerate(VERDICTS)}
CLAIM_WON = CODE[Verdict.CLAIM_WON]
CLAIM_RENEWED = CODE[Verdict.CLAIM_RENEWED]
CLAIM_RECLAIMED = CODE[Verdict.CLAIM_RECLAIMED]
HEARTBEAT = CODE[Verdict.HEARTBEAT]
RELEASED = CODE[Verdict.RELEASED]
MESSAGES_CLAIMED = CODE[Verdict.MESSAGES_CLAIMED]
MEMBER_HEARTBEAT = CODE[Verdict.MEMBER_HEARTBEAT]
MEMBER_LEFT = CODE[Verdict.MEMBER_LEFT]
SHARE_INITIALIZED = CODE[Verdict.SHARE_INITIALIZED]
RECORDS_ACQUIRED = CODE[Verdict.RECORDS_ACQUIRED]
RECORDS_ACKNOWLEDGED = CODE[Verdict.RECORDS_ACKNOWLEDGED]
LOCKS_RENEWED = CODE[Verdict.LOCKS_RENEWED]
SHARE_RESET = CODE[Verdict.SHARE_RESET]
KEY_RANGES_CLAIMED = CODE[Verdict.KEY_RANGES_CLAIMED]
KEY_RANGES_HEARTBEAT = CODE[Verdict.KEY_RANGES_HEARTBEAT]
KEY_RANGES_RELEASED = CODE[Verdict.KEY_RANGES_RELEASED]
CHECKPOINT = CODE[Verdict.CHECKPOINT]
OFFSETS_RESET = CODE[Verdict.OFFSETS_RESET]
TRANSACTION_COMMITTED = CODE[Verdict.TRANSACTION_COMMITTED]
CLAIM_LOST = CODE[Verdict.CLAIM_LOST]
NOT_OWNER = CODE[Verdict.NOT_OWNER]
SHARE_IGNORED = CODE[Verdict.SHARE_IGNORED]
KEY_RANGES_IGNORED = CODE[Verdict.KEY_RANGES_IGNORED]
BEFORE_CHECKPOINT = CODE[Verdict.BEFORE_CHECKPOINT]
RESET_IGNORED = CODE[Verdict.RESET_IGNORED]
MISPLACED = CODE[Verdict.MISPLACED]
REJECTED = CODE[Verdict.REJECTED]
DUPLICATE = CODE[Verdict.DUPLICATE]
TOMBSTONE = CODE[Verdict.TOMBSTONE]
MALFORMED = CODE[Verdict.MALFORMED]
UNKNOWN_TYPE = CODE[Verdict.UNKNOWN_TYPE]
UNKNOWN_VERSION = CODE[Verdict.UNKNOWN_VERSION]
#: Verdicts that are a sign of life of the sender (as a member of the pair).
PROOF_OF_LIFE = frozenset({CLAIM_WON, CLAIM_RENEWED, CLAIM_RECLAIMED, HEARTBEAT,
                           RECORDS_ACQUIRED, RECORDS_ACKNOWLEDGED, LOCKS_RENEWED,
                           KEY_RANGES_CLAIMED, KEY_RANGES_HEARTBEAT})
#: Verdicts of records whose message was decoded (an outcome shows it).
WITHOUT_MESSAGE = frozenset({DUPLICATE, TOMBSTONE, MALFORMED, UNKNOWN_TYPE, UNKNOWN_VERSION})
#: The verdict code of each way a record fails to decode.
DECODE_CODES = {DecodeErrorKind.MALFORMED: MALFORMED, DecodeErrorKind.UNKNOWN_TYPE: UNKNOWN_TYPE,
                DecodeErrorKind.UNKNOWN_VERSION: UNKNOWN_VERSION}

_UNREAD: Any = object()


class Outcome:
    """The verdict on one record, with the message when it decoded.

    ``expired``: the record's (group, topic) had been Empty for longer than the offset
    retention, so all its state expired just before the record applied (KIP-211).

    Immutable. The message is decoded from the record when first asked for: replaying
    records does not build one per record.
    """

    __slots__ = ("_detail", "_expired", "_message", "_record", "_verdict")
    __match_args__ = ("record", "verdict", "message", "detail", "expired")

    def __init__(self, record: CoordinationRecord, verdict: Verdict,
                 message: Message | None = None, detail: str = "",
                 expired: bool = False) -> None:
        self._record = record
        self._verdict = verdict
        self._message = message
        self._detail = detail
        self._expired = expired

    @classmethod
    def lazy(cls, record: CoordinationRecord, code: int, detail: str,
             expired: bool) -> Outcome:
        """The outcome of a record the rationalizer gave verdict ``code``; its message is
        read from the record when asked for."""
        outcome = cls(record, VERDICTS[code], None, detail, expired)
        if code not in WITHOUT_MESSAGE:
            outcome._message = _UNREAD
        return outcome

    @property
    def record(self) -> CoordinationRecord:
        """The record."""
        return self._record

    @property
    def verdict(self) -> Verdict:
        """What the rationalizer did with it."""
        return self._verdict

    @property
    def message(self) -> Message | None:
        """The message it carried (None when it could not be read as one)."""
        if self._message is _UNREAD:
            value = self._record.value
            assert value is not None
            self._message = decode_signed(value)[0]
        return self._message

    @property
    def detail(self) -> str:
        """Why, in words (empty for the common verdicts)."""
        return self._detail

    @property
    def expired(self) -> bool:
        """The record's pair expired just before it applied."""
        return self._expired

    def _fields(self) -> tuple[Any, ...]:
        return (self.record, self.verdict, self.message, self.detail, self.expired)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Outcome):
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def __repr__(self) -> str:
        return (f"Outcome(record={self.record!r}, verdict={self.verdict!r}, "
                f"message={self.message!r}, detail={self.detail!r}, expired={self.expired!r})")
