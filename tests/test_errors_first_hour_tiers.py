"""A new user's first hour, continued: when no shared tier answers, the one
error names every tier that failed (`TierUnavailable.tiers`), from the API
and in the CLI's one line; a Postgres that went away does not fill the log
with psycopg_pool's reconnect attempts; a definite configuration error ends
a drain at once instead of retrying it until ``drain_timeout``."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any
from urllib.parse import urlsplit

import pytest

from langgraph_durable import ConfigError, DurableSaver, Tiers, TierUnavailable, cli
from tests.conftest import POSTGRES_URL, database_url
from tests.graphs import loop_graph
from tests.servers import free_port

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

KEY = b"k" * 32
CONFIG = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}


# -- TierUnavailable.every ------------------------------------------------------------


def test_every_names_each_tier_and_keeps_the_first_as_tier() -> None:
    redis = TierUnavailable("redis tier at R is unreachable (refused). Check it.", tier="redis")
    postgres = TierUnavailable("postgres tier at P is unreachable (refused). Check it.", tier="postgres", skipped=True)
    both = TierUnavailable.every([redis, postgres])
    assert isinstance(both, TierUnavailable)
    assert both.tiers == ["redis", "postgres"] and both.tier == "redis" and not both.skipped
    assert str(both) == (
        "no tier could be reached (redis, postgres): redis tier at R is unreachable (refused). Check it; "
        "postgres tier at P is unreachable (refused). Check it."
    )
    # One error, one tier twice, or a tier that answered and refused: the first, as it was.
    assert TierUnavailable.every([redis]) is redis
    assert TierUnavailable.every([redis, redis]) is redis
    refused = ConfigError("no")
    assert TierUnavailable.every([refused, redis]) is refused
    assert TierUnavailable.every([redis, refused]) is redis
    assert redis.tiers == ["redis"]


# -- both shared tiers down: one error naming both ------------------------------------


def _down_urls() -> tuple[str, str]:
    return f"redis://127.0.0.1:{free_port()}/0", f"postgresql://postgres@127.0.0.1:{free_port()}/test"


def test_both_shared_tiers_down_at_start_names_both(tmp_path: Any, capsys: Any, caplog: Any) -> None:
    redis, postgres = _down_urls()
    caplog.set_level(logging.INFO)
    started = time.monotonic()
    saver = DurableSaver(
        sqlite=str(tmp_path / "l.sqlite"), redis=redis, postgres=postgres, tiers=Tiers(connect_timeout=1)
    )
    with pytest.raises(TierUnavailable) as info:
        saver.setup()
    saver.close()
    assert time.monotonic() - started < 10.0  # nothing listens: refused at once, not retried
    assert info.value.tiers == ["redis", "postgres"] and info.value.tier == "redis"
    message = str(info.value)
    assert message.startswith(f"no tier could be reached (redis, postgres): redis tier at {redis} is unreachable (")
    assert f"; postgres tier at {postgres} is unreachable (" in message
    # Each tier's going down is logged once, nothing else at WARNING or above.
    loud = sorted(r.getMessage().split(" (")[0] for r in caplog.records if r.levelno >= logging.WARNING)
    assert loud == ["postgres tier is down", "redis tier is down"], loud

    code = cli.main(["threads", "--sqlite", "", "--redis", redis, "--postgres", postgres])
    err = capsys.readouterr().err
    assert code == cli.EXIT_CANNOT_RUN == 3
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(
        f"langgraph-durable: error: no tier could be reached (redis, postgres): redis tier at {redis} is unreachable ("
    )
    assert f"; postgres tier at {postgres} is unreachable (" in lines[0]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_both_shared_tiers_cut_mid_run_names_both_and_the_pool_is_quiet(
    face: str, tmp_path: Any, redis_proxy: Any, postgres_proxy: Any, redis_prefix: str, caplog: Any
) -> None:
    import asyncio

    (rproxy, redis), (pproxy, postgres) = redis_proxy, postgres_proxy
    saver = DurableSaver(
        sqlite=str(tmp_path / "l.sqlite"),
        redis=redis,
        postgres=postgres,
        signing_key=KEY,
        tiers=Tiers(redis_key_prefix=redis_prefix, connect_timeout=1),
    )
    graph = loop_graph(2).compile(checkpointer=saver)

    def run(thread: str) -> Any:
        config = {"configurable": {"thread_id": thread}}
        if face == "sync":
            return graph.invoke({"messages": [], "n": 0}, config)
        return asyncio.run(graph.ainvoke({"messages": [], "n": 0}, config))

    try:
        assert run("before")["n"] == 2
        caplog.set_level(logging.INFO)
        rproxy.cut()
        pproxy.cut()
        errors = []
        deadline = time.monotonic() + 4
        while time.monotonic() < deadline:
            with pytest.raises(TierUnavailable) as info:
                run(f"during-{len(errors)}")
            errors.append(info.value)
            time.sleep(0.2)
        assert all(sorted(e.tiers) == ["postgres", "redis"] for e in errors), [str(e) for e in errors]
        # psycopg_pool retries its lost connections in the background and
        # logs each try: not for the saver's own pool, whose tier says it is down.
        noise = [r.getMessage() for r in caplog.records if r.name.startswith("psycopg")]
        assert noise == [], noise
    finally:
        rproxy.restore()
        pproxy.restore()
        if face == "sync":
            saver.close()
        else:
            asyncio.run(saver.aclose())


# -- a definite configuration error ends a drain at once ------------------------------


def test_drain_stops_at_a_config_error(postgres_url: str, tmp_path: Any, caplog: Any) -> None:
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint

    local = str(tmp_path / "local.sqlite")
    # Owed for sure: written behind while Postgres cannot be reached (nothing
    # listens on port 1), not shipped by a pass that may win the race.
    down = database_url(POSTGRES_URL, "lgd_unused").replace(urlsplit(POSTGRES_URL).netloc.split("@")[-1], "127.0.0.1:1")
    with DurableSaver(sqlite=local, postgres=down, write="local", signing_key=KEY, tiers=Tiers(drain_timeout=0)) as s:
        s.put(CONFIG, generate_checkpoint(), {}, {})
        assert s.lag().records > 0
    caplog.clear()  # that saver's "postgres tier is down"
    missing = database_url(POSTGRES_URL, f"lgd_missing_{uuid.uuid4().hex[:12]}")
    caplog.set_level(logging.INFO, logger="langgraph_durable")
    saver = DurableSaver(sqlite=local, postgres=missing, write="local", signing_key=KEY, tiers=Tiers(drain_timeout=0))
    try:
        started = time.monotonic()
        saver.drain(60)
        assert time.monotonic() - started < 20.0  # not the 60 s asked for
        stopped = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(stopped) == 1, stopped
        assert stopped[0].startswith(f"drain stopped: postgres tier at {missing} refused the connection (")
        with pytest.raises(ConfigError, match="does not exist"):
            saver.setup()
    finally:
        saver.close()
