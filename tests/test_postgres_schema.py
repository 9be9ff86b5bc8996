"""``postgres_schema=``: the saver's tables in a schema of their own, named
in every statement, so two applications share one database, each in its
schema, through pools of their own (whose ``configure=`` callbacks set a
search_path the saver's other face could not run), through URLs, and
behind PgBouncer. Real servers, real graphs."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from langgraph_durable import ConfigError, DurableSaver, Tiers

from .graphs import loop_graph

pytestmark = pytest.mark.postgres


def _tables(url: str) -> dict[str, set[str]]:
    """The saver's tables, by schema."""
    found: dict[str, set[str]] = {}
    with psycopg.connect(url) as conn:
        for schema, table in conn.execute("SELECT schemaname, tablename FROM pg_tables WHERE tablename LIKE 'lgd_%'"):
            found.setdefault(schema, set()).add(table)
    return found


def _thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": "user-42"}}


def _set_path(schema: str) -> Any:
    async def configure(conn: Any) -> None:
        await conn.execute(f"SET search_path TO {schema}")
        await conn.commit()

    return configure


async def test_a_pool_whose_configure_sets_a_search_path_needs_a_schema_named(postgres_url: str) -> None:
    """The other face's pool cannot run an async callback: a search_path it
    sets would hold on one face only. Refused at once, saying what to pass."""
    async with AsyncConnectionPool(postgres_url, configure=_set_path("app_a"), open=False) as pool:
        with pytest.raises(ConfigError, match=r"configure callback.*Tiers\(postgres_schema='\.\.\.'\)"):
            DurableSaver(sqlite=None, postgres=pool)
    assert _tables(postgres_url) == {}, "nothing was created"


@pytest.mark.parametrize("bad", ["", "pg_mine", "x" * 64, 5])
def test_a_bad_schema_name_is_a_config_error(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"Tiers\(postgres_schema=\) must be"):
        DurableSaver(sqlite=None, postgres="postgresql://u@127.0.0.1:1/db", tiers=Tiers(postgres_schema=bad))


async def test_two_apps_in_two_schemas_of_one_database_through_their_own_pools(postgres_url: str) -> None:
    """App A and app B each pass an async pool that sets its own search_path,
    with their schema named. Each app's sync face (get_state, as LangGraph
    and its server call it) reads the thread its async face wrote; neither
    reads the other's thread of the same id; no table lands in public."""
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute('CREATE SCHEMA "App B"')  # made by an administrator; a quoted name
    apps = {"app_a": "app_a", "app_b": "App B"}
    graph_of: dict[str, Any] = {}
    pools = []
    try:
        for name, schema in apps.items():
            pool = AsyncConnectionPool(postgres_url, configure=_set_path(f'"{schema}"'), open=False)
            await pool.open()
            pools.append(pool)
            saver = DurableSaver(sqlite=None, postgres=pool, tiers=Tiers(postgres_schema=schema))
            await saver.asetup()
            graph_of[name] = (loop_graph(3 if name == "app_a" else 5).compile(checkpointer=saver), saver)
        for name, (graph, _) in graph_of.items():
            out = await graph.ainvoke({"messages": [name], "n": 0}, _thread())
            assert out["n"] == (3 if name == "app_a" else 5)
        for name, (graph, _) in graph_of.items():
            state = graph.get_state(_thread())  # the sync face: the saver's own pool
            assert state.values["n"] == (3 if name == "app_a" else 5), name
            assert state.values["messages"][0] == name, f"{name} read another app's thread"
            assert len(list(graph.get_state_history(_thread()))) == (5 if name == "app_a" else 7)
    finally:
        for _, saver in graph_of.values():
            await saver.aclose()
        for pool in pools:
            await pool.close()
    tables = _tables(postgres_url)
    assert set(tables) == {"app_a", "App B"}, tables
    assert tables["app_a"] == tables["App B"] and "lgd_checkpoints" in tables["app_a"]


def test_a_sync_pool_with_a_schema_and_a_url_with_the_same_schema_address_the_same_tables(postgres_url: str) -> None:
    def configure(conn: Any) -> None:
        conn.execute("SET search_path TO elsewhere, public")
        conn.commit()

    with ConnectionPool(postgres_url, configure=configure) as pool:
        with DurableSaver(sqlite=None, postgres=pool, tiers=Tiers(postgres_schema="agents")) as saver:
            loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _thread())
    with DurableSaver(sqlite=None, postgres=postgres_url, tiers=Tiers(postgres_schema="agents")) as by_url:
        assert by_url.get_tuple(_thread()).checkpoint["channel_values"]["n"] == 2
    with DurableSaver(sqlite=None, postgres=postgres_url) as in_public:  # another place: nothing there
        assert in_public.get_tuple(_thread()) is None
    assert set(_tables(postgres_url)) == {"agents", "public"}


def test_the_schema_from_the_environment(postgres_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGGRAPH_DURABLE_POSTGRES_URL", postgres_url)
    monkeypatch.setenv("LANGGRAPH_DURABLE_SQLITE", "")
    monkeypatch.setenv("LANGGRAPH_DURABLE_POSTGRES_SCHEMA", "from_env")
    with DurableSaver.from_env() as saver:
        assert saver.postgres_schema == "from_env"
        saver.setup()
    assert set(_tables(postgres_url)) == {"from_env"}
    monkeypatch.setenv("LANGGRAPH_DURABLE_POSTGRES_SCHEMA", "pg_bad")
    with pytest.raises(ConfigError, match=r"LANGGRAPH_DURABLE_POSTGRES_SCHEMA: Tiers\(postgres_schema=\) must be"):
        DurableSaver.from_env()


def test_a_schema_behind_pgbouncer_in_transaction_mode(postgres_url: str) -> None:
    """Each statement may run in another server session: the tables are
    named in the statements, never found through a session's search_path."""
    from .conftest import POSTGRES_URL
    from .pgbouncer import PrivateBouncer

    with PrivateBouncer(POSTGRES_URL) as bouncer:
        url = bouncer.url_for(postgres_url)
        for _ in range(2):  # the second finds the schema made by the first
            with DurableSaver(
                sqlite=None, postgres=url, tiers=Tiers(postgres_schema="pooled", postgres_prepared_statements=False)
            ) as saver:
                graph = loop_graph(3).compile(checkpointer=saver)
                config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:8]}"}}
                assert graph.invoke({"messages": [], "n": 0}, config)["n"] == 3
    assert set(_tables(postgres_url)) == {"pooled"}


def test_every_statement_names_its_tables_in_the_schema() -> None:
    """Statement by statement, without a server: no table of the saver's is
    left to the search_path (an index's name and a row lock's OF stay bare,
    as Postgres requires), and qualifying twice changes nothing."""
    import re

    from langgraph_durable.tiers.postgres import sql

    in_schema = sql.in_schema('we"ird')
    bare = re.compile(r"(?<![\w.\"])lgd_(checkpoints|blobs|writes|quarantine|ledger|meta|leases|migrations)\b(?!_)")
    allowed = re.compile(r"FOR SHARE OF lgd_leases")
    texts = []
    for name, value in vars(in_schema).items():
        texts += [(name, v) for v in (value if isinstance(value, list | tuple) else [value]) if isinstance(v, str)]
    texts += [("fenced", in_schema.fenced((in_schema.INSERT_WRITES,), renew=False))]
    every = dict.fromkeys(("thread_id", "ns", "checkpoint_id", "before", "filter", "limit"), True)
    texts += [("select_checkpoints", in_schema.select_checkpoints(**every))]
    texts += [("grouped", in_schema.qualify(sql.GROUPED))]
    assert len(texts) > 50
    for name, text in texts:
        assert not bare.search(allowed.sub("", text)), (name, text)
        assert in_schema.qualify(text) == text, name
    assert '"we""ird".lgd_checkpoints' in in_schema.SELECT_CHECKPOINT
