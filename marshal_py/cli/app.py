"""The ``marshal`` command line: the group of commands, and how their errors are printed
(one line on stderr, exit status 2). The commands live in the modules beside this one."""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence
from typing import Any

import click

from marshal_py.errors import MarshalError


class MarshalGroup(click.Group):
    """A click group whose errors are one line on stderr and exit status 2, and whose
    commands (:data:`COMMANDS`) are imported when they are needed."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*COMMANDS, *super().list_commands(ctx)})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        found = super().get_command(ctx, cmd_name)
        if found is not None or cmd_name not in COMMANDS:
            return found
        module, name = COMMANDS[cmd_name]
        command: click.Command = getattr(importlib.import_module(module), name)
        return command

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


#: Each command's module and its name there (``marshal --help`` lists them sorted). A
#: command's module is imported when the command runs (or ``--help`` lists them all): a
#: command line starts without importing every other command's dependencies.
COMMANDS: dict[str, tuple[str, str]] = {
    "state": ("marshal_py.cli.inspect", "state"),
    "tail": ("marshal_py.cli.inspect", "tail"),
    "consume": ("marshal_py.cli.consume", "consume"),
    "init": ("marshal_py.cli.admin", "init"),
    "groups": ("marshal_py.cli.admin", "groups"),
    "lag": ("marshal_py.cli.admin", "lag"),
    "reset-offsets": ("marshal_py.cli.admin", "reset_offsets"),
    "watch": ("marshal_py.cli.admin", "watch"),
    "find-hanging": ("marshal_py.cli.transactions", "find_hanging"),
    "audit": ("marshal_py.cli.audit", "audit"),
    "dev-broker": ("marshal_py.cli.dev_broker", "dev_broker"),
}
