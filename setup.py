"""The C part of the build; everything else is in pyproject.toml.

Three optional extensions; where one cannot be built (no C compiler, no OpenSSL headers) the
build goes on without it and the same behaviour runs in Python:

* marshal_py.client._fastpath (marshal_py/client/_fastpath.c): the per-record work of an
  exclusive consumer (its Python build: marshal_py/client/fastpath.py);
* marshal_py.world._macs (marshal_py/world/_macs.c): the MAC check of signed coordination
  records, with OpenSSL's SHA-256 (its Python build: marshal_py/world/macs.py);
* marshal_py.world._feed (marshal_py/world/_feed.c): the record loop's runs of owners'
  heartbeats (its Python build: the loop in marshal_py/world/engine.py).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("marshal_py.client._fastpath", ["marshal_py/client/_fastpath.c"], optional=True),
    Extension("marshal_py.world._macs", ["marshal_py/world/_macs.c"], libraries=["crypto"],
              optional=True),
    Extension("marshal_py.world._feed", ["marshal_py/world/_feed.c"], optional=True),
])
