"""Two versions of one app, for the rolling-update tests (`test_migrations.py`).

Version 1 keeps the request under ``topic`` and runs draft -> ask (an
interrupt) -> summarize. Version 2 calls it ``subject``, renamed the node
``draft`` to ``write``, and replaced ``summarize`` with ``finish``; its
migration step says so. Run as a script it is one replica of one version
(``python -m tests.versioned_app VERSION ACTION THREAD`` with the tiers in
``LANGGRAPH_DURABLE_*``), printing what it did as one line of JSON.
"""

from __future__ import annotations

import json
import operator
import sys
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_durable import DurableSaver, Migration, Migrations, NewerStateVersion


class StateV1(TypedDict, total=False):
    topic: str
    log: Annotated[list[str], operator.add]
    answer: str


class StateV2(TypedDict, total=False):
    subject: str
    log: Annotated[list[str], operator.add]
    answer: str


def _ask(key: str, tag: str) -> Any:
    def ask(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt({"question": f"publish {state.get(key)!r}?"})
        return {"answer": answer, "log": [f"{tag}:{answer}"]}

    return ask


def graph_v1() -> StateGraph:
    g = StateGraph(StateV1)
    g.add_node("draft", lambda s: {"log": [f"draft:{s['topic']}"]})
    g.add_node("ask", _ask("topic", "ask1"))
    g.add_node("summarize", lambda s: {"log": [f"summarize:{s['topic']}"]})
    g.add_edge(START, "draft")
    g.add_edge("draft", "ask")
    g.add_edge("ask", "summarize")
    g.add_edge("summarize", END)
    return g


def graph_v2() -> StateGraph:
    g = StateGraph(StateV2)
    g.add_node("write", lambda s: {"log": [f"write:{s['subject']}"]})
    g.add_node("ask", _ask("subject", "ask2"))
    g.add_node("finish", lambda s: {"log": [f"finish:{s['subject']}"]})
    g.add_edge(START, "write")
    g.add_edge("write", "ask")
    g.add_edge("ask", "finish")
    g.add_edge("finish", END)
    return g


def v1_migrations(**options: Any) -> Migrations:
    return Migrations(version=1, **options)


def v2_migrations(**options: Any) -> Migrations:
    m = Migrations(version=2, **options)

    @m.step(from_version=1)
    def topic_is_subject(step: Migration) -> None:
        step.rename("topic", "subject")
        step.rename_node("draft", "write")
        step.remove_node("summarize", reroute_to="finish")

    return m


GRAPHS = {1: graph_v1, 2: graph_v2}
MIGRATIONS = {1: v1_migrations, 2: v2_migrations}
MIGRATIONS_V2 = v2_migrations()  # for --migrations tests.versioned_app:MIGRATIONS_V2


def cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def main(argv: list[str]) -> int:
    """One replica: ``VERSION start|resume THREAD``; prints the outcome as JSON."""
    version, action, thread = int(argv[0]), argv[1], argv[2]
    with DurableSaver.from_env(migrations=MIGRATIONS[version]()) as saver:
        graph = GRAPHS[version]().compile(checkpointer=saver)
        try:
            if action == "start":
                out = graph.invoke({"topic": "cats"}, cfg(thread))
            else:
                out = graph.invoke(Command(resume="yes"), cfg(thread))
        except NewerStateVersion as exc:
            print(json.dumps({"refused": True, "version": exc.version, "running": exc.running}))
            return 0
        state = graph.get_state(cfg(thread))
        print(
            json.dumps(
                {
                    "log": out.get("log"),
                    "waiting": bool(out.get("__interrupt__")),
                    "state_version": state.metadata.get("state_version"),
                    "pins": len(saver.pins(thread)),
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
