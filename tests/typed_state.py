"""An application's own types kept in a graph's state, for the tests that
check they come back as themselves (not as plain dicts) after a resume.

A module of its own so a fresh process can import the same classes."""

from __future__ import annotations

import enum
import operator
from dataclasses import dataclass
from typing import Annotated, Union

import pydantic
from langgraph.func import entrypoint, task
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt
from typing_extensions import TypedDict


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Item:
    id: str
    qty: int


class Order(pydantic.BaseModel):
    id: str
    items: list[Item]
    color: Color


class State(TypedDict, total=False):
    item: Item
    order: Order
    color: Color
    maybe: Union[Item, Order] | None  # noqa: UP007 - the Optional/Union spelling is what LangGraph walks
    pairs: list[tuple[str, Item]]
    log: Annotated[list[str], operator.add]


def fill(state: State) -> State:
    item = Item("i1", 2)
    return {
        "item": item,
        "order": Order(id="o1", items=[item, Item("i2", 5)], color=Color.BLUE),
        "color": Color.RED,
        "maybe": Order(id="o2", items=[], color=Color.RED),
        "pairs": [("a", Item("p1", 1)), ("b", Item("p2", 2))],
        "log": ["fill"],
    }


def ask(state: State) -> State:
    answer = interrupt("ok?")
    return {"log": [f"answer:{answer}"]}


def use(state: State) -> State:
    # What broke when values came back as dicts: attribute access on them.
    return {"log": [f"{state['item'].id}/{state['order'].items[1].qty}/{state['maybe'].id}/{state['color'].value}"]}


def build():  # type: ignore[no-untyped-def]
    g = StateGraph(State)
    g.add_node("fill", fill)
    g.add_node("ask", ask)
    g.add_node("use", use)
    g.add_edge(START, "fill")
    g.add_edge("fill", "ask")
    g.add_edge("ask", "use")
    g.add_edge("use", END)
    return g


EXPECTED = {
    "item": Item("i1", 2),
    "order": Order(id="o1", items=[Item("i1", 2), Item("i2", 5)], color=Color.BLUE),
    "color": Color.RED,
    "maybe": Order(id="o2", items=[], color=Color.RED),
    "pairs": [("a", Item("p1", 1)), ("b", Item("p2", 2))],
}


@task
def make_order(n: int) -> Order:
    return Order(id=f"f{n}", items=[Item("x", n)], color=Color.BLUE)


def functional(checkpointer):  # type: ignore[no-untyped-def]
    @entrypoint(checkpointer=checkpointer)
    def flow(n: int) -> dict:
        order = make_order(n).result()
        answer = interrupt("ok?")
        # After the resume the task's result is read back from the checkpoint.
        return {"order": order, "qty": order.items[0].qty, "answer": answer}

    return flow


def encrypted_serde():  # type: ignore[no-untyped-def]
    """The serializer of an app that encrypts its checkpoints (LangGraph's
    EncryptedSerializer), as the CLI's ``--serde tests.typed_state:encrypted_serde``."""
    from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

    return EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
