"""A writer's duty before its first record about a (group, topic) pair (PROTOCOL.md 6).

On a declared coordination topic, a reader takes a pair without a ``History`` record in the
index to have no record at all, and starts it at the end of the partition. So every writer
-- members, and admin commands that write about a group -- makes sure, before it appends its
first record about a pair, that the index holds a History of the pair: when the index (read
after the partition's end was) has none, it writes one naming that end, below which it has
written nothing. Several first writers may each write one (the keys name the writer, so
compaction keeps all): the history begins at the lowest.
"""

from __future__ import annotations

from marshal_py.identity import new_instance_id
from marshal_py.log.base import CoordinationLog
from marshal_py.protocol.index import History, IndexView, encode_entry, history_key, index_view
from marshal_py.protocol.placement import coordination_partition


def read_index_view(log_: CoordinationLog) -> IndexView:
    """The index as of now, as it applies to ``log_``'s topic."""
    return index_view(log_.read_index(), log_.topic, log_.index_topic_id)


def record_history(log_: CoordinationLog, group: str, topic: str, *,
                   index: IndexView | None = None, end: int | None = None) -> bool:
    """Write the History of (``group``, ``topic``) unless ``index`` has one; True when
    written. ``end``: the end of the pair's coordination partition, read *before*
    ``index`` (both are read now when not given)."""
    if index is None or end is None:
        end = log_.end_position(coordination_partition(topic, log_.partition_count()))
        index = read_index_view(log_)
    if index.history_start(group, topic) is not None:
        return False
    entry = History(log_.topic, log_.index_topic_id, group, topic, end)
    log_.append_index(history_key(group, topic, new_instance_id()), encode_entry(entry))
    return True
