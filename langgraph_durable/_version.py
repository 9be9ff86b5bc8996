"""The installed distribution's version, in a module of its own so that any
module can read it without importing the package's top (which imports them)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("langgraph-durable")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"
