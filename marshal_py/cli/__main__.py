"""``python -m marshal_py.cli``: the ``marshal`` command."""

from marshal_py.cli.main import main

main()
