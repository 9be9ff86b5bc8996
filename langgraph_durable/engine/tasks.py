"""Background work with one lifecycle.

The saver runs a few long-lived jobs beside the application: the replicator
(replicator.py), the retention sweep (sweeper.py), the archive replica
(``archive/replica.py``) and the lease hand-off listener (handoff.py). Each
is a `BackgroundTask`: one daemon thread, started on demand (and again in a
forked child, which inherits no threads), stopped once by the saver's
``close()``, woken or interrupted by its own hook. Like psycopg_pool's
maintenance tasks, each is small, knows nothing of the others, and
receives the object it works for (the saver's runtime, or for the sweep
the saver), typed by a small protocol in its own module, not callbacks.
The runtime (``faces/runtime.py``) makes them, starts them and stops them,
in order, when the saver closes.
"""

from __future__ import annotations

import os
import threading
from typing import ClassVar


class BackgroundTask:
    """One daemon thread running `_run` until `stop`."""

    thread_name: ClassVar[str] = "langgraph-durable-task"
    # Whether `start` works again after `stop` (the replicator: a saver's
    # drain may kick it after close began).
    restartable: ClassVar[bool] = False

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pid = 0

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and self._pid == os.getpid() and thread.is_alive()

    def start(self) -> None:
        """Start the thread unless it runs (in this process) or the task is stopping."""
        if self.running:
            return
        with self._lock:
            if self._stopping.is_set() or self.running:
                return
            self._pid = os.getpid()
            self._starting()
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the thread to end, interrupt what it waits on, and wait for
        it `timeout` seconds at most (never from the thread itself)."""
        with self._lock:
            self._stopping.set()
            thread = self._thread if self._pid == os.getpid() else None
            if self.restartable:
                self._thread = None
        self._interrupt()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        if self.restartable:
            self._stopping.clear()

    # -- hooks ---------------------------------------------------------------------

    def _run(self) -> None:
        raise NotImplementedError

    def _starting(self) -> None:
        """Called under the lock just before a thread starts."""

    def _interrupt(self) -> None:
        """Wake the thread from whatever it waits on (after `stop` set `stopping`)."""
