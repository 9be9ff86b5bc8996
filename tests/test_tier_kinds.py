"""A tier kind is a package and one registration: a kind registered from
outside the package (here, from the tests) is taken by every room that
names tiers, with nothing else changed. The test kind, ``warehouse``, is a
system of record whose URLs read ``warehouse://...``: its classes are the
Postgres tier's, reached through a URL of its own, so it runs against the
real Postgres the tests use."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from langgraph_durable import ConfigError, DurableSaver, Leases, Tiers, TierStats, cli
from langgraph_durable import register_tier_kind as register
from langgraph_durable.model.roles import Role
from langgraph_durable.tiers.postgres import kind as postgres_kind
from langgraph_durable.tiers.postgres.tier import PostgresTier
from langgraph_durable.tiers.postgres.tier_async import AsyncPostgresTier
from langgraph_durable.tiers.registry import TierKind, kinds, unregister

from .conftest import REDIS_URL
from .graphs import loop_graph

SCHEME = "warehouse://"
ENV = "LANGGRAPH_DURABLE_TEST_WAREHOUSE_URL"


def postgres_of(url: str) -> str:
    return "postgresql://" + url.removeprefix(SCHEME)


class WarehouseTier(PostgresTier):
    name = "warehouse"

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(postgres_of(url), **options)


class AsyncWarehouseTier(AsyncPostgresTier):
    name = "warehouse"

    def __init__(self, url: str, **options: Any) -> None:
        super().__init__(postgres_of(url), **options)


WAREHOUSE = TierKind(
    keyword="warehouse",
    role=Role.RECORD,
    env=ENV,
    schemes=(SCHEME,),
    what="warehouse:// URL of the test's record tier",
    classes=(WarehouseTier, AsyncWarehouseTier),
    arguments=postgres_kind.arguments,
    ears=postgres_kind.ears,
)


@pytest.fixture
def warehouse(postgres_url: str) -> Iterator[str]:
    """The test kind registered, and a URL of it on the test's database."""
    register(WAREHOUSE)
    try:
        yield SCHEME + postgres_url.removeprefix("postgresql://")
    finally:
        unregister(WAREHOUSE.keyword)
    assert WAREHOUSE not in kinds()


def _saver(tmp_path: Path, warehouse: str, redis_prefix: str, name: str = "local.sqlite", **options: Any) -> Any:
    return DurableSaver(
        sqlite=str(tmp_path / name),
        redis=REDIS_URL,
        tiers=Tiers(redis_key_prefix=redis_prefix),
        warehouse=warehouse,
        **options,
    )


def _run(saver: Any, thread: str, *, face: str = "sync", steps: int = 3) -> dict[str, Any]:
    graph = loop_graph(steps).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": thread}}
    if face == "sync":
        return graph.invoke({"messages": [], "n": 0}, config)
    return asyncio.run(graph.ainvoke({"messages": [], "n": 0}, config))


def _rows_in_postgres(postgres_url: str) -> int:
    with psycopg.connect(postgres_url) as conn:
        row = conn.execute("SELECT count(*) FROM lgd_checkpoints").fetchone()
    assert row is not None
    return int(row[0])


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_registered_kind_is_a_tier_of_the_saver(
    tmp_path: Path, warehouse: str, redis_prefix: str, postgres_url: str, face: str
) -> None:
    stats = TierStats()
    with _saver(tmp_path, warehouse, redis_prefix, metrics=stats) as saver:
        assert saver.tier_names == ["sqlite", "redis", "warehouse"]
        assert _run(saver, "t", face=face)["n"] == 3
        assert stats.tiers == ["sqlite", "redis", "warehouse"]  # in the registry's order
    # It is the system of record: the checkpoints are in its database, and a
    # saver on that database alone (the built-in kind) reads the thread whole.
    assert _rows_in_postgres(postgres_url) >= 3
    with DurableSaver(sqlite=None, postgres=postgres_url) as record:
        state = record.get_tuple({"configurable": {"thread_id": "t"}})
        assert state is not None and state.checkpoint["channel_values"]["n"] == 3


def test_from_env_and_the_command_line_take_a_registered_kind(
    tmp_path: Path, warehouse: str, redis_prefix: str, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setenv(ENV, warehouse)
    monkeypatch.setenv("LANGGRAPH_DURABLE_SQLITE", str(tmp_path / "env.sqlite"))
    monkeypatch.delenv("LANGGRAPH_DURABLE_POSTGRES_URL", raising=False)
    monkeypatch.delenv("LANGGRAPH_DURABLE_REDIS_URL", raising=False)
    with DurableSaver.from_env() as saver:
        assert saver.tier_names == ["sqlite", "warehouse"]
        _run(saver, "from-env")
    # Its flag, on every command that opens a store, and in --help.
    monkeypatch.delenv(ENV)
    assert cli.main(["threads", "--json", "--sqlite", "", "--warehouse", warehouse]) == cli.EXIT_OK
    assert "from-env" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        cli.main(["threads", "--help"])
    assert "--warehouse URL" in capsys.readouterr().out


def test_a_kept_lease_on_a_registered_kind_is_handed_off(tmp_path: Path, warehouse: str, redis_prefix: str) -> None:
    """Its ears hook: a replica that wants a thread another keeps after its
    run asks on the kind's tier, and gets it at once."""
    linger = Leases(linger=30.0)
    with (
        _saver(tmp_path, warehouse, redis_prefix, "a.sqlite", leases=linger) as a,
        _saver(tmp_path, warehouse, redis_prefix, "b.sqlite", leases=linger) as b,
    ):
        _run(a, "shared")
        assert a._runtime.leases.kept("shared", time.monotonic()) is not None  # kept after the run
        assert _run(b, "shared", steps=2)["n"] == 2  # on_busy="raise": asked for, and given back


def test_two_tiers_in_one_role_are_refused(tmp_path: Path, warehouse: str, postgres_url: str) -> None:
    with pytest.raises(ConfigError, match="postgres= and warehouse= are both record tiers"):
        DurableSaver(sqlite=str(tmp_path / "x.sqlite"), postgres=postgres_url, warehouse=warehouse)
    assert not (tmp_path / "x.sqlite").exists()


def test_a_kind_s_url_is_checked_and_unknown_keywords_are_type_errors(tmp_path: Path, warehouse: str) -> None:
    with pytest.raises(ConfigError, match=r"warehouse= got 'postgresql://.*which is not a warehouse URL"):
        DurableSaver(sqlite=str(tmp_path / "x.sqlite"), warehouse="postgresql://127.0.0.1/x")
    with pytest.raises(TypeError, match="unexpected keyword argument 'lakehouse'"):
        DurableSaver(sqlite=str(tmp_path / "x.sqlite"), lakehouse="warehouse://x")
    assert not (tmp_path / "x.sqlite").exists()


def test_a_kind_registers_once_and_built_in_kinds_stay(warehouse: str) -> None:
    assert register(WAREHOUSE) is WAREHOUSE  # again, the same row: nothing changes
    with pytest.raises(ConfigError, match="already registered"):
        register(TierKind(**{**WAREHOUSE.__dict__, "what": "another"}))
    with pytest.raises(ConfigError, match="built-in"):
        unregister("postgres")
    assert [k.keyword for k in kinds()] == ["sqlite", "redis", "postgres", "warehouse"]
    assert os.environ.get(ENV) is None


@pytest.mark.parametrize(
    ("change", "said"),
    [
        ({"keyword": "serde", "env": "LGD_TEST_A", "schemes": ("a://",)}, "an option of that name"),
        ({"keyword": "write", "env": "LGD_TEST_B", "schemes": ("b://",)}, "an option of that name"),
        ({"keyword": "archive", "env": "LGD_TEST_C", "schemes": ("c://",)}, "an option of that name"),
        ({"keyword": "tiers", "env": "LGD_TEST_D", "schemes": ("d://",)}, "an option of that name"),
        ({"keyword": "lease_linger", "env": "LGD_TEST_E", "schemes": ("e://",)}, "an option of that name"),
        ({"keyword": "lakehouse", "env": "LANGGRAPH_DURABLE_SERDE", "schemes": ("f://",)}, "variable"),
        ({"keyword": "lakehouse", "env": "LGD_TEST_G", "schemes": ()}, "URL schemes"),
        ({"keyword": "lakehouse", "env": "LGD_TEST_H", "schemes": ("h://",), "ears": None}, "needs ears="),
        ({"keyword": "lakehouse", "env": "LGD_TEST_I", "schemes": ("i://",), "role": Role.HOT}, "is a record tier"),
        (
            {"keyword": "lakehouse", "env": "LGD_TEST_J", "schemes": ("j://",), "classes": ("nowhere.at_all:X",) * 2},
            "cannot be imported",
        ),
    ],
    ids=lambda v: v["keyword"] + "-" + v["env"] if isinstance(v, dict) else None,
)
def test_a_kind_that_would_take_another_s_place_is_refused(change: dict[str, Any], said: str) -> None:
    """A kind registered under an option's name would have from_env drop
    that option's variable (a serializer, an archive) and the command line
    break; a shared kind with no way to hear hand-offs would keep no lease."""
    with pytest.raises(ConfigError, match=said):
        register(TierKind(**{**WAREHOUSE.__dict__, **change}))
    assert [k.keyword for k in kinds()] == ["sqlite", "redis", "postgres"]


def test_a_saver_keeps_its_kinds_when_one_is_unregistered(
    tmp_path: Path, warehouse: str, redis_prefix: str, postgres_url: str
) -> None:
    """The async face's tiers are made at its first call: from the kinds the
    saver was made with, not the registry of that moment."""
    with _saver(tmp_path, warehouse, redis_prefix, write="all") as saver:
        unregister(WAREHOUSE.keyword)
        assert _run(saver, "after", face="async")["n"] == 3
        assert saver.tier_names == ["sqlite", "redis", "warehouse"]
    register(WAREHOUSE)  # as the fixture left it
    with DurableSaver(sqlite=None, postgres=postgres_url) as record:
        assert record.get_tuple({"configurable": {"thread_id": "after"}}) is not None  # in the record tier


def test_a_registered_kind_counts_as_a_shared_tier(tmp_path: Path, warehouse: str) -> None:
    from langgraph_durable import Memory

    with DurableSaver(sqlite=str(tmp_path / "w.sqlite"), warehouse=warehouse, write="local") as behind:
        _run(behind, "behind")
    with DurableSaver(
        sqlite=str(tmp_path / "b.sqlite"), warehouse=warehouse, memory=Memory(local_max_bytes=1 << 20)
    ) as bounded:
        assert bounded.tier_names == ["sqlite", "warehouse"]
