"""``marshal lag``: how far each partition of a group is behind the end of its topic. Pure.

The committed offset depends on how the group consumes the partition:

* exclusive (at-least-once): the committed offset of the claim;
* exclusive at-most-once (the log holds ClaimingMessages confirmations): max(committed,
  confirmed + 1), where the next owner starts;
* share: the SPSO (every record below it is acknowledged or archived);
* key-shared: the lowest committed offset over the key-hash slots (unknown while a slot has
  never committed).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from marshal_py.errors import MarshalError
from marshal_py.world.rationalizer import Rationalizer
from marshal_py.world.state import ClaimStatus, Owner, PartitionClaim

#: Columns of ``marshal lag`` (and the keys of its JSON partition objects).
LAG_COLUMNS = ("topic", "partition", "mode", "end_offset", "committed_offset", "lag",
               "owners", "status")


@dataclass(frozen=True)
class LagRow:
    """One partition of a group's topic."""

    group: str
    topic: str
    partition: int
    mode: str
    end_offset: int | None
    committed_offset: int | None
    lag: int | None
    owners: tuple[str, ...]
    status: str | None

    def cells(self) -> list[object]:
        """The row's text cells, in :data:`LAG_COLUMNS` order."""
        return [self.topic, self.partition, self.mode, self.end_offset, self.committed_offset,
                self.lag, ", ".join(self.owners) or None, self.status]

    def as_dict(self) -> dict[str, object]:
        """The row as JSON (owners as a list)."""
        return {"topic": self.topic, "partition": self.partition, "mode": self.mode,
                "end_offset": self.end_offset, "committed_offset": self.committed_offset,
                "lag": self.lag, "owners": list(self.owners), "status": self.status}


@dataclass
class LagReport:
    """Every partition row, and the lag summed per topic and over all."""

    group: str
    rows: list[LagRow] = field(default_factory=list)

    def topic_totals(self) -> dict[str, dict[str, int]]:
        """Per topic: summed lag, partitions, and partitions whose lag is unknown."""
        totals: dict[str, dict[str, int]] = {}
        for row in self.rows:
            entry = totals.setdefault(row.topic, {"lag": 0, "partitions": 0, "unknown": 0})
            entry["partitions"] += 1
            if row.lag is None:
                entry["unknown"] += 1
            else:
                entry["lag"] += row.lag
        return totals

    @property
    def total_lag(self) -> int:
        return sum(r.lag for r in self.rows if r.lag is not None)

    @property
    def unknown(self) -> int:
        return sum(1 for r in self.rows if r.lag is None)

    def as_json(self) -> dict[str, object]:
        """``marshal lag --json``."""
        return {
            "group": self.group,
            "partitions": [r.as_dict() for r in self.rows],
            "topics": [{"topic": t, **v} for t, v in self.topic_totals().items()],
            "total_lag": self.total_lag,
            "unknown_partitions": self.unknown,
        }


def lag_of(end: int | None, committed: int | None) -> int | None:
    """Records between the committed offset and the end (never negative)."""
    if end is None or committed is None:
        return None
    return max(0, end - committed)


def exclusive_committed(claim: PartitionClaim) -> int | None:
    """Where the next owner of an exclusive partition starts (None: nothing committed)."""
    committed = claim.committed_offset
    if claim.amo_claimed_offset is not None:
        after = claim.amo_claimed_offset + 1
        committed = after if committed is None else max(committed, after)
    return committed


def group_topics(rationalizer: Rationalizer, group: str) -> list[str]:
    """The topics the log shows ``group`` consuming, sorted."""
    topics = {t for g, t in rationalizer.groups() if g == group}
    topics.update(c.key.topic for c in rationalizer.claims(group))
    topics.update(k.topic for k, _ in rationalizer.share_partitions(group))
    topics.update(k.topic for k, _ in rationalizer.key_shared_partitions(group))
    return sorted(topics)


def require_group(rationalizer: Rationalizer, group: str, where: str,
                  topic: str | None = None) -> list[str]:
    """The group's topics (just ``topic`` when given); a one-line error when the log does not
    know the group (there)."""
    topics = group_topics(rationalizer, group)
    if topic is not None:
        topics = [t for t in topics if t == topic]
    if not topics:
        on = f" on topic {topic!r}" if topic is not None else ""
        raise MarshalError(f"unknown group {group!r}{on}: no record of it in {where} within "
                           "the replay window (marshal groups lists the groups)")
    return topics


def owner_text(owner: Owner) -> str:
    return owner.client_id


def lag_report(rationalizer: Rationalizer, group: str, topics: Iterable[str],
               partition_counts: Mapping[str, int | None],
               ends: Mapping[tuple[str, int], int], now_ms: int) -> LagReport:
    """One row per partition of each topic: those Kafka has (``partition_counts``) and any
    other the log mentions; ``ends`` are the end offsets Kafka reported."""
    report = LagReport(group)
    hi = rationalizer.config.heartbeat_interval_for(group)
    for topic in topics:
        claims = {c.key.partition: c for c in rationalizer.claims(group, topic)}
        shares = {k.partition: s for k, s in rationalizer.share_partitions(group, topic)}
        keyed = {k.partition: s for k, s in rationalizer.key_shared_partitions(group, topic)}
        count = partition_counts.get(topic) or 0
        partitions = sorted(set(range(count)) | set(claims) | set(shares) | set(keyed))
        members = rationalizer.members(group, topic, now_ms)
        for p in partitions:
            end = ends.get((topic, p))
            mode: str
            committed: int | None
            owners: tuple[str, ...] = ()
            status: str | None = None
            if p in shares:
                share = shares[p]
                mode, committed = "share", share.spso
                owners = tuple(owner_text(m) for m in members)
                status = f"{share.speo - share.spso} in flight"
            elif p in keyed:
                keys = keyed[p]
                mode, committed = "key-shared", keys.lowest_committed()
                slots: dict[Owner, int] = {}
                free = 0
                for owner in keys.live_owners(now_ms, hi):
                    if owner is None:
                        free += 1
                    else:
                        slots[owner] = slots.get(owner, 0) + 1
                owners = tuple(f"{owner_text(o)} ({n} slots)" for o, n in sorted(slots.items()))
                status = f"{free} slots free" if free else "all slots owned"
            elif p in claims:
                claim = claims[p]
                mode = "amo" if claim.amo_claimed_offset is not None else "exclusive"
                committed = exclusive_committed(claim)
                state = claim.status(now_ms)
                if claim.owner is not None and state is not ClaimStatus.UNCLAIMED:
                    owners = (owner_text(claim.owner),)
                status = state.value
            else:
                mode, committed, status = "-", None, "never claimed"
            report.rows.append(LagRow(group, topic, p, mode, end, committed,
                                      lag_of(end, committed), owners, status))
    return report


def report_lines(report: LagReport) -> list[str]:
    """The totals under the table: one line per topic and one overall."""
    lines = []
    for topic, entry in report.topic_totals().items():
        unknown = f", {entry['unknown']} unknown" if entry["unknown"] else ""
        lines.append(f"{topic}: lag {entry['lag']:,} over {entry['partitions']} "
                     f"partition(s){unknown}")
    lines.append(f"total lag of {report.group}: {report.total_lag:,}")
    return lines
