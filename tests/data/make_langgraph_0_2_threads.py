"""Makes `langgraph_0_2_threads.sqlite`: real checkpoints in LangGraph's older
format (checkpoint v1: channels named `start:NODE`, `branch:SOURCE:COND:NODE`
and `NODE`), written by LangGraph 0.2 through its SqliteSaver.

Run it under the old versions, not the project's venv:

    python -m venv old && old/bin/pip install 'langgraph==0.2.60' 'langgraph-checkpoint-sqlite==2.0.1'
    old/bin/python tests/data/make_langgraph_0_2_threads.py tests/data/langgraph_0_2_threads.sqlite

The tests import `build` and `populate` from this file: they compile the
same graphs under today's LangGraph to resume these threads, and make
today's-format threads of the same shape with the stock savers.
"""

from __future__ import annotations

import operator
import sqlite3
import sys
from typing import Annotated

from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict


class State(TypedDict):
    log: Annotated[list, operator.add]
    n: int


def start(state: State) -> dict:
    return {"log": ["start"], "n": state["n"] + 1}


def work(state: State) -> dict:
    return {"log": [f"work {state['n']}"], "n": state["n"] + 1}


def again(state: State) -> str:
    return "work" if state["n"] < 4 else "finish"


def ask(state: State) -> dict:
    answer = interrupt({"question": "approve?", "n": state["n"]})
    return {"log": [f"answer {answer}"]}


def finish(state: State) -> dict:
    return {"log": ["finish"]}


def inner(state: State) -> dict:
    return {"log": ["inner"], "n": state["n"] + 10}


def build(*, with_question: bool, checkpointer: object) -> object:
    sub = StateGraph(State)
    sub.add_node("inner", inner)
    sub.add_edge(START, "inner")
    sub.add_edge("inner", END)

    g = StateGraph(State)
    g.add_node("start", start)
    g.add_node("work", work)
    g.add_node("sub", sub.compile())
    g.add_node("finish", finish)
    g.add_edge(START, "start")
    g.add_edge("start", "work")
    g.add_conditional_edges("work", again, ["work", "finish"])
    if with_question:
        g.add_node("ask", ask)
        g.add_edge("finish", "ask")
        g.add_edge("ask", "sub")
    else:
        g.add_edge("finish", "sub")
    g.add_edge("sub", END)
    return g.compile(checkpointer=checkpointer)


def populate(saver: object) -> None:
    """Three threads: finished, waiting at interrupt(), resumed and finished
    (the last two with a subgraph namespace)."""
    plain = build(with_question=False, checkpointer=saver)
    asking = build(with_question=True, checkpointer=saver)
    # finished
    plain.invoke({"log": [], "n": 0}, {"configurable": {"thread_id": "finished"}})
    # waiting at interrupt()
    asking.invoke({"log": [], "n": 0}, {"configurable": {"thread_id": "interrupted"}})
    # resumed once and finished, with a second run appended
    cfg = {"configurable": {"thread_id": "resumed"}}
    asking.invoke({"log": [], "n": 0}, cfg)
    asking.invoke(Command(resume="yes"), cfg)


def main(path: str) -> None:
    conn = sqlite3.connect(path, check_same_thread=False)
    populate(SqliteSaver(conn))
    conn.commit()
    conn.close()


if __name__ == "__main__":
    main(sys.argv[1])
