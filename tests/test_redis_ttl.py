"""`redis_ttl`: idle threads leave Redis whole and come back from Postgres."""

from __future__ import annotations

from typing import Any

import pytest
import redis as redis_lib
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_durable import ConfigError

from .conftest import REDIS_URL
from .graphs import interrupt_graph, loop_graph
from .waiting import wait_until

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
            assert saver.drain(60).caught_up
        else:
            await graph.ainvoke({"messages": [], "n": 0}, cfg)
            assert (await saver.adrain(60)).caught_up
        ref.invoke({"messages": [], "n": 0}, cfg)
        keys = _keys(redis_prefix, "idle")
        assert keys and all(0 < ttl <= TTL for ttl in keys.values()), keys  # no key without an expiry
    # Gone whole: Redis expires the keys (each one set to TTL or less, above).
    wait_until(lambda: _keys(redis_prefix, "idle") == {}, "the idle thread's keys did not expire")
    # Another replica (no local copy) serves it from Postgres, copies it back
    # into Redis (with an expiry), and resumes it.
    async with make_saver("redis+postgres", redis_ttl=TTL) as replica:
        graph = interrupt_graph().compile(checkpointer=replica)
        assert graph.get_state(cfg).values == ref.get_state(cfg).values
        back = _keys(redis_prefix, "idle")
        assert back and all(0 < ttl <= TTL for ttl in back.values()), back
        assert graph.invoke(Command(resume="yes"), cfg) == ref.invoke(Command(resume="yes"), cfg)


def test_a_thread_in_use_stays(make_saver: Any, redis_prefix: str) -> None:
    """A read pushes the expiry of every key of the thread back to the TTL.
    No clock: the keys are made to expire sooner (as if idle for a while),
    then read by a replica (each saver pushes back at most every tenth of
    the TTL, per thread)."""
    ttl, sooner = 3600, 60
    cfg = {"configurable": {"thread_id": "busy"}}
    with make_saver("redis+postgres", redis_ttl=ttl) as saver:
        loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg)
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        for key in _keys(redis_prefix, "busy"):
            client.expire(key, sooner)
    finally:
        client.close()
    before = _keys(redis_prefix, "busy")
    assert any(k.endswith(b":cp") for k in before) and all(0 < t <= sooner for t in before.values()), before
    with make_saver("redis+postgres", redis_ttl=ttl) as replica:
        assert loop_graph(3).compile(checkpointer=replica).get_state(cfg).values["n"] == 3  # reads keep it alive
    after = _keys(redis_prefix, "busy")
    assert after.keys() == before.keys()
    assert all(sooner < t <= ttl for t in after.values()), after


def test_without_a_ttl_keys_never_expire(make_saver: Any, redis_prefix: str) -> None:
    with make_saver("redis+postgres") as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
    assert all(ttl == -1 for ttl in _keys(redis_prefix, "t").values())


def test_a_ttl_needs_postgres(make_saver: Any) -> None:
    with pytest.raises(ConfigError, match="redis_ttl"):
        make_saver("sqlite+redis", redis_ttl=60)
    with pytest.raises(ConfigError, match="redis_ttl"):
        make_saver("redis+postgres", redis_ttl=0)
