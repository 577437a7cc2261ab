"""Exactly-once commits (CommittingTransaction): the rules of PROTOCOL.md 7.2, record by record."""

from __future__ import annotations

import json

from marshal_py.protocol import CommittingTransaction, ResettingOffsets
from marshal_py.world import Verdict
from marshal_py.world.checkpoint import decode_state, encode_state
from tests.support import HI, Scenario


def commit(s: Scenario, client: str, at: int, offset: int, partition: int = 0) -> None:
    s.write(CommittingTransaction(sent_at=0, instance_id=f"i-{client}.txn", client_id=client,
                                  group_id="g", topic="t", partition=partition,
                                  offset=offset), at)


def test_a_committed_transaction_sets_the_offset_whoever_wrote_it() -> None:
    s = Scenario()
    s.claim("a", 0)
    s.heartbeat("a", 10, 5)
    s.claim("b", 3 * HI)  # a went stale; b owns the partition
    commit(s, "a", 3 * HI + 1, 9)  # a's last transaction committed after b's claim
    r = s.replay()
    claim = r.claim("g", "t", 0)
    assert claim.owner is not None and claim.owner.client_id == "b"
    assert claim.committed_offset == 9  # its output is out: its offset counts
    assert claim.transactional
    assert r.counters[Verdict.TRANSACTION_COMMITTED] == 1


def test_heartbeats_and_releases_do_not_move_a_transactional_offset() -> None:
    s = Scenario()
    s.claim("a", 0)
    commit(s, "a", 10, 20)
    s.heartbeat("a", 20, 12)  # prepared before the commit, appended after it
    assert s.replay().claim("g", "t", 0).committed_offset == 20
    s.release("a", 30, 15)
    claim = s.replay().claim("g", "t", 0)
    assert claim.owner is None and claim.committed_offset == 20
    commit(s, "a", 40, 25)
    assert s.replay().claim("g", "t", 0).committed_offset == 25


def test_a_reset_of_the_empty_group_ends_the_transactional_state() -> None:
    s = Scenario()
    s.claim("a", 0)
    commit(s, "a", 10, 20)
    s.release("a", 20, 20)
    s.write(ResettingOffsets(sent_at=0, instance_id="i-admin", client_id="admin",
                             group_id="g", topic="t", partition=0, offset=3), 4 * HI)
    s.claim("b", 4 * HI + 1)
    s.heartbeat("b", 4 * HI + 2, 7)
    claim = s.replay().claim("g", "t", 0)
    assert not claim.transactional and claim.committed_offset == 7


def test_the_transactional_state_survives_a_checkpoint() -> None:
    s = Scenario()
    s.claim("a", 0)
    commit(s, "a", 10, 20)
    r = s.replay()
    restored = decode_state(r.snapshot("g", "t"))
    assert restored.claims[0].transactional and restored.claims[0].committed_offset == 20
    plain = Scenario()
    plain.claim("a", 0)
    plain.heartbeat("a", 10, 4)
    text = plain.replay().snapshot("g", "t")
    assert not decode_state(text).claims[0].transactional
    # A claim without transactions is written as before (nine fields).
    entry = json.loads(encode_state(decode_state(text)))["claims"][0]
    assert len(entry) == 9
