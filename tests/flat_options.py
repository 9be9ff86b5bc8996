"""Saver keywords from a test's options, which may name a group's field by
its flat name (``lease_linger=0``, ``redis_key_prefix=...``), as the
environment's options and the command line's flags do: the helpers that
build savers for many tests take them so, and tests that pass a group
(``leases=Leases(...)``) mix with them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langgraph_durable.option_groups import flattened, grouped


def durable_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """`DurableSaver`'s keywords for `options` (flat names grouped; a group's
    fields left at their defaults do not override a flat name given)."""
    return grouped(flattened(options, set_only=True))
