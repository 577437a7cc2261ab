"""Checkpoints of any size: split into CheckpointChunk records, and put back together.

A checkpoint is one record while it fits the coordination topic's ``max.message.bytes``; a
larger one (a share group with many partitions full of in-flight records) is written as
``parts`` :class:`~marshal_py.protocol.messages.CheckpointChunk` records that carry its state
text in order, with the SHA-256 of the whole. A reader uses it only once it holds every part
and the text has the digest: a checkpoint torn by a writer that failed half-way is never
used, and the reader takes an older one (PROTOCOL.md, checkpoints).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from marshal_py.protocol.codec import encode, escape_field, unescape_field
from marshal_py.protocol.messages import MAX_CHECKPOINT_PARTS, Checkpoint, CheckpointChunk

#: Room left in a record for the signature of an authenticated group's records
#: (``Signed/3/<key id: at most 64>/<seq: at most 19>/<mac: 43>/``).
SIGNATURE_ROOM = 160
#: Smallest budget of a part's data worth splitting into.
_MIN_DATA_BYTES = 1024


def state_digest(state: str) -> str:
    """The digest a chunked checkpoint carries: SHA-256 of the state text, lowercase hex."""
    return hashlib.sha256(state.encode("utf-8")).hexdigest()


def _cut(escaped: bytes, limit: int) -> int:
    """The largest cut at most ``limit`` into ``escaped`` that splits neither an escape
    (``%25``, ``%2F``) nor a UTF-8 character."""
    cut = min(limit, len(escaped))
    if cut == len(escaped):
        return cut
    if escaped[cut - 1:cut] == b"%":
        cut -= 1
    elif escaped[cut - 2:cut - 1] == b"%":
        cut -= 2
    while cut > 0 and 0x80 <= escaped[cut] < 0xC0:  # never begin a part mid-character
        cut -= 1
    return cut


def split_checkpoint(checkpoint: Checkpoint,
                     max_value_bytes: int) -> list[Checkpoint | CheckpointChunk]:
    """``[checkpoint]`` when it fits ``max_value_bytes`` (with :data:`SIGNATURE_ROOM` to
    spare), else the chunks that carry it, each of which fits. Raises ValueError when it
    would take more than :data:`MAX_CHECKPOINT_PARTS` parts."""
    budget = max_value_bytes - SIGNATURE_ROOM
    if len(encode(checkpoint)) <= budget:
        return [checkpoint]
    escaped = escape_field(checkpoint.state).encode("utf-8")
    digest = state_digest(checkpoint.state)
    c = checkpoint

    def chunk(part: int, parts: int, data: str) -> CheckpointChunk:
        return CheckpointChunk(c.sent_at, c.instance_id, c.client_id, c.group_id, c.topic,
                               c.position, part, parts, digest, data)

    header = len(encode(chunk(MAX_CHECKPOINT_PARTS - 1, MAX_CHECKPOINT_PARTS, "")))
    room = budget - header
    if room < _MIN_DATA_BYTES:
        raise ValueError(f"records of at most {max_value_bytes} bytes cannot carry a "
                         "checkpoint in parts")
    pieces: list[str] = []
    at = 0
    while at < len(escaped):
        end = at + _cut(escaped[at:at + room + 2], room)
        pieces.append(unescape_field(escaped[at:end].decode("utf-8")))
        at = end
    if len(pieces) > MAX_CHECKPOINT_PARTS:
        raise ValueError(f"a checkpoint of {len(escaped):,} bytes would take "
                         f"{len(pieces):,} parts (at most {MAX_CHECKPOINT_PARTS:,})")
    return [chunk(i, len(pieces), piece) for i, piece in enumerate(pieces)]


@dataclass
class _Parts:
    parts: int
    data: dict[int, str] = field(default_factory=dict)
    first_position: int | None = None  # the lowest record position of a part seen
    sent_at: int = 0


#: What identifies the parts of one checkpoint.
ChunkKey = tuple[str, str, str, str, int, int, str]


def chunk_key(chunk: CheckpointChunk) -> ChunkKey:
    """(instance, client, group, topic, position, parts, digest)."""
    return (chunk.instance_id, chunk.client_id, chunk.group_id, chunk.topic, chunk.position,
            chunk.parts, chunk.digest)


class ChunkAssembler:
    """Collects the parts of chunked checkpoints in any order; :meth:`add` returns the
    whole checkpoint (and the position of its first part's record) once every part of it is
    there and the joined state has its digest."""

    def __init__(self) -> None:
        self._pending: dict[ChunkKey, _Parts] = {}

    def add(self, chunk: CheckpointChunk, record_position: int
            ) -> tuple[Checkpoint, int] | None:
        key = chunk_key(chunk)
        entry = self._pending.setdefault(key, _Parts(chunk.parts))
        entry.data.setdefault(chunk.part, chunk.data)
        if chunk.part == 0:
            entry.sent_at = chunk.sent_at
        if entry.first_position is None or record_position < entry.first_position:
            entry.first_position = record_position
        if len(entry.data) < entry.parts:
            return None
        del self._pending[key]
        state = "".join(entry.data[i] for i in range(entry.parts))
        if state_digest(state) != chunk.digest:
            return None
        instance, client, group, topic, position, _, _ = key
        assert entry.first_position is not None
        return (Checkpoint(entry.sent_at, instance, client, group, topic, position, state),
                entry.first_position)

    def has_first_part_of(self, chunk: CheckpointChunk) -> bool:
        """True when part 0 of ``chunk``'s checkpoint has been added and it is incomplete."""
        entry = self._pending.get(chunk_key(chunk))
        return entry is not None and 0 in entry.data
