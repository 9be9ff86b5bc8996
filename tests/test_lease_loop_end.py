"""An async run whose end is seen while its event loop shuts down, or after.

``asyncio.run`` cancels the tasks left, finalizes the async generators (the
saver closes its async connections there) and closes the loop. A run's end
(its stream writer freed, `LeaseBook`) can come at any of those moments, or
after the loop is gone: its lease is given back all the same, no task is left
pending and no connection is left open.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from langgraph.config import get_config

from langgraph_durable import DurableSaver
from langgraph_durable.validation import RUNTIME_KEY
from tests import lease_worker
from tests.waiting import wait_until


def _released(saver: DurableSaver, thread_id: str) -> bool:
    """The thread's lease record in Postgres (the lease tier) says given back."""
    with psycopg.connect(saver.postgres_url) as conn:
        row = conn.execute("SELECT expires_at FROM lgd_leases WHERE thread_id = %s", (thread_id,)).fetchone()
    return row is not None and row[0] == 0


def _problems(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the saver, or asyncio (a task destroyed while pending), warned of.
    (psycopg_pool may log a connect cut short by the loop's end: not the
    saver's doing.)"""
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.split(".")[0] in ("langgraph_durable", "asyncio")
    ]


def _run_keeping_the_writer(saver: DurableSaver, thread_id: str, let_go: Callable[[list[Any]], Any]) -> list[Any]:
    """One ``asyncio.run`` of a one-step run whose stream writer the test
    keeps (so the run has not ended when ``ainvoke`` returns); `let_go` is
    given the list holding it, inside the main coroutine, and arranges when
    it is emptied."""
    kept: list[Any] = []

    def node(state: dict[str, Any]) -> dict[str, Any]:
        kept.append(get_config()["configurable"][RUNTIME_KEY].stream_writer)
        return {"count": state.get("count", 0) + 1}

    graph = lease_worker.counter(node).compile(checkpointer=saver)

    async def main() -> Any:
        await graph.ainvoke({"hits": ["x"]}, {"configurable": {"thread_id": thread_id}})
        assert kept, "the node did not run"
        return let_go(kept)

    keep_alive = asyncio.run(main())
    del keep_alive
    return kept


def _in_a_task_cancelled_at_loop_end(kept: list[Any]) -> Any:
    async def hold() -> None:
        try:
            await asyncio.sleep(3600)
        finally:
            kept.clear()

    return asyncio.ensure_future(hold())


def _in_an_async_generator_finalized_at_loop_end(kept: list[Any]) -> Any:
    async def hold() -> Any:
        try:
            yield
        finally:
            kept.clear()

    gen = hold()
    with pytest.raises(StopIteration):
        gen.__anext__().send(None)  # registered with the loop, paused at its yield
    return gen


def _after_the_loop_is_closed(kept: list[Any]) -> None:
    return None  # the test empties `kept` once asyncio.run has returned


@pytest.mark.parametrize(
    "let_go",
    [_in_a_task_cancelled_at_loop_end, _in_an_async_generator_finalized_at_loop_end, _after_the_loop_is_closed],
    ids=["task-cancelled", "asyncgen-finalized", "loop-closed"],
)
def test_a_run_ending_as_its_loop_shuts_down_gives_its_lease_back(
    make_saver: Any, caplog: pytest.LogCaptureFixture, let_go: Callable[[list[Any]], Any]
) -> None:
    caplog.set_level(logging.WARNING)
    with make_saver("redis+postgres", lease_ttl=3600.0) as saver:
        for i in range(3):  # each asyncio.run has a loop, and connections, of its own
            thread_id = f"end-{i}"
            kept = _run_keeping_the_writer(saver, thread_id, let_go)
            kept.clear()
            gc.collect()  # a task or connection left behind warns here (warnings are errors)
            wait_until(lambda: _released(saver, thread_id), f"the lease of {thread_id} was not given back")
        assert saver._runtime.leases.held("end-2") is None
    gc.collect()
    assert _problems(caplog) == []


def test_asyncio_run_of_ainvoke_gives_the_lease_back(make_saver: Any, caplog: pytest.LogCaptureFixture) -> None:
    """The plainest async use, ``asyncio.run(graph.ainvoke(...))``: the run
    ends as the loop's main coroutine returns, when the loop no longer runs
    anything but its own shutdown. Another replica takes the thread at once."""
    caplog.set_level(logging.WARNING)
    config = {"configurable": {"thread_id": "plain"}}
    with (
        make_saver("redis+postgres", sqlite_name="a", lease_ttl=3600.0) as a,
        make_saver("redis+postgres", sqlite_name="b", lease_ttl=3600.0, on_busy="raise") as b,
    ):
        ga, gb = lease_worker.counter().compile(checkpointer=a), lease_worker.counter().compile(checkpointer=b)
        for i in range(3):
            assert asyncio.run(ga.ainvoke({"hits": ["a"]}, config))["count"] == 2 * i + 1
            wait_until(lambda: _released(a, "plain"), "a's lease was not given back")
            assert asyncio.run(gb.ainvoke({"hits": ["b"]}, config))["count"] == 2 * i + 2
            wait_until(lambda: _released(b, "plain"), "b's lease was not given back")
    gc.collect()
    assert _problems(caplog) == []
