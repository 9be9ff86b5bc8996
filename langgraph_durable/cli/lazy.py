"""Modules loaded when first used: the saver, LangGraph and the drivers load
when a command runs, not for ``--help``, ``--version`` or a usage error."""

from __future__ import annotations

import importlib.util
import sys
from typing import Any


def lazy(name: str) -> Any:
    """Module `name`, loaded when one of its attributes is first used."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    assert spec is not None and spec.loader is not None, name
    spec.loader = importlib.util.LazyLoader(spec.loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
