"""``marshal find-hanging``: transactions that hold the coordination topic open after their
coordinator finished them (a broker restart can leave one), and ``--resolve`` to complete
them the way their coordinator decided (:mod:`marshal_py.log.hanging`).

A hanging transaction stops every member of every group at its first record: the members
say that no coordination records arrive. Errors are one line with exit status 2, like every
``marshal`` command.
"""

from __future__ import annotations

import json

import click

from marshal_py.cli.common import kafka_log_config, kafka_options
from marshal_py.errors import MarshalError
from marshal_py.log.hanging import DEFAULT_MIN_AGE_S, HangingTransaction, HangingTransactions


def _as_dict(hanging: HangingTransaction, resolved: bool) -> dict[str, object]:
    return {"producer_id": hanging.producer_id, "producer_epoch": hanging.producer_epoch,
            "transactional_id": hanging.transactional_id,
            "coordinator_state": hanging.coordinator_state, "decision": hanging.decision,
            "open_on": [{"topic": o.topic, "partition": o.partition,
                         "start_offset": o.start_offset} for o in hanging.open_on],
            "resolved": resolved}


@click.command("find-hanging")
@kafka_options
@click.option("--min-age", type=click.FloatRange(min=0), default=DEFAULT_MIN_AGE_S,
              show_default=True,
              help="Only transactions whose producer last wrote at least this many seconds "
                   "ago (a live transaction's markers follow its end within milliseconds).")
@click.option("--resolve", is_flag=True,
              help="Complete each one whose coordinator decided (commit or abort) on every "
                   "partition holding it open; needs ClusterAction on the cluster.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object per transaction.")
def find_hanging(bootstrap_servers: str, coordination_topic: str, timeout: float,
                 min_age: float, resolve: bool, as_json: bool) -> None:
    """List transactions hanging on the coordination topic (open on a partition, finished
    by their coordinator) and, with --resolve, complete them as their coordinator decided.

    Every topic of the cluster is searched for the partitions each one holds open (an
    exactly-once member's transaction also writes to its output topics). One whose outcome
    is unknown (its transactional id was initialized again) is listed with the Kafka tool's
    command that aborts it, for an operator to judge.
    """
    config = kafka_log_config(bootstrap_servers, coordination_topic, timeout)
    with HangingTransactions(config) as finder:
        watched = finder.partitions_of([coordination_topic])
        if not watched:
            raise MarshalError(f"coordination topic {coordination_topic!r} does not exist at "
                               f"{bootstrap_servers}: check --coordination-topic")
        found = finder.find(watched, min_age_s=min_age)
        for hanging in found:
            resolved = False
            if resolve and hanging.decision is not None:
                finder.resolve(hanging)
                resolved = True
            if as_json:
                click.echo(json.dumps(_as_dict(hanging, resolved), sort_keys=True))
                continue
            click.echo(hanging.describe() + ("; resolved" if resolved else ""))
            if hanging.decision is None:
                click.echo(f"  to abort it (an operator's call): "
                           f"{hanging.abort_command(bootstrap_servers)}")
            elif not resolve:
                click.echo("  run again with --resolve to complete it")
        if not found and not as_json:
            click.echo(f"no hanging transaction on {coordination_topic} (open for at least "
                       f"{min_age:g} s)")
