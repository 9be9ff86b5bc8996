"""A small LangGraph worker checkpointed by ``DurableSaver.from_env()``.

Each replica runs one thread (``AGENT_THREAD_ID``, default: the host name,
which in a StatefulSet is the stable pod name ``agent-0``, ``agent-1``, ...).
A run is ``AGENT_STEPS`` steps of ``AGENT_STEP_SECONDS`` each. At start, a
run that a stop or a crash cut short is resumed from its last checkpoint;
then new runs follow, forever. Kill the container at any point and start it
again: the thread goes on where it was.

On SIGTERM (``docker compose stop``, a pod being deleted) the handler of
`drain_on_sigterm` starts shipping to Redis / Postgres what they are still
owed, for up to ``DRAIN_TIMEOUT_S`` seconds, and the process stops with
status 143; leaving the ``with`` block closes the saver, which waits for that
drain, then drains again, for up to the saver's ``drain_timeout``, only if
something is still owed. A process that has not exited 10 s after the drain
ended (``exit_grace``) is ended then. The grace periods in
docker-compose.yml and kubernetes/statefulset.yaml are sized from these
numbers.

The file ``AGENT_HEARTBEAT`` is touched after every step: the container's
probes look at its age instead of connecting to the tiers.
"""

from __future__ import annotations

import logging
import operator
import os
import socket
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from langgraph_durable import DurableError, DurableSaver
from langgraph_durable.shutdown import drain_on_sigterm

# Seconds the SIGTERM drain keeps shipping the backlog. Keep it, plus
# drain_on_sigterm's exit_grace (10 s by default), below the container's grace period.
DRAIN_TIMEOUT_S = 20.0

THREAD_ID = os.environ.get("AGENT_THREAD_ID") or socket.gethostname()
STEPS = int(os.environ.get("AGENT_STEPS", "5"))
STEP_SECONDS = float(os.environ.get("AGENT_STEP_SECONDS", "2"))
HEARTBEAT = Path(os.environ.get("AGENT_HEARTBEAT", "/tmp/agent.heartbeat"))

log = logging.getLogger("agent")


class State(TypedDict, total=False):
    run: int  # runs started on this thread
    step: int  # steps done in the current run
    log: Annotated[list[str], operator.add]  # grows across runs and restarts


def work(state: State) -> State:
    time.sleep(STEP_SECONDS)  # stands for a model or tool call
    step = state.get("step", 0) + 1
    beat()
    return {"step": step, "log": [f"run {state.get('run', 0)} step {step} on {socket.gethostname()}"]}


def build_graph() -> StateGraph:
    graph = StateGraph(State)
    graph.add_node("work", work)
    graph.add_edge(START, "work")
    graph.add_conditional_edges("work", lambda s: "work" if s["step"] < STEPS else END)
    return graph


def advance(graph: Any, thread_id: str) -> State:
    """Resume the thread's unfinished run if it has one, else start a new run."""
    config = {"configurable": {"thread_id": thread_id}, "recursion_limit": STEPS + 10}
    snapshot = graph.get_state(config)
    if snapshot.next:
        log.info(
            "thread %s: resuming run %s at step %s", thread_id, snapshot.values.get("run"), snapshot.values.get("step")
        )
        start = None
    else:
        start = {"run": snapshot.values.get("run", 0) + 1, "step": 0}
        log.info("thread %s: starting run %s", thread_id, start["run"])
    # durability="sync": each step's checkpoint is stored before the next step
    # starts, so a crash loses at most the step in flight.
    return graph.invoke(start, config, durability="sync")


def beat() -> None:
    HEARTBEAT.touch()


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # on_busy="wait": a previous process of this replica that was killed
    # (not stopped) still holds the thread's lease until it expires.
    saver = DurableSaver.from_env(on_busy="wait")
    drain_on_sigterm(saver, timeout=DRAIN_TIMEOUT_S)
    with saver:
        saver.setup()
        graph = build_graph().compile(checkpointer=saver)
        log.info("tiers %s, write mode %r, thread %s", " -> ".join(saver.tier_names), saver.write, THREAD_ID)
        while True:
            beat()
            try:
                state = advance(graph, THREAD_ID)
                log.info("thread %s: run %s done, %s steps so far", THREAD_ID, state["run"], len(state["log"]))
            except DurableError as exc:  # e.g. every shared tier down: wait and try again
                log.error("thread %s: %s", THREAD_ID, exc)
                time.sleep(STEP_SECONDS)


if __name__ == "__main__":
    main()
