"""The library's version, read from the installed package's metadata (pyproject.toml).

A low module that imports nothing from the package, so that the file format
(`_persistence`) can record the version without importing the package's ``__init__``.
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("lcm_eqx")
except PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"
