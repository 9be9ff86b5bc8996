"""The public API as README.md and docs/ show it: the package's names
(``__all__``, imported when first used), and `DurableSaver.from_urls`."""

from __future__ import annotations

import asyncio
import collections
import operator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

import langgraph_durable
from langgraph_durable import ConfigError, DurableSaver, Tiers
from tests.flat_options import durable_options

from .conftest import REDIS_URL
from .tamper import RedisStore, postgres_store, sqlite_store

# -- the package's names ------------------------------------------------------------------------


def test_every_public_name_resolves_once() -> None:
    names = langgraph_durable.__all__
    assert [n for n, count in collections.Counter(names).items() if count > 1] == []
    missing = [n for n in names if getattr(langgraph_durable, n, None) is None]
    assert missing == []
    # `from langgraph_durable import *` goes through the same names.
    star: dict[str, Any] = {}
    exec("from langgraph_durable import *", star)
    assert set(names) <= set(star)
    assert star["DurableSaver"] is DurableSaver


def test_every_lazily_imported_name_is_public() -> None:
    # A name the package imports on first use but leaves out of __all__ is
    # missing from `import *` and from the API reference.
    lazy = set(langgraph_durable._EXPORTS)
    assert lazy - set(langgraph_durable.__all__) == set()
    assert set(langgraph_durable.__all__) - lazy == set()
    assert set(langgraph_durable.__all__) <= set(dir(langgraph_durable))


# -- from_urls, as README.md's Quickstart uses it -----------------------------------------------


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def _quickstart() -> Any:
    """README.md's Quickstart graph."""
    builder = StateGraph(State)
    builder.add_node("work", lambda state: {"steps": ["done"]})
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    return builder


def test_from_urls_names_the_three_tiers_and_a_thread_continues(
    tmp_path: Path, postgres_url: str, redis_prefix: str
) -> None:
    config = {"configurable": {"thread_id": "t1"}}
    urls = {"sqlite": str(tmp_path / "checkpoints.sqlite"), "redis": REDIS_URL, "postgres": postgres_url}
    # Keyword options pass through to the constructor (a prefix of the test's own).
    for expected in (["done"], ["done", "done"]):  # "Run it twice: the second run continues thread t1"
        with DurableSaver.from_urls(**durable_options(urls), tiers=Tiers(redis_key_prefix=redis_prefix)) as saver:
            assert saver.tier_names == ["sqlite", "redis", "postgres"]
            assert (saver.sqlite_path, saver.redis_url, saver.postgres_url) == tuple(urls.values())
            assert saver.redis_key_prefix == redis_prefix
            graph = _quickstart().compile(checkpointer=saver)
            assert graph.invoke({"steps": []}, config) == {"steps": expected}
            newest = graph.get_state(config).config["configurable"]["checkpoint_id"]
            assert saver.drain(30).caught_up
    # Each tier the URLs named holds the thread (read directly, not through the saver).
    redis = RedisStore(REDIS_URL, redis_prefix)
    stores = [sqlite_store(urls["sqlite"]), redis, postgres_store(postgres_url)]
    try:
        for store in stores:
            assert newest in store.record_ids("t1", ""), store.name
    finally:
        for store in stores:
            store.close()


def test_from_urls_serves_the_async_face(postgres_url: str) -> None:
    # "The same object serves invoke and ainvoke / astream; in async code use async with".
    config = {"configurable": {"thread_id": "t1"}}

    async def main() -> list[Any]:
        async with DurableSaver.from_urls(sqlite=None, postgres=postgres_url) as saver:
            graph = _quickstart().compile(checkpointer=saver)
            assert await graph.ainvoke({"steps": []}, config) == {"steps": ["done"]}
            return [chunk async for chunk in graph.astream({"steps": []}, config, stream_mode="values")]

    streamed = asyncio.run(main())
    assert streamed[-1] == {"steps": ["done", "done"]}
    with DurableSaver(sqlite=None, postgres=postgres_url) as again:
        assert again.get_tuple(config).checkpoint["channel_values"]["steps"] == ["done", "done"]


def test_from_urls_defaults_to_the_local_file_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The documented default path is relative: it lands in the working directory.
    monkeypatch.chdir(tmp_path)
    with DurableSaver.from_urls() as saver:
        assert saver.tier_names == ["sqlite"]
        assert saver.sqlite_path == ".langgraph_durable/checkpoints.sqlite"
        assert (saver.redis_url, saver.postgres_url) == (None, None)
        _quickstart().compile(checkpointer=saver).invoke({"steps": []}, {"configurable": {"thread_id": "t1"}})
    assert (tmp_path / ".langgraph_durable" / "checkpoints.sqlite").is_file()


def test_from_urls_in_memory_and_no_local_tier(postgres_url: str) -> None:
    with DurableSaver.from_urls(sqlite=":memory:") as memory:
        assert memory.tier_names == ["sqlite"] and memory.sqlite_path == ":memory:"
        graph = _quickstart().compile(checkpointer=memory)
        assert graph.invoke({"steps": []}, {"configurable": {"thread_id": "t1"}}) == {"steps": ["done"]}
    with DurableSaver.from_urls(sqlite=None, postgres=postgres_url, write="all") as shared:
        assert shared.tier_names == ["postgres"] and shared.sqlite_path is None and shared.write == "all"
    with pytest.raises(ConfigError):
        DurableSaver.from_urls(sqlite=None)  # no tier at all
    with pytest.raises(TypeError):
        DurableSaver.from_urls(sqlite=":memory:", no_such_option=1)


def test_each_sync_method_has_an_async_twin_with_the_same_parameters() -> None:
    """The two faces take the same arguments and are both documented: a
    method added to one face alone, or a keyword to one twin, fails here."""
    import inspect

    from langgraph_durable import DurableSaver

    public = {n for n in dir(DurableSaver) if not n.startswith("_") and inspect.isfunction(getattr(DurableSaver, n))}
    # No I/O (no twin in BaseCheckpointSaver either), or a view of the saver.
    one_face = {"add_validator", "get_next_version", "with_allowlist"}
    for name in sorted(public - one_face):
        method = getattr(DurableSaver, name)
        if inspect.iscoroutinefunction(method) or inspect.isasyncgenfunction(method):
            assert name.startswith("a") and name[1:] in public, f"{name} has no sync twin"
            sync = getattr(DurableSaver, name[1:])
            assert list(inspect.signature(method).parameters) == list(inspect.signature(sync).parameters), name
            assert (method.__doc__ or "").strip(), f"{name} has no docstring"
        else:
            assert f"a{name}" in public, f"{name} has no async twin"
