"""Checkpoints in parts (PROTOCOL.md 11.1): the vector, splitting below a record size (never
inside an escape or a character), and putting back together only what is whole."""

from __future__ import annotations

import random

import pytest

from marshal_py.log.checkpoint_chunks import (
    SIGNATURE_ROOM,
    ChunkAssembler,
    split_checkpoint,
    state_digest,
)
from marshal_py.protocol import DecodeError, decode, encode
from marshal_py.protocol.messages import MAX_CHECKPOINT_PARTS, Checkpoint, CheckpointChunk

DIGEST = "8b2dfd08f2a7bfb2c7b1d5b8e2e3d8f3a7d0cdbc1f0f8d36a4d6f4b0b5b1c9d2"


def test_the_protocol_vector() -> None:
    chunk = CheckpointChunk(0, "ab12cd34", "w1", "orders.g", "orders", 4711, 0, 2, DIGEST,
                            '{"auth":[0,[]],"claims":[[0,0,17')
    assert encode(chunk) == (
        b"CheckpointChunk/2/0/ab12cd34/w1/orders.g/orders/4711/0/2/" + DIGEST.encode()
        + b'/{"auth":[0,[]],"claims":[[0,0,17')
    assert decode(encode(chunk)) == chunk
    # printf '{"v":1}' | sha256sum
    assert state_digest('{"v":1}') == \
        "afbf9d0f3560b0fd7795e81c42a0a79ee6b6fc67e064f77826aee642cad28d91"


@pytest.mark.parametrize("value", [
    b"CheckpointChunk/2/0/i/c/g/t/1/2/2/" + DIGEST.encode() + b"/x",  # part 2 of 2
    b"CheckpointChunk/2/0/i/c/g/t/1/0/1/" + DIGEST.encode() + b"/x",  # one part
    b"CheckpointChunk/2/0/i/c/g/t/1/0/2/" + DIGEST.upper().encode() + b"/x",
    b"CheckpointChunk/2/0/i/c/g/t/-1/0/2/" + DIGEST.encode() + b"/x",
    b"CheckpointChunk/2/0/i/c/g/t/1/0/2/abc/x",
    b"CheckpointChunk/2/0/i/c/g/t/1/0/20000/" + DIGEST.encode() + b"/x",
])
def test_malformed_parts_are_refused(value: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(value)


def state_text(rng: random.Random, size: int) -> str:
    """JSON-ish text rich in what splitting must not cut: escapes and wide characters."""
    alphabet = ['"', "[", "]", ",", "0", "7", "/", "%", "é", "字", "🙂", "owner/a%2F"]
    return "".join(rng.choice(alphabet) for _ in range(size))


@pytest.mark.parametrize("seed", range(20))
def test_split_parts_fit_and_assemble_to_the_checkpoint(seed: int) -> None:
    rng = random.Random(seed)
    limit = rng.randrange(1_300, 3_000)
    checkpoint = Checkpoint(1700000000, "ab12cd34", "w/1", "grüppe/x", "orders", 42,
                            state_text(rng, rng.randrange(2_000, 9_000)))
    parts = split_checkpoint(checkpoint, limit)
    assert len(parts) > 1
    assert all(isinstance(p, CheckpointChunk) for p in parts)
    assert all(len(encode(p)) <= limit - SIGNATURE_ROOM for p in parts)
    assembler = ChunkAssembler()
    order = list(enumerate(parts))
    rng.shuffle(order)
    results = [assembler.add(p, 100 + i) for i, p in order]  # type: ignore[arg-type]
    assert results[:-1] == [None] * (len(parts) - 1)
    assert results[-1] == (checkpoint, 100)


def test_a_checkpoint_that_fits_is_one_record() -> None:
    checkpoint = Checkpoint(0, "ab12cd34", "w1", "g", "t", 0, '{"v":2}')
    assert split_checkpoint(checkpoint, 1_000) == [checkpoint]


def test_missing_or_mixed_parts_never_assemble() -> None:
    checkpoint = Checkpoint(0, "ab12cd34", "w1", "g", "t", 9, "x" * 5_000)
    parts = split_checkpoint(checkpoint, 1_500)
    assembler = ChunkAssembler()
    for i, part in enumerate(parts[:-1]):
        assert assembler.add(part, i) is None  # type: ignore[arg-type]
    assert assembler.has_first_part_of(parts[0])  # type: ignore[arg-type]
    other = split_checkpoint(Checkpoint(0, "ab12cd34", "w1", "g", "t", 10, "y" * 5_000),
                             1_500)
    assert assembler.add(other[-1], 99) is None  # type: ignore[arg-type]  # another one's
    last = parts[-1]
    assert isinstance(last, CheckpointChunk)
    forged = CheckpointChunk(last.sent_at, last.instance_id, last.client_id, last.group_id,
                             last.topic, last.position, last.part, last.parts, last.digest,
                             last.data[:-1] + "z")
    assert assembler.add(forged, 50) is None  # the digest does not match


def test_too_many_parts_is_an_error() -> None:
    checkpoint = Checkpoint(0, "ab12cd34", "w1", "g", "t", 0,
                            "x" * (MAX_CHECKPOINT_PARTS * 2_000))
    with pytest.raises(ValueError, match="parts"):
        split_checkpoint(checkpoint, 1_500)
    with pytest.raises(ValueError):
        split_checkpoint(Checkpoint(0, "a", "w", "g", "t", 0, "x" * 5_000), 600)
