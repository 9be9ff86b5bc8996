"""One test body for both faces of a `DurableSaver`.

A body is an ``async def`` that calls the saver through `On`: ``await
on.put(...)`` is ``saver.put(...)`` on the sync face and ``await
saver.aput(...)`` on the async one, and so for every method pair (``lag`` /
``alag``, ``restore`` / ``arestore``, ...); `OnGraph` does the same for a
compiled graph (``invoke`` / ``ainvoke``, ``stream`` / ``astream``, ...).

`run` drives a body. On the async face it runs on a new event loop
(``asyncio.run``), as an async application would. On the sync face no event
loop runs at all: every call `On` makes is a plain sync call that returns
at once, so the coroutine finishes in one step and the saver is used
exactly as sync code uses it (a running loop would change which threads
LangGraph and the saver's sync face see).
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from langgraph_durable import DurableSaver

FACES = ("sync", "async")

T = TypeVar("T")


def run(face: str, body: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run `body` on `face` (see the module) and return what it returns."""
    assert face in FACES, face
    if face == "async":
        return asyncio.run(body())
    coro = body()
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError("a sync-face body awaited something that suspends: call it through On")


class On:
    """`saver` seen from one face (see the module)."""

    def __init__(self, saver: DurableSaver, face: str) -> None:
        assert face in FACES, face
        self.saver = saver
        self.face = face

    def __getattr__(self, name: str) -> Callable[..., Awaitable[Any]]:
        if name.startswith("_"):  # copy, pickle and friends probe dunders: no face has those
            raise AttributeError(name)
        if self.face == "sync":
            method = getattr(self.saver, name)

            async def call(*args: Any, **kwargs: Any) -> Any:
                return method(*args, **kwargs)

        else:
            amethod = getattr(self.saver, f"a{name}")

            async def call(*args: Any, **kwargs: Any) -> Any:
                return await amethod(*args, **kwargs)

        return call

    async def list(self, config: Any, **kwargs: Any) -> builtins.list[Any]:
        """``list(saver.list(...))`` or ``[t async for t in saver.alist(...)]``."""
        if self.face == "sync":
            return builtins.list(self.saver.list(config, **kwargs))
        return [t async for t in self.saver.alist(config, **kwargs)]

    async def close(self) -> None:
        """``close()`` or ``await aclose()``: each face closes what it opened."""
        if self.face == "sync":
            self.saver.close()
        else:
            await self.saver.aclose()

    async def __aenter__(self) -> On:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class OnGraph:
    """A compiled graph seen from one face: ``invoke`` / ``ainvoke``,
    ``stream`` / ``astream``, ``get_state`` / ``aget_state``,
    ``get_state_history`` / ``aget_state_history``."""

    def __init__(self, graph: Any, face: str) -> None:
        assert face in FACES, face
        self.graph = graph
        self.face = face

    async def invoke(self, payload: Any, config: Any, **kwargs: Any) -> Any:
        if self.face == "sync":
            return self.graph.invoke(payload, config, **kwargs)
        return await self.graph.ainvoke(payload, config, **kwargs)

    async def stream(self, payload: Any, config: Any, **kwargs: Any) -> builtins.list[Any]:
        """Every item the stream yields, in order."""
        if self.face == "sync":
            return builtins.list(self.graph.stream(payload, config, **kwargs))
        return [chunk async for chunk in self.graph.astream(payload, config, **kwargs)]

    async def get_state(self, config: Any, **kwargs: Any) -> Any:
        if self.face == "sync":
            return self.graph.get_state(config, **kwargs)
        return await self.graph.aget_state(config, **kwargs)

    async def history(self, config: Any) -> builtins.list[Any]:
        if self.face == "sync":
            return builtins.list(self.graph.get_state_history(config))
        return [snap async for snap in self.graph.aget_state_history(config)]
