"""An application's own types come back as themselves, and a record a reader
cannot decode is an error of the reader's, never damage and never a dict.

With a shared tier and no signing key, every record is sealed with the
store's own key (created at setup in the system of record), so a planted
record fails verification and verified records decode with the app's serde.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.types import Command

from langgraph_durable import DurableSaver, UndecodableRecord
from langgraph_durable.model.records import BadRecord
from langgraph_durable.tiers.base import STORE_KEY_META

from . import typed_state
from .conftest import CONFIGS, REDIS_URL

SHARED = [c for c in CONFIGS if c != "sqlite"]


def run_to_interrupt(saver: DurableSaver, thread: str) -> None:
    graph = typed_state.build().compile(checkpointer=saver)
    graph.invoke({"log": []}, {"configurable": {"thread_id": thread}})


def resume(saver: DurableSaver, thread: str) -> dict[str, Any]:
    graph = typed_state.build().compile(checkpointer=saver)
    return graph.invoke(Command(resume="yes"), {"configurable": {"thread_id": thread}})


def assert_typed(values: dict[str, Any]) -> None:
    for key, expected in typed_state.EXPECTED.items():
        if key == "pairs":  # msgpack has no tuple: every saver hands pairs back as lists
            assert [list(p) for p in values[key]] == [list(p) for p in expected]
            assert all(type(p[1]) is typed_state.Item for p in values[key])
            continue
        assert type(values[key]) is type(expected), (key, type(values[key]))
        assert values[key] == expected, key


def quarantined(saver: DurableSaver) -> list[Any]:
    return saver.quarantined()


@pytest.mark.parametrize("tiers", CONFIGS)
@pytest.mark.parametrize("key", [None, "k" * 32], ids=["no-key", "key"])
def test_state_types_survive_a_resume_in_a_fresh_saver(make_saver: Any, tiers: str, key: str | None) -> None:
    with make_saver(tiers, signing_key=key) as first:
        run_to_interrupt(first, "t")
    # A fresh saver reads everything from the tiers (no memo of the first one's).
    fresh = "local.sqlite" if tiers == "sqlite" else "other.sqlite"  # SQLite alone: its one file
    with make_saver(tiers, signing_key=key, sqlite_name=fresh) as second:
        state = typed_state.build().compile(checkpointer=second).get_state({"configurable": {"thread_id": "t"}})
        assert_typed(state.values)
        out = resume(second, "t")
        assert out["log"][-1] == "i1/5/o2/red"
        assert_typed(out)


@pytest.mark.parametrize("tiers", SHARED)
async def test_state_types_survive_on_the_async_face(make_saver: Any, tiers: str) -> None:
    async with make_saver(tiers) as first:
        graph = typed_state.build().compile(checkpointer=first)
        await graph.ainvoke({"log": []}, {"configurable": {"thread_id": "t"}})
    async with make_saver(tiers, sqlite_name="other.sqlite") as second:
        graph = typed_state.build().compile(checkpointer=second)
        out = await graph.ainvoke(Command(resume="yes"), {"configurable": {"thread_id": "t"}})
        assert out["log"][-1] == "i1/5/o2/red"
        assert_typed(out)


@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "redis"])
def test_functional_api_task_results_come_back_as_models(make_saver: Any, tiers: str) -> None:
    config = {"configurable": {"thread_id": "f"}}
    with make_saver(tiers) as first:
        typed_state.functional(first).invoke(3, config)
    with make_saver(tiers, sqlite_name="other.sqlite") as second:
        out = typed_state.functional(second).invoke(Command(resume="go"), config)
    assert type(out["order"]) is typed_state.Order
    assert out["order"].items[0] == typed_state.Item("x", 3)
    assert out["qty"] == 3 and out["answer"] == "go"


@pytest.mark.parametrize("tiers", CONFIGS)
@pytest.mark.parametrize("key", [None, "k" * 32], ids=["no-key", "key"])
def test_the_same_types_as_postgres_saver_in_a_new_process(
    make_saver: Any, postgres_url: str, tmp_path: Path, tiers: str, key: str | None
) -> None:
    """Resume in another process, as after an OOM kill: DurableSaver on each
    tier configuration and PostgresSaver alone hand back the same types."""
    with make_saver(tiers, signing_key=key) as saver:
        run_to_interrupt(saver, "t")
        options = {
            "sqlite": saver.sqlite_path
            if tiers == "sqlite"
            else (str(tmp_path / "fresh.sqlite") if "sqlite" in tiers else None),
            "redis": saver.redis_url,
            "postgres": saver.postgres_url,
            "signing_key": key,
        }
    with PostgresSaver.from_conn_string(postgres_url) as stock:
        stock.setup()
        run_to_interrupt(stock, "stock")  # type: ignore[arg-type]
    script = textwrap.dedent(
        f"""
        from langgraph.checkpoint.postgres import PostgresSaver
        from langgraph.types import Command
        from langgraph_durable import DurableSaver, Tiers
        from tests import typed_state

        def kinds(out):
            return sorted((k, type(v).__name__) for k, v in out.items() if k in typed_state.EXPECTED)

        with DurableSaver(**{options!r}, tiers=Tiers(redis_key_prefix={saver.redis_key_prefix!r})) as saver:
            ours = typed_state.build().compile(checkpointer=saver).invoke(
                Command(resume="yes"), {{"configurable": {{"thread_id": "t"}}}})
        with PostgresSaver.from_conn_string({postgres_url!r}) as stock:
            theirs = typed_state.build().compile(checkpointer=stock).invoke(
                Command(resume="yes"), {{"configurable": {{"thread_id": "stock"}}}})
        assert kinds(ours) == kinds(theirs), (kinds(ours), kinds(theirs))
        assert ours["log"][-1] == theirs["log"][-1] == "i1/5/o2/red", (ours["log"], theirs["log"])
        print("same", kinds(ours))
        """
    )
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "('item', 'Item')" in done.stdout and "('order', 'Order')" in done.stdout


@pytest.mark.parametrize("tiers", SHARED)
def test_every_replica_seals_with_the_one_store_key(make_saver: Any, tiers: str) -> None:
    with make_saver(tiers) as a, make_saver(tiers, sqlite_name="b.sqlite") as b:
        a.setup()
        b.setup()
        assert a._codec.key and a._codec.key == b._codec.key
        authority = a._sync_chain().shared[-1]
        assert authority.read_meta(STORE_KEY_META) is not None


def test_a_restart_reads_the_store_key_from_its_local_copy(make_saver: Any, postgres_proxy: Any) -> None:
    """With Postgres (the key's keeper) down, a replica that has run before
    still starts and serves its threads from Redis."""
    proxy, url = postgres_proxy
    with make_saver("sqlite+redis+postgres", postgres=url) as saver:
        run_to_interrupt(saver, "t")
        key = saver._codec.key
    proxy.cut()
    with make_saver("sqlite+redis+postgres", postgres=url, connect_timeout=1) as again:
        again.setup()
        assert again._codec.key == key
        assert_typed(
            typed_state.build().compile(checkpointer=again).get_state({"configurable": {"thread_id": "t"}}).values
        )


def test_a_new_replica_without_the_key_says_where_it_is(make_saver: Any, postgres_proxy: Any) -> None:
    from langgraph_durable import TierUnavailable

    proxy, url = postgres_proxy
    proxy.cut()
    with make_saver("sqlite+redis+postgres", postgres=url, connect_timeout=1) as saver:
        with pytest.raises(TierUnavailable, match="store's key") as exc:
            saver.setup()
        assert exc.value.tier == "postgres"


# -- a record planted in a shared tier --------------------------------------------------


class Boom:
    called = 0

    def __init__(self, *args: Any) -> None:
        Boom.called += 1


def test_a_planted_unsigned_record_constructs_nothing(make_saver: Any) -> None:
    """Someone who can write Redis but not read the key plants a channel
    value naming a class: it fails verification, nothing is built, and the
    intact copy in Postgres is served."""
    import ormsgpack
    from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS

    from langgraph_durable.model.records import blob_context, seal

    from .tamper import BLOB, Rec, RedisStore

    with make_saver("redis+postgres") as saver:
        run_to_interrupt(saver, "t")
        tup = saver.get_tuple({"configurable": {"thread_id": "t"}})
        assert tup is not None
        version = str(tup.checkpoint["channel_versions"]["item"])
        prefix = saver.redis_key_prefix
    # What LangGraph's msgpack writes for an object rebuilt by calling its class.
    call = ormsgpack.packb([__name__, "Boom", [1]])
    tag, payload = "msgpack", ormsgpack.packb(ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, call))
    planted = seal(blob_context("t", "", "item", version), tag, payload)  # unsigned: the key is not at hand
    store = RedisStore(REDIS_URL, prefix)
    rec = Rec(BLOB, "", ("item", version))
    original = store.get("t", rec)
    assert original is not None
    store.put_raw("t", rec, planted, original)
    with make_saver("redis+postgres") as fresh:
        state = typed_state.build().compile(checkpointer=fresh).get_state({"configurable": {"thread_id": "t"}})
        assert Boom.called == 0
        assert state.values["item"] == typed_state.Item("i1", 2)
        assert [q.tier for q in fresh.quarantined()] == ["redis"]  # the planted copy, not the intact one


# -- a store the reader cannot decode ------------------------------------------------------


def encrypted() -> EncryptedSerializer:
    return EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")


@pytest.mark.parametrize("tiers", ["postgres", "sqlite+redis+postgres", "sqlite"])
def test_an_encrypted_store_read_without_its_serde_raises_and_moves_nothing(make_saver: Any, tiers: str) -> None:
    with make_saver(tiers, serde=encrypted()) as app:
        run_to_interrupt(app, "t")
        before = [(t.checkpoint["id"]) for t in app.list({"configurable": {"thread_id": "t"}})]
    with make_saver(tiers, read_only=True) as reader:
        with pytest.raises(UndecodableRecord, match="serde") as exc:
            reader.get_tuple({"configurable": {"thread_id": "t"}})
        assert exc.value.type_tag.endswith("+aes")
        with pytest.raises(UndecodableRecord):
            list(reader.list({"configurable": {"thread_id": "t"}}))
    # Not even a reader that may write takes intact bytes for damage.
    with make_saver(tiers) as careless:
        with pytest.raises(UndecodableRecord):
            careless.get_tuple({"configurable": {"thread_id": "t"}})
        report = careless.verify()
        assert report.bad == [] and report.undecodable, report
        assert "+aes" in report.undecodable[0]
        assert careless.repair().bad == []
        assert quarantined(careless) == []
    with make_saver(tiers, serde=encrypted()) as app:
        assert [t.checkpoint["id"] for t in app.list({"configurable": {"thread_id": "t"}})] == before
        assert_typed(
            typed_state.build().compile(checkpointer=app).get_state({"configurable": {"thread_id": "t"}}).values
        )
        assert quarantined(app) == []


def test_a_type_the_allowlist_blocks_is_an_error_not_a_dict(make_saver: Any) -> None:
    """A legacy record (sealed before the store had a key) holding an app
    type: strict decoding refuses it loudly, and repair re-seals it."""
    with make_saver("sqlite+postgres") as old:
        old._runtime.store_key = False  # a store written before records were sealed by default
        run_to_interrupt(old, "t")
        assert old._codec.key == b""
    with make_saver("sqlite+postgres", sqlite_name="new.sqlite") as new:
        with pytest.raises(UndecodableRecord, match="stored without a signing key") as exc:
            new.get_tuple({"configurable": {"thread_id": "t"}})
        assert exc.value.blocked and all(b.startswith("tests.typed_state.") for b in exc.value.blocked)
        assert quarantined(new) == []
        # repair re-seals only what decodes strictly: the app's types stay unsigned ...
        new.repair()
        with pytest.raises(UndecodableRecord):
            new.get_tuple({"configurable": {"thread_id": "t"}})
    # ... until the operator, knowing the app alone wrote them, says so.
    with make_saver("sqlite+postgres", sqlite_name="new.sqlite", permissive_decoding=True) as trusting:
        assert trusting.repair().resealed > 0
    with make_saver("sqlite+postgres", sqlite_name="new.sqlite") as new:
        state = typed_state.build().compile(checkpointer=new).get_state({"configurable": {"thread_id": "t"}})
        assert_typed(state.values)


@pytest.mark.parametrize("tiers", CONFIGS)
@pytest.mark.parametrize("key", [None, "k" * 32], ids=["no-key", "key"])
def test_a_class_this_process_cannot_import_is_an_error_not_a_dict(
    make_saver: Any, monkeypatch: pytest.MonkeyPatch, postgres_url: str, tiers: str, key: str | None
) -> None:
    """A class renamed or moved since the state was stored (or a package the
    reading process lacks): LangGraph hands back the stored data as a dict,
    PostgresSaver included; this saver raises, naming the class, and moves
    nothing. With the class back, the state reads whole."""
    with make_saver(tiers, signing_key=key) as saver:
        run_to_interrupt(saver, "t")
    with PostgresSaver.from_conn_string(postgres_url) as stock:
        stock.setup()
        run_to_interrupt(stock, "stock")  # type: ignore[arg-type]
        monkeypatch.delattr(typed_state, "Order")  # renamed in a later version of the app
        stock_values = stock.get_tuple({"configurable": {"thread_id": "stock"}})
        assert stock_values is not None
        assert type(stock_values.checkpoint["channel_values"]["order"]) is dict  # what LangGraph does
    fresh = "local.sqlite" if tiers == "sqlite" else "fresh.sqlite"  # a new replica, where there are shared tiers
    with make_saver(tiers, signing_key=key, sqlite_name=fresh) as reader:
        with pytest.raises(UndecodableRecord, match=r"cannot rebuild: tests\.typed_state\.Order") as exc:
            reader.get_tuple({"configurable": {"thread_id": "t"}})
        assert exc.value.unbuildable == ["tests.typed_state.Order"]
        assert "keep an alias at the old path" in str(exc.value)
        assert quarantined(reader) == []
    monkeypatch.undo()
    with make_saver(tiers, signing_key=key, sqlite_name=fresh) as reader:
        state = typed_state.build().compile(checkpointer=reader).get_state({"configurable": {"thread_id": "t"}})
        assert_typed(state.values)


def test_the_cli_shows_a_class_it_cannot_import_as_its_data(
    make_saver: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The read commands only show values: a class of the application that
    the command line's process cannot import is shown as its stored data."""
    from langgraph_durable import cli

    with make_saver("sqlite") as saver:
        run_to_interrupt(saver, "t")
        path = saver.sqlite_path
    monkeypatch.delattr(typed_state, "Order")
    assert cli.main(["show", "t", "--sqlite", str(path), "--json"]) == cli.EXIT_OK
    shown = json.loads(capsys.readouterr().out)["report"]["channel_values"]["order"]
    assert shown == {"id": "o1", "items": [{"id": "i1", "qty": 2}, {"id": "i2", "qty": 5}], "color": "blue"}


def test_bad_record_is_still_damage() -> None:
    """The line between the two errors: bytes that fail verification are
    damage (BadRecord, quarantined and read around), verified bytes are not."""
    assert not issubclass(UndecodableRecord, BadRecord)


@pytest.mark.parametrize("tiers", ["postgres", "sqlite+redis+postgres"])
async def test_an_encrypted_store_on_the_async_face(make_saver: Any, tiers: str) -> None:
    async with make_saver(tiers, serde=encrypted()) as app:
        graph = typed_state.build().compile(checkpointer=app)
        await graph.ainvoke({"log": []}, {"configurable": {"thread_id": "t"}})
    async with make_saver(tiers, sqlite_name="other.sqlite") as careless:
        with pytest.raises(UndecodableRecord, match="serde"):
            await careless.aget_tuple({"configurable": {"thread_id": "t"}})
        with pytest.raises(UndecodableRecord):
            [t async for t in careless.alist({"configurable": {"thread_id": "t"}})]
        report = await careless.averify()
        assert report.bad == [] and report.undecodable
        assert await careless.aquarantined() == []
    async with make_saver(tiers, serde=encrypted()) as app:
        state = await typed_state.build().compile(checkpointer=app).aget_state({"configurable": {"thread_id": "t"}})
        assert_typed(state.values)


def test_a_store_key_the_system_of_record_lost_is_put_back(make_saver: Any) -> None:
    """Redis as the system of record (no Postgres) loses its meta hash (evicted,
    flushed): a replica with the local copy of the key puts it back, so a new
    replica seals and reads with the same key rather than creating another."""
    from langgraph_durable.tiers.base import KEYS_META

    with make_saver("sqlite+redis") as first:
        run_to_interrupt(first, "t")
        key = first._codec.key
        far = first._sync_chain().shared[-1]
        far.write_meta(STORE_KEY_META, None)
        far.write_meta(KEYS_META, None)
    with make_saver("sqlite+redis") as again:  # the same local file: it keeps a copy
        again.setup()
        assert again._codec.key == key
    with make_saver("sqlite+redis", sqlite_name="new.sqlite") as fresh:
        fresh.setup()
        assert fresh._codec.key == key
        assert_typed(
            typed_state.build().compile(checkpointer=fresh).get_state({"configurable": {"thread_id": "t"}}).values
        )


def test_replicas_starting_together_on_a_new_store_agree_on_one_key(make_saver: Any) -> None:
    """Two replicas set up a new store at once: B is paused right after its
    first read of Postgres' store-wide settings while A sets the store up
    (creates the key, records its fingerprint). B then reads A's key; it does
    not take the store for one sealed with a key of the user's (which it did
    when it read the key before the fingerprints)."""
    with make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite") as a:
        with make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b:
            far = b._sync_chain().raw_shared[-1]
            assert far.name == "postgres"
            read_meta = far.read_meta
            paused: list[str] = []

            def read_then_let_a_in(key: str) -> Any:
                value = read_meta(key)
                if not paused:
                    paused.append(key)
                    a.setup()  # the other replica, in between B's reads
                return value

            far.read_meta = read_then_let_a_in
            b.setup()
            assert paused
            assert a._codec.key and b._codec.key == a._codec.key
