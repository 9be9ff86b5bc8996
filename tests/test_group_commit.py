"""Group commit: fenced Postgres writes that meet one in flight go together.

On the async face, the writes of many runs that arrive while a Postgres
write is in flight wait for it and then go in one statement, one
transaction. Each keeps its own fence and its own answer: a write whose
lease was taken over gets `LeaseLost` while the others in its statement
land, and a write that makes the statement fail for a reason of its own is
sent again alone, so that its failure is never another's. Real Postgres;
the group is driven through the real tier and through real graphs.
"""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest

from langgraph_durable.errors import LeaseLost
from langgraph_durable.model.lease import Fence
from langgraph_durable.model.records import BlobRow, CheckpointRow, WriteRow
from langgraph_durable.tiers.postgres.tier_async import AsyncPostgresTier

from .conftest import SaverFactory
from .graphs import loop_graph

HOLDER = "test-holder"


def checkpoint(thread: str, cid: str, metadata: str = "{}") -> tuple[CheckpointRow, list[BlobRow]]:
    row = CheckpointRow(thread, "", cid, None, "run-1", metadata, f"record of {thread} {cid}".encode())
    return row, [BlobRow(thread, "", "messages", f"{cid}.1", f"blob of {thread} {cid}".encode())]


def writes(thread: str, cid: str) -> list[WriteRow]:
    return [WriteRow(thread, "", cid, "task", i, "messages", "", f"write {i} of {thread}".encode()) for i in range(2)]


async def leased_tier(url: str, threads: list[str]) -> tuple[AsyncPostgresTier, dict[str, Fence]]:
    tier = AsyncPostgresTier(url)
    await tier.setup()
    fences = {}
    for t in threads:
        lease = await tier.swap_lease(t, None, HOLDER, 1, 30.0)
        assert lease is not None
        fences[t] = Fence(t, HOLDER, lease.token, 30.0, tier="postgres")
    return tier, fences


def stored(url: str, table: str) -> set[str]:
    with psycopg.connect(url) as conn:
        return {r[0] for r in conn.execute(f"SELECT DISTINCT thread_id FROM {table}").fetchall()}


async def test_writes_that_meet_one_in_flight_go_in_one_statement_each_with_its_own_fence(postgres_url: str) -> None:
    threads = [f"t{i}" for i in range(10)]
    tier, fences = await leased_tier(postgres_url, threads)
    try:
        # Another holder takes t5's lease over: its write must not land, the others' must.
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            conn.execute("UPDATE lgd_leases SET holder = 'thief', token = token + 1 WHERE thread_id = 't5'")

        async def one(t: str) -> str:
            row, blobs = checkpoint(t, "c1")
            if t in ("t2", "t7"):  # pending writes among the checkpoints, replacing or not
                await tier.write_writes(writes(t, "c0"), upsert=t == "t7", fence=fences[t])
            await tier.write_checkpoint(row, blobs, fence=fences[t])
            return t

        results = await asyncio.gather(*(one(t) for t in threads), return_exceptions=True)
    finally:
        await tier.close()
    lost = [r for r in results if isinstance(r, BaseException)]
    assert len(lost) == 1 and isinstance(lost[0], LeaseLost) and "t5" in str(lost[0])
    assert tier.group.statements >= 1 and tier.group.grouped > tier.group.statements  # grouped, not one by one
    assert stored(postgres_url, "lgd_checkpoints") == set(threads) - {"t5"}
    assert stored(postgres_url, "lgd_blobs") == set(threads) - {"t5"}
    assert stored(postgres_url, "lgd_writes") == {"t2", "t7"}
    with psycopg.connect(postgres_url) as conn:
        rows = conn.execute("SELECT thread_id, record FROM lgd_checkpoints ORDER BY thread_id").fetchall()
        assert all(bytes(r) == f"record of {t} c1".encode() for t, r in rows)
        # Each lease renewed or kept by its own write, the thief's untouched.
        assert conn.execute("SELECT holder FROM lgd_leases WHERE thread_id = 't5'").fetchone() == ("thief",)


async def test_a_write_that_fails_the_grouped_statement_fails_alone(postgres_url: str) -> None:
    threads = [f"t{i}" for i in range(6)]
    tier, fences = await leased_tier(postgres_url, threads)
    try:

        async def one(t: str) -> None:
            # t3's metadata is not JSON: the grouped statement fails, each write goes again alone.
            row, blobs = checkpoint(t, "c1", "{not json" if t == "t3" else "{}")
            await tier.write_checkpoint(row, blobs, fence=fences[t])

        results = await asyncio.gather(*(one(t) for t in threads), return_exceptions=True)
    finally:
        await tier.close()
    failed = {t: r for t, r in zip(threads, results) if isinstance(r, BaseException)}
    assert list(failed) == ["t3"] and isinstance(failed["t3"], psycopg.DataError)
    assert stored(postgres_url, "lgd_checkpoints") == set(threads) - {"t3"}


async def test_a_caller_that_gives_up_while_waiting_leaves_the_others_alone(postgres_url: str) -> None:
    threads = [f"t{i}" for i in range(5)]
    tier, fences = await leased_tier(postgres_url, threads)
    try:
        tasks = [asyncio.ensure_future(tier.write_checkpoint(*checkpoint(t, "c1"), fence=fences[t])) for t in threads]
        await asyncio.sleep(0)  # every write started: the first in flight, the others waiting
        tasks[3].cancel()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        await tier.close()
    assert isinstance(results[3], asyncio.CancelledError)
    assert [r for i, r in enumerate(results) if i != 3] == [None] * 4
    assert set(threads) - {"t3"} <= stored(postgres_url, "lgd_checkpoints")


@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "postgres"])
async def test_concurrent_runs_share_statements_and_every_thread_reads_back_whole(
    make_saver: SaverFactory, tiers: str
) -> None:
    runs = 30
    graph = loop_graph(6)
    async with make_saver(tiers) as saver:
        compiled = graph.compile(checkpointer=saver)
        outs = await asyncio.gather(
            *(
                compiled.ainvoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"c{i}"}}, durability="sync")
                for i in range(runs)
            )
        )
        tier: Any = next(t for t in saver._async_chain().raw_shared if t.name == "postgres")
        assert tier.group.grouped > tier.group.statements > 0
    assert all(o["n"] == 6 and len(o["messages"]) == 6 for o in outs)
    # What Postgres holds, through a saver with no other tier: every run, whole.
    with make_saver("postgres") as reader:
        for i in range(runs):
            tup = reader.get_tuple({"configurable": {"thread_id": f"c{i}"}})
            assert tup is not None and tup.checkpoint["channel_values"]["n"] == 6
            assert len(list(reader.list({"configurable": {"thread_id": f"c{i}"}}))) == 8


def test_two_writes_of_one_thread_under_different_leases_never_share_a_statement() -> None:
    """The grouped statement checks one lease per thread: a write under
    another holder's lease of the same thread waits for the next one."""
    from langgraph_durable.tiers.postgres.group import GroupCommit, Member, Rows

    async def never(statement: str, params: list[Any]) -> set[str]:
        raise AssertionError("not sent")

    async def alone() -> bool:
        return True

    loop = asyncio.new_event_loop()
    try:
        group = GroupCommit(never)
        fence_a, fence_b, fence_u = Fence("t", "a", 1, 30.0), Fence("t", "b", 2, 30.0), Fence("u", "a", 1, 30.0)
        members = [Member(f, False, Rows, alone, loop.create_future()) for f in (fence_a, fence_b, fence_u)]
        group._queue = list(members)
        batch = group._take()
        assert [m.fence for m in batch] == [fence_a, fence_u]
        assert [m.fence for m in group._queue] == [fence_b]
        assert [m.fence for m in group._take()] == [fence_b] and group._queue == []
    finally:
        loop.close()
