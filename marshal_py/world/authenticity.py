"""Whether a record about an authenticated group is authentic (PROTOCOL.md 12), as the
rationalizer checks it on its general path (a part of :class:`~marshal_py.world.engine.Core`).
Pure."""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.protocol.auth import DECLARATION_SEQ, Signature, verify, verify_declaration
from marshal_py.protocol.messages import AcknowledgingRecords, Message
from marshal_py.world.sequences import PairSequences, sequence_refusal
from marshal_py.world.state import Owner

if TYPE_CHECKING:
    from marshal_py.world.pairs import Pair
    from marshal_py.world.rationalizer_config import RationalizerConfig


class Authenticity:
    """Signature, skew and replay checks of signed records (the signed fast path,
    :mod:`~marshal_py.world.signed_path`, takes only what these would accept)."""

    config: RationalizerConfig
    #: Authenticated group -> broker time of the newest authentic record signed without a
    #: sequence number (an older marshal_py, or a replay) refused in a sequenced pair.
    unsequenced_ms: dict[str, int]

    def refusal(self, message: Message, signature: Signature | None,
                timestamp_ms: int) -> str | None:
        """Why a record about an authenticated group is not authentic (None: it is, or the
        group is not authenticated)."""
        keys = self.config.group_keys.get(message.group_id)
        if keys is None:
            return None
        if signature is None:
            return f"group {message.group_id!r} requires signed records; this one is unsigned"
        if signature.seq == DECLARATION_SEQ:
            # A gap declaration (PROTOCOL.md 12.2 rule 2): signed with its sender's holder
            # key, and nothing else may be numbered 0.
            if not isinstance(message, AcknowledgingRecords):
                return (f"sequence number 0 marks a gap declaration, not a {message.TYPE} "
                        f"record: a forged or malformed record")
            if message.kind != "gap":
                return (f"sequence number 0 marks a gap declaration, not an acknowledgement "
                        f"of kind {message.kind!r}: a forged or malformed record")
            if not verify_declaration(signature, keys, message.instance_id,
                                      message.client_id):
                known = ", ".join(k.key_id for k in keys)
                return (f"bad signature of a gap declaration (key id {signature.key_id!r}; "
                        f"group {message.group_id!r} accepts holder keys of {known})")
        elif not verify(signature, keys):
            known = ", ".join(k.key_id for k in keys)
            return (f"bad signature (key id {signature.key_id!r}; group "
                    f"{message.group_id!r} accepts {known})")
        skew = abs(timestamp_ms - message.sent_at * 1000)
        if skew > self.config.auth_max_skew_ms:
            return (f"signed {skew // 1000} s away from its broker time (more than "
                    f"{self.config.auth_max_skew_ms // 1000} s): a replayed record")
        return None

    def _replay_refusal(self, pair: Pair, message: Message, signature: Signature,
                        ts: int) -> str | None:
        """The replay guard (after the signature and skew checks of :meth:`refusal`)."""
        sequences = pair.sequences
        if sequences is None:
            sequences = pair.sequences = PairSequences()
        why = sequence_refusal(sequences, Owner(message.instance_id, message.client_id),
                               signature.seq, ts, self.config.auth_max_skew_ms)
        if why is not None and signature.seq is None:
            group = message.group_id
            self.unsequenced_ms[group] = max(ts, self.unsequenced_ms.get(group, ts))
        return why
