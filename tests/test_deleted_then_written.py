"""A thread deleted and then written again, with the same or older checkpoint
ids (a restore from a backup, `import_from`, `put` of the same history,
`copy_thread` onto it), reads back whole on every tier configuration; a copy
of a deleted checkpoint that another replica's local cache still holds stays
hidden, and is not written back into the shared tiers."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable import DurableSaver

from .conftest import CONFIGS
from .graphs import _ahistory, _history, interrupt_graph, loop_graph
from .test_tamper import _ids_in_every_tier

WITH_A_CACHE = ["sqlite+redis", "sqlite+postgres", "sqlite+redis+postgres"]


def _cfg(thread: str, cid: str | None = None) -> Any:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": "", **({"checkpoint_id": cid} if cid else {})}}


def _source(thread: str = "t") -> tuple[InMemorySaver, list[Any]]:
    """An InMemorySaver holding a thread paused at an interrupt (so its newest
    checkpoint has pending writes), and that thread's history, as the
    graph's `get_state_history` reads it there."""
    memory = InMemorySaver()
    graph = interrupt_graph().compile(checkpointer=memory)
    graph.invoke({"messages": [], "n": 0}, _cfg(thread))
    return memory, _history(graph, _cfg(thread))


def _by_task(tup: Any) -> dict[str, list[tuple[str, Any]]]:
    """A checkpoint's pending writes, per task, in their order."""
    by_task: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in tup.pending_writes or []:
        by_task.setdefault(task_id, []).append((channel, value))
    return by_task


def _put_all(saver: DurableSaver, source: InMemorySaver, thread: str) -> None:
    """Write `source`'s thread into `saver` with plain `put` / `put_writes`,
    oldest first, as a restore from a backup would."""
    for tup in sorted(source.list(_cfg(thread)), key=lambda t: t.config["configurable"]["checkpoint_id"]):
        parent = tup.parent_config or _cfg(thread)
        saver.put(parent, tup.checkpoint, tup.metadata, dict(tup.checkpoint["channel_versions"]))
        for task_id, writes in _by_task(tup).items():
            saver.put_writes(tup.config, writes, task_id)


async def _aput_all(saver: DurableSaver, source: InMemorySaver, thread: str) -> None:
    for tup in sorted(source.list(_cfg(thread)), key=lambda t: t.config["configurable"]["checkpoint_id"]):
        parent = tup.parent_config or _cfg(thread)
        await saver.aput(parent, tup.checkpoint, tup.metadata, dict(tup.checkpoint["channel_versions"]))
        for task_id, writes in _by_task(tup).items():
            await saver.aput_writes(tup.config, writes, task_id)


def _ids(source: InMemorySaver, thread: str) -> list[str]:
    return [t.config["configurable"]["checkpoint_id"] for t in source.list(_cfg(thread))]


@pytest.mark.parametrize("how", ["import_from", "put"])
@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", CONFIGS)
async def test_a_thread_deleted_and_written_again_with_the_same_ids_reads_back_whole(
    tiers: str, face: str, how: str, make_saver: Any
) -> None:
    """Before: the deletion marker ("deleted through the newest id") hid every
    checkpoint at or below it, so the restored thread read back as empty
    (`get_state` gave ``{}``) although the import reported success."""
    memory, history = _source()
    ids = _ids(memory, "t")
    newest = memory.get_tuple(_cfg("t"))
    assert newest is not None
    async with make_saver(tiers) as saver:
        graph = interrupt_graph().compile(checkpointer=saver)
        if face == "sync":
            saver.import_from(memory)
            saver.delete_thread("t")
            assert saver.get_tuple(_cfg("t")) is None
            if how == "import_from":
                report = saver.import_from(memory)
                assert report.checkpoints == len(ids) and not report.differences
            else:
                _put_all(saver, memory, "t")
            got = saver.get_tuple(_cfg("t"))
            listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(_cfg("t"))]
            by_id = [saver.get_tuple(_cfg("t", cid)) for cid in ids]
            state = graph.get_state(_cfg("t"))
            got_history = _history(graph, _cfg("t"))
        else:
            await saver.aimport_from(memory)
            await saver.adelete_thread("t")
            assert await saver.aget_tuple(_cfg("t")) is None
            if how == "import_from":
                report = await saver.aimport_from(memory)
                assert report.checkpoints == len(ids) and not report.differences
            else:
                await _aput_all(saver, memory, "t")
            got = await saver.aget_tuple(_cfg("t"))
            listed = [t.config["configurable"]["checkpoint_id"] async for t in saver.alist(_cfg("t"))]
            by_id = [await saver.aget_tuple(_cfg("t", cid)) for cid in ids]
            state = await graph.aget_state(_cfg("t"))
            got_history = await _ahistory(graph, _cfg("t"))
    assert got is not None
    assert got.checkpoint["id"] == newest.checkpoint["id"]
    assert got.checkpoint["channel_values"] == newest.checkpoint["channel_values"]
    assert sorted(got.pending_writes or []) == sorted(newest.pending_writes or [])
    assert listed == ids
    assert all(t is not None for t in by_id)
    assert state.values == history[0][0] and state.next == ("ask",)
    assert got_history == history


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", CONFIGS)
async def test_a_thread_copied_onto_a_deleted_thread_reads_back_whole(tiers: str, face: str, make_saver: Any) -> None:
    """`copy_thread` keeps the checkpoint ids: copied onto a thread deleted
    before, under the same ids, the copy reads back whole."""
    async with make_saver(tiers) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, _cfg("src"))
        history = _history(graph, _cfg("src"))
        if face == "sync":
            saver.copy_thread("src", "dst")
            saver.delete_thread("dst")
            saver.copy_thread("src", "dst")
            got = _history(graph, _cfg("dst"))
        else:
            await saver.acopy_thread("src", "dst")
            await saver.adelete_thread("dst")
            await saver.acopy_thread("src", "dst")
            got = await _ahistory(graph, _cfg("dst"))
    assert got == history and len(got) == 5


def _shared_ids(saver: DurableSaver, thread: str) -> dict[str, set[str]]:
    """Checkpoint ids each shared tier holds for `thread`, read directly."""
    return {name: ids for name, ids in _ids_in_every_tier(saver, thread).items() if name != "sqlite"}


def _backup(memory: InMemorySaver, count: int) -> InMemorySaver:
    """An older backup of thread "t": its `count` oldest checkpoints, with
    their pending writes, as they were."""
    backup = InMemorySaver()
    for tup in sorted(memory.list(_cfg("t")), key=lambda t: t.config["configurable"]["checkpoint_id"])[:count]:
        backup.put(tup.parent_config or _cfg("t"), tup.checkpoint, tup.metadata, tup.checkpoint["channel_versions"])
        for task_id, writes in _by_task(tup).items():
            backup.put_writes(tup.config, writes, task_id)
    return backup


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", WITH_A_CACHE)
async def test_a_restore_of_an_older_backup_reads_back_while_a_stale_cache_stays_hidden(
    tiers: str, face: str, make_saver: Any
) -> None:
    """Replica B ran the thread (its local cache holds every checkpoint);
    replica A deleted it and restored an older backup (the first few
    checkpoints, same ids). B serves the restored history, not the newer
    checkpoints its cache still holds of the deleted thread, and writes none
    of those back into the shared tiers: the marker discredits copies that no
    shared tier holds, never copies written after the deletion."""
    memory = InMemorySaver()
    loop_graph(4).compile(checkpointer=memory).invoke({"messages": [], "n": 0}, _cfg("t"))
    ids = _ids(memory, "t")  # newest first
    backup = _backup(memory, 3)
    restored = _ids(backup, "t")
    assert restored == ids[-3:]
    async with make_saver(tiers, sqlite_name="a.sqlite") as a, make_saver(tiers, sqlite_name="b.sqlite") as b:
        b.import_from(memory)  # B wrote it: B's cache holds every checkpoint
        assert b.get_tuple(_cfg("t", ids[0])) is not None
        if face == "sync":
            a.delete_thread("t")
            a.import_from(backup)
            latest = b.get_tuple(_cfg("t"))
            listed = [t.config["configurable"]["checkpoint_id"] for t in b.list(_cfg("t"))]
            stale = [b.get_tuple(_cfg("t", cid)) for cid in ids[:-3]]
            state = loop_graph(4).compile(checkpointer=b).get_state(_cfg("t"))
        else:
            await a.adelete_thread("t")
            await a.aimport_from(backup)
            latest = await b.aget_tuple(_cfg("t"))
            listed = [t.config["configurable"]["checkpoint_id"] async for t in b.alist(_cfg("t"))]
            stale = [await b.aget_tuple(_cfg("t", cid)) for cid in ids[:-3]]
            state = await loop_graph(4).compile(checkpointer=b).aget_state(_cfg("t"))
        assert latest is not None and latest.checkpoint["id"] == restored[0]
        assert listed == restored
        assert stale == [None] * len(stale)
        assert state.values == loop_graph(4).compile(checkpointer=backup).get_state(_cfg("t")).values
        for name, held in _shared_ids(a, "t").items():
            assert held == set(restored), name


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", WITH_A_CACHE)
async def test_deleting_a_restored_thread_again_still_hides_the_older_deletions_stale_copies(
    tiers: str, face: str, make_saver: Any
) -> None:
    """Deleted, restored from an older backup, deleted again: the second
    marker must not fall back to the restored history's newest id, or the
    newer checkpoints replica B's cache kept from before the first deletion
    are taken for ones the shared tiers lost, served and written back."""
    memory = InMemorySaver()
    loop_graph(4).compile(checkpointer=memory).invoke({"messages": [], "n": 0}, _cfg("t"))
    ids = _ids(memory, "t")
    backup = _backup(memory, 2)
    async with make_saver(tiers, sqlite_name="a.sqlite") as a, make_saver(tiers, sqlite_name="b.sqlite") as b:
        b.import_from(memory)
        if face == "sync":
            a.delete_thread("t")
            a.import_from(backup)
            a.delete_thread("t")
            latest = b.get_tuple(_cfg("t"))
            by_id = [b.get_tuple(_cfg("t", cid)) for cid in ids]
            listed = list(b.list(_cfg("t")))
        else:
            await a.adelete_thread("t")
            await a.aimport_from(backup)
            await a.adelete_thread("t")
            latest = await b.aget_tuple(_cfg("t"))
            by_id = [await b.aget_tuple(_cfg("t", cid)) for cid in ids]
            listed = [t async for t in b.alist(_cfg("t"))]
        assert latest is None and listed == []
        assert by_id == [None] * len(ids)
        for name, held in _shared_ids(a, "t").items():
            assert held == set(), name


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("tiers", WITH_A_CACHE)
async def test_a_copy_onto_a_deleted_thread_leaves_another_replicas_stale_copies_hidden(
    tiers: str, face: str, make_saver: Any
) -> None:
    """`copy_thread` onto a deleted thread used to clear the target's marker
    (it hid the copies, whose ids it covered): replica B's cache, still
    holding the deleted thread's newer checkpoints, then passed for a copy
    the shared tiers had lost, and B served it and wrote it back. The marker
    stays now; the copies are served because the shared tiers hold them."""
    async with make_saver(tiers, sqlite_name="a.sqlite") as a, make_saver(tiers, sqlite_name="b.sqlite") as b:
        loop_graph(2).compile(checkpointer=a).invoke({"messages": [], "n": 0}, _cfg("src"))
        source = _history(loop_graph(2).compile(checkpointer=a), _cfg("src"))
        loop_graph(3).compile(checkpointer=b).invoke({"messages": [], "n": 0}, _cfg("dst"))  # newer ids, in B's cache
        stale = [t.config["configurable"]["checkpoint_id"] for t in b.list(_cfg("dst"))]
        graph = loop_graph(2).compile(checkpointer=b)
        if face == "sync":
            a.delete_thread("dst")
            a.copy_thread("src", "dst")
            got = _history(graph, _cfg("dst"))
            by_id = [b.get_tuple(_cfg("dst", cid)) for cid in stale]
        else:
            await a.adelete_thread("dst")
            await a.acopy_thread("src", "dst")
            got = await _ahistory(graph, _cfg("dst"))
            by_id = [await b.aget_tuple(_cfg("dst", cid)) for cid in stale]
        assert got == source
        assert by_id == [None] * len(stale)
        for name, held in _shared_ids(a, "dst").items():
            assert not held & set(stale), name


@pytest.mark.parametrize("tiers", ["redis+postgres", "sqlite+redis+postgres"])
@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_redis_restored_from_before_the_deletion_does_not_bring_the_thread_back(
    make_saver: Any, tiers: str, face: str
) -> None:
    """Redis restarts from a snapshot taken before `delete_thread` (or was
    down while it ran): it holds the thread again, Postgres, the system of
    record, lacks it and recorded the deletion. No replica serves it, and it
    is not copied back into Postgres."""
    import redis as redis_lib

    from .conftest import REDIS_URL

    with make_saver(tiers) as saver:
        saver.put(
            {"configurable": {"thread_id": "gone", "checkpoint_ns": ""}},
            empty_checkpoint(),
            {"source": "input", "step": -1},
            {},
        )
        prefix = saver.redis_key_prefix
        client = redis_lib.Redis.from_url(REDIS_URL)
        snapshot = {k: client.dump(k) for k in client.scan_iter(match=f"{prefix}:{{gone}}:*")}
        assert snapshot
        saver.delete_thread("gone")
        for key, value in snapshot.items():  # the old snapshot comes back
            client.restore(key, 0, value, replace=True)
        client.close()
    config = {"configurable": {"thread_id": "gone"}}
    with make_saver(tiers, sqlite_name="other.sqlite") as replica:
        if face == "sync":
            assert replica.get_tuple(config) is None
            assert list(replica.list(config)) == []
        else:
            assert await replica.aget_tuple(config) is None
            assert [t async for t in replica.alist(config)] == []
    with make_saver("postgres") as far:
        assert far.get_tuple(config) is None
