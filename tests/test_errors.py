"""Bad input and unreachable tiers: typed errors that say what to do, and
nothing half-written left behind."""

from __future__ import annotations

import asyncio
import math
import os
import random
import re
import sqlite3
import stat
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
import redis as redis_lib
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from langgraph.graph import END, START, StateGraph

from langgraph_durable import (
    ConfigError,
    DurableError,
    DurableSaver,
    Integrity,
    RetentionPolicy,
    SerializationError,
    Tiers,
    TierUnavailable,
    cli,
)
from langgraph_durable.engine.replicator import Replicator
from langgraph_durable.saver import (
    ENV_LEASE_LINGER,
    ENV_OLD_SIGNING_KEYS,
    ENV_POSTGRES_PREPARED_STATEMENTS,
    ENV_POSTGRES_URL,
    ENV_REDIS_TTL,
    ENV_REDIS_URL,
    ENV_SERDE,
    ENV_SIGNING_KEY,
    ENV_WRITE,
)
from langgraph_durable.tiers.base import redact

from .conftest import CONFIGS, REDIS_URL
from .proxy import TcpProxy


def _footprint(saver: DurableSaver) -> dict[str, Any]:
    """What each of the saver's tiers holds, read directly rather than
    through the saver (whose reads skip what is not a whole record): every
    table of the SQLite file and every lgd_* table of the Postgres database
    (found, not listed here, so a new table is covered) with its row count,
    and every key under the Redis prefix with its fields or members."""
    seen: dict[str, Any] = {}
    if saver.sqlite_path:
        local = sqlite3.connect(Path(saver.sqlite_path).resolve().as_uri() + "?mode=ro", uri=True)
        tables = [r[0] for r in local.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        seen["sqlite"] = {t: local.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
        local.close()
    if saver.redis_url:
        r = redis_lib.Redis.from_url(saver.redis_url)
        seen["redis"] = {k: _members(r, k) for k in r.scan_iter(match=f"{saver.redis_key_prefix}:*", count=1000)}
        r.close()
    if saver.postgres_url:
        with psycopg.connect(saver.postgres_url, autocommit=True) as conn:
            # In any schema: the database is the test's own, and a saver may
            # keep its tables outside the search path.
            tables = conn.execute(
                "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
                "AND table_name LIKE 'lgd\\_%' AND table_schema NOT IN ('pg_catalog', 'information_schema')"
            ).fetchall()
            assert tables, "no lgd_* table in the test's database: a footprint of nothing proves nothing"
            seen["postgres"] = {
                f"{schema}.{t}": conn.execute(f'SELECT count(*) FROM "{schema}"."{t}"').fetchone()[0]
                for schema, t in tables
            }
    return seen


def _members(r: redis_lib.Redis, key: bytes) -> set[Any]:
    """A key's fields or members (a list's or stream's positions, a string as
    one): what a write to an existing key adds shows up as a new one."""
    kind = r.type(key)
    if kind == b"hash":
        return set(r.hkeys(key))
    if kind == b"set":
        return set(r.smembers(key))
    if kind == b"zset":
        return set(r.zrange(key, 0, -1))
    if kind == b"list":
        return set(range(r.llen(key)))
    if kind == b"stream":
        return set(range(r.xlen(key)))
    return {kind}


# A thread's writer lease (its table, its Redis key): a put takes it, as a run
# does, before it encodes the checkpoint, so a put refused for a value or
# metadata it cannot encode leaves it held. It is coordination, not a record.
LEASES = re.compile(r"(^|\.)lgd_leases$|\}:lease$")


def _added(before: dict[str, Any], after: dict[str, Any], *, but: re.Pattern[str] | None = None) -> list[Any]:
    """What `after` holds that `before` did not: a tier, table or key, rows
    in a table, fields or members in a key; `but` names tables and keys left
    out. Only growth counts, so a background pass that ships the journal or
    expires a key meanwhile is no false alarm."""

    def counted(name: str | bytes) -> bool:
        return but is None or not but.search(name.decode() if isinstance(name, bytes) else name)

    new: list[Any] = [tier for tier in after if tier not in before]
    for tier in ("sqlite", "postgres"):
        had = before.get(tier, {})
        new += [
            (tier, t, had.get(t), n)
            for t, n in after.get(tier, {}).items()
            if counted(t) and (t not in had or n > had[t])
        ]
    had = before.get("redis", {})
    for key, members in after.get("redis", {}).items():
        if counted(key) and (key not in had or members - had[key]):
            new.append(("redis", key, sorted(map(repr, members - had.get(key, set())))))
    return new


@pytest.mark.parametrize("tiers", CONFIGS)
def test_unserializable_value_names_the_channel_and_writes_nothing(make_saver: Any, tiers: str) -> None:
    with make_saver(tiers) as saver:
        saver.setup()  # what setup writes (the store's key, migrations) is not the put's
        before = _footprint(saver)
        cfg = generate_config("t-bad")
        cp = generate_checkpoint(channel_values={"fine": 1, "handle": threading.Lock()})
        cp["channel_versions"] = {"fine": 1, "handle": 1}
        with pytest.raises(SerializationError) as info:
            saver.put(cfg, cp, generate_metadata(), {"fine": 1, "handle": 1})
        assert info.value.channel == "handle"
        assert "'handle'" in str(info.value) and "lock" in str(info.value)
        assert isinstance(info.value, DurableError) and isinstance(info.value, TypeError)
        assert _added(before, _footprint(saver), but=LEASES) == []  # not even the blob of "fine"


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
        before = _footprint(saver)
        with pytest.raises(SerializationError, match="'out'"):
            saver.put_writes(stored, [("ok", 1), ("out", object())], "task")
        assert _added(before, _footprint(saver)) == []  # not even the write of "ok"
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
        ({"tiers": Tiers(postgres_pool_size=0)}, "at least 1"),
        ({"signing_key": b"short"}, "at least 16 bytes"),
    ],
)
def test_bad_configuration_is_a_config_error(kwargs: dict[str, Any], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        DurableSaver(**{"sqlite": ":memory:", **kwargs})


KEY = "k" * 32  # a signing key long enough


@pytest.mark.parametrize(
    ("kwargs", "needles"),
    [
        ({"write": "everywhere"}, ["write=", "'everywhere'", "'shared', 'all', 'local'"]),
        ({"write": "SHARED"}, ["write=", "'SHARED'", "'shared', 'all', 'local'"]),
        ({"write": None}, ["write=", "None", "'shared', 'all', 'local'"]),
        ({"write": "local"}, ['write="local"', "redis= or postgres="]),  # write-behind with no shared tier
        (
            {"signing_key": KEY, "integrity": Integrity(signing_keys=[KEY])},
            ["signing_key=", "signing_keys=", "not both"],
        ),
        ({"signing_key": KEY, "integrity": Integrity(signing_keys=[])}, ["signing_key=", "signing_keys=", "not both"]),
        ({"integrity": Integrity(signing_keys=[])}, ["signing_keys=", "at least one key"]),
        pytest.param(
            {"integrity": Integrity(signing_keys=KEY)},
            ["signing_keys=", "list"],
        ),
        ({"retention": {"keep_last": 3}}, ["retention=", "RetentionPolicy", "'keep_last': 3"]),
        ({"retention": RetentionPolicy}, ["retention=", "langgraph_durable.RetentionPolicy"]),
        ({"retention": 30}, ["retention=", "RetentionPolicy", "30"]),
    ],
)
def test_constructor_errors_say_how_to_fix_them_and_create_nothing(
    tmp_path: Any, kwargs: dict[str, Any], needles: list[str]
) -> None:
    """A bad argument is a ConfigError naming it and what it takes, raised
    before the local SQLite file (or its folder) exists."""

    def ours() -> set[threading.Thread]:
        return {
            t
            for t in threading.enumerate()
            if t.name in ("langgraph-durable-retention", "langgraph-durable-replicator")
        }

    folder = tmp_path / "store"
    before = ours()
    with pytest.raises(ConfigError) as info:
        DurableSaver(sqlite=str(folder / "local.sqlite"), **kwargs)
    message = str(info.value)
    for needle in needles:
        assert needle in message, (needle, message)
    assert list(tmp_path.iterdir()) == []
    assert ours() - before == set()  # no retention sweeper or replicator left running


def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("LANGGRAPH_DURABLE_") and not name.startswith("LANGGRAPH_DURABLE_TEST_"):
            monkeypatch.delenv(name)


_SHARED = {ENV_REDIS_URL: "redis://127.0.0.1:1/0", ENV_POSTGRES_URL: "postgresql://u@127.0.0.1:1/db"}


@pytest.mark.parametrize(
    ("name", "value", "hint", "others"),
    [
        (ENV_REDIS_TTL, "soon", "number of seconds", _SHARED),
        (ENV_REDIS_TTL, "1h", "number of seconds", _SHARED),
        (ENV_LEASE_LINGER, "soon", "number of seconds", {}),
        (ENV_POSTGRES_PREPARED_STATEMENTS, "sometimes", "true or false", _SHARED),
        (ENV_SERDE, "json", "MODULE:ATTR", {}),
        (ENV_SERDE, "no_such_module_here:serde", "cannot import", {}),
        pytest.param(
            ENV_REDIS_TTL,
            "nan",
            "number of seconds",
            _SHARED,
        ),
        pytest.param(
            ENV_REDIS_TTL,
            "-5",
            "above 0",
            _SHARED,
        ),
        pytest.param(
            ENV_LEASE_LINGER,
            "-1",
            "0 or more",
            {},
        ),
        pytest.param(
            ENV_WRITE,
            "fast",
            "'shared', 'all', 'local'",
            {},
        ),
        pytest.param(
            ENV_SIGNING_KEY,
            "too-short",
            "16 bytes",
            {},
        ),
        pytest.param(
            ENV_OLD_SIGNING_KEYS,
            "too-short",
            "16 bytes",
            {ENV_SIGNING_KEY: KEY},
        ),
        pytest.param(
            ENV_REDIS_URL,
            "http://127.0.0.1:6379",
            "redis://",
            {},
        ),
        pytest.param(
            ENV_POSTGRES_URL,
            "mysql://127.0.0.1/db",
            "postgresql://",
            {},
        ),
    ],
)
def test_from_env_a_malformed_value_names_its_variable_and_creates_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, name: str, value: str, hint: str, others: dict[str, str]
) -> None:
    """The person who set the variable learns which one is wrong and what it
    takes; no SQLite file appears at the default path (relative to the
    working directory)."""
    _clean_env(monkeypatch)
    monkeypatch.chdir(tmp_path)
    for key, val in {**others, name: value}.items():
        monkeypatch.setenv(key, val)
    with pytest.raises(ConfigError) as info:
        DurableSaver.from_env()
    message = str(info.value)
    assert hint in message, message  # what the variable takes
    assert name in message, message  # which variable
    if "SIGNING_KEY" in name:
        assert value not in message  # a key, even a bad one, is never shown
    assert list(tmp_path.iterdir()) == []


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
    """A loopback port nothing listens on, that no other test is handed."""
    from tests.servers import free_port

    return free_port()


@pytest.mark.parametrize("tier", ["redis", "postgres"])
def test_unreachable_server_at_setup(tier: str, tmp_path: Any) -> None:
    port = _closed_port()
    url = f"redis://127.0.0.1:{port}/0" if tier == "redis" else f"postgresql://u:secret@127.0.0.1:{port}/db"
    saver = DurableSaver(sqlite=str(tmp_path / "x.sqlite"), **{tier: url}, tiers=Tiers(connect_timeout=1))
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
    saver = DurableSaver(sqlite=str(tmp_path / "x.sqlite"), **{tier: url}, tiers=Tiers(connect_timeout=1))
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
    """write="all": Postgres vanishes (TCP proxy cut) between two puts: the
    second put raises TierUnavailable, and neither SQLite nor Redis keeps its
    checkpoint. (The default write mode carries on: test_outages.py.)"""
    host, port = _server_of(postgres_url)
    with TcpProxy(host, port) as proxy:
        proxied = postgres_url.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")
        saver = make_saver("sqlite+redis", postgres=proxied, connect_timeout=2, write="all")
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


# -- bad keys: refused before any tier is touched; bad metadata: before any record --


def _bad_calls(stored: Any) -> list[tuple[str, Any, str]]:
    """(label, call(saver), what the message must say) for keys no tier can store."""
    nul, huge = "t\x00x", "t" * (1024 * 1024)

    def put(thread: Any = "t-ok", ns: str = "", cp_id: str | None = None, channel: str = "a") -> Any:
        cp = generate_checkpoint(checkpoint_id=cp_id, channel_values={channel: 1})
        cp["channel_versions"] = {channel: 1}
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        return lambda s: s.put(cfg, cp, generate_metadata(), {channel: 1})

    def writes(task_id: str = "task", channel: str = "a", task_path: str = "") -> Any:
        return lambda s: s.put_writes(stored, [(channel, 1)], task_id, task_path)

    return [
        ("NUL in thread id", put(thread=nul), "NUL"),
        ("1 MB thread id", put(thread=huge), "over the limit"),
        ("lone surrogate", put(thread="t\ud800"), "not valid Unicode"),
        ("bytes thread id", put(thread=b"t"), "str(thread_id)"),
        ("float thread id", put(thread=1.5), "str(thread_id)"),
        ("NUL in namespace", put(ns="n\x00s"), "checkpoint_ns"),
        ("1 MB namespace", put(ns=huge), "checkpoint_ns"),
        ("NUL in checkpoint id", put(cp_id="1\x002"), "checkpoint['id']"),
        ("NUL in channel name", put(channel="a\x00b"), "channel name"),
        ("NUL in thread id (get_tuple)", lambda s: s.get_tuple({"configurable": {"thread_id": nul}}), "NUL"),
        (
            "NUL in checkpoint id (get_tuple)",
            lambda s: s.get_tuple({"configurable": {"thread_id": "t-ok", "checkpoint_id": "1\x002"}}),
            "checkpoint_id",
        ),
        ("NUL in task id", writes(task_id="ta\x00sk"), "task_id"),
        ("long task id", writes(task_id="t" * 10_000), "over the limit"),
        ("NUL in write channel", writes(channel="a\x00b"), "channel name"),
        ("NUL in task path", writes(task_path="p\x00"), "task_path"),
    ]


@pytest.mark.parametrize("tiers", CONFIGS)
def test_keys_no_tier_can_store_are_refused_before_any_write(make_saver: Any, tiers: str) -> None:
    """NUL, over-long, non-str or non-Unicode ids and names: a ConfigError
    saying what to change, and every tier exactly as it was."""
    with make_saver(tiers) as saver:
        stored = saver.put(generate_config("t-ok"), generate_checkpoint(), generate_metadata(), {})
        before = _footprint(saver)
        for label, call, needle in _bad_calls(stored):
            with pytest.raises(ConfigError, match=re.escape(needle)) as info:
                call(saver)
            assert len(str(info.value)) < 400, label  # names the value, never dumps it
            assert _added(before, _footprint(saver)) == [], label


def test_int_and_uuid_thread_ids_are_their_text(make_saver: Any) -> None:
    """As in LangGraph's own invoke/get_state: thread 5 is thread "5"."""
    with make_saver("sqlite") as saver:
        saver.put({"configurable": {"thread_id": 5}}, generate_checkpoint(), generate_metadata(), {})
        tup = saver.get_tuple({"configurable": {"thread_id": "5"}})
        assert tup is not None and tup.config["configurable"]["thread_id"] == "5"
        tid = uuid.uuid4()
        saver.put({"configurable": {"thread_id": tid}}, generate_checkpoint(), generate_metadata(), {})
        assert saver.get_tuple({"configurable": {"thread_id": str(tid)}}) is not None
        with pytest.raises(ConfigError, match="not bool"):
            saver.get_tuple({"configurable": {"thread_id": True}})


def test_longest_allowed_ids_fit_every_tier(make_saver: Any) -> None:
    """The limits keep the Postgres index entries under their 2,704-byte cap
    even for text that does not compress (4-byte characters, random)."""
    rng = random.Random(7)

    def text(n_bytes: int) -> str:
        return "".join(chr(0x1F300 + rng.randrange(0x300)) for _ in range(n_bytes // 4))

    thread, ns, channel, task = text(1024), text(1024), text(256), text(256)
    with make_saver("sqlite+redis+postgres") as saver:
        # A checkpoint id is a UUID (36 bytes): the other parts take the rest.
        cp = generate_checkpoint(channel_values={channel: 1})
        cp["channel_versions"] = {channel: text(256)}
        cfg = {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
        stored = saver.put(cfg, cp, generate_metadata(), {channel: cp["channel_versions"][channel]})
        saver.put_writes(stored, [(channel, 2)], task)
        tup = saver.get_tuple(stored)
        assert tup is not None and tup.checkpoint["channel_values"] == {channel: 1}
        assert tup.pending_writes == [(task, channel, 2)]
        with pytest.raises(ConfigError, match="over the limit"):
            saver.get_tuple({"configurable": {"thread_id": thread + "x"}})


@pytest.mark.parametrize("tiers", CONFIGS)
def test_metadata_json_cannot_hold_names_the_key_and_writes_nothing(make_saver: Any, tiers: str) -> None:
    with make_saver(tiers) as saver:
        saver.setup()
        before = _footprint(saver)
        for metadata, key, shown in [
            (generate_metadata(score=math.nan), "score", "nan"),
            (generate_metadata(stats={"p": [1.0, math.inf]}), "stats", "inf at ['p'][1]"),
            (generate_metadata(low=-math.inf), "low", "-inf"),
            (generate_metadata(text="a\ud800"), "text", ""),
        ]:
            with pytest.raises(SerializationError, match=re.escape(f"metadata key {key!r}")) as info:
                saver.put(generate_config("t-md"), generate_checkpoint(), metadata, {})
            assert info.value.channel == key
            assert shown in str(info.value)
            assert _added(before, _footprint(saver), but=LEASES) == []
        # A NUL inside a metadata string is no error: LangGraph drops it.
        stored = saver.put(generate_config("t-md"), generate_checkpoint(), generate_metadata(note="a\x00b"), {})
        tup = saver.get_tuple(stored)
        assert tup is not None and tup.metadata["note"] == "ab"
        # The text "\u0000" (a backslash, then u0000) is not a NUL: kept as it
        # is, and found by a filter on it in every tier; a NaN dict key is the
        # JSON key "NaN".
        text = "x\\u0000y"
        stored = saver.put(
            generate_config("t-md2"), generate_checkpoint(), generate_metadata(note=text, by={math.nan: 1}), {}
        )
        tup = saver.get_tuple(stored)
        assert tup is not None and tup.metadata["note"] == text
        found = list(saver.list(generate_config("t-md2"), filter={"note": text}))
        assert [t.config["configurable"]["checkpoint_id"] for t in found] == [stored["configurable"]["checkpoint_id"]]


# -- passwords ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql://u:secret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("postgresql://u:sec@ret/x@h/db", "postgresql://u:***@h/db"),
        (
            "postgresql://h/db?user=u&password=secret&sslmode=require",
            "postgresql://h/db?user=u&password=***&sslmode=require",
        ),
        ("postgresql://h/db?sslpassword=secret", "postgresql://h/db?sslpassword=***"),
        ("host=h password='se cret' dbname=db", "host=h password=*** dbname=db"),
        ("redis://:secret@h:6379/0", "redis://:***@h:6379/0"),
        ("redis://h:6379/0?password=secret", "redis://h:6379/0?password=***"),
        ("unix://:secret@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
        ("postgresql://u@h/db?application_name=me@x", "postgresql://u@h/db?application_name=me@x"),
    ],
)
def test_redact_hides_every_password_form(url: str, shown: str) -> None:
    assert redact(url) == shown


@pytest.mark.parametrize(
    "kwargs",
    [
        {"postgres": "mysql://u:secret@h/db"},
        {"postgres": "host=h password=secret dbname=db"},
        {"redis": "http://:secret@h:6379"},
    ],
)
def test_wrong_scheme_error_hides_the_password(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="URL") as info:
        DurableSaver(sqlite=":memory:", **kwargs)
    assert "secret" not in str(info.value) and "***" in str(info.value)


@pytest.mark.parametrize("tier", ["redis", "postgres"])
def test_unreachable_error_hides_a_query_string_password(tier: str, tmp_path: Any) -> None:
    port = _closed_port()
    url = (
        f"redis://127.0.0.1:{port}/0?password=secret"
        if tier == "redis"
        else f"postgresql://127.0.0.1:{port}/db?user=u&password=secret"
    )
    tiers: dict[str, Any] = {tier: url}
    saver = DurableSaver(sqlite=str(tmp_path / "x.sqlite"), **tiers, tiers=Tiers(connect_timeout=1))
    with pytest.raises(TierUnavailable) as info:
        saver.setup()
    assert "secret" not in str(info.value) and "password=***" in str(info.value)
    saver.close()


# -- the local folder and files are private ----------------------------------------


def test_local_folder_and_files_are_private_whatever_the_umask(tmp_path: Any) -> None:
    os.chmod(tmp_path, 0o755)
    old = os.umask(0o002)
    try:
        with DurableSaver(sqlite=str(tmp_path / "state" / "checkpoints.sqlite")) as saver:
            saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
            modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "state").iterdir()}
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "state").stat().st_mode) == 0o700
    assert {"checkpoints.sqlite", "checkpoints.sqlite-wal", "checkpoints.sqlite-shm"} <= set(modes)
    assert set(modes.values()) == {0o600}, modes
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755  # a folder we did not create keeps its mode


def test_every_folder_created_above_the_file_is_private_under_umask_000(tmp_path: Any) -> None:
    os.chmod(tmp_path, 0o755)
    old = os.umask(0o000)
    try:
        with DurableSaver(sqlite=str(tmp_path / "a" / "b" / "state" / "checkpoints.sqlite")) as saver:
            saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
    finally:
        os.umask(old)
    for folder in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "state"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755


def test_an_existing_database_file_keeps_its_mode(tmp_path: Any) -> None:
    path = tmp_path / "shared.sqlite"
    sqlite3.connect(path).close()
    os.chmod(path, 0o640)
    with DurableSaver(sqlite=str(path)) as saver:
        saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
    assert stat.S_IMODE(path.stat().st_mode) == 0o640


# -- the real reason a Postgres connection fails -------------------------------------


def _with(url: str, *, user: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc if user is None else f"{user}@{parts.netloc.rsplit('@', 1)[-1]}"
    path = parts.path if database is None else f"/{database}"
    return parts._replace(netloc=netloc, path=path).geturl()


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"database": "lgd_no_such_database"}, 'database "lgd_no_such_database" does not exist'),
        ({"user": "lgd_no_such_role"}, 'role "lgd_no_such_role" does not exist'),
    ],
)
async def test_wrong_database_or_role_is_a_config_error_with_the_servers_reason(
    postgres_url: str, tmp_path: Any, face: str, change: dict[str, str], reason: str
) -> None:
    saver = DurableSaver(sqlite=None, postgres=_with(postgres_url, **change), tiers=Tiers(connect_timeout=1))
    with pytest.raises(ConfigError) as info:
        if face == "sync":
            saver.setup()
        else:
            await saver.asetup()
    assert reason in str(info.value) and "postgres=" in str(info.value)
    assert not isinstance(info.value, TierUnavailable)
    await saver.aclose()


# -- the command line: one line and a documented exit code ----------------------------


@pytest.fixture
def no_tier_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LANGGRAPH_DURABLE_SQLITE", "LANGGRAPH_DURABLE_REDIS_URL", "LANGGRAPH_DURABLE_POSTGRES_URL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_tier_env")
@pytest.mark.parametrize("command", ["verify", "repair", "actions"])
def test_cli_unreachable_tier_is_one_line_and_exit_3(command: str, tmp_path: Any, capsys: Any) -> None:
    argv = [command, "--sqlite", str(tmp_path / "x.sqlite"), "--redis", "redis://:secret@127.0.0.1:1/0"]
    if command == "actions":
        argv += ["--thread", "t"]
    assert cli.main(argv) == cli.EXIT_CANNOT_RUN == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("langgraph-durable: error: redis tier at ")
    assert "secret" not in err


@pytest.mark.usefixtures("no_tier_env")
def test_cli_exit_codes(tmp_path: Any, capsys: Any) -> None:
    assert cli.main(["verify", "--sqlite", str(tmp_path / "x.sqlite"), "--postgres", "mysql://u:pw@h/db"]) == 3
    assert "postgresql://" in capsys.readouterr().err
    assert cli.main(["verify", "--sqlite", str(tmp_path / "x.sqlite")]) == cli.EXIT_CANNOT_RUN  # no store there
    assert "no store at" in capsys.readouterr().err
    with DurableSaver(sqlite=str(tmp_path / "x.sqlite")) as made:  # one, empty
        made.setup()
    assert cli.main(["verify", "--sqlite", str(tmp_path / "x.sqlite")]) == cli.EXIT_OK
    with pytest.raises(SystemExit) as info:
        cli.main(["verify", "--no-such-flag"])
    assert info.value.code == cli.EXIT_USAGE == 2
    capsys.readouterr()
    with pytest.raises(SystemExit):
        cli.main(["verify", "--help"])
    out = capsys.readouterr().out
    # One line pointing at the top-level help, not the whole table again.
    assert " ".join(cli.SUBCOMMAND_EPILOG.split()) in " ".join(out.split()) and "130" not in out


# -- one saver, successive event loops ------------------------------------------------


def _with_query(url: str, param: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}{param}"


def test_successive_asyncio_runs_close_their_connections(
    make_saver: Any, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each asyncio.run() closes the connections its loop opened, when the
    loop shuts down: none are left behind, and no run hangs. (The replicator
    thread, held back here, has connections of its own: it ships Redis.)"""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    name = f"lgd-loops-{uuid.uuid4().hex[:8]}"
    saver = make_saver(
        "sqlite+redis+postgres",
        redis=_with_query(REDIS_URL, f"client_name={name}"),
        postgres=_with_query(postgres_url, f"application_name={name}"),
        # No kept lease: the listener renews kept leases on the sync face's
        # connections, which live as long as the saver; this counts the loops'.
        lease_linger=0,
    )
    # The sync face's connections live as long as the saver (a run whose end
    # comes as its loop shuts down is released through it): opened first, and
    # counted apart from the loops' own.
    saver.setup()
    saver.get_tuple({"configurable": {"thread_id": "t-warm"}})
    g: StateGraph[Any] = StateGraph(dict)
    g.add_node("count", lambda s: {"n": s.get("n", 0) + 1})
    g.add_edge(START, "count")
    g.add_edge("count", END)
    graph = g.compile(checkpointer=saver)
    cfg: RunnableConfig = {"configurable": {"thread_id": "t-loops"}}
    r = redis_lib.Redis.from_url(REDIS_URL)

    def open_connections() -> tuple[int, int]:
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            sql = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
            pg = conn.execute(sql, (name,)).fetchone()
        return sum(c.get("name") == name for c in r.client_list()), pg[0] if pg else 0

    sync_face = open_connections()

    async def one_run(i: int) -> int:
        out = await graph.ainvoke({"n": i}, cfg, durability="sync")
        assert await saver.aget_tuple(cfg) is not None
        redis_clients, postgres_clients = open_connections()
        # The counts see this run's clients, in each server (a tuple compared
        # as a whole would pass on two Redis clients and no Postgres one).
        assert redis_clients > sync_face[0] and postgres_clients > sync_face[1], (redis_clients, postgres_clients)
        return int(out["n"])

    results: list[Any] = []

    def runs() -> None:
        try:
            for i in range(3):
                results.append(asyncio.run(one_run(10 * i)))
                deadline = time.monotonic() + 5  # a server notices a closed socket a moment later
                while open_connections() != sync_face and time.monotonic() < deadline:
                    time.sleep(0.05)
                results.append(open_connections())
        except Exception as exc:  # reported by the assertion below
            results.append(exc)

    worker = threading.Thread(target=runs, daemon=True)
    worker.start()
    worker.join(timeout=60)
    r.close()
    assert not worker.is_alive(), f"an asyncio.run() hung at loop shutdown after {results}"
    assert results == [1, sync_face, 11, sync_face, 21, sync_face], sync_face
    saver.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_redis_database_the_server_does_not_have_is_one_line(face: str, capsys: pytest.CaptureFixture[str]) -> None:
    from langgraph_durable import cli

    url = REDIS_URL.rsplit("/", 1)[0] + "/99"
    saver = DurableSaver(sqlite=None, redis=url)
    with pytest.raises(ConfigError, match=r"names a database this Redis server does not have.*e\.g\. /0"):
        if face == "sync":
            saver.setup()
        else:
            asyncio.run(saver.asetup())
    saver.close()
    code = cli.main(["threads", "--sqlite", "", "--redis", url])
    err = capsys.readouterr().err
    assert code == cli.EXIT_CANNOT_RUN
    assert len(err.strip().splitlines()) == 1 and "DB index is out of range" in err


def test_a_local_file_that_is_not_a_database_is_a_one_line_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "notes.sqlite"
    path.write_bytes(b"these are my notes, not a database\n" * 200)
    before = path.read_bytes()
    saver = DurableSaver(sqlite=str(path))
    with pytest.raises(ConfigError, match=r"sqlite= names .*notes\.sqlite', which is not a SQLite database"):
        saver.setup()
    saver.close()
    assert cli.main(["threads", "--sqlite", str(path)]) == cli.EXIT_CANNOT_RUN
    err = capsys.readouterr().err
    assert err.startswith("langgraph-durable: error: --sqlite names ") and err.count("\n") == 1
    assert path.read_bytes() == before  # nothing written to it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.sqlite"]


def test_a_serializer_module_that_fails_as_it_loads_is_a_config_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_serde_module.py").write_text("raise RuntimeError('no settings file')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("LANGGRAPH_DURABLE_SERDE", "broken_serde_module:serde")
    with pytest.raises(
        ConfigError,
        match=r"LANGGRAPH_DURABLE_SERDE 'broken_serde_module:serde': cannot import it \(RuntimeError: no settings file\)",
    ):
        DurableSaver.from_env(sqlite=":memory:")
