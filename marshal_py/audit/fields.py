"""What the audit observer needs of a record's message, read cheaply.

The rationalizer's fast path gives verdicts without decoding the common messages; asking an
:class:`~marshal_py.world.verdicts.Outcome` for its message then decodes it with the codec
(validation, range checks, a frozen dataclass), which was the largest single cost of an audit
(about 40 % of the per-record time in the profile of issue 21). The observer needs only the
ids, the partition and one number or word, so for the common messages it reads them straight
from the bytes: the verdict says the record decoded, so its fields are exactly what the codec
would read, as long as nothing is escaped (no ``%`` in the record). Anything else (signed
records, escapes, other types) is decoded with the codec.
"""

from __future__ import annotations

from typing import NamedTuple

from marshal_py.protocol.messages import (
    AcknowledgingRecords,
    AcquiringRecords,
    ClaimingMessages,
    ClaimingPartition,
    Heartbeat,
    MemberHeartbeat,
    Message,
    PartitionMessage,
    ReleasingPartition,
)
from marshal_py.world.verdicts import VERDICTS, WITHOUT_MESSAGE, Outcome

#: Verdicts whose outcome carries no message (the record did not decode, or was not read).
NO_MESSAGE = frozenset(VERDICTS[code] for code in WITHOUT_MESSAGE)


class MessageFields(NamedTuple):
    """A decoded record's message, as far as the audit reads it."""

    type: type[Message]
    group_id: str
    topic: str
    partition: int | None
    client_id: str
    instance_id: str
    #: Heartbeat and ReleasingPartition: the offset; ClaimingMessages: the proposed last
    #: offset; else None.
    number: int | None
    #: AcknowledgingRecords: the kind (accept, release, ...); else None.
    kind: str | None


#: Types read from the bytes, and the index of their number or kind field (None: none).
_LIGHT: dict[bytes, tuple[type[Message], int | None]] = {
    Heartbeat.TYPE.encode(): (Heartbeat, 8),
    ReleasingPartition.TYPE.encode(): (ReleasingPartition, 8),
    ClaimingMessages.TYPE.encode(): (ClaimingMessages, 8),
    ClaimingPartition.TYPE.encode(): (ClaimingPartition, None),
    MemberHeartbeat.TYPE.encode(): (MemberHeartbeat, None),
    AcquiringRecords.TYPE.encode(): (AcquiringRecords, None),
    AcknowledgingRecords.TYPE.encode(): (AcknowledgingRecords, 9),
}


def message_fields(outcome: Outcome) -> MessageFields | None:
    """The fields of the outcome's message, None when it has none."""
    if outcome.verdict in NO_MESSAGE:
        return None
    value = outcome.record.value
    if value is not None and b"%" not in value:
        parts = value.split(b"/")
        light = _LIGHT.get(parts[0])
        if light is not None:
            cls, extra = light
            try:
                partition = int(parts[7]) if cls is not MemberHeartbeat else None
                number = kind = None
                if extra is not None:
                    if cls is AcknowledgingRecords:
                        kind = parts[extra].decode()
                    else:
                        number = int(parts[extra])
                return MessageFields(cls, parts[5].decode(), parts[6].decode(), partition,
                                     parts[4].decode(), parts[3].decode(), number, kind)
            except (IndexError, ValueError):  # pragma: no cover - it decoded, so never
                pass
    message = outcome.message
    if message is None:
        return None
    number = None
    if isinstance(message, Heartbeat | ReleasingPartition):
        number = message.offset
    elif isinstance(message, ClaimingMessages):
        number = message.proposed_last_offset
    return MessageFields(
        type(message), message.group_id, message.topic,
        message.partition if isinstance(message, PartitionMessage) else None,
        message.client_id, message.instance_id, number,
        message.kind if isinstance(message, AcknowledgingRecords) else None)
