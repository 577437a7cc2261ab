"""``python -m marshal_py.cli``: the ``marshal`` command."""

from marshal_py.cli.app import main

main()
