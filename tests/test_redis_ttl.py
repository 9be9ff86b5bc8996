"""`redis_ttl`: idle threads leave Redis whole and come back from Postgres."""

from __future__ import annotations

import math
import time
from typing import Any

import pytest
import redis as redis_lib
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_durable import ConfigError

from .conftest import REDIS_URL
from .graphs import interrupt_graph, loop_graph
from .waiting import wait_until

# Long, so that nothing expires by itself while the test runs, however slow
# the machine: the test makes keys expire (or expire sooner) itself.
TTL = 3600
SOONER = 60
# Slack for Redis counting expiries in whole milliseconds of its own clock.
CLOCK_MS = 10


def _pttls(prefix: str, thread: str) -> dict[bytes, int]:
    """The thread's Redis keys and their PTTLs in ms (the lease has its own expiry)."""
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        keys = [k for k in client.scan_iter(match=f"{prefix}:{{{thread}}}:*") if not k.endswith(b":lease")]
        return {k: client.pttl(k) for k in keys}
    finally:
        client.close()


def _expire_in(prefix: str, thread: str, ms: int) -> dict[bytes, int]:
    """Every key of the thread (bar its lease) expires `ms` from now, as if it
    had been idle for a while; their PTTLs now."""
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        for key in _pttls(prefix, thread):
            client.pexpire(key, ms)
    finally:
        client.close()
    return _pttls(prefix, thread)


def _fresh(pttls: dict[bytes, int], since: float) -> dict[bytes, int]:
    """The keys set to expire TTL seconds after a call made after `since`
    (a `time.monotonic()` taken before it): their PTTL is the TTL less no
    more than the time that has passed since. A stall only widens the window;
    a key without an expiry (-1), with a shorter one, or left as it was, is out."""
    passed_ms = math.ceil((time.monotonic() - since) * 1000) + CLOCK_MS
    return {k: ms for k, ms in pttls.items() if TTL * 1000 - passed_ms <= ms <= TTL * 1000}


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_an_idle_thread_leaves_redis_whole_and_comes_back_from_postgres(
    make_saver: Any, redis_prefix: str, face: str
) -> None:
    ref = interrupt_graph().compile(checkpointer=InMemorySaver())
    cfg = {"configurable": {"thread_id": "idle"}}
    async with make_saver("sqlite+redis+postgres", redis_ttl=TTL) as saver:
        graph = interrupt_graph().compile(checkpointer=saver)
        since = time.monotonic()
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
        keys = _pttls(redis_prefix, "idle")
        # Every key the run wrote expires TTL after it: the thread leaves whole.
        assert any(k.endswith(b":cp") for k in keys) and _fresh(keys, since) == keys, keys
    # Idle for the TTL: Redis expires every key.
    _expire_in(redis_prefix, "idle", 1)
    wait_until(lambda: _pttls(redis_prefix, "idle") == {}, "the idle thread's keys did not expire")
    # Another replica (no local copy) serves it from Postgres, copies it back
    # into Redis (each key with the TTL), and resumes it.
    async with make_saver("redis+postgres", redis_ttl=TTL) as replica:
        graph = interrupt_graph().compile(checkpointer=replica)
        since = time.monotonic()
        state = graph.get_state(cfg) if face == "sync" else await graph.aget_state(cfg)
        assert state.values == ref.get_state(cfg).values
        back = _pttls(redis_prefix, "idle")
        assert any(k.endswith(b":cp") for k in back) and _fresh(back, since) == back, back
        # A write sets the keys it touches to expire TTL after it. (This
        # replica's read above pushed every key back just now, so it leaves
        # them to the write: it pushes back at most every tenth of the TTL.)
        before = _expire_in(redis_prefix, "idle", SOONER * 1000)
        since = time.monotonic()
        if face == "sync":
            out = graph.invoke(Command(resume="yes"), cfg)
        else:
            out = await graph.ainvoke(Command(resume="yes"), cfg)
        assert out == ref.invoke(Command(resume="yes"), cfg)
        after = _pttls(redis_prefix, "idle")
        fresh = _fresh(after, since)
        # Each checkpoint write touches the thread's records, namespaces and id index.
        touched = {k for k in after if k.endswith((b":cp", b":nss")) or b":ids:" in k}
        assert touched and touched <= fresh.keys(), after
        assert after.keys() - before.keys() <= fresh.keys(), after  # new keys too
        untouched = {k: ms for k, ms in after.items() if k not in fresh}
        assert all(0 < ms <= SOONER * 1000 for ms in untouched.values()), after


def test_a_thread_in_use_stays(make_saver: Any, redis_prefix: str) -> None:
    """A read pushes the expiry of every key of the thread back to the TTL.
    No clock: the keys are made to expire sooner (as if idle for a while),
    then read by a replica (each saver pushes back at most every tenth of
    the TTL, per thread)."""
    cfg = {"configurable": {"thread_id": "busy"}}
    with make_saver("redis+postgres", redis_ttl=TTL) as saver:
        loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg)
    before = _expire_in(redis_prefix, "busy", SOONER * 1000)
    assert any(k.endswith(b":cp") for k in before) and all(0 < ms <= SOONER * 1000 for ms in before.values()), before
    since = time.monotonic()
    with make_saver("redis+postgres", redis_ttl=TTL) as replica:
        assert loop_graph(3).compile(checkpointer=replica).get_state(cfg).values["n"] == 3  # reads keep it alive
    after = _pttls(redis_prefix, "busy")
    assert after.keys() == before.keys() and _fresh(after, since) == after, after


def test_without_a_ttl_keys_never_expire(make_saver: Any, redis_prefix: str) -> None:
    with make_saver("redis+postgres") as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
    keys = _pttls(redis_prefix, "t")
    assert any(k.endswith(b":cp") for k in keys) and all(ms == -1 for ms in keys.values()), keys


def test_a_ttl_needs_postgres(make_saver: Any) -> None:
    with pytest.raises(ConfigError, match=r"Tiers\(redis_ttl=\)"):
        make_saver("sqlite+redis", redis_ttl=60)
    with pytest.raises(ConfigError, match=r"Tiers\(redis_ttl=\)"):
        make_saver("redis+postgres", redis_ttl=0)
