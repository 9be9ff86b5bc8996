"""A read never fails while a shared tier is reachable: when no tier answers,
the tiers whose circuit breakers skip them are tried once, as an early
half-open probe, before the read gives up (writes do the same)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from langgraph_durable import DurableSaver, Tiers, TierUnavailable
from tests.graphs import loop_graph
from tests.proxy import TcpProxy

KEY = "k" * 32  # a signing key of the test's: no store key to fetch from a tier that is down


class Reader:
    """`get_tuple` on one face; the async face on one event loop throughout,
    as in a long-running app (a new loop would set the tiers up again)."""

    def __init__(self, saver: DurableSaver, face: str) -> None:
        self.saver = saver
        self.loop = asyncio.new_event_loop() if face == "async" else None

    def __call__(self, thread: str) -> Any:
        config = {"configurable": {"thread_id": thread}}
        if self.loop is None:
            return self.saver.get_tuple(config)
        return self.loop.run_until_complete(self.saver.aget_tuple(config))

    def close(self) -> None:
        if self.loop is not None:
            self.loop.run_until_complete(self.saver.aclose())
            self.loop.close()
        else:
            self.saver.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_read_tries_redis_behind_its_open_breaker_when_postgres_drops(
    redis_proxy: tuple[TcpProxy, str], postgres_proxy: tuple[TcpProxy, str], redis_prefix: str, face: str
) -> None:
    """Redis was cut (its breaker opened, with a long backoff) and is back;
    then Postgres is cut. The read goes to Redis as a probe instead of
    failing with TierUnavailable, and Redis's breaker closes."""
    redis, redis_url = redis_proxy
    postgres, postgres_url = postgres_proxy
    saver = DurableSaver(  # no local copy to fall back on
        sqlite=None, redis=redis_url, postgres=postgres_url, signing_key=KEY,
        tiers=Tiers(redis_key_prefix=redis_prefix, call_timeout=2))  # fmt: skip
    read = Reader(saver, face)
    try:
        saver.setup()
        loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
        newest = read("t")
        assert newest is not None
        breaker = saver._runtime.breakers["redis"]
        breaker.backoff_first = breaker.backoff_max = 3600.0  # once open, no ordinary retry within the test
        redis.cut()
        assert read("t").config == newest.config  # Postgres alone answers
        assert breaker.state == "open"
        redis.restore()  # back, behind its open breaker
        postgres.cut()
        served = read("t")
        assert served is not None and served.config == newest.config
        assert served.checkpoint["channel_values"] == newest.checkpoint["channel_values"]
        assert breaker.state == "closed"
        # Once a probe failed in an outage, the next read fails as before.
        redis.cut()
        with pytest.raises(TierUnavailable):
            read("t")
    finally:
        redis.restore()
        postgres.restore()
        read.close()
