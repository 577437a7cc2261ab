"""``import marshal_py`` is cheap: the package and its rooms import their public names on first
use (PEP 562), and the Spark source's modules import only their own side.

Each check runs in a fresh interpreter (``sys.modules`` of this one already holds everything
other tests imported) and reads that interpreter's ``sys.modules``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Third-party packages a bare ``import marshal_py`` must not import.
HEAVY = ("kafka", "confluent_kafka", "click", "pyspark", "pyarrow", "numpy", "xxhash")

#: The packages whose ``__init__`` re-exports names lazily.
LAZY_PACKAGES = ("marshal_py", "marshal_py.client", "marshal_py.log", "marshal_py.config",
                 "marshal_py.admin", "marshal_py.devbroker", "marshal_py.replay")


def imported_after(statement: str) -> set[str]:
    """The modules a fresh interpreter holds after running ``statement``."""
    script = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.splitlines()[-1]))


def packages_of(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def test_import_marshal_py_imports_no_client_no_kafka_and_no_spark() -> None:
    modules = imported_after("import marshal_py")
    assert not packages_of(modules) & set(HEAVY)
    ours = {m for m in modules if m.startswith("marshal_py")}
    assert ours == {"marshal_py", "marshal_py.errors", "marshal_py.lazy"}


def test_the_public_names_resolve_on_first_use_to_their_defining_modules() -> None:
    modules = imported_after("from marshal_py import Consumer, GroupKey, MarshalError")
    assert "marshal_py.client.consumer" in modules
    assert "marshal_py.protocol.auth" in modules
    # Consumer needs kafka-python, but not the other consumers nor the Spark source
    assert "marshal_py.client.share_consumer" not in modules
    assert not packages_of(modules) & {"pyspark", "click", "confluent_kafka"}


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_name_in_all_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
        assert name in dir(module)


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_an_unknown_name_is_an_attribute_error(package: str) -> None:
    module = importlib.import_module(package)
    with pytest.raises(AttributeError, match="no_such_name"):
        module.no_such_name  # noqa: B018


def test_the_lazy_names_are_the_defining_modules_objects() -> None:
    import marshal_py
    from marshal_py.client.consumer import Consumer
    from marshal_py.world.rationalizer import Rationalizer

    assert marshal_py.Consumer is Consumer
    assert marshal_py.Rationalizer is Rationalizer


def test_importing_one_module_of_a_room_does_not_import_its_siblings() -> None:
    modules = imported_after("import marshal_py.log.base")
    assert "marshal_py.log.kafka" not in modules
    assert "kafka" not in packages_of(modules)


def test_the_spark_source_imports_neither_the_consumers_nor_the_cli() -> None:
    """What Spark's driver-side Python worker imports to unpickle the source and make its
    reader (before joining): not the consumers' classes, click or the admin tools."""
    modules = imported_after("import marshal_py.spark.source, marshal_py.spark.reader")
    assert not packages_of(modules) & {"click", "confluent_kafka"}
    for name in ("marshal_py.client.share_consumer", "marshal_py.client.key_shared_consumer",
                 "marshal_py.admin", "marshal_py.cli", "marshal_py.config.kafka_properties",
                 "marshal_py.devbroker.broker"):
        assert name not in modules, name


def test_the_spark_reader_leaves_the_executors_reading_to_the_executors() -> None:
    modules = imported_after("import marshal_py.spark.reader")
    assert "marshal_py.spark.fetch" not in modules
    assert "marshal_py.spark.gaps" not in modules


def test_a_command_line_imports_its_own_command_only() -> None:
    modules = imported_after(
        "from marshal_py.cli import main\n"
        "try:\n"
        "    main(['tail', '--help'])\n"
        "except SystemExit:\n"
        "    pass")
    commands = {m for m in modules if m.startswith("marshal_py.cli.")}
    assert commands == {"marshal_py.cli.app", "marshal_py.cli.inspect",
                        "marshal_py.cli.common"}


def test_every_command_is_found_where_the_group_says() -> None:
    import click

    from marshal_py.cli.app import COMMANDS, main

    context = click.Context(main)
    assert main.list_commands(context) == sorted(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(context, name)
        assert isinstance(command, click.Command) and command.name == name
