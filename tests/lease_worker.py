"""Child processes for tests/test_lease.py (started with multiprocessing "spawn").

Each one builds its own DurableSaver from keyword arguments, runs a small
counting graph on one thread and reports through a queue: ("ok", detail) or
("error", type name, message).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import operator
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from langgraph_durable import DurableSaver
from tests.flat_options import durable_options


class CountState(TypedDict, total=False):
    count: int
    hits: Annotated[list[str], operator.add]


def counter(node: Any = None) -> StateGraph:
    """START -> inc -> END; `inc` adds one to `count` (a lost update shows)."""

    def inc(state: CountState) -> dict[str, Any]:
        return {"count": state.get("count", 0) + 1}

    g = StateGraph(CountState)
    g.add_node("inc", node or inc)
    g.add_edge(START, "inc")
    g.add_edge("inc", END)
    return g


@contextlib.contextmanager
def stalled_run(saver: DurableSaver, config: dict[str, Any], **invoke: Any) -> Iterator[list[BaseException]]:
    """A run of `counter` on `saver` (replica A) that stalls inside its node,
    on a thread of its own: inside the block the node has been entered and
    waits (A holds the thread's lease, or did); leaving the block lets the
    node go on (its update adds "stale A") and waits for the run to end.
    Yields the list of what the run raised, complete once the block is left."""
    entered, proceed = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def stall(state: CountState) -> dict[str, Any]:
        entered.set()
        proceed.wait(30)
        return {"count": state.get("count", 0) + 1, "hits": ["stale A"]}

    def run() -> None:
        try:
            counter(stall).compile(checkpointer=saver).invoke({"hits": ["A"]}, config, **invoke)
        except BaseException as exc:  # reported to the test
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    try:
        assert entered.wait(30), "the stalled run never reached its node"
        yield errors
    finally:
        proceed.set()
        runner.join(60)  # a liveness bound: the node was let go
    assert not runner.is_alive(), "the stalled run did not end once its node was let go"


def increments(saver_kwargs: dict[str, Any], thread_id: str, tag: str, runs: int, start: Any, results: Any) -> None:
    """`runs` increment runs on `thread_id` (each gives the lease back when
    it ends), pausing a little between them so the two processes interleave."""
    try:
        with DurableSaver(**durable_options(saver_kwargs)) as saver:
            graph = counter().compile(checkpointer=saver)
            config = {"configurable": {"thread_id": thread_id}}
            start.wait(60)
            for i in range(runs):
                graph.invoke({"hits": [f"{tag}-{i}"]}, config)
                time.sleep(random.uniform(0, 0.02))
        results.put(("ok", tag))
    except BaseException as exc:  # reported to the test
        results.put(("error", type(exc).__name__, str(exc)))


def hold(saver_kwargs: dict[str, Any], thread_id: str, entered: Any, proceed: Any, results: Any) -> None:
    """One run whose node waits for `proceed`: it holds the thread's lease
    meanwhile (the node signals `entered`)."""

    def wait_inside(state: CountState) -> dict[str, Any]:
        entered.set()
        proceed.wait(60)
        return {"count": state.get("count", 0) + 1}

    try:
        with DurableSaver(**durable_options(saver_kwargs)) as saver:
            graph = counter(wait_inside).compile(checkpointer=saver)
            # durability="sync": the input checkpoint is stored before the node
            # runs, so a kill after `entered` always leaves a thread to resume
            # (under "async" that put races the node).
            out = graph.invoke({"hits": ["holder"]}, {"configurable": {"thread_id": thread_id}}, durability="sync")
        results.put(("ok", out))
    except BaseException as exc:  # reported to the test
        results.put(("error", type(exc).__name__, str(exc)))


def alternate(
    saver_kwargs: dict[str, Any], thread_id: str, tag: str, face: str, turns: list[Any], mine: int, results: Any
) -> None:
    """Runs `thread_id` at turns ``mine``, ``mine + 2``, ...: waits for its
    turn's event, runs the graph once, then sets the next turn's event (the
    other process's), as a load balancer handing the thread from replica to
    replica would. Reports ("ok", [for each run, the leases it took over
    from another holder, as logged: after they expired, or from a holder
    gone]): a run that found the thread given back took over nothing."""
    took_over = _TakeOvers()
    logging.getLogger("langgraph_durable").addHandler(took_over)

    async def arun() -> list[list[str]]:
        runs = []
        async with DurableSaver(**durable_options(saver_kwargs)) as saver:
            graph = counter().compile(checkpointer=saver)
            for turn in range(mine, len(turns), 2):
                if not await asyncio.to_thread(turns[turn].wait, 60):
                    raise TimeoutError(f"turn {turn} never came")
                took_over.seen.clear()
                await graph.ainvoke({"hits": [f"{tag}-{turn}"]}, {"configurable": {"thread_id": thread_id}})
                runs.append(list(took_over.seen))
                if turn + 1 < len(turns):
                    turns[turn + 1].set()
        return runs

    def run() -> list[list[str]]:
        runs = []
        with DurableSaver(**durable_options(saver_kwargs)) as saver:
            graph = counter().compile(checkpointer=saver)
            for turn in range(mine, len(turns), 2):
                if not turns[turn].wait(60):
                    raise TimeoutError(f"turn {turn} never came")
                took_over.seen.clear()
                graph.invoke({"hits": [f"{tag}-{turn}"]}, {"configurable": {"thread_id": thread_id}})
                runs.append(list(took_over.seen))
                if turn + 1 < len(turns):
                    turns[turn + 1].set()
        return runs

    try:
        results.put(("ok", asyncio.run(arun()) if face == "async" else run()))
    except BaseException as exc:  # reported to the test
        results.put(("error", type(exc).__name__, str(exc)))
        for event in turns:  # let the other process finish
            event.set()


class _TakeOvers(logging.Handler):
    """The saver's log lines saying it took a lease over from another holder."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "took over the writer lease" in message:
            self.seen.append(message)


def keep_and_die(saver_kwargs: dict[str, Any], thread_id: str, host: str, ran: Any, results: Any) -> None:
    """One run with the default options, as a replica on another machine
    (`host`: a killed holder on this one is seen dead by its pid), then wait
    to be killed: the saver keeps the thread's lease after the run."""
    import socket

    socket.gethostname = lambda: host  # type: ignore[assignment]
    try:
        saver = DurableSaver(**durable_options(saver_kwargs))
        saver.setup()
        out = (
            counter().compile(checkpointer=saver).invoke({"hits": ["kept"]}, {"configurable": {"thread_id": thread_id}})
        )
        results.put(("ok", out, saver._runtime.leases.holder))
        ran.set()
        time.sleep(600)  # killed before
    except BaseException as exc:  # reported to the test
        results.put(("error", type(exc).__name__, str(exc)))


# -- run as a program, for a test that starts it in a PID namespace of its own --------------


def _hold_in_files(saver_kwargs: dict[str, Any], thread_id: str, folder: Path) -> None:
    """`hold`, signalling through files: ``entered`` when its node runs, then
    waits for ``proceed``."""

    def wait_inside(state: CountState) -> dict[str, Any]:
        (folder / "entered").touch()
        deadline = time.monotonic() + 60
        while not (folder / "proceed").exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        return {"count": state.get("count", 0) + 1}

    with DurableSaver(**durable_options(saver_kwargs)) as saver:
        graph = counter(wait_inside).compile(checkpointer=saver)
        return graph.invoke({"hits": ["holder"]}, {"configurable": {"thread_id": thread_id}}, durability="sync")


def _contend(saver_kwargs: dict[str, Any], thread_id: str, face: str) -> Any:
    """One run of the counting graph on `thread_id`, on the given face."""
    config = {"configurable": {"thread_id": thread_id}}

    async def arun() -> Any:
        async with DurableSaver(**durable_options(saver_kwargs)) as saver:
            return await counter().compile(checkpointer=saver).ainvoke({"hits": ["contender"]}, config)

    if face == "async":
        return asyncio.run(arun())
    with DurableSaver(**durable_options(saver_kwargs)) as saver:
        return counter().compile(checkpointer=saver).invoke({"hits": ["contender"]}, config)


def main(argv: list[str]) -> None:
    """``python -m tests.lease_worker hold|contend-sync|contend-async KWARGS_JSON THREAD FOLDER``:
    writes FOLDER/WHAT.json: ["ok", output, pid] or ["error", type, message, pid]."""
    import json
    import os

    what, kwargs, thread_id, folder = argv[0], json.loads(argv[1]), argv[2], Path(argv[3])
    try:
        if what == "hold":
            out = _hold_in_files(kwargs, thread_id, folder)
        else:
            out = _contend(kwargs, thread_id, what.removeprefix("contend-"))
        result = ["ok", out, os.getpid()]
    except BaseException as exc:  # reported to the test
        result = ["error", type(exc).__name__, str(exc), os.getpid()]
    (folder / f"{what}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
