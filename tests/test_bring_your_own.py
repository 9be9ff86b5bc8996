"""Connections the application owns, given as ``postgres=`` (a psycopg
pool) and ``redis=`` (a redis-py client): used on their face, the other face
served by the saver's own, left open on close, shared with a PostgresStore
in one compiled graph. Real servers, real graphs."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis as redis_lib
import redis.asyncio as aredis
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.config import get_store
from langgraph.graph import END, START, StateGraph
from langgraph.store.postgres import AsyncPostgresStore, PostgresStore
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool
from typing_extensions import TypedDict

from langgraph_durable import ConfigError, DurableSaver, Tiers

from .conftest import REDIS_URL
from .graphs import loop_graph


def _config() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}


def _requests(pool: Any) -> int:
    return int(pool.get_stats().get("requests_num", 0))


def _keys(prefix: str) -> int:
    with redis_lib.Redis.from_url(REDIS_URL) as client:
        return len(list(client.scan_iter(match=f"{prefix}:*")))


def test_a_sync_pool_and_client_serve_the_sync_face_and_stay_open(
    postgres_url: str, redis_prefix: str, tmp_path: Any
) -> None:
    # Made as an app sharing them with its own code would: dict rows, no autocommit.
    with ConnectionPool(postgres_url, kwargs={"row_factory": dict_row}) as pool:
        client = redis_lib.Redis.from_url(REDIS_URL, socket_timeout=5)
        saver = DurableSaver(
            sqlite=str(tmp_path / "local.sqlite"),
            redis=client,
            postgres=pool,
            tiers=Tiers(redis_key_prefix=redis_prefix),
        )
        before = _requests(pool)
        with saver:
            graph = loop_graph(5).compile(checkpointer=saver)
            config = _config()
            assert graph.invoke({"messages": [], "n": 0}, config)["n"] == 5
            assert len(list(saver.list(config))) == 7  # the input, then one a step and the last
        assert _requests(pool) > before, "the saver did not use the pool it was given"
        assert _keys(redis_prefix) > 0
        # Still open, and given back with its own settings.
        assert not pool.closed
        with pool.connection() as conn:
            assert conn.autocommit is False
            assert conn.execute("SELECT 1 AS one").fetchone() == {"one": 1}
        assert client.ping()
        client.close()


async def test_an_async_pool_and_client_serve_both_faces(postgres_url: str, redis_prefix: str, tmp_path: Any) -> None:
    """The async face uses the app's pool and client; the sync face (LangGraph's
    ``get_state``) one of the saver's own, to the same server."""
    async with AsyncConnectionPool(postgres_url, kwargs={"row_factory": dict_row}, open=False) as pool:
        client = aredis.Redis.from_url(REDIS_URL)
        saver = DurableSaver(
            sqlite=str(tmp_path / "local.sqlite"),
            redis=client,
            postgres=pool,
            tiers=Tiers(redis_key_prefix=redis_prefix),
        )
        before = _requests(pool)
        async with saver:
            graph = loop_graph(4).compile(checkpointer=saver)
            config = _config()
            assert (await graph.ainvoke({"messages": [], "n": 0}, config))["n"] == 4
            assert graph.get_state(config).values["n"] == 4  # the sync face
            assert (await graph.aget_state(config)).values["n"] == 4
        assert _requests(pool) > before
        assert not pool.closed
        async with pool.connection() as conn:
            assert conn.autocommit is False
            assert await (await conn.execute("SELECT 1 AS one")).fetchone() == {"one": 1}
        assert await client.ping()
        await client.aclose()
    # What the async face wrote is in Postgres, seen by a saver from a URL.
    with DurableSaver(sqlite=None, postgres=postgres_url) as other:
        assert other.get_tuple(config) is not None


class Noted(TypedDict):
    n: int
    seen: list[str]


def _noting_graph(*, asynchronous: bool) -> StateGraph:
    """Two steps, each noting its step in the graph's store and reading every note back."""

    def note(state: Noted) -> dict[str, Any]:
        store = get_store()
        store.put(("notes",), f"n{state['n']}", {"n": state["n"]})
        return {"n": state["n"] + 1, "seen": sorted(i.key for i in store.search(("notes",)))}

    async def anote(state: Noted) -> dict[str, Any]:
        store = get_store()
        await store.aput(("notes",), f"n{state['n']}", {"n": state["n"]})
        return {"n": state["n"] + 1, "seen": sorted(i.key for i in await store.asearch(("notes",)))}

    g = StateGraph(Noted)
    g.add_node("first", anote if asynchronous else note)
    g.add_node("second", anote if asynchronous else note)
    g.add_edge(START, "first")
    g.add_edge("first", "second")
    g.add_edge("second", END)
    return g


def test_a_postgres_store_shares_the_sync_pool(postgres_url: str, tmp_path: Any) -> None:
    # PostgresStore's documented pool settings.
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    with ConnectionPool(postgres_url, kwargs=kwargs, max_size=4) as pool:
        store = PostgresStore(pool)
        store.setup()
        with DurableSaver(sqlite=str(tmp_path / "local.sqlite"), postgres=pool) as saver:
            graph = _noting_graph(asynchronous=False).compile(checkpointer=saver, store=store)
            config = _config()
            out = graph.invoke({"n": 0, "seen": []}, config)
            assert out == {"n": 2, "seen": ["n0", "n1"]}
            assert saver.get_tuple(config) is not None
        # Both the store's tables and the saver's live in the one database.
        with pool.connection() as conn:
            tables = {r["tablename"] for r in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname='public'")}
        assert "store" in tables and any(t.startswith("lgd_") or "checkpoint" in t for t in tables - {"store"})
        assert store.get(("notes",), "n1") is not None  # the store still works on the pool after close


async def test_an_async_postgres_store_shares_the_async_pool(postgres_url: str, tmp_path: Any) -> None:
    kwargs = {"autocommit": True, "prepare_threshold": 0, "row_factory": dict_row}
    async with AsyncConnectionPool(postgres_url, kwargs=kwargs, max_size=4, open=False) as pool:
        store = AsyncPostgresStore(pool)
        await store.setup()
        async with DurableSaver(sqlite=None, postgres=pool) as saver:
            graph = _noting_graph(asynchronous=True).compile(checkpointer=saver, store=store)
            config = _config()
            out = await graph.ainvoke({"n": 0, "seen": []}, config)
            assert out == {"n": 2, "seen": ["n0", "n1"]}
            history = [s async for s in graph.aget_state_history(config)]
            assert len(history) >= 3
        assert await store.aget(("notes",), "n0") is not None


def test_a_closed_pool_is_a_config_error(postgres_url: str) -> None:
    pool = ConnectionPool(postgres_url, open=False)
    saver = DurableSaver(sqlite=None, postgres=pool)
    with pytest.raises(ConfigError, match=r"not open: open it"):
        saver.setup()
    saver.close()
    assert pool.closed  # the saver did not open it either


def test_a_decoding_redis_client_is_a_config_error() -> None:
    client = redis_lib.Redis.from_url(REDIS_URL, decode_responses=True)
    with pytest.raises(ConfigError, match=r"decode_responses=False"):
        DurableSaver(sqlite=None, redis=client)
    client.close()


def test_a_pool_with_settings_that_are_not_libpq_parameters_is_a_config_error() -> None:
    pool = ConnectionPool("postgresql://127.0.0.1/test", kwargs={"no_such_parameter": 1}, open=False)
    with pytest.raises(ConfigError, match=r"only libpq parameters"):
        DurableSaver(sqlite=None, postgres=pool)


def test_the_other_face_reaches_the_same_server_with_the_pools_credentials(postgres_url: str) -> None:
    """The derived address keeps what the pool's kwargs say (here the
    database name, given only in kwargs), and no psycopg attribute."""
    base, _, dbname = postgres_url.rpartition("/")
    pool = AsyncConnectionPool(f"{base}/postgres", kwargs={"dbname": dbname, "autocommit": True}, open=False)
    saver = DurableSaver(sqlite=None, postgres=pool)
    assert saver.postgres_url is not None
    assert f"dbname={dbname}" in saver.postgres_url and "autocommit" not in saver.postgres_url
    saver.setup()  # the sync face: the saver's own pool, to the pool's database
    saver.put({"configurable": {"thread_id": "x", "checkpoint_ns": ""}}, empty_checkpoint(), {}, {})
    saver.close()
    with DurableSaver(sqlite=None, postgres=postgres_url) as other:
        assert other.get_tuple({"configurable": {"thread_id": "x"}}) is not None
