"""The replay guard of authenticated groups: each writer's last accepted sequence number. Pure.

A signed record (version 3) carries its writer's sequence number, which grows with every
record the writing process signs, and its writer appends its records to a coordination
partition in that order. So a copy of a signed record appended again later carries a number
its writer has already used: the rationalizer accepts a signed record of an authenticated
group only when its number is above the last one it accepted from the same sender about the
same (group, topic) pair (PROTOCOL.md, authenticated groups).

An entry can be forgotten once every record it could refuse would be refused anyway by the
skew guard (a record's own time must be within the skew bound of its broker time). A copy of
a record sent at ``s`` passes the skew guard only until ``s + skew``; that record's original
was appended no later than the entry's record (its writer appends in sequence order) and
passed the skew guard there, so ``s <= entry time + skew``. Hence an entry older than two
skew bounds at a record's broker time can refuse nothing more, and is dropped, which keeps
the table to the senders of the last few minutes. The table is part of checkpoints.

Cost: the table remembers a lower bound of its entries' times, so the check for entries to
drop is one comparison until the oldest one is due (then one pass over the table).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from marshal_py.world.state import Owner

_UNKNOWN = -(2**63)


@dataclass(slots=True)
class PairSequences:
    """The replay guard of one authenticated (group, topic) pair.

    ``last`` maps each sender to the sequence number and broker time of its last accepted
    signed record. ``sequenced``: a version 3 record was accepted; from then on version 2
    records (no sequence number, replayable) are refused. Before that the pair's history is
    that of an older marshal_py, whose version 2 records are read as they always were, so a
    group's offsets survive the upgrade.
    """

    sequenced: bool = False
    last: dict[Owner, tuple[int, int]] = field(default_factory=dict)
    #: No entry is older than this (unknown at first: entries may be set directly). The
    #: signed fast path reads it to skip :meth:`forget_older_than` in one comparison.
    oldest: int = field(default=_UNKNOWN, init=False, repr=False, compare=False)

    def forget_older_than(self, horizon_ms: int) -> None:
        """Drop the entries whose broker time is before ``horizon_ms``."""
        if horizon_ms <= self.oldest:
            return
        for sender in [s for s, (_, ts) in self.last.items() if ts < horizon_ms]:
            del self.last[sender]
        self.oldest = min((ts for _, ts in self.last.values()), default=2**63)

    def replayed(self, sender: Owner, seq: int) -> int | None:
        """The last accepted number of ``sender`` when ``seq`` is not above it, else None."""
        entry = self.last.get(sender)
        return entry[0] if entry is not None and seq <= entry[0] else None

    def accept(self, sender: Owner, seq: int, ts: int) -> None:
        """``sender``'s record numbered ``seq`` was accepted at broker time ``ts``."""
        self.last[sender] = (seq, ts)
        self.sequenced = True
        if ts < self.oldest:
            self.oldest = ts

    def is_empty(self) -> bool:
        """Nothing to remember (a pair that never saw a version 3 record)."""
        return not self.sequenced and not self.last


def sequence_refusal(sequences: PairSequences, sender: Owner, seq: int | None, ts: int,
                     skew_ms: int) -> str | None:
    """Check an authentic signed record of the pair against the replay guard, and remember
    it when it passes. Returns why it is refused (None: accepted)."""
    sequences.forget_older_than(ts - 2 * skew_ms)
    if seq is None:
        if sequences.sequenced:
            return ("signed without a sequence number (Signed/2, written by an older "
                    "marshal_py) in a group whose members sign with sequence numbers: a "
                    "replayed record, or a member of an older version; every member of the "
                    "group must run the same version (PROTOCOL.md, authenticated groups)")
        return None
    last = sequences.replayed(sender, seq)
    if last is not None:
        return (f"sequence number {seq} is not above {last}, the last accepted from "
                f"{sender.client_id} (instance {sender.instance_id}): a replayed record")
    sequences.accept(sender, seq, ts)
    return None
