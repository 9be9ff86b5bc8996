"""`redis_ttl`: idle threads leave Redis whole and come back from Postgres."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis as redis_lib
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_durable import ConfigError

from .conftest import REDIS_URL
from .graphs import interrupt_graph, loop_graph

TTL = 2


def _keys(prefix: str, thread: str) -> dict[bytes, int]:
    """The thread's Redis keys and their TTLs (the lease has its own expiry)."""
    client = redis_lib.Redis.from_url(REDIS_URL)
    keys = [k for k in client.scan_iter(match=f"{prefix}:{{{thread}}}:*") if not k.endswith(b":lease")]
    return {k: client.ttl(k) for k in keys}


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_an_idle_thread_leaves_redis_whole_and_comes_back_from_postgres(
    make_saver: Any, redis_prefix: str, face: str
) -> None:
    ref = interrupt_graph().compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "idle"}}
    async with make_saver("sqlite+redis+postgres", redis_ttl=TTL) as saver:
        graph = interrupt_graph().compile(checkpointer=saver)
        # Redis is written behind: shipped when the run's end is seen (an
        # interrupted run's may be seen later, by the garbage collector), so
        # drained here before its keys are looked at.
        if face == "sync":
            graph.invoke({"messages": [], "n": 0}, cfg)
            saver.drain(10)
        else:
            await graph.ainvoke({"messages": [], "n": 0}, cfg)
            await saver.adrain(10)
        ref.invoke({"messages": [], "n": 0}, cfg)
        keys = _keys(redis_prefix, "idle")
        assert keys and all(0 < ttl <= TTL for ttl in keys.values()), keys  # no key without an expiry
    time.sleep(TTL + 1.2)
    assert _keys(redis_prefix, "idle") == {}  # gone whole
    # Another replica (no local copy) serves it from Postgres, copies it back
    # into Redis (with an expiry), and resumes it.
    async with make_saver("redis+postgres", redis_ttl=TTL) as replica:
        graph = interrupt_graph().compile(checkpointer=replica)
        assert graph.get_state(cfg).values == ref.get_state(cfg).values
        back = _keys(redis_prefix, "idle")
        assert back and all(0 < ttl <= TTL for ttl in back.values()), back
        assert graph.invoke(Command(resume="yes"), cfg) == ref.invoke(Command(resume="yes"), cfg)


def test_a_thread_in_use_stays(make_saver: Any, redis_prefix: str) -> None:
    with make_saver("redis+postgres", redis_ttl=TTL) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "busy"}}
        graph.invoke({"messages": [], "n": 0}, cfg)
        deadline = time.monotonic() + 2 * TTL + 1
        while time.monotonic() < deadline:
            graph.get_state(cfg)  # reads keep it alive
            time.sleep(TTL / 4)
        keys = _keys(redis_prefix, "busy")
        assert any(k.endswith(b":cp") for k in keys) and all(0 < ttl <= TTL for ttl in keys.values())


def test_without_a_ttl_keys_never_expire(make_saver: Any, redis_prefix: str) -> None:
    with make_saver("redis+postgres") as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
    assert all(ttl == -1 for ttl in _keys(redis_prefix, "t").values())


def test_a_ttl_needs_postgres(make_saver: Any) -> None:
    with pytest.raises(ConfigError, match="redis_ttl"):
        make_saver("sqlite+redis", redis_ttl=60)
    with pytest.raises(ConfigError, match="redis_ttl"):
        make_saver("redis+postgres", redis_ttl=0)
