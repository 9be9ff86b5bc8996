"""`Tier.write_batch`, what catch-up ships a thread's owed records with: one
transaction per tier, all or nothing under a fence, and the journal shipping
runs of a thread's entries through it (`journal_async._ship_group`).

Every tier is real; the shipping tests run write-behind savers on real
Redis and Postgres and read the result back from each shared tier alone."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig

from langgraph_durable import DurableSaver, LeaseLost
from langgraph_durable.engine.replicator import Replicator
from langgraph_durable.model.lease import Fence
from langgraph_durable.model.records import BlobRow, CheckpointRow, WriteRow
from tests.flat_options import durable_options

from .graphs import loop_graph, looping

TIERS = ["sqlite", "redis", "postgres"]


def _records(thread: str, n: int) -> tuple[list[tuple[CheckpointRow, list[BlobRow]]], list[WriteRow]]:
    """`n` chained checkpoints of `thread` (two namespaces), each with a blob,
    and two pending writes of each."""
    checkpoints: list[tuple[CheckpointRow, list[BlobRow]]] = []
    writes: list[WriteRow] = []
    parent = None
    for i in range(n):
        ns = "" if i % 2 == 0 else "child:1"
        cid = f"1ef{i:05d}"
        row = CheckpointRow(thread, ns, cid, parent if ns == "" else None, "run-1", f'{{"step": {i}}}', b"cp%d" % i)
        checkpoints.append((row, [BlobRow(thread, ns, "messages", f"{i:05d}.0", b"blob%d" % i)]))
        writes += [WriteRow(thread, ns, cid, "task", idx, "messages", "", b"w%d.%d" % (i, idx)) for idx in (0, 1)]
        if ns == "":
            parent = cid
    return checkpoints, writes


def _tier(saver: DurableSaver, name: str) -> Any:
    chain = saver._sync_chain()
    chain.ensure_setup()
    return next(t for t in [chain.raw_local, *chain.raw_shared] if t is not None and t.name == name)


def _held(tier: Any, checkpoints: list[tuple[CheckpointRow, list[BlobRow]]], writes: list[WriteRow]) -> bool:
    """Whether `tier` holds exactly these records (True) or none of them (False)."""
    found = []
    for row, blobs in checkpoints:
        got = tier.read_checkpoint(row.thread_id, row.checkpoint_ns, row.checkpoint_id)
        values = tier.read_blobs(row.thread_id, row.checkpoint_ns, [(b.channel, b.version) for b in blobs])
        stored = {
            (w.task_id, w.idx): w for w in tier.read_writes(row.thread_id, row.checkpoint_ns, [row.checkpoint_id])
        }
        mine = [w for w in writes if w.checkpoint_id == row.checkpoint_id and w.checkpoint_ns == row.checkpoint_ns]
        found.append(
            (
                got == row,
                all(values.get((b.channel, b.version)) == b for b in blobs),
                all(stored.get((w.task_id, w.idx)) == w for w in mine),
            )
        )
    flat = {x for triple in found for x in triple}
    assert len(flat) == 1, found  # all or nothing
    return flat.pop()


@pytest.mark.parametrize("name", TIERS)
def test_a_batch_is_stored_whole_and_read_back(make_saver: Any, name: str) -> None:
    with make_saver("sqlite+redis+postgres") as saver:
        tier = _tier(saver, name)
        checkpoints, writes = _records("batch", 7)
        tier.write_batch(checkpoints, writes)
        assert _held(tier, checkpoints, writes)
        # Shipped again (a pass that died before its acknowledgements): no change, no error.
        tier.write_batch(checkpoints, writes)
        assert _held(tier, checkpoints, writes)
        newest = tier.head("batch", "")
        assert newest.checkpoint_id == max(r.checkpoint_id for r, _ in checkpoints if r.checkpoint_ns == "")


@pytest.mark.parametrize("name", TIERS)
def test_a_fenced_batch_is_all_or_nothing(make_saver: Any, name: str) -> None:
    with make_saver("sqlite+redis+postgres") as saver:
        tier = _tier(saver, name)
        taken = tier.swap_lease("fenced", None, "me:1:a", 3, 30.0)
        assert taken is not None
        checkpoints, writes = _records("fenced", 5)
        for stale in (Fence("fenced", "me:1:a", 2, 30.0, name), Fence("fenced", "other:2:b", 3, 30.0, name)):
            with pytest.raises(LeaseLost):
                tier.write_batch(checkpoints, writes, fence=stale)
            assert not _held(tier, checkpoints, writes)
        tier.write_batch(checkpoints, writes, fence=Fence("fenced", "me:1:a", 3, 30.0, name, late=True))
        assert _held(tier, checkpoints, writes)


def _shared_history(saver_kwargs: dict[str, Any], config: RunnableConfig) -> list[Any]:
    with DurableSaver(sqlite=None, **durable_options(saver_kwargs)) as reader:
        return [(t.checkpoint["id"], t.metadata.get("step"), len(t.pending_writes or [])) for t in reader.list(config)]


@pytest.mark.parametrize("shared", ["redis", "postgres"])
def test_write_behind_ships_each_threads_runs_whole_and_in_order(
    make_saver: Any, monkeypatch: pytest.MonkeyPatch, shared: str
) -> None:
    """Three threads run one after another with the replicator held back,
    so one pass finds their entries interleaved with nothing shipped; each
    shared tier must then hold every checkpoint and write, as the local
    tier does, and the journal must be empty."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    with make_saver(f"sqlite+{shared}", write="local") as saver:
        graph = loop_graph(6).compile(checkpointer=saver)
        configs: list[RunnableConfig] = [{"configurable": {"thread_id": f"t{i}"}} for i in range(3)]
        for round_ in range(2):
            for config in configs:
                graph.invoke({"messages": [f"round {round_}"], "n": 0}, config, durability="sync")
        assert saver.lag().records > 0
        assert saver.drain(10).caught_up
        local = [
            [(t.checkpoint["id"], t.metadata.get("step"), len(t.pending_writes or [])) for t in saver.list(c)]
            for c in configs
        ]
        kwargs = _shared_of(saver)
    for config, mine in zip(configs, local):
        assert len(mine) > 12  # two runs of 6 steps, with their input checkpoints
        assert _shared_history(kwargs, config) == mine


def _shared_of(saver: DurableSaver) -> dict[str, Any]:
    """Options opening another saver on `saver`'s shared tiers."""
    out: dict[str, Any] = {"redis": saver.redis_url, "postgres": saver.postgres_url}
    if saver.redis_url:
        out["redis_key_prefix"] = saver.redis_key_prefix
    return out


def test_a_damaged_entry_in_a_run_is_quarantined_and_the_rest_ships(
    make_saver: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """One local checkpoint of a thread's unshipped run is damaged, and the
    records are read back from the local file to ship (as after a restart:
    the outbox of the process that wrote them is gone): it is quarantined,
    not shipped, and every other checkpoint of the run ships."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    config: RunnableConfig = {"configurable": {"thread_id": "damaged"}}
    with make_saver("sqlite+postgres", write="local") as saver:
        loop_graph(6).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, config, durability="sync")
        ids = [t.checkpoint["id"] for t in saver.list(config)]
        bad = ids[3]
        _damage_local(tmp_path / "local.sqlite", bad)
        saver._runtime.memory.outbox.forget()
        assert saver.drain(10).caught_up
        quarantined = [q.key for q in saver.quarantined("damaged")]
        kwargs = _shared_of(saver)
    assert any(bad in key for key in quarantined), quarantined
    shipped = [cid for cid, _, _ in _shared_history(kwargs, config)]
    assert shipped == [cid for cid in ids if cid != bad]


def _damage_local(path: Any, checkpoint_id: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "UPDATE lgd_checkpoints SET record = CAST(substr(record, 1, length(record) - 1) || X'00' AS BLOB) "
            "WHERE checkpoint_id = ?",
            (checkpoint_id,),
        )


@pytest.mark.parametrize("write", ["local", "shared"])
def test_a_record_damaged_locally_before_it_ships_reaches_the_shared_tiers_intact(
    make_saver: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Any, write: str
) -> None:
    """The records just written wait in memory (the outbox) until they have
    shipped: a local copy damaged meanwhile (here mid-run, with nothing
    shipped yet) is not what ships. Every checkpoint of the run reaches the
    shared tiers intact, and a read then finds the damaged local copy and
    serves an intact one instead."""
    monkeypatch.setattr(Replicator, "kick", lambda self, **_: None)
    config: RunnableConfig = {"configurable": {"thread_id": "damaged-later"}}
    events: list[Any] = []
    damaged: list[str] = []

    def step(state: dict[str, Any]) -> dict[str, Any]:
        n = state.get("n", 0)
        if n == 3:
            damaged.append(saver.get_tuple(config).checkpoint["id"])
            _damage_local(tmp_path / "local.sqlite", damaged[0])
        return {"messages": ["m"], "n": n + 1}

    with make_saver("sqlite+redis+postgres", write=write, on_corruption=events.append) as saver:
        looping(step, 6).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, config, durability="sync")
        assert saver.drain(10).caught_up
        assert saver.quarantined("damaged-later") == []  # nothing was read back from the file to ship
        with DurableSaver(sqlite=None, **durable_options(_shared_of(saver))) as reader:
            shared = [t.checkpoint["id"] for t in reader.list(config)]
        assert len(shared) == 8 and damaged[0] in shared and events == []
        for cid in shared:
            tup = saver.get_tuple({"configurable": {"thread_id": "damaged-later", "checkpoint_id": cid}})
            assert tup is not None and tup.checkpoint["id"] == cid
        assert [(e.tier, e.kind) for e in events] == [("sqlite", "checkpoint")], events
        assert events[0].served_instead.startswith("intact copy from")
