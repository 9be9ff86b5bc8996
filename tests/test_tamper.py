"""The attacks and careless-operator mistakes that used to destroy or expose
data, performed against the real tiers, each asserting what a user expects:
intact data survives, the newest acknowledged state is served, no action
runs twice, nothing planted is executed.

Records are planted, damaged, deleted and replayed directly in the stores
(SQL, redis-py), never through the saver under test.
"""

from __future__ import annotations

import asyncio
import operator
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import ormsgpack
import psycopg
import pytest
import redis as redis_lib
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_SINGLE_ARG
from langgraph.graph import END, START, StateGraph

from langgraph_durable import ConfigError, CorruptCheckpoint, DurableSaver, LedgerEntry, UndecodableRecord, action, cli
from langgraph_durable.model.records import blob_context, seal

from .conftest import REDIS_URL
from .graphs import LoopState, loop_graph
from .tamper import CHECKPOINT, WRITE, Rec, flip, open_stores

ALL = "sqlite+redis+postgres"
KEY = b"k" * 32
KEY2 = b"n" * 32
SEP = "\x00"


def _cfg(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def _pg(saver: DurableSaver) -> psycopg.Connection[Any]:
    assert saver.postgres_url is not None
    return psycopg.connect(saver.postgres_url, autocommit=True)


def _redis() -> redis_lib.Redis:
    return redis_lib.Redis.from_url(REDIS_URL)


def _chain(saver: DurableSaver, thread: str, n: int, *, writes: bool = True) -> list[Any]:
    """n checkpoints, each with one task's pending writes; returns their configs."""
    configs = []
    config = generate_config(thread)
    for i in range(n):
        cp = generate_checkpoint(channel_values={"v": f"value {i}"}) | {"channel_versions": {"v": i + 1}}
        config = saver.put(config, cp, generate_metadata(step=i), {"v": i + 1})
        if writes:
            saver.put_writes(config, [("x", f"write {i}")], f"task-{i}")
        configs.append(config)
    return configs


def _ids_in_every_tier(saver: DurableSaver, thread: str) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    if saver.sqlite_path:
        with sqlite3.connect(saver.sqlite_path) as conn:
            rows = conn.execute("SELECT checkpoint_id FROM lgd_checkpoints WHERE thread_id = ?", (thread,))
            out["sqlite"] = {r[0] for r in rows}
    if saver.redis_url:
        r = _redis()
        out["redis"] = {f.decode().split(SEP)[1] for f in r.hkeys(f"{saver.redis_key_prefix}:{{{thread}}}:cp")}
        r.close()
    if saver.postgres_url:
        with _pg(saver) as conn:
            rows = conn.execute("SELECT checkpoint_id FROM lgd_checkpoints WHERE thread_id = %s", (thread,))
            out["postgres"] = {r[0] for r in rows}
    return out


# -- keys: a configuration error is not corruption ------------------------------------


@pytest.mark.parametrize("tiers", [ALL, "sqlite"])
@pytest.mark.parametrize("wrong", [None, b"w" * 32])
def test_a_reader_with_a_missing_or_wrong_key_is_refused_and_destroys_nothing(
    make_saver: Any, tiers: str, wrong: bytes | None
) -> None:
    with make_saver(tiers, signing_key=KEY) as keyed:
        loop_graph(4).compile(checkpointer=keyed).invoke({"messages": [], "n": 0}, _cfg("t"))
        history = [t.checkpoint["id"] for t in keyed.list(_cfg("t"))]
    with make_saver(tiers, signing_key=wrong) as other:
        for call in (other.setup, lambda: other.get_tuple(_cfg("t")), lambda: list(other.list(_cfg("t")))):
            with pytest.raises(ConfigError, match=r"cannot verify\. Nothing was read or changed"):
                call()
    with make_saver(tiers, signing_key=KEY) as keyed:
        assert keyed.get_tuple(_cfg("t")).checkpoint["channel_values"]["n"] == 4
        assert [t.checkpoint["id"] for t in keyed.list(_cfg("t"))] == history
        report = keyed.verify()
        assert report.bad == [] and report.missing == []
        assert keyed.quarantined() == []


def test_every_copy_failing_alike_is_read_around_but_never_quarantined(make_saver: Any) -> None:
    """Were the fingerprint lost, identical bad bytes in every tier still say
    "key", not "corruption": the copies stay where they are."""
    with make_saver(ALL, signing_key=KEY) as keyed:
        configs = _chain(keyed, "t", 2)
    r = _redis()
    prefix = make_saver(ALL).redis_key_prefix
    r.delete(f"{prefix}:meta")
    r.close()
    with make_saver(ALL, signing_key=KEY) as s:
        with _pg(s) as conn:
            conn.execute("DELETE FROM lgd_meta")
        with sqlite3.connect(s.sqlite_path) as conn:
            conn.execute("DELETE FROM lgd_meta")
    events: list[Any] = []
    with make_saver(ALL, signing_key=KEY2, on_corruption=events.append) as other:
        with pytest.raises(CorruptCheckpoint, match="no intact ancestor"):
            other.get_tuple(_cfg("t"))  # nothing it can verify, and it says so
        assert events and all("the same bytes fail in every tier" in e.reason for e in events)
        assert other.quarantined("t") == []
    for tier, ids in _ids_in_every_tier(make_saver(ALL), "t").items():
        assert ids == {c["configurable"]["checkpoint_id"] for c in configs}, tier


def test_turning_a_key_on_over_a_store_written_unsigned(make_saver: Any) -> None:
    """A store written before records were sealed by default (unsigned)."""
    with make_saver(ALL) as plain:
        plain._runtime.store_key = False  # how such a store was written
        _chain(plain, "t", 3)
    with make_saver(ALL, signing_key=KEY) as keyed, pytest.raises(ConfigError, match=r"signing_keys=\[key, None\]"):
        keyed.setup()
    with make_saver(ALL, signing_keys=[KEY, None]) as migrating:
        assert migrating.get_tuple(_cfg("t")).checkpoint["channel_values"] == {"v": "value 2"}
        report = migrating.repair()
        assert report.resealed > 0 and not report.unrestorable
    with make_saver(ALL, signing_key=KEY) as keyed:
        assert keyed.get_tuple(_cfg("t")).checkpoint["channel_values"] == {"v": "value 2"}
        assert keyed.verify().bad == []


def test_turning_a_key_on_and_rotating_it(make_saver: Any) -> None:
    with make_saver(ALL) as plain:
        _chain(plain, "t", 3)
        plain.record_action("t", LedgerEntry("email", "done", result="sent"))
    # Sealed with the store's own key by default: a key of the user's takes
    # over with no old key to name, and repair re-seals everything with it.
    with make_saver(ALL, signing_key=KEY) as migrating:
        assert migrating.get_tuple(_cfg("t")).checkpoint["channel_values"] == {"v": "value 2"}
        report = migrating.repair()
        assert report.resealed > 0 and not report.unrestorable
    with make_saver(ALL, signing_key=KEY) as keyed:
        assert keyed.get_tuple(_cfg("t")).checkpoint["channel_values"] == {"v": "value 2"}
        assert keyed.actions("t")["email"].result == "sent"
        assert keyed.verify().bad == []
    with make_saver(ALL, signing_keys=[KEY2, KEY]) as rotating:
        assert rotating.repair().resealed > 0
    with make_saver(ALL, signing_key=KEY2) as rotated:
        assert len(list(rotated.list(_cfg("t")))) == 3
        assert rotated.actions("t")["email"].result == "sent"
    with make_saver(ALL, signing_key=KEY) as stale, pytest.raises(ConfigError):
        stale.setup()


# -- one bad or missing row in one tier ---------------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_garbage_write_in_postgres_only_deletes_nothing(make_saver: Any, face: str) -> None:
    with make_saver(ALL) as saver:
        configs = _chain(saver, "t", 3)
    ids = [c["configurable"]["checkpoint_id"] for c in configs]
    with _pg(saver) as conn:
        for cid in ids:
            conn.execute("INSERT INTO lgd_writes VALUES ('t', '', %s, 'evil', 0, 'x', '', %s)", (cid, b"garbage" * 10))
    saver = make_saver(ALL)
    if face == "sync":
        with saver:
            tup = saver.get_tuple(_cfg("t"))
            listed = list(saver.list(_cfg("t")))
            quarantined = saver.quarantined("t")
    else:
        async with saver:
            tup = await saver.aget_tuple(_cfg("t"))
            listed = [t async for t in saver.alist(_cfg("t"))]
            quarantined = await saver.aquarantined("t")
    assert tup.checkpoint["id"] == ids[-1]
    assert tup.pending_writes == [("task-2", "x", "write 2")]
    assert [t.checkpoint["id"] for t in listed] == ids[::-1]
    for tier, held in _ids_in_every_tier(saver, "t").items():
        assert held == set(ids), f"{tier} lost checkpoints"
    assert {(q.tier, q.kind) for q in quarantined} == {("postgres", "write")} and len(quarantined) == 3


def test_planted_and_damaged_local_rows_with_journal_entries_are_never_shipped(make_saver: Any) -> None:
    with make_saver(ALL, signing_key=KEY) as saver:
        configs = _chain(saver, "t", 2)
    cid = configs[-1]["configurable"]["checkpoint_id"]
    with sqlite3.connect(saver.sqlite_path) as conn:
        conn.execute("INSERT INTO lgd_writes VALUES ('t', '', ?, 'evil', 0, 'x', '', ?)", (cid, b"\xd7LGD planted"))
        conn.execute(
            "INSERT INTO lgd_journal (kind, thread_id, checkpoint_ns, checkpoint_id, task_id, created_at) "
            "VALUES ('writes', 't', '', ?, 'evil', 0)",
            (cid,),
        )
        record = conn.execute("SELECT record FROM lgd_checkpoints WHERE checkpoint_id = ?", (cid,)).fetchone()[0]
        conn.execute(
            "UPDATE lgd_checkpoints SET record = ? WHERE checkpoint_id = ?", (record[:-3] + b"\x00\x00\x00", cid)
        )
        conn.execute(
            "INSERT INTO lgd_journal (kind, thread_id, checkpoint_ns, checkpoint_id, task_id, created_at) "
            "VALUES ('checkpoint', 't', '', ?, NULL, 0)",
            (cid,),
        )
    with make_saver(ALL, signing_key=KEY) as restarted:
        restarted.setup()  # neither raises nor ships anything
        with _pg(restarted) as conn:
            assert conn.execute("SELECT count(*) FROM lgd_writes WHERE task_id = 'evil'").fetchone()[0] == 0
            pg_record = conn.execute("SELECT record FROM lgd_checkpoints WHERE checkpoint_id = %s", (cid,)).fetchone()
        assert bytes(pg_record[0]) == bytes(record)  # the intact copy was not overwritten
        with sqlite3.connect(restarted.sqlite_path) as conn:
            assert conn.execute("SELECT count(*) FROM lgd_journal").fetchone()[0] == 0
        assert {q.kind for q in restarted.quarantined("t") if q.tier == "sqlite"} == {"write", "checkpoint"}
        assert restarted.get_tuple(_cfg("t")).checkpoint["id"] == cid


@pytest.mark.parametrize("tiers", [ALL, "sqlite+postgres", "redis+postgres"])
def test_the_newest_checkpoint_lost_by_postgres_alone_is_still_served(make_saver: Any, tiers: str) -> None:
    with make_saver(tiers) as saver:
        configs = _chain(saver, "t", 3)
    newest = configs[-1]["configurable"]["checkpoint_id"]
    with _pg(saver) as conn:
        conn.execute("DELETE FROM lgd_checkpoints WHERE checkpoint_id = %s", (newest,))
    with make_saver(tiers) as saver:
        assert [m.key for m in saver.verify("t").missing] == [f"checkpoint {newest}"]
        tup = saver.get_tuple(_cfg("t"))
        assert tup.checkpoint["id"] == newest
        assert tup.pending_writes == [("task-2", "x", "write 2")]
    assert newest in _ids_in_every_tier(saver, "t")["postgres"]  # read-repaired


class FanState(TypedDict):
    log: Annotated[list[str], operator.add]


def test_pending_writes_lost_by_postgres_alone_do_not_run_a_finished_node_again(make_saver: Any) -> None:
    runs = {"a": 0, "b": 0}
    a_stored = threading.Event()

    def a(state: FanState) -> dict[str, Any]:
        runs["a"] += 1
        return {"log": ["a"]}

    def b(state: FanState) -> dict[str, Any]:
        runs["b"] += 1
        if runs["b"] == 1:
            assert a_stored.wait(60), "a's writes were never stored"  # a liveness bound
            raise RuntimeError("the container died here")
        return {"log": ["b"]}

    g = StateGraph(FanState)
    g.add_node("a", a)
    g.add_node("b", b)
    g.add_edge(START, "a")
    g.add_edge(START, "b")
    g.add_edge("a", END)
    g.add_edge("b", END)
    with make_saver(ALL) as saver:
        put_writes = saver.put_writes

        def spy(config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            put_writes(config, writes, task_id, task_path)
            if ("log", ["a"]) in [tuple(w) for w in writes]:
                a_stored.set()  # "a" has finished and its writes are stored

        saver.put_writes = spy  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            g.compile(checkpointer=saver).invoke({"log": []}, _cfg("t"), durability="sync")
    with _pg(saver) as conn:
        assert conn.execute("DELETE FROM lgd_writes WHERE thread_id = 't'").rowcount > 0
    with make_saver(ALL) as saver:
        result = g.compile(checkpointer=saver).invoke(None, _cfg("t"), durability="sync")
    assert sorted(result["log"]) == ["a", "b"]
    assert runs == {"a": 1, "b": 2}


def _charging_graph(charged: list[str]) -> StateGraph:
    def charge(state: LoopState) -> dict[str, Any]:
        with action("charge:order-1") as act:
            if not act.done:
                charged.append("order-1")
                act.result = "receipt-1"
        return {"messages": [f"charged: {act.result}"], "n": state.get("n", 0) + 1}

    g = StateGraph(LoopState)
    g.add_node("charge", charge)
    g.add_edge(START, "charge")
    g.add_edge("charge", END)
    return g


@pytest.mark.parametrize("attack", ["delete", "replay-intent"])
def test_a_confirmed_action_lost_or_rolled_back_in_postgres_alone_never_runs_again(
    make_saver: Any, attack: str
) -> None:
    charged: list[str] = []
    with make_saver(ALL, signing_key=KEY) as saver:
        _charging_graph(charged).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _cfg("t"))
        # An older record of the same action, signed and genuine: the intent.
        intent = saver._sync_chain().codec.encode_ledger("t", LedgerEntry("charge:order-1", "intent", updated_at=1.0))
    with _pg(saver) as conn:
        if attack == "delete":
            conn.execute("DELETE FROM lgd_ledger WHERE thread_id = 't'")
        else:
            conn.execute("UPDATE lgd_ledger SET record = %s WHERE thread_id = 't'", (intent,))
    with make_saver(ALL, signing_key=KEY) as saver:
        result = _charging_graph(charged).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, _cfg("t"))
        assert saver.actions("t")["charge:order-1"].state == "done"
        # The reads brought Postgres forward (a compare-and-swap on the bytes
        # they saw, so a confirmation written meanwhile is never overwritten).
        assert not saver.verify("t").missing
    assert charged == ["order-1"]
    assert result["messages"][-1] == "charged: receipt-1"
    with _pg(saver) as conn:
        record = conn.execute("SELECT record FROM lgd_ledger WHERE thread_id = 't'").fetchone()
    assert record is not None and bytes(record[0]) != intent


def _on(face: str, saver: DurableSaver, method: str, *args: Any) -> Any:
    """`saver.method(*args)` on the sync face, or ``saver.a<method>`` on the async one."""
    if face == "sync":
        return getattr(saver, method)(*args)

    async def call() -> Any:
        return await getattr(saver, f"a{method}")(*args)

    return asyncio.run(call())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_postgres_restored_from_an_older_backup_is_detected_and_repaired(make_saver: Any, face: str) -> None:
    tables = ("lgd_checkpoints", "lgd_blobs", "lgd_writes", "lgd_ledger")
    with make_saver(ALL) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, _cfg("t"))
        with _pg(saver) as conn:
            for t in tables:
                conn.execute(f"CREATE TABLE backup_{t} AS SELECT * FROM {t}")
        loop_graph(5).compile(checkpointer=saver).invoke({"messages": []}, _cfg("t"))
        newest = saver.get_tuple(_cfg("t")).checkpoint["id"]
    with _pg(saver) as conn:
        for t in tables:
            conn.execute(f"DELETE FROM {t}")
            conn.execute(f"INSERT INTO {t} SELECT * FROM backup_{t}")
    with make_saver(ALL) as saver:
        report = _on(face, saver, "verify")
        assert report.missing and {m.tier for m in report.missing} == {"postgres"}
        state = loop_graph(5).compile(checkpointer=saver).get_state(_cfg("t"))
        assert state.values["n"] == 5 and state.config["configurable"]["checkpoint_id"] == newest
        assert _on(face, saver, "repair").missing
        assert not _on(face, saver, "verify").missing
    with make_saver("postgres") as postgres_only:  # the system of record is whole again
        assert postgres_only.get_tuple(_cfg("t")).checkpoint["id"] == newest


# -- planted records and the serializer ----------------------------------------------------


def _one_checkpoint(saver: DurableSaver) -> Any:
    return saver.put(
        generate_config("t"),
        generate_checkpoint(channel_values={"v": "real"}) | {"channel_versions": {"v": 1}},
        generate_metadata(),
        {"v": 1},
    )


def _plant_os_system(saver: DurableSaver, marker: Path, *, postgres: bool = True) -> None:
    """Replace thread t's channel value in Redis (and Postgres) with an unsigned
    record (its plain checksum verifies) that would call os.system."""
    payload = ormsgpack.packb(
        ormsgpack.Ext(EXT_CONSTRUCTOR_SINGLE_ARG, ormsgpack.packb(("os", "system", f"touch {marker}")))
    )
    envelope = seal(blob_context("t", "", "v", "1"), "msgpack", payload)
    r = _redis()
    r.hset(f"{saver.redis_key_prefix}:{{t}}:blob", f"{SEP}v{SEP}1", envelope)
    r.close()
    if postgres:
        with _pg(saver) as conn:
            conn.execute("UPDATE lgd_blobs SET record = %s WHERE thread_id = 't'", (envelope,))


def test_a_planted_record_never_executes_code_without_a_signing_key(make_saver: Any, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    with make_saver("redis+postgres") as saver:
        config = _one_checkpoint(saver)
    _plant_os_system(saver, marker)
    with make_saver("redis+postgres") as saver:
        # Every record is sealed with the store's key: the planted one fails
        # verification in both tiers, so nothing is decoded, let alone called.
        with pytest.raises(CorruptCheckpoint):
            saver.get_tuple(config)
        with make_saver("redis+postgres", permissive_decoding=True) as permissive, pytest.raises(CorruptCheckpoint):
            permissive.get_tuple(config)  # only records that verify unsigned are decoded permissively
    assert not marker.exists()


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_an_undecodable_copy_in_one_tier_is_read_around(make_saver: Any, tmp_path: Path, face: str) -> None:
    """In a store written unsigned, a record planted in Redis alone verifies
    but does not decode strictly: the read takes Postgres's copy, which does,
    instead of failing, and nothing is built from the planted one."""
    marker = tmp_path / "pwned"
    with make_saver("redis+postgres") as saver:
        saver._runtime.store_key = False  # how such a store was written
        config = _one_checkpoint(saver)
    _plant_os_system(saver, marker, postgres=False)
    saver = make_saver("redis+postgres")
    if face == "sync":
        with saver:
            value = saver.get_tuple(config).checkpoint["channel_values"]["v"]
    else:
        async with saver:
            value = (await saver.aget_tuple(config)).checkpoint["channel_values"]["v"]
    assert value == "real"
    assert not marker.exists()


def test_a_planted_record_in_a_store_written_unsigned_executes_nothing(make_saver: Any, tmp_path: Path) -> None:
    """A store written before records were sealed by default: an unsigned
    record verifies, so it is decoded with the strict allowlist."""
    marker = tmp_path / "pwned"
    with make_saver("redis+postgres") as saver:
        saver._runtime.store_key = False  # how such a store was written
        config = _one_checkpoint(saver)
    _plant_os_system(saver, marker)
    with make_saver("redis+postgres") as saver:
        with pytest.raises(UndecodableRecord, match=r"os\.system"):
            saver.get_tuple(config)  # strict: refused loudly, never the plain data in its place
        assert saver.quarantined("t") == []  # it verifies: not damage
    assert not marker.exists()
    # repair does not seal it with the store's key (it would then be trusted and decoded as is).
    with make_saver("redis+postgres") as saver:
        report = saver.repair()
        assert report.undecodable and report.bad == []
        with pytest.raises(UndecodableRecord, match=r"os\.system"):
            saver.get_tuple(config)
    with make_saver("redis+postgres") as saver:
        with pytest.raises(UndecodableRecord, match=r"os\.system"):
            saver.get_tuple(config)
    assert not marker.exists()
    # The option that restores LangGraph's permissive default does what it says.
    with make_saver("redis+postgres", permissive_decoding=True) as permissive:
        permissive.get_tuple(config)
    assert marker.exists()


@dataclass
class Item:
    name: str


class ItemState(TypedDict):
    items: Annotated[list[Item], operator.add]


def test_state_types_round_trip_through_with_allowlist_in_strict_mode(make_saver: Any) -> None:
    g = StateGraph(ItemState)
    g.add_node("add", lambda s: {"items": [Item(f"item {len(s['items'])}")]})
    g.add_edge(START, "add")
    g.add_edge("add", END)
    with make_saver("redis+postgres") as saver:
        clone = saver.with_allowlist([(Item.__module__, "Item")])
        assert clone is not saver
        graph = g.compile(checkpointer=clone)
        graph.invoke({"items": []}, _cfg("t"))
        graph.invoke({"items": []}, _cfg("t"))
        assert graph.get_state(_cfg("t")).values["items"] == [Item("item 0"), Item("item 1")]
        # The records are sealed with the store's key, so the saver itself
        # decodes them with its serde as is: the same types, not plain data.
        raw = saver.get_tuple(_cfg("t")).checkpoint["channel_values"]["items"]
        assert raw == [Item("item 0"), Item("item 1")]


# -- quarantine is reversible ------------------------------------------------------------


@pytest.mark.parametrize("face", ["cli", "async"])
def test_a_withdrawn_checkpoint_comes_back_from_quarantine(
    make_saver: Any, capsys: pytest.CaptureFixture[str], face: str
) -> None:
    with make_saver(ALL) as saver:
        configs = _chain(saver, "t", 2)
    newest = configs[-1]["configurable"]["checkpoint_id"]
    field = f"{SEP}v{SEP}2"
    r = _redis()
    blob_key = f"{saver.redis_key_prefix}:{{t}}:blob"
    original = r.hget(blob_key, field)
    r.hset(blob_key, field, original[:-1] + b"\x01")
    r.close()
    with _pg(saver) as conn:
        conn.execute("UPDATE lgd_blobs SET record = %s WHERE version = '2'", (original[:-1] + b"\x02",))
    with sqlite3.connect(saver.sqlite_path) as conn:
        conn.execute("UPDATE lgd_blobs SET record = ? WHERE version = '2'", (original[:-1] + b"\x03",))
    with make_saver(ALL) as saver:
        assert saver.get_tuple(_cfg("t")).checkpoint["id"] != newest  # fell back
        kinds = {(q.tier, q.kind) for q in saver.quarantined("t")}
        assert kinds == {(t, k) for t in ("sqlite", "redis", "postgres") for k in ("checkpoint", "blob")}
    # The operator finds the value in a backup and puts it back in one tier...
    with _pg(saver) as conn:
        conn.execute("INSERT INTO lgd_blobs VALUES ('t', '', 'v', '2', %s)", (original,))
    # ...and restores the withdrawn checkpoint (the bad blob copies are kept
    # out: an intact copy is in place where it matters).
    if face == "cli":
        flags = [
            "--sqlite", saver.sqlite_path, "--redis", REDIS_URL, "--redis-key-prefix", saver.redis_key_prefix,
            "--postgres", saver.postgres_url,
        ]  # fmt: skip
        assert cli.main(["quarantine", "list", "--thread", "t", *flags]) == 0
        assert "6 quarantined record(s)" in capsys.readouterr().out
        assert cli.main(["quarantine", "restore", "--all", "--thread", "t", *flags]) == 0
        assert "restored" in capsys.readouterr().out
    else:

        async def restore() -> tuple[list[Any], list[Any]]:
            async with make_saver(ALL) as saver:
                found = await saver.aquarantined("t")
                assert len(found) == 6
                return await saver.arestore_quarantined(found)

        restored, kept_out = asyncio.run(restore())
        assert {(q.tier, q.kind) for q in restored} >= {(t, "checkpoint") for t in ("sqlite", "redis", "postgres")}
        assert restored and len(restored) + len(kept_out) == 6
    with make_saver(ALL) as saver:
        tup = saver.get_tuple(_cfg("t"))
        assert tup.checkpoint["id"] == newest and tup.checkpoint["channel_values"] == {"v": "value 1"}
        assert saver.verify("t").bad == []


@pytest.mark.parametrize("face", ["sync", "async"])
def test_restore_refuses_unknown_ids(make_saver: Any, face: str) -> None:
    with make_saver("sqlite") as saver, pytest.raises(ConfigError, match="no quarantined record 'sqlite:999'"):
        _on(face, saver, "restore_quarantined", ["sqlite:999"])


STRICT_SCRIPT = """
import operator, sys
from dataclasses import dataclass
from typing import Annotated, TypedDict
from langgraph.graph import END, START, StateGraph
from langgraph_durable import DurableSaver, Tiers

@dataclass
class Item:
    name: str

class ItemState(TypedDict):
    items: Annotated[list[Item], operator.add]

g = StateGraph(ItemState)
g.add_node("add", lambda s: {"items": [Item(f"item {len(s['items'])}")]})
g.add_edge(START, "add")
g.add_edge("add", END)
redis_url, prefix, postgres_url = sys.argv[1:4]
with DurableSaver(sqlite=None, redis=redis_url, tiers=Tiers(redis_key_prefix=prefix), postgres=postgres_url) as saver:
    graph = g.compile(checkpointer=saver)  # compile() passes the state's types to with_allowlist
    graph.invoke({"items": []}, {"configurable": {"thread_id": "t"}})
with DurableSaver(sqlite=None, redis=redis_url, tiers=Tiers(redis_key_prefix=prefix), postgres=postgres_url) as saver:
    items = g.compile(checkpointer=saver).get_state({"configurable": {"thread_id": "t"}}).values["items"]
    assert items == [Item("item 0")], items
    print("round-tripped", type(items[0]).__name__)
"""


def test_compile_registers_the_state_types_under_langgraph_strict_msgpack(make_saver: Any) -> None:
    """LangGraph's strict mode (read when it is imported, hence a process of
    its own): compile() hands the state schema's types to with_allowlist, and
    the saver decodes them, also for records from unsigned shared tiers."""
    import os
    import subprocess
    import sys

    saver = make_saver("redis+postgres")
    env = {**os.environ, "LANGGRAPH_STRICT_MSGPACK": "true"}
    done = subprocess.run(
        [sys.executable, "-c", STRICT_SCRIPT, REDIS_URL, saver.redis_key_prefix, saver.postgres_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "round-tripped Item" in done.stdout


def test_ledger_read_repair_never_overwrites_a_state_written_meanwhile(make_saver: Any) -> None:
    """What makes the reads' ledger repair safe while a task confirms its
    action: each tier replaces an entry only if it still holds what was read."""
    with make_saver(ALL) as saver:
        chain = saver._sync_chain()
        chain.ensure_setup()
        codec = chain.codec
        intent = codec.encode_ledger("t", LedgerEntry("k", "intent", updated_at=1.0))
        done = codec.encode_ledger("t", LedgerEntry("k", "done", result="r", updated_at=2.0))
        other = codec.encode_ledger("t", LedgerEntry("k", "intent", updated_at=3.0))
        for tier in chain.tiers:
            tier.swap_ledger("t", "k", None, intent)  # absent: inserted
            assert tier.read_ledger("t")["k"] == intent, tier.name
            tier.write_ledger("t", "k", done)  # a confirmation lands meanwhile
            tier.swap_ledger("t", "k", intent, other)  # the repair saw the intent: refused
            tier.swap_ledger("t", "k", None, other)  # "absent" is stale too: refused
            assert tier.read_ledger("t")["k"] == done, tier.name
            tier.swap_ledger("t", "k", done, other)  # still what it saw: replaced
            assert tier.read_ledger("t")["k"] == other, tier.name


@pytest.mark.parametrize("how", ["delete_thread", "delete_for_runs"])
def test_a_deletion_through_one_replica_is_not_undone_by_another_replicas_cache(make_saver: Any, how: str) -> None:
    """Replica B's local cache still holds what replica A deleted: B must
    neither serve it as the latest nor copy it back into the shared tiers."""
    a = make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite")
    b = make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite")
    with a, b:
        config = generate_config("t")
        for i, run in enumerate(["run-1", "run-1", "run-2", "run-2"]):
            cp = generate_checkpoint(channel_values={"v": f"value {i}"}) | {"channel_versions": {"v": i + 1}}
            config = a.put(config, cp, generate_metadata(step=i) | {"run_id": run}, {"v": i + 1})
        newest = config["configurable"]["checkpoint_id"]
        assert b.get_tuple(_cfg("t")).checkpoint["id"] == newest  # now in B's cache too
        if how == "delete_thread":
            a.delete_thread("t")
            assert b.get_tuple(_cfg("t")) is None
        else:
            a.delete_for_runs(["run-2"])
            assert b.get_tuple(_cfg("t")).checkpoint["channel_values"] == {"v": "value 1"}
        shared = _ids_in_every_tier(a, "t")
        assert newest not in shared["redis"] and newest not in shared["postgres"]


@pytest.mark.parametrize("moved_on", [False, True])
def test_an_unacknowledged_journal_entry_is_not_grafted_onto_a_thread_that_moved_on(
    make_saver: Any, moved_on: bool
) -> None:
    """Replica A committed checkpoint C locally and died before the shared
    tiers took it. If replica B ran the thread on meanwhile, A's restart must
    not ship C (a fork of an acknowledged history); otherwise it ships it."""
    with make_saver(ALL, sqlite_name="a.sqlite") as a:
        parent = a.put(generate_config("t"), generate_checkpoint(), generate_metadata(step=0), {})
    with make_saver("sqlite", sqlite_name="a.sqlite") as local_only:  # C reaches a.sqlite only
        c = local_only.put(parent, generate_checkpoint(), generate_metadata(step=1), {})["configurable"]
    with sqlite3.connect(local_only.sqlite_path) as conn:
        conn.execute(
            "INSERT INTO lgd_journal (kind, thread_id, checkpoint_ns, checkpoint_id, task_id, created_at) "
            "VALUES ('checkpoint', 't', '', ?, NULL, 0)",
            (c["checkpoint_id"],),
        )
    if moved_on:
        with make_saver(ALL, sqlite_name="b.sqlite") as b:
            q = b.put(parent, generate_checkpoint(), generate_metadata(step=1), {})["configurable"]["checkpoint_id"]
    with make_saver(ALL, sqlite_name="a.sqlite") as restarted:
        restarted.setup()
        shared = _ids_in_every_tier(restarted, "t")
        assert (c["checkpoint_id"] in shared["postgres"]) is not moved_on
        assert (c["checkpoint_id"] in shared["redis"]) is not moved_on
        latest = restarted.get_tuple(_cfg("t")).checkpoint["id"]
        assert latest == (q if moved_on else c["checkpoint_id"])


def test_verify_finds_what_postgres_lost_when_only_the_local_tier_still_holds_it(make_saver: Any) -> None:
    """SQLite + Postgres: Postgres restored from a backup older than the last
    step. The local tier is the only other evidence: verify reports the
    newest checkpoint, its value and its writes as missing from Postgres,
    and repair makes Postgres whole again on its own."""
    with make_saver("sqlite+postgres") as saver:
        configs = _chain(saver, "t", 3)
    newest = configs[-1]["configurable"]["checkpoint_id"]
    with _pg(saver) as conn:  # the backup predates the last step
        conn.execute("DELETE FROM lgd_checkpoints WHERE checkpoint_id = %s", (newest,))
        conn.execute("DELETE FROM lgd_blobs WHERE version = '3'")
        conn.execute("DELETE FROM lgd_writes WHERE checkpoint_id = %s", (newest,))
    with make_saver("sqlite+postgres") as saver:
        missing = saver.verify("t").missing
        assert {(m.tier, m.kind) for m in missing} == {("postgres", k) for k in ("checkpoint", "blob", "write")}
        saver.repair("t")
        assert not saver.verify("t").missing
    with make_saver("postgres") as postgres_only:
        tup = postgres_only.get_tuple(_cfg("t"))
        assert tup.checkpoint["id"] == newest and tup.checkpoint["channel_values"] == {"v": "value 2"}
        assert tup.pending_writes == [("task-2", "x", "write 2")]


@pytest.mark.parametrize("column", ["record", "parent_id"])
def test_a_local_row_holding_text_where_bytes_belong_is_one_bad_copy_not_a_dead_tier(
    make_saver: Any, column: str
) -> None:
    """sqlite3 raises when it cannot decode a text value; one such row (a
    record column holding text, a key column holding bytes that are not
    UTF-8) used to make every read of the local tier fail, so the tier
    counted as down and its writes were skipped. It is one bad copy: read
    around, reported, replaced; the local tier keeps working."""
    events: list[Any] = []
    with make_saver(ALL, on_corruption=events.append) as saver:
        saver.setup()
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, _cfg("t"))
        latest = saver.get_tuple(_cfg("t"))
        assert latest is not None
        path = saver.sqlite_path or ""
    with sqlite3.connect(path) as conn:
        if column == "record":
            conn.execute(
                "UPDATE lgd_checkpoints SET record = CAST(x'd74c4744ff00' AS TEXT) WHERE thread_id = 't' "
                "AND checkpoint_id = ?",
                (latest.checkpoint["id"],),
            )
        else:
            conn.execute(
                "UPDATE lgd_checkpoints SET parent_id = CAST(x'ff' AS TEXT) WHERE thread_id = 't' AND checkpoint_id = ?",
                (latest.checkpoint["id"],),
            )
    with make_saver(ALL, on_corruption=events.append) as saver:
        tup = saver.get_tuple(_cfg("t"))
        assert tup is not None and tup.checkpoint == latest.checkpoint
        assert [(e.tier, e.kind) for e in events] == [("sqlite", "checkpoint")]
        # The local tier still works: the next run writes it, nothing is owed.
        loop_graph(5).compile(checkpointer=saver).invoke({"messages": [], "n": 3}, _cfg("t"))
        assert saver.health().local_write_failures == 0
        assert saver.lag().records == 0
        assert saver.verify("t").bad == []


# -- a task that lost one write; a record intact only in the local cache ------------------


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_task_that_lost_a_write_runs_again_on_every_read_never_from_part_of_its_writes(
    make_saver: Any, face: str
) -> None:
    """Write 1 of task t1 is damaged in every tier (differently: no intact
    copy, not the same bytes); write 0 is intact. Every read serves none of
    t1's writes (LangGraph runs t1 again), not just the first: the intact
    write goes to the quarantine with the damaged ones, from where `restore`
    brings it back."""
    with make_saver(ALL) as saver:
        config = saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
        saver.put_writes(config, [("x", "first"), ("y", "second")], "t1")
        saver.put_writes(config, [("z", "other task")], "t2")
        cid = config["configurable"]["checkpoint_id"]
        stores = open_stores(saver, REDIS_URL)
        lost = Rec(WRITE, "", (cid, "t1", 1))
        for i, store in enumerate(stores):
            original = store.get("t", lost)
            assert original is not None
            store.put_raw("t", lost, flip(original.raw, 12 + i, 1), original)

        def read() -> list[Any]:
            tup = saver.get_tuple(config) if face == "sync" else asyncio.run(saver.aget_tuple(config))
            assert tup is not None
            return sorted((w[0], w[1]) for w in tup.pending_writes)

        assert read() == [("t2", "z")]
        assert read() == [("t2", "z")]  # the second read too: no partial set of t1's
        kept = [q for q in saver.quarantined("t") if q.kind == "write"]
        assert {q.key for q in kept} == {f"write t1/0 of checkpoint {cid}", f"write t1/1 of checkpoint {cid}"}
        assert any("withdrawn" in q.reason for q in kept)
        for store in stores:
            store.close()


def test_repair_copies_a_record_held_intact_only_locally_to_every_shared_tier_in_one_pass(make_saver: Any) -> None:
    """An older checkpoint's record is intact in SQLite only, damaged in Redis
    and gone from Postgres: one `repair` restores it in both shared tiers."""
    with make_saver(ALL) as saver:
        configs = _chain(saver, "t", 2)
        cid = configs[0]["configurable"]["checkpoint_id"]
        stores = open_stores(saver, REDIS_URL)
        rec = Rec(CHECKPOINT, "", (cid,))
        local, redis_store, postgres_store = stores
        original = redis_store.get("t", rec)
        assert original is not None and original.envelope is not None
        redis_store.put_envelope("t", rec, flip(original.envelope, 30, 1), original)
        postgres_store.delete("t", rec)
        before = saver.verify("t")
        assert [c.tier for c in before.bad] == ["redis"] and not before.missing
        report = saver.repair("t")
        assert report.restored
        after = saver.verify("t")
        assert not after.bad and not after.missing, (after.bad, after.missing)
        held = local.get("t", rec)
        assert held is not None
        for store in (redis_store, postgres_store):
            copy = store.get("t", rec)
            assert copy is not None and copy.same_record(held)
        for store in stores:
            store.close()


@pytest.mark.parametrize("damaged", ["redis", "sqlite"])
@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_local_cache_that_lost_the_checkpoint_still_lends_its_pending_writes(
    make_saver: Any, damaged: str, face: str
) -> None:
    """The local cache lost the newest checkpoint's record but kept its
    pending write; one copy of that write is damaged, in Redis or in the
    local cache. The heads make the local cache look as if it held none of
    the checkpoint's writes: the read asks it for them all the same, serves
    the intact copy (not a task that runs again), and leaves an intact copy
    in both tiers."""
    with make_saver("sqlite+redis", lease_linger=0) as saver:
        config = saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
        saver.put_writes(config, [("x", "kept")], "t1")
        cid = config["configurable"]["checkpoint_id"]
        stores = open_stores(saver, REDIS_URL)
        local, redis_store = stores
        write = Rec(WRITE, "", (cid, "t1", 0))
        target = redis_store if damaged == "redis" else local
        original = target.get("t", write)
        assert original is not None
        target.put_raw("t", write, flip(original.raw, 12, 1), original)
        local.delete("t", Rec(CHECKPOINT, "", (cid,)))
        latest = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        for _ in range(2):  # the second read too
            tup = saver.get_tuple(latest) if face == "sync" else asyncio.run(saver.aget_tuple(latest))
            assert tup is not None and tup.checkpoint["id"] == cid
            assert [(w[0], w[1], w[2]) for w in tup.pending_writes] == [("t1", "x", "kept")]
        held = [store.get("t", write) for store in stores]
        assert all(copy is not None and copy.same_record(held[0]) for copy in held)
        assert not saver.verify("t").bad
        for store in stores:
            store.close()
