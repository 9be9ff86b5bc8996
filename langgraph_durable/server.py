"""`DurableSaver` as the checkpointer of LangGraph's own server.

The LangGraph Agent Server (and ``langgraph dev`` from ``langgraph-cli[inmem]``)
replaces its persistence backend with the object named by ``checkpointer.path``
in ``langgraph.json``::

    {
      "graphs": {"agent": "./agent.py:graph"},
      "checkpointer": {"path": "langgraph_durable.server.checkpointer"}
    }

langgraph-api (0.16) imports a path without ``/`` and ``.py:`` as
``module.attr``, split at its last dot, so write
``"langgraph_durable.server.checkpointer"``. The ``module:attr`` spelling its
documentation shows (``"langgraph_durable.server:checkpointer"``) makes it
look for an attribute named ``server:checkpointer`` in ``langgraph_durable``,
and the server does not start.

How the server uses it: at startup it imports `checkpointer` and, seeing a
callable that is not itself a context manager, calls it with no arguments
and enters the async context manager that returns, once for each OS thread
that asks for a checkpointer (its event loop's thread in practice); the
`DurableSaver` yielded serves every graph, wrapped in the server's adapter.
At shutdown it exits the context manager, which drains the saver and
closes it. Because it is called, not entered as is, one process may open it
more than once: each call builds its own saver.

The tiers come from the environment, as `DurableSaver.from_env` reads it
(set them in your deployment, or under ``"env"`` in ``langgraph.json``):

``LANGGRAPH_DURABLE_SQLITE``
    the local SQLite file (default ``.langgraph_durable/checkpoints.sqlite``
    in the server's working directory), ``:memory:``, or empty for none.
``LANGGRAPH_DURABLE_REDIS_URL``
    ``redis://...``, optional; ``LANGGRAPH_DURABLE_REDIS_KEY_PREFIX`` sets
    the prefix of its keys (default ``langgraph_durable``).
``LANGGRAPH_DURABLE_POSTGRES_URL``
    ``postgresql://...``, optional.
``LANGGRAPH_DURABLE_SIGNING_KEY``, ``LANGGRAPH_DURABLE_OLD_SIGNING_KEYS``
    HMAC key (16 bytes or more) and, during a rotation, the old ones
    (comma-separated; ``unsigned`` accepts unsigned records).
``LANGGRAPH_DURABLE_WRITE``
    ``shared`` (default), ``all`` or ``local`` (write-behind).

Set Redis or Postgres (or both) when several server replicas serve the same
threads: the SQLite file is local to one machine.

On failure at startup the server does not start: its lifespan fails with
the error, uvicorn logs "Application startup failed" and exits with status 3.
A malformed variable raises `ConfigError`, and so does a signing key that
does not match the store. An unreachable tier does not by itself stop it:
with the default ``write="shared"`` the server starts as long as one shared
tier answers (or, with no shared tier, the local file opens), logs "<tier>
tier is down at setup", and that tier is set up and caught up when it
answers. If no tier it must write to answers (every shared tier down; any
tier down with ``LANGGRAPH_DURABLE_WRITE=all``), `TierUnavailable` names the
tier, and whatever was opened is closed again before it propagates.

At shutdown `DurableSaver.aclose` ships what the shared tiers are still owed
for up to ``drain_timeout`` seconds (10 by default), then closes every
connection; what it could not ship stays in the local journal and is shipped
by the next start.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from .saver import DurableSaver

__all__ = ["checkpointer"]

logger = logging.getLogger("langgraph_durable")


@contextlib.asynccontextmanager
async def checkpointer(**options: Any) -> AsyncIterator[DurableSaver]:
    """Yield a set-up `DurableSaver` built by `DurableSaver.from_env`; drain
    and close it on exit.

    `options` are passed to ``from_env`` and override the environment (the
    server passes none; wrap it, e.g. ``functools.partial(checkpointer,
    redis_key_prefix="myapp")`` in a module of your own, to set more).
    Raises `ConfigError` or `TierUnavailable` from ``asetup`` as described in
    the module docstring, after closing what was opened.
    """
    saver = DurableSaver.from_env(**options)
    try:
        await saver.asetup()
    except BaseException:
        await saver.aclose()
        raise
    logger.info("langgraph_durable.server: serving checkpoints from %s", " -> ".join(saver.tier_names))
    try:
        yield saver
    finally:
        await saver.aclose()
