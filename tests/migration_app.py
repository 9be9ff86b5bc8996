"""A small app across two deploys, for the command line's ``--migrations``
(``tests.migration_app:migrations``): version 1 of its graph keeps the
draft's ``topic``, version 2 calls it ``subject``, and `migrations` carries
threads from one to the other.

Both graphs outline the draft, stop at an ``interrupt()`` for approval and
then write it; each node reads the key of its own version, so a version 2
graph on a thread that was not migrated fails with a KeyError.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt

from langgraph_durable import Migration, Migrations


class DraftV1(TypedDict):
    topic: str
    notes: Annotated[list[str], operator.add]


class DraftV2(TypedDict):
    subject: str
    notes: Annotated[list[str], operator.add]


def _graph(state: type, key: str) -> StateGraph:
    def outline(s: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"outline of {s[key]}"]}

    def approve(s: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt({"approve": s[key]})
        return {"notes": [f"approved: {answer}"]}

    def write(s: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"written about {s[key]}"]}

    g = StateGraph(state)
    g.add_node("outline", outline)
    g.add_node("approve", approve)
    g.add_node("write", write)
    g.add_edge(START, "outline")
    g.add_edge("outline", "approve")
    g.add_edge("approve", "write")
    g.add_edge("write", END)
    return g


def graph_v1() -> StateGraph:
    return _graph(DraftV1, "topic")


def graph_v2() -> StateGraph:
    return _graph(DraftV2, "subject")


def topic_is_now_subject(m: Migration) -> None:
    m.rename("topic", "subject")


def unchanged(m: Migration) -> None:
    """Version 3 changed nothing of the state (a new node, say)."""


POISON = "poison"


def rename_unless_poisoned(m: Migration) -> None:
    """A step with a bug: it raises on one thread's value."""
    if m.values.get("topic") == POISON:
        raise ValueError(f"cannot rename a topic of {POISON!r}")
    m.rename("topic", "subject")


# Deploy 1, declaring its version: checkpoints stamped 1.
migrations_v1 = Migrations(version=1)

# Deploy 2: what `migrate` runs.
migrations = Migrations(version=2, steps={1: topic_is_now_subject})

# Deploy 2 with a step that raises on the thread whose topic is POISON.
failing = Migrations(version=2, steps={1: rename_unless_poisoned})

# A deploy 3 that lost the step from version 1: threads of version 1 are unreachable.
ahead = Migrations(version=3, steps={2: unchanged})

# Deploy 3, complete: it writes threads of version 3 (newer than deploy 2).
migrations_v3 = Migrations(version=3, steps={1: topic_is_now_subject, 2: unchanged})


def make_migrations() -> Migrations:
    """`migrations`, from a function (``--migrations tests.migration_app:make_migrations``)."""
    return migrations


NOT_MIGRATIONS = {"version": 2}
