"""Giving the memory a process freed back to the system, now and then.

A saver's memos are bounded (`model.memory_budget`): once they are full,
each new thread's entries replace the least recently used. The entries
they free, and the short-lived objects of every step, go back to the C
allocator, but glibc's malloc keeps freed memory in its heap, where new
allocations of other sizes do not always reuse it, and hands it back to the
system only from the top of the heap. A process serving thread after thread
then keeps growing by a fraction of a megabyte per 1,000 threads after its
memos are full, with Python's own blocks and objects flat
(``benchmarks/bench_memory.py``); ``malloc_trim(0)`` returns those free
pages to the system.

So a saver's writes ask for a trim (`now_and_then`), and at most one runs
per `TRIM_EVERY_S` per process, on the deferred worker thread
(`concurrency.defer`), never on a run's path. It costs well under a
millisecond. Where the C library has no ``malloc_trim`` (macOS, musl, a
process on jemalloc or another allocator) nothing is done.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from collections.abc import Callable

from .concurrency import defer

# At most one trim per this many seconds, per process.
TRIM_EVERY_S = 30.0


def _malloc_trim() -> Callable[[int], object] | None:
    """glibc's ``malloc_trim``, or None where the process has none."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        trim = ctypes.CDLL(None).malloc_trim
    except (AttributeError, OSError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


_trim = _malloc_trim()
_lock = threading.Lock()
_next = 0.0


def available() -> bool:
    """Whether this process can give freed memory back (glibc)."""
    return _trim is not None


def now_and_then(now: float) -> bool:
    """Hand a trim to the deferred worker if none was in the last
    `TRIM_EVERY_S` seconds (`now`: ``time.monotonic()``); True if it did."""
    global _next
    if _trim is None or now < _next:
        return False
    with _lock:
        if now < _next:
            return False
        _next = now + TRIM_EVERY_S
    defer(_trim, 0)
    return True
