"""Draining on SIGTERM: a container's grace period spent shipping the backlog.

Kubernetes stops a pod by sending SIGTERM, waiting
``terminationGracePeriodSeconds`` (30 s by default), then SIGKILL. Records the
shared tiers are still owed (a tier was down, or ``write="local"``) stay in
the local journal and are shipped at the next start, but a pod's disk usually
goes with the pod. So on SIGTERM the saver should drain first::

    from langgraph_durable import DurableSaver
    from langgraph_durable.shutdown import drain_on_sigterm

    saver = DurableSaver.from_env()
    drain_on_sigterm(saver, timeout=20)  # leave the app time to stop, too

On the signal the drain starts, for at most `timeout` seconds, on a thread
that `drain_on_sigterm` started beforehand, and the handler hands over at
once to the handler that was installed before; if there was none, it stops
the process as SIGTERM would have (status 143) by raising ``SystemExit``.
``saver.close()`` waits for the drain before it closes the tiers, and so
does the interpreter before it exits. The outcome is logged: caught up, or
what is still owed.

Why the handler itself does so little: it runs in the main thread between
two of its instructions, possibly in the middle of one of the saver's own
calls, holding its locks or a cursor, or in the middle of starting a thread;
a drain there would wait for the main thread, which waits for the handler.
And ``SystemExit`` raised at an arbitrary instruction can be swallowed (by a
``__del__`` or a callback that ignores exceptions) or leave behind a thread
the interpreter then waits for forever. So unless an earlier handler owns
the exit, the drain's thread, once the drain ended, gives the process
`exit_grace` seconds to exit and then ends it (``os._exit(143)``; what was
acknowledged is in the local file already).

Servers that own SIGTERM themselves (uvicorn, gunicorn) call their shutdown
hooks instead: close the saver there (``saver.close()`` / ``await
saver.aclose()`` drain for ``drain_timeout`` seconds), and no handler is
needed.
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import logging
import os
import signal
import sys
import threading
from types import FrameType
from typing import Any

from .errors import ConfigError

logger = logging.getLogger("langgraph_durable")

# After the drain: how long the process has to exit on its own (the saver's
# close drains again for up to its drain_timeout, 10 s by default).
DEFAULT_EXIT_GRACE_S = 10.0


def drain_on_sigterm(
    saver: Any, *, timeout: float = 20.0, sig: int = signal.SIGTERM, exit_grace: float = DEFAULT_EXIT_GRACE_S
) -> None:
    """Install a handler of `sig` (SIGTERM) that drains `saver` for up to
    `timeout` seconds, on a thread, while the process goes on stopping.
    Call it from the main thread (Python only lets the main thread install
    signal handlers). Unless an earlier handler owns `sig`, the process
    exits with status ``128 + sig``, at the latest `exit_grace` seconds after
    the drain ended."""
    if threading.current_thread() is not threading.main_thread():
        raise ConfigError("drain_on_sigterm() must be called from the main thread (signal handlers live there).")
    if timeout < 0 or exit_grace < 0:
        raise ConfigError(
            f"drain_on_sigterm(): timeout and exit_grace are seconds, 0 or more, not {timeout!r}, {exit_grace!r}."
        )
    previous = signal.getsignal(sig)
    owns_exit = not callable(previous) and previous != signal.SIG_IGN
    stop = _Stop(saver, timeout, exit_grace if owns_exit else None)

    def handler(signum: int, frame: FrameType | None) -> None:
        # Only what is safe wherever the main thread was interrupted: no
        # lock another code path takes, no thread started, no I/O.
        if not stop.signalled(signum):
            return  # a repeated signal: the first one's stop is under way
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:
            sys.exit(128 + signum)

    signal.signal(sig, handler)


class _Stop:
    """The drain's thread, started before any signal (a daemon: it must not
    keep the process alive), and what the process waits for at exit."""

    def __init__(self, saver: Any, timeout: float, exit_grace: float | None) -> None:
        self.saver = saver
        self.timeout = timeout
        self.exit_grace = exit_grace
        self.signum = 0
        self.wake = threading.Event()
        self.done: threading.Event | None = None
        threading.Thread(target=self._run, name="langgraph-durable-sigterm", daemon=True).start()
        atexit.register(self._wait_at_exit)

    def signalled(self, signum: int) -> bool:
        """The handler's part; False when a signal came before."""
        if self.wake.is_set():
            return False
        self.signum = signum
        self.done = self.saver._runtime.drain_pending()  # close() waits for it
        self.wake.set()
        return True

    def _run(self) -> None:
        self.wake.wait()
        assert self.done is not None
        try:
            _log_outcome(self.signum, self.timeout, self.saver.drain(self.timeout))
        except Exception as exc:  # the saver was closed meanwhile, say
            logger.error("signal %s: the drain failed: %s", self.signum, exc)
        finally:
            self.done.set()
        if self.exit_grace is not None:
            _exit_after(self.exit_grace, 128 + self.signum)

    def _wait_at_exit(self) -> None:
        if self.done is not None:
            self.done.wait(self.timeout + 1.0)


def _log_outcome(signum: int, timeout: float, lag: Any) -> None:
    if lag.caught_up:
        logger.warning("signal %s: the shared tiers are caught up", signum)
    else:
        logger.error(
            "signal %s: %s record(s) still owed to the shared tiers after %s s (%s); they stay in the local journal",
            signum,
            lag.records,
            timeout,
            ", ".join(f"{n}: {k}" for n, k in lag.by_tier.items() if k),
        )


def _exit_after(grace: float, status: int) -> None:
    """Runs on a daemon thread, which goes on running while the interpreter
    waits for the other threads at exit and dies with the process."""
    threading.Event().wait(grace)
    logger.error(
        "the process did not exit within %s s of the end of the drain (an exit swallowed, or a thread that "
        "does not end); exiting now with status %s; the threads were at:",
        grace,
        status,
    )
    for handler in logging.getLogger().handlers + logger.handlers:
        with contextlib.suppress(Exception):  # exiting anyway
            handler.flush()
    with contextlib.suppress(Exception):  # where each thread was: what kept the process alive
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    os._exit(status)
