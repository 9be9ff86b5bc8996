"""Bad input and unreachable tiers: typed errors that say what to do, and
nothing half-written left behind."""

from __future__ import annotations

import sqlite3
import threading
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import redis as redis_lib
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from langgraph.graph import END, START, StateGraph

from langgraph_durable import ConfigError, DurableError, DurableSaver, SerializationError, TierUnavailable

from .conftest import CONFIGS, REDIS_URL
from .proxy import TcpProxy


def _all_rows(saver: DurableSaver, thread_id: str) -> list[Any]:
    return list(saver.list({"configurable": {"thread_id": thread_id}}))


@pytest.mark.parametrize("tiers", CONFIGS)
def test_unserializable_value_names_the_channel_and_writes_nothing(make_saver: Any, tiers: str) -> None:
    with make_saver(tiers) as saver:
        cfg = generate_config("t-bad")
        cp = generate_checkpoint(channel_values={"fine": 1, "handle": threading.Lock()})
        cp["channel_versions"] = {"fine": 1, "handle": 1}
        with pytest.raises(SerializationError) as info:
            saver.put(cfg, cp, generate_metadata(), {"fine": 1, "handle": 1})
        assert info.value.channel == "handle"
        assert "'handle'" in str(info.value) and "lock" in str(info.value)
        assert isinstance(info.value, DurableError) and isinstance(info.value, TypeError)
        assert _all_rows(saver, "t-bad") == []


def test_unserializable_value_in_a_real_graph(make_saver: Any) -> None:
    class Handle:
        pass

    g = StateGraph(dict)
    g.add_node("make", lambda s: {"handle": Handle()})
    g.add_edge(START, "make")
    g.add_edge("make", END)
    with make_saver("sqlite") as saver:
        graph = g.compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "g"}}
        with pytest.raises(SerializationError, match=r"'__root__' at \['handle'\] .* Handle"):
            graph.invoke({"x": 1}, cfg, durability="sync")
        # The checkpoints before the bad step were written; the bad step's was not.
        steps = sorted(t.metadata["step"] for t in saver.list(cfg))
        assert steps == [-1, 0]


def test_unserializable_pending_write_writes_nothing(make_saver: Any) -> None:
    with make_saver("sqlite+redis+postgres") as saver:
        stored = saver.put(generate_config("t-w"), generate_checkpoint(), generate_metadata(), {})
        with pytest.raises(SerializationError, match="'out'"):
            saver.put_writes(stored, [("ok", 1), ("out", object())], "task")
        tup = saver.get_tuple(stored)
        assert tup is not None and tup.pending_writes == []


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"redis": "http://127.0.0.1:6379"}, "redis://"),
        ({"postgres": "mysql://127.0.0.1/db"}, "postgresql://"),
        ({"postgres": 5432}, "postgresql://"),
        ({"sqlite": None}, "at least one tier"),
        ({"sqlite": 3}, "file path"),
        ({"postgres_pool_size": 0}, "at least 1"),
        ({"signing_key": b"short"}, "at least 16 bytes"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        DurableSaver(**{"sqlite": ":memory:", **kwargs})


def test_missing_thread_id(make_saver: Any) -> None:
    with make_saver("sqlite") as saver:
        with pytest.raises(ConfigError, match="thread_id"):
            saver.put({"configurable": {}}, generate_checkpoint(), generate_metadata(), {})
        with pytest.raises(ConfigError, match="thread_id"):
            saver.get_tuple({"configurable": {"checkpoint_ns": ""}})
        with pytest.raises(ConfigError, match="checkpoint_id"):
            saver.put_writes({"configurable": {"thread_id": "t"}}, [("a", 1)], "task")


def test_unknown_prune_strategy(make_saver: Any) -> None:
    with make_saver("sqlite") as saver, pytest.raises(ConfigError, match="keep_latest"):
        saver.prune(["t"], strategy="everything")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("tier", ["redis", "postgres"])
def test_unreachable_server_at_setup(tier: str, tmp_path: Any) -> None:
    port = _closed_port()
    url = f"redis://127.0.0.1:{port}/0" if tier == "redis" else f"postgresql://u:secret@127.0.0.1:{port}/db"
    saver = DurableSaver(sqlite=str(tmp_path / "x.sqlite"), **{tier: url}, connect_timeout=1)
    with pytest.raises(TierUnavailable) as info:
        saver.setup()
    assert info.value.tier == tier
    assert f"127.0.0.1:{port}" in str(info.value) and "running" in str(info.value)
    assert "secret" not in str(info.value)
    saver.close()


@pytest.mark.parametrize("tier", ["redis", "postgres"])
async def test_unreachable_server_at_asetup(tier: str, tmp_path: Any) -> None:
    port = _closed_port()
    url = f"redis://127.0.0.1:{port}/0" if tier == "redis" else f"postgresql://u@127.0.0.1:{port}/db"
    saver = DurableSaver(sqlite=str(tmp_path / "x.sqlite"), **{tier: url}, connect_timeout=1)
    with pytest.raises(TierUnavailable, match=tier):
        await saver.asetup()
    await saver.aclose()


def test_unwritable_sqlite_path(tmp_path: Any) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    saver = DurableSaver(sqlite=str(blocker / "sub" / "x.sqlite"))
    with pytest.raises(ConfigError, match="writable path"):
        saver.setup()


def _server_of(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    return parts.hostname or "127.0.0.1", parts.port or 5432


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_failed_put_leaves_nothing_half_written(
    make_saver: Any, postgres_url: str, face: str, tmp_path: Any
) -> None:
    """Postgres vanishes (TCP proxy cut) between two puts: the second put
    raises TierUnavailable, and neither SQLite nor Redis keeps its checkpoint."""
    host, port = _server_of(postgres_url)
    with TcpProxy(host, port) as proxy:
        proxied = postgres_url.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")
        saver = make_saver("sqlite+redis", postgres=proxied, connect_timeout=2)
        cfg = generate_config("t-cut")
        cp1 = generate_checkpoint(channel_values={"a": "one"})
        cp1["channel_versions"] = {"a": 1}
        cp2 = generate_checkpoint(channel_values={"a": "two"})
        cp2["channel_versions"] = {"a": 2}
        if face == "sync":
            first = saver.put(cfg, cp1, generate_metadata(step=0), {"a": 1})
            proxy.cut()
            with pytest.raises(TierUnavailable) as info:
                saver.put(first, cp2, generate_metadata(step=1), {"a": 2})
        else:
            first = await saver.aput(cfg, cp1, generate_metadata(step=0), {"a": 1})
            proxy.cut()
            with pytest.raises(TierUnavailable) as info:
                await saver.aput(first, cp2, generate_metadata(step=1), {"a": 2})
        assert info.value.tier == "postgres"
        await saver.aclose()

    # Look at each surviving tier directly, not through the saver.
    local = sqlite3.connect(tmp_path / "local.sqlite")
    ids = [r[0] for r in local.execute("SELECT checkpoint_id FROM lgd_checkpoints WHERE thread_id = 't-cut'")]
    journal = local.execute("SELECT count(*) FROM lgd_journal").fetchone()[0]
    local.close()
    assert ids == [cp1["id"]]
    assert journal == 0
    r = redis_lib.Redis.from_url(REDIS_URL)
    prefix = saver.redis_key_prefix
    fields = r.hkeys(f"{prefix}:{{t-cut}}:cp")
    r.close()
    assert [f.decode().split("\x00")[1] for f in fields] == [cp1["id"]]
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT checkpoint_id FROM lgd_checkpoints WHERE thread_id = 't-cut'").fetchall()
    assert [r[0] for r in rows] == [cp1["id"]]
