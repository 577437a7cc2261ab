"""The rationalizer's tables: one :class:`Pair` per (group, topic), and :class:`Route` caches.

Every record about a topic lives on one coordination partition, and the rules of a record
touch only its (group, topic) pair, so the state is kept per pair: its membership
(:class:`~marshal_py.world.lifecycle.GroupLife`), its partitions' claims, share-partitions and
key-shared partitions, and its replay guard. Pair objects live as long as the rationalizer
(expiry empties one in place), so caches may point at them.

A :class:`Route` is what a record's sender and subject resolve to: the sender (one shared
:class:`~marshal_py.world.state.Owner`), the pair, the partition and the coordination
partition the topic belongs on. The rationalizer caches routes by the bytes that name them in
a record (``instance/client/group/topic/partition``), so a record from a known sender about a
known partition costs one dict lookup to resolve, its ids already validated.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from marshal_py.world.checkpoint import ClaimState
from marshal_py.world.claim_index import ClaimIndex
from marshal_py.world.lifecycle import GroupLife
from marshal_py.world.macs import mac_keys
from marshal_py.world.sequences import PairSequences

if TYPE_CHECKING:
    from marshal_py.protocol.auth import GroupKey
    from marshal_py.world.key_shared import KeySharedPartition
    from marshal_py.world.share import SharePartition
    from marshal_py.world.state import Owner


class Pair:
    """Everything known about one (group, topic) pair.

    ``life`` is None until a record about the pair got past the placement, checkpoint and
    authentication checks (the pair is not known before: :meth:`Rationalizer.groups`).
    ``keys``: the group's keys when it is authenticated (its records must be signed).
    ``before``: records of the pair's coordination partition below this position are
    already in a checkpoint it was restored from (-1: none).
    """

    __slots__ = (
        "before",
        "claims",
        "group",
        "hi",
        "home",
        "index",
        "keyed",
        "keys",
        "life",
        "macs",
        "open_from",
        "restored_at",
        "retention_ms",
        "sequences",
        "shares",
        "topic",
    )

    def __init__(self, group: str, topic: str, hi: int, retention_ms: int,
                 keys: tuple[GroupKey, ...] | None, home: int) -> None:
        self.group, self.topic = group, topic
        self.hi = hi
        self.retention_ms = retention_ms
        self.keys = keys
        #: The keys as the signed fast path checks MACs with them (None: not authenticated).
        self.macs = None if keys is None else mac_keys(
            tuple((key.key_id, key.secret) for key in keys))
        self.home = home
        self.life: GroupLife | None = None
        self.claims: dict[int, ClaimState] = {}
        #: The claimable partitions and who owns what, kept with ``claims`` by the rules.
        self.index = ClaimIndex(hi)
        self.shares: dict[int, SharePartition] = {}
        self.keyed: dict[int, KeySharedPartition] = {}
        self.sequences: PairSequences | None = None
        self.before = -1
        #: (coordination partition, position) of the checkpoint it was restored from.
        self.restored_at: tuple[int, int] | None = None
        #: Unsigned records of the pair from this position on need no authentication or
        #: checkpoint check (never, for an authenticated group).
        self.open_from = -1 if keys is None else 2**63

    def restored(self, partition: int, position: int) -> None:
        """The pair was restored from a checkpoint taken at ``position`` of ``partition``."""
        self.restored_at = (partition, position)
        self.before = position if partition == self.home else -1
        if self.keys is None:
            self.open_from = self.before

    def new_life(self) -> GroupLife:
        """Start the pair's membership afresh (first record, or after it expired)."""
        self.life = GroupLife(self.hi, self.retention_ms)
        return self.life

    def clear(self) -> None:
        """Forget the pair's offsets and modes (it expired: KIP-211)."""
        self.claims.clear()
        self.index.clear()
        self.shares.clear()
        self.keyed.clear()
        self.life = None

    def claim(self, partition: int) -> ClaimState:
        """The claim state of ``partition`` (created empty when the log first mentions it)."""
        claim = self.claims.get(partition)
        if claim is None:
            claim = self.claims[partition] = ClaimState()
        return claim


class Route:
    """A sender and the partition (or, for membership records, the topic) it writes about."""

    __slots__ = ("claim", "claims", "home", "owner", "pair", "partition")

    def __init__(self, owner: Owner, pair: Pair, partition: int) -> None:
        self.owner = owner
        self.pair = pair
        self.partition = partition
        self.home = pair.home
        #: The pair's claims (the same dict for the pair's whole life).
        self.claims = pair.claims
        #: ``claims[partition]`` once looked up (None: not yet). The rationalizer drops its
        #: routes whenever a pair's claims are emptied or replaced (expiry, restore).
        self.claim: ClaimState | None = None
