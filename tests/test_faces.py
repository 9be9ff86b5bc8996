"""The async face does what the sync face does, call for call.

`DurableSaver`'s operations are written once, async (faces/ops_async.py),
and the sync face is generated from them, over the async engine the sync one
is generated from; the async face also has what only it has: the async SQLite wrapper, the lease
keeper's releases on the event loop, the async archiver's own listing. Each
test runs one body on both faces (`tests.faces`) and asserts the same
observable results: values read back, what each tier holds (read directly,
`tests.tamper`), lag figures, streamed items, restore reports and outcomes.
"""

from __future__ import annotations

import gc
import time
from typing import Any

import psycopg
import pytest
import redis as redis_lib
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.config import get_stream_writer
from langgraph.types import Command

from langgraph_durable import DurableSaver, LedgerEntry, ThreadBusy
from langgraph_durable.archive.segments import segments_prefix
from langgraph_durable.archive.store import ArchiveStore
from langgraph_durable.model.backlog import Lag
from langgraph_durable.model.records import row_fields
from langgraph_durable.tiers.base import pack_fields

from . import lease_worker
from .conftest import REDIS_URL, SaverFactory
from .faces import FACES, On, OnGraph, run
from .graphs import interrupt_graph, loop_graph
from .tamper import WRITE, Rec, open_stores, postgres_store, sqlite_store

FULL = "sqlite+redis+postgres"
faces = pytest.mark.parametrize("face", FACES)


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def checkpoint(value: str, step: int) -> tuple[Any, dict[str, str]]:
    """A checkpoint whose channel ``k`` holds `value`, and its new versions."""
    cp = generate_checkpoint(channel_values={"k": value})
    cp["channel_versions"] = {"k": f"{step + 1:032}.0"}
    return cp, dict(cp["channel_versions"])


def ids_of(configs: list[Any]) -> list[str]:
    return [c["configurable"]["checkpoint_id"] for c in configs]


def snapshot(snap: Any) -> tuple[Any, ...]:
    """A state snapshot without its ids and timestamps (they differ between
    savers): values, next nodes, source, step, and each task's interrupts
    (read back from the pending writes)."""
    interrupts = tuple((t.name, tuple(i.value for i in t.interrupts)) for t in snap.tasks)
    return (snap.values, snap.next, snap.metadata.get("source"), snap.metadata.get("step"), interrupts)


# -- put, put_writes, get_tuple, list, drain -----------------------------------------------------


@pytest.mark.parametrize("tiers", ["sqlite", "redis+postgres", FULL])
@faces
def test_direct_puts_read_back_as_written_and_reach_every_tier(make_saver: SaverFactory, tiers: str, face: str) -> None:
    saver = make_saver(tiers)

    async def body() -> tuple[Any, ...]:
        async with On(saver, face) as on:
            stored, parent = [], generate_config("t")
            for step in range(3):
                cp, versions = checkpoint(f"value {step}", step)
                parent = await on.put(parent, cp, generate_metadata(step=step), versions)
                stored.append(parent)
            await on.put_writes(stored[-1], [("x", "w0"), ("y", "w1")], "task-1")
            latest = await on.get_tuple(generate_config("t"))
            first = await on.get_tuple(stored[0])
            listed = await on.list(generate_config("t"))
            # What is owed shipped (with all three tiers Redis gets a run's writes behind it).
            left = await on.drain(30)
            return stored, latest, first, listed, left

    stored, latest, first, listed, left = run(face, body)
    ids = ids_of(stored)
    assert latest.config["configurable"]["checkpoint_id"] == ids[-1]
    assert latest.checkpoint["channel_values"] == {"k": "value 2"}
    assert latest.parent_config["configurable"]["checkpoint_id"] == ids[1]
    assert latest.pending_writes == [("task-1", "x", "w0"), ("task-1", "y", "w1")]
    assert first.checkpoint["channel_values"] == {"k": "value 0"} and first.parent_config is None
    assert ids_of([t.config for t in listed]) == ids[::-1]
    assert [t.metadata["step"] for t in listed] == [2, 1, 0]
    assert left.caught_up
    stores = open_stores(saver, REDIS_URL)
    try:
        for store in stores:
            assert store.record_ids("t", "") == set(ids), store.name
            writes = store.get_all("t", [Rec(WRITE, "", (ids[-1], "task-1", i)) for i in (0, 1)])
            assert all(writes.values()), f"{store.name} lacks a pending write"
    finally:
        for store in stores:
            store.close()


# -- lag and drain ---------------------------------------------------------------------------------


@faces
def test_write_behind_lag_counts_what_postgres_is_owed_until_it_is_drained(
    make_saver: SaverFactory, postgres_proxy: tuple[Any, str], postgres_url: str, face: str
) -> None:
    proxy, through_proxy = postgres_proxy
    saver = make_saver("sqlite+postgres", postgres=through_proxy, write="local", connect_timeout=2)

    async def body() -> tuple[Any, ...]:
        async with On(saver, face) as on:
            cp, versions = checkpoint("shipped", 0)
            first = await on.put(generate_config("t"), cp, generate_metadata(step=0), versions)
            assert (await on.drain(30)).caught_up
            shipped = await on.lag()
            proxy.cut()
            cp, versions = checkpoint("owed", 1)
            second = await on.put(first, cp, generate_metadata(step=1), versions)
            await on.put_writes(second, [("x", "owed write")], "task")
            cp, versions = checkpoint("owed too", 2)
            third = await on.put(second, cp, generate_metadata(step=2), versions)
            owed = await on.lag()
            proxy.restore()
            left = await on.drain(60)
            return [first, second, third], shipped, owed, left, await on.lag()

    stored, shipped, owed, left, after = run(face, body)
    assert shipped == Lag(records=0, seconds=0.0, by_tier={"postgres": 0})
    # One journal entry per acknowledged call: two puts and a put_writes, all owed to Postgres.
    assert (owed.records, owed.by_tier) == (3, {"postgres": 3}) and owed.seconds > 0.0
    assert owed.archive is None
    assert left.caught_up and after == shipped
    pg = postgres_store(postgres_url)
    try:
        assert pg.record_ids("t", "") == set(ids_of(stored))
    finally:
        pg.close()


# -- stream / astream --------------------------------------------------------------------------


def _interrupt_run(face: str, checkpointer: Any) -> tuple[Any, ...]:
    """Stream interrupt_graph to its interrupt, then resume it: what each
    stream yielded (interrupts by value: their ids are the saver's), the
    state in between and the history, on `face`."""
    graph = OnGraph(interrupt_graph().compile(checkpointer=checkpointer), face)

    async def body() -> tuple[Any, ...]:
        streamed = await graph.stream({"messages": [], "n": 0}, cfg("t"), stream_mode="updates")
        first = [{k: [i.value for i in v] if k == "__interrupt__" else v for k, v in c.items()} for c in streamed]
        paused = snapshot(await graph.get_state(cfg("t")))
        rest = await graph.stream(Command(resume="yes"), cfg("t"), stream_mode="values")
        history = [snapshot(s) for s in await graph.history(cfg("t"))]
        if isinstance(checkpointer, DurableSaver):
            await On(checkpointer, face).close()
        return first, paused, rest, history

    return run(face, body)


@pytest.mark.parametrize("tiers", ["sqlite", FULL])
@faces
def test_a_streamed_run_pauses_at_its_interrupt_and_resumes_as_on_the_stock_saver(
    make_saver: SaverFactory, tiers: str, face: str
) -> None:
    first, paused, rest, history = got = _interrupt_run(face, make_saver(tiers))
    assert first == [
        {"prepare": {"messages": ["prepared"]}},
        {"__interrupt__": [{"question": "approve?", "n": 0}]},
    ]
    assert paused[:2] == ({"messages": ["prepared"], "n": 0}, ("ask",))
    assert paused[4] == (("ask", ({"question": "approve?", "n": 0},)),)
    assert rest[-1] == {"messages": ["prepared", "answer: yes", "finished"], "n": 1}
    assert len(history) == 5
    assert got == _interrupt_run(face, InMemorySaver())


@faces
def test_validators_run_once_per_run_streamed_or_invoked_and_never_on_inspection(
    make_saver: SaverFactory, face: str
) -> None:
    seen: list[str] = []
    saver = make_saver(FULL, validators=[lambda ctx: seen.append(ctx.checkpoint_id)])
    graph = OnGraph(loop_graph(3).compile(checkpointer=saver), face)

    async def body() -> None:
        async with On(saver, face):
            await graph.invoke({"messages": [], "n": 0}, cfg("t"))
            assert seen == []  # a new thread has nothing to validate
            resumed = (await graph.get_state(cfg("t"))).config["configurable"]["checkpoint_id"]
            await graph.invoke({"messages": ["again"], "n": 0}, cfg("t"))
            latest = (await graph.get_state(cfg("t"))).config["configurable"]["checkpoint_id"]
            history = await graph.history(cfg("t"))
            assert seen == [resumed]  # inspection never validates
            assert await graph.stream(None, cfg("t")) == []  # the thread is done: nothing runs
            assert seen == [resumed, latest]
            # Time travel: validated once, for the checkpoint asked for (not LangGraph's probe of the latest).
            old = history[3].config
            await graph.invoke(None, old)
            assert seen[2:] == [old["configurable"]["checkpoint_id"]]

    run(face, body)


@faces
def test_a_run_streamed_in_custom_mode_gives_its_lease_back(make_saver: SaverFactory, face: str) -> None:
    """A custom stream leaves its run's stream writer in a reference cycle;
    the run's lease must still be given back at its end, or another replica
    waits for it to expire (an hour here)."""

    def counted(state: dict[str, Any]) -> dict[str, Any]:
        count = state.get("count", 0) + 1
        get_stream_writer()({"count": count})
        return {"count": count}

    a = make_saver("sqlite", lease_ttl=3600)
    b = make_saver("sqlite", on_busy="wait", lease_wait=15)

    async def body() -> tuple[Any, Any]:
        async with On(a, face), On(b, face):
            streamed = await OnGraph(lease_worker.counter(counted).compile(checkpointer=a), face).stream(
                {"hits": ["a"]}, cfg("t"), stream_mode="custom"
            )
            if face == "sync":
                gc.collect()  # the sync face sees such a run end at the next collection
            after = await OnGraph(lease_worker.counter().compile(checkpointer=b), face).invoke(
                {"hits": ["b"]}, cfg("t")
            )
            return streamed, after

    streamed, after = run(face, body)
    assert streamed == [{"count": 1}]
    assert after == {"count": 2, "hits": ["a", "b"]}


# -- the archive: restore, drain_archive, archive_idle ------------------------------------------


def _lose_the_thread(saver: DurableSaver, thread_id: str) -> None:
    """Every row and key of `thread_id` gone from Postgres and Redis, as if
    lost (not deleted: no deletion is recorded anywhere); the store's own
    rows (its key, its id) stay. The local file is left behind by using
    another."""
    assert saver.postgres_url is not None
    with psycopg.connect(saver.postgres_url, autocommit=True) as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.columns "
            "WHERE column_name = 'thread_id' AND table_name LIKE 'lgd%'"
        ).fetchall()
        assert tables
        for schema, table in tables:
            conn.execute(f'DELETE FROM "{schema}"."{table}" WHERE thread_id = %s', (thread_id,))
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        keys = list(client.scan_iter(match=f"{saver.redis_key_prefix}:{{{thread_id}}}:*", count=1000))
        assert keys
        client.delete(*keys)
    finally:
        client.close()


@pytest.mark.s3
@faces
def test_restore_until_a_time_brings_a_lost_thread_back_as_it_was_then(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t"))
        saver.drain_archive()
        early = graph.get_state(cfg("t")).values
        cut = time.time()
        time.sleep(0.01)  # the next segment is stamped after the cut
        graph.invoke({"messages": ["later"], "n": 0}, cfg("t"))
        saver.drain_archive()
    _lose_the_thread(saver, "t")
    fresh = make_saver(FULL, archive=archive_url, sqlite_name="fresh.sqlite")

    async def body() -> tuple[Any, Any]:
        async with On(fresh, face) as on:
            report = await on.restore(["t"], until=cut)
            state = await OnGraph(loop_graph(2).compile(checkpointer=fresh), face).get_state(cfg("t"))
            return report, state.values

    report, values = run(face, body)
    assert (report.threads, report.archived, report.bad_segments) == (1, 0, []) and report.records > 0
    assert values == early and "later" not in values["messages"]


@pytest.mark.s3
@faces
def test_a_named_restore_waits_for_no_run_and_never_moves_a_thread_back(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    """A thread named to `restore` is rebuilt under its writer lease (`ThreadBusy`
    while another replica's run holds it); its ledger never goes back to what
    the archive holds (an operator's "done" stays), and a thread the archive
    records as deleted stays deleted."""
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-led"))
        saver.record_action("t-led", LedgerEntry("charge:1", "intent", updated_at=1.0))
        saver.drain_archive()  # the archive holds the intent
        saver.resolve_action("t-led", "charge:1", done=True, result="r-1")
        graph.invoke({"messages": [], "n": 0}, cfg("t-del"))
        saver.delete_thread("t-del")
        saver.drain_archive()  # the archive records the deletion
    refused = make_saver(FULL, archive=archive_url, sqlite_name="refused.sqlite", on_busy="raise")

    async def while_busy() -> None:
        async with On(refused, face) as on:
            with pytest.raises(ThreadBusy):
                await on.restore(["t-led"])

    with make_saver(FULL, archive=archive_url, sqlite_name="other.sqlite") as other:
        lease = other._sync_leases().hold("t-led")  # another replica's run has the thread
        try:
            run(face, while_busy)
        finally:
            other._sync_leases().release_quietly(lease)
    restorer = make_saver(FULL, archive=archive_url, sqlite_name="restorer.sqlite")

    async def body() -> tuple[Any, Any]:
        async with On(restorer, face) as on:
            report = await on.restore(["t-led", "t-del"])
            return report, await on.actions("t-led")

    report, actions = run(face, body)
    assert (report.threads, report.archived, report.bad_segments) == (1, 0, [])  # the deleted one stays deleted
    assert actions["charge:1"].state == "done" and actions["charge:1"].result == "r-1"


@pytest.mark.s3
@faces
def test_drain_archive_ships_what_lag_says_the_archive_is_behind(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    # The replica's own pass would come in half an hour: only drain_archive ships.
    saver = make_saver(FULL, archive=archive_url, archive_lag=3600.0)

    async def body() -> tuple[Any, ...]:
        async with On(saver, face) as on:
            cp, versions = checkpoint("archived", 0)
            stored = await on.put(generate_config("t"), cp, generate_metadata(step=0), versions)
            behind = (await on.lag()).archive
            left = await on.drain_archive(30)
            after = (await on.lag()).archive
            health = await on.health()
            return stored, behind, left, after, health

    stored, behind, left, after, health = run(face, body)
    assert (behind.threads, behind.segments) == (1, 0) and behind.seconds > 0.0
    assert left.caught_up and (left.segments, left.threads) == (1, 0) and left.records > 0
    assert (after.threads, after.segments) == (0, 1)
    assert health.ok and health.archive is not None and health.archive.reachable and health.archive.caught_up
    assert len(ArchiveStore(archive_url).keys(segments_prefix("t"))) == 1
    with make_saver(FULL, archive=archive_url) as looker:
        assert ("", stored["configurable"]["checkpoint_id"]) in looker._archiver().image("t").checkpoints


@faces
def test_drain_archive_without_an_archive_is_none(make_saver: SaverFactory, face: str) -> None:
    saver = make_saver("sqlite")

    async def body() -> Any:
        async with On(saver, face) as on:
            return await on.drain_archive(1.0)

    assert run(face, body) is None


@pytest.mark.s3
@faces
def test_archive_idle_moves_only_idle_threads_and_a_read_brings_them_back(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    saver = make_saver(FULL, archive=archive_url)

    async def body() -> tuple[Any, ...]:
        async with On(saver, face) as on:
            graph = OnGraph(loop_graph(2).compile(checkpointer=saver), face)
            for thread_id in ("t-idle", "t-other"):
                await graph.invoke({"messages": [], "n": 0}, cfg(thread_id))
            before = [snapshot(s) for s in await graph.history(cfg("t-idle"))]
            dry = await on.archive_idle(0.0, dry_run=True)  # every thread any tier holds
            young = await on.archive_idle(3600.0)
            moved = await on.archive_idle(0.0, thread_ids=["t-idle"])
            archived = await on.archived_threads()
            after = [snapshot(s) for s in await graph.history(cfg("t-idle"))]  # brings it back
            return before, dry, young, moved, archived, after, await on.archived_threads()

    before, dry, young, moved, archived, after, finally_archived = run(face, body)
    assert dry.archived == ["t-idle", "t-other"]
    assert young.archived == [] and {o.skipped for o in young.threads} == {"not idle"}
    assert moved.archived == ["t-idle"] and archived == ["t-idle"]
    assert after == before and len(after) == 4
    assert saver.archive_restores == 1 and finally_archived == []


# -- the quarantine: restore_outcomes, restore_quarantined -----------------------------------------


def _quarantine_three_ways(saver: DurableSaver) -> str:
    """Thread "q"'s newest checkpoint quarantined three ways: withdrawn from
    SQLite (its place there empty: restore puts it back), a twin in Postgres
    whose intact copy is in place (kept), and a copy in Redis kept without
    its row's fields (refused). Returns the checkpoint's id."""
    chain = saver._sync_chain()
    chain.ensure_setup()
    tiers = {t.name: t for t in chain.tiers}
    row = max(tiers["sqlite"].thread_records("q").checkpoints, key=lambda r: r.checkpoint_id)
    fields = pack_fields(row_fields(row))
    tiers["sqlite"].remove_copy("checkpoint", row)
    tiers["sqlite"].quarantine("q", row.checkpoint_ns, "checkpoint", "withdrawn", "test", row.envelope, fields)
    tiers["postgres"].quarantine("q", row.checkpoint_ns, "checkpoint", "twin", "test", row.envelope, fields)
    tiers["redis"].quarantine("q", row.checkpoint_ns, "checkpoint", "no-fields", "test", b"bad bytes")
    return str(row.checkpoint_id)


@faces
def test_restore_outcomes_say_what_restore_quarantined_then_does(make_saver: SaverFactory, face: str) -> None:
    with make_saver(FULL) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg("q"))
        newest = _quarantine_three_ways(saver)
    saver = make_saver(FULL)

    async def body() -> tuple[Any, ...]:
        async with On(saver, face) as on:
            found = await on.quarantined("q")
            outcomes = await on.restore_outcomes(found)
            unchanged = await on.quarantined("q")  # asking changes nothing
            chosen = [q for q, (verdict, _) in zip(found, outcomes) if verdict != "refuse"]
            restored, kept = await on.restore_quarantined(chosen)
            return found, outcomes, unchanged, restored, kept, await on.quarantined("q")

    found, outcomes, unchanged, restored, kept, left = run(face, body)
    verdicts = {q.key: verdict for q, (verdict, _) in zip(found, outcomes)}
    assert verdicts == {"withdrawn": "restore", "twin": "keep", "no-fields": "refuse"}
    assert all(why for _, why in outcomes)
    assert [(q.tier, q.id) for q in unchanged] == [(q.tier, q.id) for q in found]
    assert [q.key for q in restored] == ["withdrawn"] and [q.key for q in kept] == ["twin"]
    assert sorted(q.key for q in left) == ["no-fields", "twin"]
    local = sqlite_store(saver.sqlite_path or "")
    try:
        assert newest in local.record_ids("q", "")  # back in its place
    finally:
        local.close()
