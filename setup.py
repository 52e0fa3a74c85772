"""The optional C extension of the records decoder; everything else is in pyproject.toml.

``optional=True``: without a C compiler the install still succeeds and the decoder uses
its pure-Python walk (``pylog.records.vectorised.SPEEDUPS`` says which one runs).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("pylog.records._speedups", ["pylog/records/_speedups.c"], optional=True)])
