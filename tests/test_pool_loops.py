"""An ``asyncio.run`` that ends just as the Postgres pool fails to connect
returns (`pools.AsyncConnectionPool`).

psycopg_pool's scheduler task sleeps with ``asyncio.wait_for``, which on
Python 3.11 loses a cancellation that arrives just after the event it waits
on was set. A failed connect sets it (it schedules the retry), so a run that
ended in the loop iteration where the pool logged "error connecting" left a
scheduler that ignored ``asyncio.run``'s cancellation and slept on: the run
never returned. Here each run ends exactly then: a log handler on
psycopg_pool's logger resolves what the run waits for.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import DurableSaver, Tiers
from langgraph_durable.tiers.pools import OWN, AsyncConnectionPool

from .proxy import TcpProxy

# A run that is not back by then hung (a healthy one takes well under a second).
LIVENESS_S = 30.0


class _ConnectFailed(logging.Handler):
    """Resolves `fut` when psycopg_pool logs that a connect failed, in the
    very iteration where the pool schedules its retry."""

    def __init__(self) -> None:
        super().__init__()
        self.fut: asyncio.Future[None] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if record.getMessage().startswith("error connecting") and self.fut is not None and not self.fut.done():
            self.fut.set_result(None)

    def arm(self) -> asyncio.Future[None]:
        self.fut = asyncio.get_running_loop().create_future()
        return self.fut


@pytest.fixture
def connect_failed() -> Iterator[_ConnectFailed]:
    handler = _ConnectFailed()
    pool_logger = logging.getLogger("psycopg.pool")
    pool_logger.addHandler(handler)
    # The saver quiets its own pools' "error connecting" records (pools.OWN):
    # here they are the signal, so they are let through.
    pool_logger.removeFilter(OWN)
    try:
        yield handler
    finally:
        pool_logger.addFilter(OWN)
        pool_logger.removeHandler(handler)


def _runs_in_time(runs: Callable[[], list[Any]]) -> list[Any]:
    """`runs()` in a thread of its own (left behind if it hangs)."""
    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.extend(runs())
        except BaseException as exc:  # reported by the caller's assertion
            outcome.append(exc)

    worker = threading.Thread(target=target, daemon=True)
    worker.start()
    worker.join(LIVENESS_S)
    assert not worker.is_alive(), f"an asyncio.run did not return within {LIVENESS_S} s, after {outcome}"
    return outcome


def _refused_url() -> str:
    from tests.servers import free_port  # a port nothing listens on

    return f"postgresql://nobody@127.0.0.1:{free_port()}/none"


def test_a_run_ending_as_its_pool_fails_to_connect_returns(connect_failed: _ConnectFailed) -> None:
    url = _refused_url()

    async def run(i: int) -> int:
        failed = connect_failed.arm()
        pool = AsyncConnectionPool(url, min_size=1, open=False, kwargs={"connect_timeout": 1})
        await pool.open(wait=False)
        await failed  # ends now, the pool still open and about to retry
        return i

    assert _runs_in_time(lambda: [asyncio.run(run(i)) for i in range(3)]) == [0, 1, 2]


def test_a_saver_run_ending_as_postgres_reconnects_fails_returns(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], connect_failed: _ConnectFailed
) -> None:
    """One saver, successive runs, each with its loop's own pool (closed as
    its loop shuts down). In the second, Postgres is cut off: the pool's
    connection fails its check and the pool reconnects, in vain, just as the
    run ends. The third, Postgres back, is served by Postgres again."""
    proxy, proxied = postgres_proxy
    saver = DurableSaver(sqlite=str(tmp_path / "local.sqlite"), postgres=proxied, tiers=Tiers(connect_timeout=2))

    async def run(i: int) -> Any:
        health = await saver.ahealth()
        if i == 1:
            failed = connect_failed.arm()
            proxy.cut()
            # Its pooled connection is gone: the pool drops it and reconnects.
            call = asyncio.ensure_future(saver.ahealth())
            await failed
            assert not call.done()
            return "cut"
        return {t.name: t.reachable for t in health.tiers if t.name == "postgres"}

    try:
        assert _runs_in_time(lambda: [asyncio.run(run(i)) for i in range(2)]) == [{"postgres": True}, "cut"]
        proxy.restore()
        assert _runs_in_time(lambda: [asyncio.run(run(2))]) == [{"postgres": True}]
    finally:
        saver.close()
