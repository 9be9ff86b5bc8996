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

The handler drains for at most `timeout` seconds, logs what is still owed,
then hands over to the handler that was installed before (or, if there was
none, exits as SIGTERM would have: status 143). Servers that own SIGTERM
themselves (uvicorn, gunicorn) call their shutdown hooks instead: close the
saver there (``saver.close()`` / ``await saver.aclose()`` drain for
``drain_timeout`` seconds), and no handler is needed.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType
from typing import Any

logger = logging.getLogger("langgraph_durable")


def drain_on_sigterm(saver: Any, *, timeout: float = 20.0, sig: int = signal.SIGTERM) -> None:
    """Install a handler of `sig` (SIGTERM) that drains `saver` for up to
    `timeout` seconds before the process goes on stopping. Call it from the
    main thread (Python only lets the main thread install signal handlers)."""
    if threading.current_thread() is not threading.main_thread():
        from .errors import ConfigError

        raise ConfigError("drain_on_sigterm() must be called from the main thread (signal handlers live there).")
    previous = signal.getsignal(sig)

    def handler(signum: int, frame: FrameType | None) -> None:
        lag = saver.drain(timeout)
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
        if callable(previous):
            previous(signum, frame)
        elif previous == signal.SIG_IGN:
            return
        else:
            sys.exit(128 + signum)

    signal.signal(sig, handler)
