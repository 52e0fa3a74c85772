"""The optional C extensions; everything else is in pyproject.toml.

- ``pylog.records._speedups``: the records decoder's walk and murmur2.
- ``pylog.protocol._speedups``: the Produce request body decoder.

``optional=True``: without a C compiler the install still succeeds and each caller uses
its pure-Python twin (``PYLOG_RECORDS_SPEEDUPS=0`` and ``PYLOG_PROTOCOL_SPEEDUPS=0`` choose
the twins even when the extensions are built; the tests run both).
"""

from setuptools import Extension, setup

setup(ext_modules=[
    Extension("pylog.records._speedups", ["pylog/records/_speedups.c"], optional=True),
    Extension("pylog.protocol._speedups", ["pylog/protocol/_speedups.c"], optional=True),
])
