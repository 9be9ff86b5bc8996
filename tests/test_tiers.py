"""How the tiers work together: shared latest across replicas, read-repair,
the journal, and concurrency on the local tier."""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import redis as redis_lib
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata

from langgraph_durable import CorruptCheckpoint

from .conftest import REDIS_URL
from .graphs import loop_graph

SHARED = ["sqlite+redis", "sqlite+postgres", "sqlite+redis+postgres"]


def test_generated_sync_code_is_current() -> None:
    """The sync twins are what tools/async_to_sync.py makes of the async
    sources now (it runs with this interpreter: its output depends on it)."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "tools" / "async_to_sync.py"), "--check"],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{done.stderr.strip()} (python tools/async_to_sync.py regenerates them)"


def _put(saver: Any, thread: str, parent: Any = None, value: str = "v", step: int = 0) -> Any:
    cfg = generate_config(thread)
    if parent is not None:
        cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    cp = generate_checkpoint(channel_values={"k": value})
    cp["channel_versions"] = {"k": f"{step + 1:032}.0"}
    return saver.put(cfg, cp, generate_metadata(step=step), {"k": cp["channel_versions"]["k"]})


@pytest.mark.parametrize("tiers", SHARED)
def test_replicas_see_each_others_latest(make_saver: Any, tiers: str) -> None:
    """Two replicas with their own SQLite files share Redis/Postgres: each
    sees the other's newest checkpoint although its own cache is older."""
    with make_saver(tiers, sqlite_name="a.sqlite") as a, make_saver(tiers, sqlite_name="b.sqlite") as b:
        first = _put(a, "shared", value="from a")
        assert b.get_tuple(generate_config("shared")).checkpoint["channel_values"] == {"k": "from a"}
        second = _put(b, "shared", parent=first, value="from b", step=1)
        latest = a.get_tuple(generate_config("shared"))
        assert latest.config["configurable"]["checkpoint_id"] == second["configurable"]["checkpoint_id"]
        assert latest.checkpoint["channel_values"] == {"k": "from b"}
        b.put_writes(second, [("ch", "written by b")], "task")
        assert a.get_tuple(second).pending_writes == [("task", "ch", "written by b")]
        assert [t.metadata["step"] for t in a.list(generate_config("shared"))] == [1, 0]


@pytest.mark.parametrize("tiers", SHARED)
async def test_replicas_continue_one_graph_thread(make_saver: Any, tiers: str) -> None:
    """A graph thread started on one replica is resumed on another."""
    async with make_saver(tiers, sqlite_name="a.sqlite") as a, make_saver(tiers, sqlite_name="b.sqlite") as b:
        cfg = {"configurable": {"thread_id": "graph"}}
        await loop_graph(3).compile(checkpointer=a).ainvoke({"messages": [], "n": 0}, cfg)
        result = await loop_graph(6).compile(checkpointer=b).ainvoke(None, cfg)
        assert result["n"] == 3  # finished on a; nothing to resume
        result = await loop_graph(6).compile(checkpointer=b).ainvoke({"messages": ["more"], "n": 3}, cfg)
        assert result["n"] == 6 and len(result["messages"]) == 3 + 1 + 3


def _local(saver: Any) -> sqlite3.Connection:
    return sqlite3.connect(saver.sqlite_path)


def test_read_repair_fills_a_missing_local_copy(make_saver: Any) -> None:
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite") as a:
        stored = _put(a, "t", value="hello")
    # A fresh replica has an empty cache: its first read comes from a shared
    # tier and is copied into its SQLite file.
    with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
        b.setup()
        with _local(b) as conn:
            assert conn.execute("SELECT count(*) FROM lgd_checkpoints").fetchone()[0] == 0
        assert b.get_tuple(stored).checkpoint["channel_values"] == {"k": "hello"}
        with _local(b) as conn:
            assert conn.execute("SELECT count(*) FROM lgd_checkpoints").fetchone()[0] == 1
            assert conn.execute("SELECT count(*) FROM lgd_blobs").fetchone()[0] == 1


@pytest.mark.parametrize("target", ["lgd_checkpoints", "lgd_blobs"])
def test_a_corrupt_local_copy_is_replaced_from_another_tier(make_saver: Any, target: str) -> None:
    with make_saver("sqlite+redis") as saver:
        stored = _put(saver, "t", value="intact")
        with _local(saver) as conn:
            (record,) = conn.execute(f"SELECT record FROM {target}").fetchone()
            flipped = bytearray(record)
            flipped[-1] ^= 0xFF
            conn.execute(f"UPDATE {target} SET record = ?", (bytes(flipped),))
        tup = saver.get_tuple(stored)
        assert tup.checkpoint["channel_values"] == {"k": "intact"}
        with _local(saver) as conn:
            assert conn.execute(f"SELECT record FROM {target}").fetchone()[0] == record


def test_a_record_moved_to_another_key_fails_verification(make_saver: Any) -> None:
    """The digest covers the key: a blob copied onto another thread's key in
    Redis is refused, and the good copy from SQLite is served."""
    with make_saver("sqlite+redis") as saver:
        _put(saver, "victim", value="victim's")
        stored = _put(saver, "attacker", value="attacker's")
        prefix = saver.redis_key_prefix
        r = redis_lib.Redis.from_url(REDIS_URL)
        (field,) = r.hkeys(f"{prefix}:{{attacker}}:blob")
        r.hset(f"{prefix}:{{victim}}:blob", field, r.hget(f"{prefix}:{{attacker}}:blob", field))
        r.close()
        with make_saver("redis", on_corruption="raise") as redis_only:
            with pytest.raises(CorruptCheckpoint, match="missing or damaged in every tier"):
                redis_only.get_tuple(generate_config("victim"))
        assert saver.get_tuple(generate_config("victim")).checkpoint["channel_values"] == {"k": "victim's"}
        assert saver.get_tuple(stored).checkpoint["channel_values"] == {"k": "attacker's"}


def test_journal_entry_left_by_a_crash_is_replayed(make_saver: Any) -> None:
    """A crash after the local commit but before the shared tiers acked leaves
    a journal entry; the next setup() pushes the checkpoint forward."""
    with make_saver("sqlite+postgres", drain_timeout=0) as saver:  # no drain at close: as if it died
        saver.setup()
        row, blobs = saver._codec.encode_checkpoint(
            generate_config("crashed"),
            generate_checkpoint(channel_values={"k": "v"}) | {"channel_versions": {"k": 1}},
            generate_metadata(),
            {"k": 1},
        )
        assert saver._runtime.local is not None
        saver._runtime.local.write_checkpoint(row, blobs, journal=True)  # what put() does before the crash
    with make_saver("postgres") as postgres_only:
        assert postgres_only.get_tuple(generate_config("crashed")) is None
    with make_saver("sqlite+postgres") as restarted:
        restarted.setup()
    with make_saver("postgres") as postgres_only:
        tup = postgres_only.get_tuple(generate_config("crashed"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"k": "v"}
    with sqlite3.connect(restarted.sqlite_path) as conn:
        assert conn.execute("SELECT count(*) FROM lgd_journal").fetchone()[0] == 0


def test_many_threads_share_one_sqlite_saver(make_saver: Any) -> None:
    errors: list[BaseException] = []
    with make_saver("sqlite") as saver:
        graph = loop_graph(4).compile(checkpointer=saver)

        def work(i: int) -> None:
            try:
                for j in range(3):
                    graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"th-{i}-{j}"}})
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len({t.config["configurable"]["thread_id"] for t in saver.list(None)}) == 48


async def test_many_tasks_and_two_savers_on_one_file(make_saver: Any) -> None:
    """Asyncio tasks on two savers (two connections) over one SQLite file,
    while a thread writes through a third: no `database is locked`."""
    async with make_saver("sqlite") as a, make_saver("sqlite") as b:
        third = make_saver("sqlite")
        ga, gb, gc = (loop_graph(3).compile(checkpointer=s) for s in (a, b, third))

        def sync_side() -> None:
            for i in range(10):
                gc.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"c-{i}"}})

        runner = asyncio.get_running_loop().run_in_executor(None, sync_side)
        await asyncio.gather(
            *(
                g.ainvoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"{name}-{i}"}})
                for i in range(20)
                for name, g in (("a", ga), ("b", gb))
            )
        )
        await runner
        third.close()
        assert len({t.config["configurable"]["thread_id"] async for t in a.alist(None)}) == 50


def test_every_redis_key_of_a_thread_is_on_one_cluster_slot(make_saver: Any) -> None:
    """What lets one MULTI/EXEC per write work on Redis Cluster."""
    from redis.crc import key_slot

    from langgraph_durable.tiers.redis.tier import parse_key_part

    with make_saver("redis") as saver:
        for thread in ("alpha", "beta:with|separators"):
            first = _put(saver, thread)
            child = generate_config(thread, checkpoint_ns="child:1")
            saver.put(child, generate_checkpoint(), generate_metadata(), {})
            saver.put_writes(first, [("a", 1), ("__error__", "boom")], "task")
        r = redis_lib.Redis.from_url(REDIS_URL)
        keys = list(r.scan_iter(match=f"{saver.redis_key_prefix}:*"))
        r.close()
        # One store-wide key besides the threads': the signing key's fingerprint.
        assert f"{saver.redis_key_prefix}:meta".encode() in keys
        keys.remove(f"{saver.redis_key_prefix}:meta".encode())
        slots: dict[str, set[int]] = {}
        for key in keys:
            thread = parse_key_part(key.decode().split("{", 1)[1].split("}", 1)[0])  # ids are encoded in keys
            slots.setdefault(thread, set()).add(key_slot(key))
        assert set(slots) == {"alpha", "beta:with|separators"}
        assert all(len(s) == 1 for s in slots.values()), slots
        assert len(keys) >= 2 * 5  # cp, blob, nss, two ids zsets, write hash, wkeys
        # whole-store operations still find every thread without a global index
        assert {t.config["configurable"]["thread_id"] for t in saver.list(None)} == {"alpha", "beta:with|separators"}


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_reads_degrade_to_redis_when_postgres_is_cut(
    make_saver: Any, postgres_url: str, face: str, caplog: pytest.LogCaptureFixture
) -> None:
    from urllib.parse import urlsplit

    from .proxy import TcpProxy

    parts = urlsplit(postgres_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    with TcpProxy(host, port) as proxy:
        proxied = postgres_url.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")
        saver = make_saver("sqlite+redis", postgres=proxied, connect_timeout=1)
        if face == "async":
            await saver.asetup()  # each face connects on first use; set this one up before the cut
        first = _put(saver, "t", value="one")
        second = _put(saver, "t", parent=first, value="two", step=1)
        proxy.cut()
        if face == "sync":
            tup = saver.get_tuple(generate_config("t"))
            listed = list(saver.list(generate_config("t")))
        else:
            tup = await saver.aget_tuple(generate_config("t"))
            listed = [t async for t in saver.alist(generate_config("t"))]
        assert tup.config["configurable"]["checkpoint_id"] == second["configurable"]["checkpoint_id"]
        assert tup.checkpoint["channel_values"] == {"k": "two"}
        assert [t.metadata["step"] for t in listed] == [1, 0]
        # The outage is logged once at most (as the tier goes down, if a
        # read met it); the reads it degrades are counted for the line logged
        # when it is back, not logged one by one.
        down = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len([m for m in down if m.startswith("postgres tier is down")]) <= 1, caplog.text
        assert "degraded read" not in " ".join(down), caplog.text
        await saver.aclose()


@pytest.mark.parametrize("tiers", ["postgres", "sqlite+redis+postgres"])
async def test_first_use_from_many_tasks_at_once(make_saver: Any, tiers: str) -> None:
    """No setup() call: the first calls race to open pools and migrate."""
    async with make_saver(tiers) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        results = await asyncio.gather(
            *(graph.ainvoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"race-{i}"}}) for i in range(8))
        )
        assert [r["n"] for r in results] == [2] * 8


@pytest.mark.parametrize("tiers", ["postgres", "sqlite+redis+postgres"])
def test_first_use_from_many_threads_at_once(make_saver: Any, tiers: str) -> None:
    with make_saver(tiers) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        barrier = threading.Barrier(8)
        results: list[Any] = []

        def run(i: int) -> None:
            barrier.wait()
            try:
                results.append(
                    graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"race-{i}"}})["n"]
                )
            except BaseException as exc:
                results.append(exc)

        threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert results == [2] * 8
