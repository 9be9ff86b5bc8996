"""Real compiled LangGraph graphs, and a trace of what a run leaves behind.

Each scenario runs a graph against a checkpointer and returns a trace that
does not depend on checkpoint ids or timestamps, so a run on DurableSaver can
be compared with the same run on the stock InMemorySaver.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt


class LoopState(TypedDict):
    messages: Annotated[list[str], operator.add]
    n: int


def loop_graph(steps: int = 5, *, message_bytes: int = 50) -> StateGraph:
    """`steps` super-steps, each appending one message of about `message_bytes`."""

    def step(state: LoopState) -> dict[str, Any]:
        n = state.get("n", 0)
        return {"messages": [f"message {n}: " + "x" * message_bytes], "n": n + 1}

    return looping(step, steps)


def looping(step: Callable[..., Any], steps: int) -> StateGraph:
    """A LoopState graph running node `step` (sync or async) until `n` reaches `steps`."""
    g = StateGraph(LoopState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < steps else END)
    return g


def subgraph_graph() -> StateGraph:
    inner = StateGraph(LoopState)
    inner.add_node("a", lambda s: {"messages": ["inner a"], "n": s.get("n", 0) + 1})
    inner.add_node("b", lambda s: {"messages": ["inner b"], "n": s["n"] + 1})
    inner.add_edge(START, "a")
    inner.add_edge("a", "b")
    inner.add_edge("b", END)

    outer = StateGraph(LoopState)
    outer.add_node("before", lambda s: {"messages": ["outer before"]})
    outer.add_node("child", inner.compile())
    outer.add_node("after", lambda s: {"messages": [f"outer after, n={s['n']}"]})
    outer.add_edge(START, "before")
    outer.add_edge("before", "child")
    outer.add_edge("child", "after")
    outer.add_edge("after", END)
    return outer


def interrupt_graph() -> StateGraph:
    def ask(state: LoopState) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "n": state.get("n", 0)})
        return {"messages": [f"answer: {answer}"], "n": state.get("n", 0) + 1}

    g = StateGraph(LoopState)
    g.add_node("prepare", lambda s: {"messages": ["prepared"]})
    g.add_node("ask", ask)
    g.add_node("finish", lambda s: {"messages": ["finished"]})
    g.add_edge(START, "prepare")
    g.add_edge("prepare", "ask")
    g.add_edge("ask", "finish")
    g.add_edge("finish", END)
    return g


class FanState(TypedDict):
    items: list[int]
    results: Annotated[list[int], operator.add]


def fanout_graph() -> StateGraph:
    g = StateGraph(FanState)
    g.add_node("plan", lambda s: {})
    g.add_node("worker", lambda s: {"results": [s["item"] * s["item"]]})  # type: ignore[typeddict-item]
    g.add_node("total", lambda s: {"results": [sum(s["results"])]})
    g.add_edge(START, "plan")
    g.add_conditional_edges("plan", lambda s: [Send("worker", {"item": i}) for i in s["items"]], ["worker"])
    g.add_edge("worker", "total")
    g.add_edge("total", END)
    return g


def _history(graph: Any, config: dict[str, Any]) -> list[tuple[Any, ...]]:
    out = []
    for snap in graph.get_state_history(config):
        out.append(
            (
                snap.values,
                snap.next,
                snap.metadata.get("source"),
                snap.metadata.get("step"),
                len(snap.tasks),
                tuple(sorted(w for t in snap.tasks for w in ([t.name] + [str(i.value) for i in t.interrupts]))),
            )
        )
    return out


async def _ahistory(graph: Any, config: dict[str, Any]) -> list[tuple[Any, ...]]:
    out = []
    async for snap in graph.aget_state_history(config):
        out.append(
            (
                snap.values,
                snap.next,
                snap.metadata.get("source"),
                snap.metadata.get("step"),
                len(snap.tasks),
                tuple(sorted(w for t in snap.tasks for w in ([t.name] + [str(i.value) for i in t.interrupts]))),
            )
        )
    return out


def run_scenarios(checkpointer: Any, durability: str, thread_prefix: str = "t") -> dict[str, Any]:
    """Run every scenario with the sync API; return a comparable trace."""
    trace: dict[str, Any] = {}
    kw = {"durability": durability}

    g = loop_graph().compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-loop"}}
    trace["loop.result"] = g.invoke({"messages": [], "n": 0}, cfg, **kw)
    trace["loop.again"] = g.invoke({"messages": ["second input"], "n": 0}, cfg, **kw)
    trace["loop.history"] = _history(g, cfg)

    g = subgraph_graph().compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-sub"}}
    trace["sub.result"] = g.invoke({"messages": [], "n": 0}, cfg, **kw)
    trace["sub.history"] = _history(g, cfg)
    trace["sub.state"] = g.get_state(cfg, subgraphs=True).values

    g = interrupt_graph().compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-interrupt"}}
    first = g.invoke({"messages": [], "n": 0}, cfg, **kw)
    trace["interrupt.paused"] = (first["messages"], [i.value for i in first.get("__interrupt__", [])])
    trace["interrupt.next"] = g.get_state(cfg).next
    trace["interrupt.result"] = g.invoke(Command(resume="yes"), cfg, **kw)
    trace["interrupt.history"] = _history(g, cfg)

    g = fanout_graph().compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-fanout"}}
    trace["fanout.result"] = g.invoke({"items": [1, 2, 3, 4], "results": []}, cfg, **kw)
    trace["fanout.history"] = _history(g, cfg)

    g = loop_graph(4).compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-travel"}}
    g.invoke({"messages": [], "n": 0}, cfg, **kw)
    hist = list(g.get_state_history(cfg))
    older = hist[len(hist) // 2]  # with durability="exit" there are few checkpoints
    forked = g.update_state(older.config, {"messages": ["edited in the past"]})
    trace["travel.fork_state"] = g.get_state(forked).values
    trace["travel.result"] = g.invoke(None, forked, **kw)
    trace["travel.replay"] = g.invoke(None, older.config, **kw)
    trace["travel.history"] = _history(g, cfg)
    return trace


async def arun_scenarios(checkpointer: Any, durability: str, thread_prefix: str = "t") -> dict[str, Any]:
    """The same scenarios through the async API."""
    trace: dict[str, Any] = {}
    kw = {"durability": durability}

    g = loop_graph().compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-loop"}}
    trace["loop.result"] = await g.ainvoke({"messages": [], "n": 0}, cfg, **kw)
    trace["loop.again"] = await g.ainvoke({"messages": ["second input"], "n": 0}, cfg, **kw)
    trace["loop.history"] = await _ahistory(g, cfg)

    g = subgraph_graph().compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-sub"}}
    trace["sub.result"] = await g.ainvoke({"messages": [], "n": 0}, cfg, **kw)
    trace["sub.history"] = await _ahistory(g, cfg)
    trace["sub.state"] = (await g.aget_state(cfg, subgraphs=True)).values

    g = interrupt_graph().compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-interrupt"}}
    first = await g.ainvoke({"messages": [], "n": 0}, cfg, **kw)
    trace["interrupt.paused"] = (first["messages"], [i.value for i in first.get("__interrupt__", [])])
    trace["interrupt.next"] = (await g.aget_state(cfg)).next
    trace["interrupt.result"] = await g.ainvoke(Command(resume="yes"), cfg, **kw)
    trace["interrupt.history"] = await _ahistory(g, cfg)

    g = fanout_graph().compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-fanout"}}
    trace["fanout.result"] = await g.ainvoke({"items": [1, 2, 3, 4], "results": []}, cfg, **kw)
    trace["fanout.history"] = await _ahistory(g, cfg)

    g = loop_graph(4).compile(checkpointer=checkpointer)
    cfg = {"configurable": {"thread_id": f"{thread_prefix}-travel"}}
    await g.ainvoke({"messages": [], "n": 0}, cfg, **kw)
    hist = [s async for s in g.aget_state_history(cfg)]
    older = hist[len(hist) // 2]  # with durability="exit" there are few checkpoints
    forked = await g.aupdate_state(older.config, {"messages": ["edited in the past"]})
    trace["travel.fork_state"] = (await g.aget_state(forked)).values
    trace["travel.result"] = await g.ainvoke(None, forked, **kw)
    trace["travel.replay"] = await g.ainvoke(None, older.config, **kw)
    trace["travel.history"] = await _ahistory(g, cfg)
    return trace


Scenario = Callable[[Any, str], dict[str, Any]]
