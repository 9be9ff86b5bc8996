"""A saver is a view: its runtime (tiers, chains, leases, background tasks)
and a codec. `with_allowlist` makes another view of the same runtime, so
the clone shares every connection, lease, counter and worker of its
origin, decodes with its own allowlist, and closing either closes both."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from langgraph_durable import DurableSaver, RetentionPolicy

from .conftest import SaverFactory
from .faces import FACES, On, OnGraph, run
from .graphs import loop_graph
from .waiting import await_until, wait_until

FULL = "sqlite+redis+postgres"
faces = pytest.mark.parametrize("face", FACES)
# Any type will do: the clone's codec is another object whatever it allows.
EXTRA = [("tests.typed_state", "Item")]
# Threads the whole process shares, whichever saver started them: the I/O
# pool of the sync face, the deferred releases' worker, the statements' watchdog.
PROCESS_WIDE = ("langgraph-durable-io", "langgraph-durable-deferred", "langgraph-durable-watchdog")


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def threads_started_since(before: set[threading.Thread]) -> list[str]:
    """The names of this package's threads started since `before` and still
    alive, but those the process shares."""
    return sorted(
        t.name
        for t in threading.enumerate()
        if t not in before and t.name.startswith("langgraph-durable-") and not t.name.startswith(PROCESS_WIDE)
    )


@faces
def test_a_with_allowlist_view_shares_the_runtime_and_decodes_with_its_own_codec(
    make_saver: SaverFactory, face: str
) -> None:
    saver = make_saver(FULL)  # shared tiers and no key of the user's: strict, so the clone is a copy
    clone = saver.with_allowlist(EXTRA)
    assert clone is not saver and clone._runtime is saver._runtime
    assert clone._codec is not saver._codec and clone._codec.strict
    assert not hasattr(clone, "_origin") and not hasattr(saver, "_origin")

    async def body() -> None:
        await On(clone, face).setup()
        await OnGraph(loop_graph(2).compile(checkpointer=clone), face).invoke({"messages": [], "n": 0}, cfg("t"))
        if face == "sync":
            chains = clone._sync_chain(), saver._sync_chain()
            keepers = clone._sync_leases(), saver._sync_leases()
        else:
            chains = clone._async_chain(), saver._async_chain()
            keepers = clone._async_leases(), saver._async_leases()
            # The async face handles a run's end on the loop, a moment later.
            await await_until(lambda: saver._runtime.leases.kept("t", time.monotonic()), "the run's lease was not kept")
        # One set of connections, each view decoding with its own codec.
        assert chains[0].codec is clone._codec and chains[1].codec is saver._codec
        assert chains[0].tiers == chains[1].tiers
        # One lease keeper per face: the run the clone ran holds its lease in the origin's book too.
        assert keepers[0] is keepers[1]
        if face == "sync":
            wait_until(lambda: saver._runtime.leases.kept("t", time.monotonic()), "the run's lease was not kept")
        assert saver._runtime.lease_token(cfg("t"))[0] is not None
        written = await On(saver, face).get_tuple(cfg("t"))
        assert written is not None and written.checkpoint["channel_values"]["n"] == 2
        await On(clone, face).close()  # the clone's close is the origin's

    run(face, body)
    assert saver._runtime.closed
    assert not any(task.running for task in saver._runtime.tasks)


@pytest.mark.s3
@faces
def test_closing_the_origin_stops_every_background_task_of_every_view(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    before = set(threading.enumerate())
    saver = make_saver(
        FULL, archive=archive_url, retention=RetentionPolicy(keep_last=10, every=3600.0), lease_linger=30.0
    )
    clone = saver.with_allowlist(EXTRA)
    runtime = saver._runtime

    async def body() -> set[str]:
        await On(clone, face).setup()  # the hand-off listener hears its channel
        await OnGraph(loop_graph(2).compile(checkpointer=clone), face).invoke({"messages": [], "n": 0}, cfg("t"))
        runtime.replicator.kick()  # whether or not this run left anything owed
        running = {type(task).__name__ for task in runtime.tasks if task.running}
        await On(saver, face).close()
        return running

    assert isinstance(clone, DurableSaver) and clone._runtime is runtime
    running = run(face, body)
    # Every kind of background task ran, and none is left: not the origin's, not the clone's.
    assert running == {"Replicator", "RetentionSweeper", "ArchiveReplica", "HandOffListener"}
    assert len(runtime.tasks) == 4 and not any(task.running for task in runtime.tasks)
    assert clone._runtime.closed
    assert threads_started_since(before) == []
