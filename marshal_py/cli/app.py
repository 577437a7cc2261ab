"""The ``marshal`` command line: the group of commands, and how their errors are printed
(one line on stderr, exit status 2). The commands live in the modules beside this one."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from typing import Any

import click

from marshal_py.errors import MarshalError


class MarshalGroup(click.Group):
    """A click group whose errors are one line on stderr and exit status 2."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None,
             complete_var: str | None = None, standalone_mode: bool = True,
             **extra: Any) -> Any:
        argv = list(sys.argv[1:] if args is None else args)
        try:
            return super().main(argv, prog_name or "marshal", complete_var,
                                standalone_mode=False, **extra)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("marshal: aborted", err=True)
            sys.exit(130)
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx else "marshal"
            click.echo(f"{where}: error: {exc.format_message()} (see {where} --help)", err=True)
            sys.exit(2)
        except MarshalError as exc:
            click.echo(f"marshal: error: {exc}", err=True)
            sys.exit(2)


@click.group(cls=MarshalGroup)
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv for debug).")
def main(verbose: int) -> None:
    """marshal_py: leaderless Kafka consumer coordination through __marshal."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        logging.getLogger("kafka").setLevel(logging.CRITICAL)


def _register_commands() -> None:
    from marshal_py.cli.admin import COMMANDS
    from marshal_py.cli.audit import audit
    from marshal_py.cli.consume import consume
    from marshal_py.cli.dev_broker import dev_broker
    from marshal_py.cli.inspect import state, tail
    from marshal_py.cli.transactions import find_hanging

    for command in (state, tail, consume, *COMMANDS, find_hanging, audit):  # init, groups, ...
        main.add_command(command)
    main.add_command(dev_broker, "dev-broker")


_register_commands()
