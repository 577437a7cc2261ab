"""``marshal audit``: audit the whole coordination log (named in
:data:`marshal_py.cli.app.COMMANDS`)."""

from __future__ import annotations

import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from marshal_py.audit.local import AuditResult, prepare_output, run_local_audit
from marshal_py.audit.observer import COORDINATION, SUMMARY, aligned
from marshal_py.cli.common import (
    auth_keys_option,
    current_group_keys,
    current_index_topic,
    current_kafka_config,
    kafka_options,
)
from marshal_py.errors import ConfigurationError, MarshalError

SPARK_HINT = "pip install marshal_py[spark]"


def _printer(enabled: bool) -> Any:
    last = [0.0]

    def emit(message: str) -> None:
        now = time.monotonic()
        if enabled and now - last[0] >= 1.0:
            last[0] = now
            click.echo(message, err=True)
    return emit


def _require(module: str, what: str) -> None:
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(f"{what} needs {module}, which is not installed: "
                                 f"{SPARK_HINT}") from exc


def _run(engine: str, bootstrap_servers: str, coordination_topic: str, timeout: float,
         heartbeat_interval: float, output: Path | None, group: str | None,
         topic: str | None, master: str, progress: bool) -> AuditResult:
    if output is not None:
        _require("pyarrow", "--output (Parquet)")
    common: dict[str, Any] = dict(
        heartbeat_interval_ms=int(heartbeat_interval * 1000), output=output, group=group,
        topic=topic, timeout_s=timeout, progress=_printer(progress))
    kafka_config = current_kafka_config()  # --command-config
    common["group_keys"] = current_group_keys()  # --auth-keys
    common["index_topic"] = current_index_topic()  # --index-topic
    if engine == "local":
        return run_local_audit(bootstrap_servers, coordination_topic,
                               kafka_config=kafka_config, **common)
    _require("pyspark", "--engine spark")
    _require("pyarrow", "--engine spark")
    from marshal_py.spark.audit import run_spark_audit

    try:
        return run_spark_audit(bootstrap_servers, coordination_topic, master=master,
                               kafka_options={k: _option_text(v)
                                              for k, v in kafka_config.items()},
                               **common)
    except MarshalError:
        raise
    except Exception as exc:  # pyspark's errors carry whole JVM traces: keep one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MarshalError(f"the Spark job failed: {first}") from exc


def _option_text(value: object) -> str:
    """A kafka-python setting as a Spark option (read back by the Spark source)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@click.command("audit")
@kafka_options
@click.option("--engine", type=click.Choice(["local", "spark"]), default="local",
              show_default=True,
              help="local: one rationalizer in this process; spark: one per domain, in "
                   "parallel on Spark.")
@click.option("--output", type=click.Path(path_type=Path), default=None,
              help="Write the tables as Parquet to DIR/<table>/ (replacing earlier ones).")
@click.option("--group", help="Only this consumer group.")
@click.option("--topic", help="Only this topic (reads only its coordination partition).")
@click.option("--heartbeat-interval", type=click.FloatRange(min=0.001), default=10.0,
              show_default=True,
              help="Seconds: the heartbeat interval of members that announce none (older "
                   "marshal_py, Go); others are judged by the one they announce.")
@click.option("--master", default="local[*]", show_default=True,
              help="Spark master URL for --engine spark.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as one JSON object.")
@auth_keys_option
def audit(bootstrap_servers: str, coordination_topic: str, timeout: float, engine: str,
          output: Path | None, group: str | None, topic: str | None,
          heartbeat_interval: float, master: str, as_json: bool) -> None:
    """Audit the whole coordination log: ownership stints, per-partition counters, AMO
    ranges, share-record history and invariant violations, per group and topic."""
    try:
        prepare_output(output)
        result = _run(engine, bootstrap_servers, coordination_topic, timeout,
                      heartbeat_interval, output, group, topic, master, progress=True)
    except MarshalError as exc:
        click.echo(f"marshal audit: error: {exc}", err=True)
        sys.exit(2)
    rate = result.records / result.seconds if result.seconds > 0 else 0.0
    click.echo(f"audited {result.records:,} coordination records in {result.seconds:.1f} s "
               f"({rate:,.0f} records/s, {result.engine} engine)", err=True)
    if as_json:
        click.echo(json.dumps(result.as_json(), indent=2, sort_keys=False))
        return
    for line in aligned([n for n, _ in SUMMARY], result.summary):
        click.echo(line)
    click.echo("")
    for line in aligned([n for n, _ in COORDINATION], result.coordination):
        click.echo(line)
    click.echo("")
    click.echo(f"violations: {result.violations}")
    if result.output is not None:
        click.echo(f"tables: {result.output}/<table>/ (Parquet)")
