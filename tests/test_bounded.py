"""A size-bounded local cache (`local_max_bytes`): least recently used
threads' local copies go; what the shared tiers hold is served and copied
back; what the journal still owes a shared tier never goes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from langgraph_durable import ConfigError
from langgraph_durable.tiers.sqlite.tier import EVICT_TO
from tests.proxy import TcpProxy

from .graphs import loop_graph

BOUND = 256 * 1024
THREADS = 24


def _local_threads(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT DISTINCT thread_id FROM lgd_checkpoints")}


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_the_local_file_stays_within_its_bound_and_every_thread_is_served(
    make_saver: Any, tmp_path: Path, face: str
) -> None:
    graph_of = loop_graph(6, message_bytes=2000)
    ref = graph_of.compile(checkpointer=InMemorySaver())
    async with make_saver("sqlite+redis+postgres", local_max_bytes=BOUND) as saver:
        graph = graph_of.compile(checkpointer=saver)
        for i in range(THREADS):
            cfg = {"configurable": {"thread_id": f"t{i}"}}
            if face == "sync":
                graph.invoke({"messages": [], "n": 0}, cfg)
            else:
                await graph.ainvoke({"messages": [], "n": 0}, cfg)
            ref.invoke({"messages": [], "n": 0}, cfg)
        local = saver._runtime.local
        local.evict(force=True)
        assert local.used_bytes() <= BOUND
        held = _local_threads(tmp_path / "local.sqlite")
        assert 0 < len(held) < THREADS  # some went, the newest stayed
        assert f"t{THREADS - 1}" in held
        for i in range(THREADS):  # every thread is still served whole, from the shared tiers if need be
            cfg = {"configurable": {"thread_id": f"t{i}"}}
            assert graph.get_state(cfg).values == ref.get_state(cfg).values
        # An evicted thread that is read comes back into the cache, and resumes.
        gone = sorted(set(f"t{i}" for i in range(THREADS)) - held)[0]
        graph.get_state({"configurable": {"thread_id": gone}})
        assert gone in _local_threads(tmp_path / "local.sqlite")
        cfg = {"configurable": {"thread_id": gone}}
        assert graph.invoke({"messages": ["more"], "n": 0}, cfg) == ref.invoke({"messages": ["more"], "n": 0}, cfg)


def test_what_the_journal_owes_is_never_evicted(
    make_saver: Any, tmp_path: Path, postgres_proxy: tuple[TcpProxy, str]
) -> None:
    """Postgres cut off, write-behind: the local file is the only copy of
    what it owes, so none of it goes, whatever the bound; once Postgres is
    back every thread is there."""
    proxy, proxied = postgres_proxy
    graph_of = loop_graph(4, message_bytes=2000)
    with make_saver("sqlite+postgres", postgres=proxied, write="local", local_max_bytes=64 * 1024) as saver:
        graph = graph_of.compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "early"}})
        saver.drain(10)
        proxy.cut()
        for i in range(12):
            graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": f"owed{i}"}})
        assert saver.lag().records > 0
        evicted = saver._runtime.local.evict(force=True)
        assert all(not t.startswith("owed") for t in evicted)
        assert {f"owed{i}" for i in range(12)} <= _local_threads(tmp_path / "local.sqlite")
        proxy.restore()
        assert saver.drain(30).records == 0
    with make_saver("postgres") as far:
        for i in range(12):
            state = far.get_tuple({"configurable": {"thread_id": f"owed{i}"}})
            assert state is not None and len(state.checkpoint["channel_values"]["messages"]) == 4


def test_the_bound_needs_a_shared_tier(make_saver: Any) -> None:
    with pytest.raises(ConfigError, match=r"Memory\(local_max_bytes=\)"):
        make_saver("sqlite", local_max_bytes=BOUND)
    with pytest.raises(ConfigError, match=r"Memory\(local_max_bytes=\)"):
        make_saver("sqlite+redis", local_max_bytes=0)
    assert 0 < EVICT_TO < 1
