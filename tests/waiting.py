"""Waiting for something asynchronous in a test: poll for the condition, with
a generous deadline, instead of sleeping a fixed time and then asserting.

The deadline is a liveness bound (the thing did not happen at all), never a
measure of speed: a loaded machine only makes the poll take longer. Speed
is measured in the benchmarks, not asserted by tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

# How long a condition may take to come true before the test fails: far
# beyond anything a working saver needs, on any machine.
LIVENESS_S = 30.0
POLL_S = 0.01


def wait_until(cond: Callable[[], T], what: str = "the condition", *, timeout: float = LIVENESS_S) -> T:
    """Poll `cond` until it returns something true, and return that; fail
    the test if it has not within `timeout` seconds (a liveness bound)."""
    deadline = time.monotonic() + timeout
    while not (found := cond()):
        assert time.monotonic() < deadline, f"{what}: still not so after {timeout} s"
        time.sleep(POLL_S)
    return found


async def await_until(cond: Callable[[], T], what: str = "the condition", *, timeout: float = LIVENESS_S) -> T:
    """`wait_until` on an event loop: the loop runs on while it waits."""
    deadline = time.monotonic() + timeout
    while not (found := cond()):
        assert time.monotonic() < deadline, f"{what}: still not so after {timeout} s"
        await asyncio.sleep(POLL_S)
    return found
