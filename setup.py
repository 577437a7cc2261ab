"""The C part of the build; everything else is in pyproject.toml.

marshal_py.client._fastpath (marshal_py/client/_fastpath.c) does the per-record work of an
exclusive consumer in C. It is optional: where no C compiler is found the build goes on
without it and the same behaviour runs in Python (marshal_py/client/fastpath.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("marshal_py.client._fastpath",
                             ["marshal_py/client/_fastpath.c"], optional=True)])
