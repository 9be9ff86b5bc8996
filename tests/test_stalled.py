"""No stalled or refusing tier hangs a run, on either face.

Real servers behind the TCP proxy (`tests.proxy.TcpProxy`): `stall()` keeps
every connection open and forwards nothing (a hung server, a partition
without resets: the kernel still acks, so keepalives see nothing wrong).
Each run goes on a thread joined with a generous limit, so a hang fails the
test instead of hanging it; what is asserted is the outcome (the run
completed, or raised `TierUnavailable`), the breakers and the metrics
counters, never the time.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from langgraph_durable import DurableSaver, TierUnavailable
from langgraph_durable.metrics import TierCall
from tests.conftest import REDIS_URL
from tests.flat_options import durable_options
from tests.graphs import LoopState, looping
from tests.proxy import TcpProxy
from tests.servers import PrivateRedis, free_port

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

STEPS = 4
STALL_AT = 2  # the step whose node stalls the proxy: the run is half done
CALL_TIMEOUT = 2.0
JOIN_S = 60.0  # far past every bound under test; only a hang reaches it
KEY = "k" * 32  # a signing key of the test's: no store key to fetch from a tier that is down


@pytest.fixture
def redis_proxy() -> Iterator[TcpProxy]:
    parts = urlsplit(REDIS_URL)
    with TcpProxy(parts.hostname or "127.0.0.1", parts.port or 6379) as proxy:
        yield proxy


def _proxied_redis(proxy: TcpProxy) -> str:
    parts = urlsplit(REDIS_URL)
    return REDIS_URL.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{proxy.port}")


def _graph(saver: DurableSaver, proxy: TcpProxy | None = None) -> Any:
    """`STEPS` steps; the node of step `STALL_AT` stalls `proxy` (mid-run)."""

    def step(state: LoopState) -> dict[str, Any]:
        n = state.get("n", 0)
        if proxy is not None and n == STALL_AT:
            proxy.stall()
        return {"messages": [f"message {n}"], "n": n + 1}

    return looping(step, STEPS).compile(checkpointer=saver)


def _returns(graph: Any, thread: str, face: str) -> Any:
    """The run's outcome (its final state, or the exception it raised),
    run on a thread; fails if it has not returned after `JOIN_S`."""
    config = {"configurable": {"thread_id": thread}}

    def run() -> Any:
        if face == "sync":
            return graph.invoke({"messages": [], "n": 0}, config)
        return asyncio.run(graph.ainvoke({"messages": [], "n": 0}, config))

    return _outcome(run, f"the {face} run")


def _why(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


def _saver(tmp_path: Path, **options: Any) -> DurableSaver:
    options.setdefault("call_timeout", CALL_TIMEOUT)
    # Long enough that only call_timeout can bound a call to a stalled
    # server: the old sync face had no other bound than this.
    options.setdefault("connect_timeout", 120)
    return DurableSaver(sqlite=str(tmp_path / "local.sqlite"), signing_key=KEY, **durable_options(options))


def _hold_open(saver: DurableSaver, tier: str) -> None:
    """Once this tier's breaker opens, no ordinary probe comes within the
    test, however slow the machine: what a test sees of the tier is the
    calls under test."""
    saver._runtime.breakers[tier].backoff_first = saver._runtime.breakers[tier].backoff_max = 3600.0


def _failures(saver: DurableSaver, tier: str) -> int:
    return saver._runtime.breakers[tier].stats(time.monotonic()).failures


# -- a shared tier stalls mid-run ------------------------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
def test_postgres_stalled_mid_run_redis_acknowledges(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], redis_prefix: str, face: str
) -> None:
    """Postgres (the lease's tier) stops answering mid-run, its connections
    open: the call waiting on it gives up after `call_timeout` (the sync face
    had no bound at all), its breaker opens, the lease moves to Redis and the
    run completes."""
    proxy, proxied = postgres_proxy
    saver = _saver(tmp_path, redis=REDIS_URL, redis_key_prefix=redis_prefix, postgres=proxied)
    assert _returns(_graph(saver), "warm", face)["n"] == STEPS
    out = _returns(_graph(saver, proxy), "stalled", face)
    assert not isinstance(out, BaseException), _why(out)
    assert out["n"] == STEPS
    assert _failures(saver, "postgres") >= 1
    assert saver.lag().by_tier["postgres"] > 0  # owed, shipped once Postgres is back
    proxy.cut()  # drop the stalled connections for good: the saver was never to reuse them
    proxy.restore()
    assert saver.health().tiers[-1].reachable  # probes now: the breaker's backoff may be long by now
    assert saver.drain(30).caught_up
    with DurableSaver(sqlite=None, postgres=proxied, signing_key=KEY) as replica:
        tup = replica.get_tuple({"configurable": {"thread_id": "stalled"}})
    assert tup is not None and tup.checkpoint["channel_values"]["n"] == STEPS
    saver.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_redis_stalled_mid_run_postgres_acknowledges(
    tmp_path: Path, redis_proxy: TcpProxy, postgres_url: str, redis_prefix: str, face: str
) -> None:
    """Redis stops answering mid-run: its calls give up after `call_timeout`
    (on the sync face too, whatever `connect_timeout` says), and the run
    completes through Postgres."""
    saver = _saver(tmp_path, redis=_proxied_redis(redis_proxy), redis_key_prefix=redis_prefix, postgres=postgres_url)
    assert _returns(_graph(saver), "warm", face)["n"] == STEPS
    out = _returns(_graph(saver, redis_proxy), "stalled", face)
    assert not isinstance(out, BaseException), _why(out)
    assert out["n"] == STEPS
    redis_proxy.cut()
    saver.close()


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("alone", ["postgres", "redis"])
def test_one_shared_tier_alone_stalled_mid_run_fails_with_tier_unavailable(
    request: pytest.FixtureRequest, tmp_path: Path, redis_prefix: str, alone: str, face: str
) -> None:
    """No other shared tier: the run fails with `TierUnavailable` naming the
    stalled tier, instead of hanging."""
    if alone == "postgres":
        proxy, proxied = request.getfixturevalue("postgres_proxy")
        saver = _saver(tmp_path, postgres=proxied)
    else:
        proxy = request.getfixturevalue("redis_proxy")
        saver = _saver(tmp_path, redis=_proxied_redis(proxy), redis_key_prefix=redis_prefix)
    assert _returns(_graph(saver), "warm", face)["n"] == STEPS
    out = _returns(_graph(saver, proxy), "stalled", face)
    assert isinstance(out, TierUnavailable), repr(out)
    assert out.tier == alone
    proxy.cut()
    saver.close()


# -- a new saver while a shared tier refuses ---------------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
@pytest.mark.parametrize("refusing", ["postgres", "redis"])
def test_first_run_of_a_new_saver_while_a_tier_refuses(
    tmp_path: Path, postgres_url: str, redis_prefix: str, refusing: str, face: str
) -> None:
    """A new saver whose Postgres or Redis refuses connections (nothing
    listens on its port): its first run succeeds through the other shared
    tier, the refusing tier is tried once (a refused connect fails at once:
    no waiting `connect_timeout` for a pool that never fills) and its
    breaker is open after the run."""
    dead = free_port()
    calls: list[TierCall] = []
    urls = {"redis": REDIS_URL, "postgres": postgres_url}
    urls[refusing] = (
        f"postgresql://postgres@127.0.0.1:{dead}/test" if refusing == "postgres" else f"redis://127.0.0.1:{dead}/0"
    )
    saver = _saver(
        tmp_path,
        redis=urls["redis"],
        redis_key_prefix=redis_prefix,
        postgres=urls["postgres"],
        metrics=lambda e: calls.append(e) if isinstance(e, TierCall) else None,
        # No kept lease: its listener sets up the sync face on a thread of its
        # own, which would try the refusing tier once too.
        lease_linger=0,
    )
    # No probe within the test: every attempt counted below is the first run's.
    _hold_open(saver, refusing)
    out = _returns(_graph(saver), "first", face)
    assert not isinstance(out, BaseException), _why(out)
    assert out["n"] == STEPS
    stats = saver._runtime.breakers[refusing].stats(time.monotonic())
    assert stats.state == "open" and stats.failures == 1
    tried = [c for c in calls if c.tier == refusing and c.seconds > 0.0]
    skipped = [c for c in calls if c.tier == refusing and c.seconds == 0.0]
    assert len(tried) == 1 and tried[0].outcome == "unavailable", tried
    assert skipped and {c.outcome for c in skipped} == {"unavailable"}
    saver.close()


# -- a tier back behind its open breaker --------------------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
def test_redis_back_behind_its_open_breaker_takes_the_run_when_postgres_drops(
    tmp_path: Path, postgres_proxy: tuple[TcpProxy, str], redis_prefix: str, face: str
) -> None:
    """Redis went down (its breaker opened, with a long backoff) and came
    back; then Postgres is cut. With no shared tier left to write to, the
    saver tries the tier its breaker skips once, as a half-open probe,
    instead of failing: Redis answers, its breaker closes and the run
    completes through it."""
    proxy, proxied = postgres_proxy
    with PrivateRedis() as redis_server:
        # A cut is seen at once: no connect timeout to wait for here.
        saver = _saver(
            tmp_path, redis=redis_server.url, redis_key_prefix=redis_prefix, postgres=proxied, connect_timeout=5
        )
        assert _returns(_graph(saver), "warm", face)["n"] == STEPS
        _hold_open(saver, "redis")  # once open, it stays open for the rest of the test
        redis_server.kill()
        assert _returns(_graph(saver), "redis-down", face)["n"] == STEPS
        assert saver._runtime.breakers["redis"].state == "open"
        redis_server.start()  # back, behind its open breaker
        proxy.cut()
        out = _returns(_graph(saver), "postgres-cut", face)
        assert not isinstance(out, BaseException), _why(out)
        assert out["n"] == STEPS
        assert saver._runtime.breakers["redis"].state == "closed"
        assert saver._runtime.breakers["postgres"].state == "open"
        saver.close()


# -- the calls no call timeout holds: setup, whole-store scans, the hand-off listener ---

LONG = 4.0  # the tests' `long_call_timeout` (60 s and more by default)


class StallsOn(TcpProxy):
    """A `TcpProxy` that stalls once a client sends `marker` (the text of a
    statement or command, which it does not forward): a server that
    accepted the connection, answered until then and stops answering just
    when that call is made."""

    def __init__(self, target_host: str, target_port: int, marker: bytes) -> None:
        self.marker = marker
        self.hit = threading.Event()
        super().__init__(target_host, target_port)

    def _seen(self, data: bytes) -> None:
        if self.marker in data:
            self.hit.set()
            self.stall()


@contextlib.contextmanager
def _stalls_on(url: str, marker: bytes) -> Iterator[tuple[StallsOn, str]]:
    """A `StallsOn` proxy in front of the server of `url`, and `url` through it."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 0
    with StallsOn(host, port, marker) as proxy:
        yield proxy, url.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")


def _raised_unavailable(proxy: StallsOn, out: Any, tier: str, saver: DurableSaver) -> None:
    """The call met the stall and raised `TierUnavailable` naming `tier`;
    then the proxy is cut and the saver closed."""
    assert proxy.hit.is_set()
    assert isinstance(out, TierUnavailable), repr(out)
    assert out.tier == tier
    proxy.cut()
    saver.close()


def _outcome(call: Callable[[], Any], what: str) -> Any:
    """`call()`'s outcome (what it returned or raised), called on a thread;
    fails if it has not returned after `JOIN_S`."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call())
        except BaseException as exc:  # the outcome under test
            outcome.append(exc)

    worker = threading.Thread(target=run, daemon=True)  # left behind if it hangs
    worker.start()
    worker.join(JOIN_S)
    assert not worker.is_alive(), f"{what} did not return within {JOIN_S} s: a stalled tier hangs it"
    return outcome[0]


def _on_face(saver: DurableSaver, face: str, call: str) -> Callable[[], Any]:
    """`saver.<call>()` on `face` (``a<call>`` inside `asyncio.run`), with its
    Postgres tier's `long_call_timeout` cut to `LONG`, so a test does not
    wait the default's minute."""

    def shorten(chain: Any) -> None:
        for tier in chain.raw_shared:
            if tier.name == "postgres":
                tier.long_call_timeout = LONG

    def sync() -> Any:
        shorten(saver._sync_chain())
        return getattr(saver, call)()

    async def in_loop() -> Any:
        shorten(saver._async_chain())
        return await getattr(saver, "a" + call)()

    return sync if face == "sync" else lambda: asyncio.run(in_loop())


@pytest.mark.parametrize("face", ["sync", "async"])
def test_postgres_stalled_in_setups_migration_raises_tier_unavailable(
    tmp_path: Path, postgres_url: str, face: str
) -> None:
    """Postgres accepts the connection, answers the connection test, then
    stops answering at the migration's advisory lock (as a replica hung
    holding it would look): `setup` is bounded by `long_call_timeout` (it
    had no bound on either face: the lock may legitimately be waited for)
    and raises `TierUnavailable` saying what to check."""
    with _stalls_on(postgres_url, b"pg_advisory_xact_lock") as (proxy, proxied):
        saver = _saver(tmp_path, postgres=proxied, connect_timeout=5)
        out = _outcome(_on_face(saver, face, "setup"), f"the {face} setup")
        assert "setup" in str(out) and "migration lock" in str(out), str(out)
        _raised_unavailable(proxy, out, "postgres", saver)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_redis_stalled_in_setup_raises_tier_unavailable(tmp_path: Path, redis_prefix: str, face: str) -> None:
    """Redis answers, then stops answering in `setup`'s key layout check:
    each of setup's commands is bounded by the socket timeout
    (`call_timeout`), so setup raises `TierUnavailable` (the same check as
    for Postgres; Redis's own timeouts already bounded it)."""
    with _stalls_on(REDIS_URL, b"key_layout") as (proxy, proxied):
        saver = _saver(tmp_path, redis=proxied, redis_key_prefix=redis_prefix, connect_timeout=5)
        out = _outcome(_on_face(saver, face, "setup"), f"the {face} setup")
        _raised_unavailable(proxy, out, "redis", saver)


@pytest.mark.parametrize("face", ["sync", "async"])
def test_postgres_stalled_in_a_whole_store_scan_raises_tier_unavailable(
    tmp_path: Path, postgres_url: str, face: str
) -> None:
    """`verify()` of every thread lists the threads in one scan, which
    `call_timeout` does not bound (nor `thread_records`, `prune`, the
    deletes, the quarantine's list): Postgres stalling just then no longer
    holds it for ever, on either face; it raises `TierUnavailable`."""
    with _stalls_on(postgres_url, b"UNION SELECT thread_id") as (proxy, proxied):
        saver = _saver(tmp_path, postgres=proxied, connect_timeout=5)
        assert _returns(_graph(saver), "warm", face)["n"] == STEPS
        out = _outcome(_on_face(saver, face, "verify"), f"the {face} verify")
        _raised_unavailable(proxy, out, "postgres", saver)


@pytest.mark.parametrize("tier", ["postgres", "redis"])
def test_hand_off_listener_stalled_ends_and_close_returns(
    request: pytest.FixtureRequest, tmp_path: Path, redis_prefix: str, tier: str
) -> None:
    """The hand-off listener's server (``lease_linger``) stops answering as
    it starts listening (LISTEN / SUBSCRIBE sent, nothing comes back): the
    listener does not hang there (the LISTEN had no bound at all), `close()`
    returns, and the listener's thread ends instead of staying behind on
    a connection that never answers."""
    if tier == "postgres":
        url, marker = request.getfixturevalue("postgres_url"), b"LISTEN"
    else:
        url, marker = REDIS_URL, b"SUBSCRIBE"
    with _stalls_on(url, marker) as (proxy, proxied):
        urls = {"postgres": proxied} if tier == "postgres" else {"redis": proxied, "redis_key_prefix": redis_prefix}
        saver = _saver(tmp_path, connect_timeout=5, lease_linger=30.0, **urls)
        out = _outcome(saver.setup, "setup")  # waits a moment for the listener's first try only
        assert not isinstance(out, BaseException), _why(out)
        assert proxy.hit.is_set()
        listener = saver._runtime.hand_offs
        assert listener is not None and listener._thread is not None
        thread = listener._thread
        out = _outcome(saver.close, "close()")
        assert not isinstance(out, BaseException), _why(out)
        thread.join(JOIN_S)
        assert not thread.is_alive(), "the hand-off listener hangs on its stalled connection"
        proxy.cut()


# -- the early probe's decisions (no servers) ---------------------------------------------


def test_an_open_breaker_allows_one_early_probe_per_opening() -> None:
    """`Breaker.allow_early`: once the breaker opened, one call may go before
    the backoff has passed (a caller with no other tier left), and others
    while it is out; none once it failed while the tier stays down, and
    again once the breaker closed and reopened."""
    from langgraph_durable.model.breaker import Breaker

    b = Breaker("redis", backoff_first=600.0)
    assert not b.allow_early(0.0)  # closed: nothing to probe
    b.failed(0.0, "refused")
    assert not b.allow(1.0)  # the backoff holds ordinary calls
    assert b.allow_early(1.0) and b.state == "half_open"
    assert b.allow_early(1.1)  # a probe is out: a caller with nowhere else to go tries too
    b.failed(1.2, "refused")
    assert b.state == "open" and not b.allow_early(1.3)  # spent in this outage
    b.succeeded(700.0, 0.001)  # a probe after the backoff: back
    b.failed(701.0, "refused")
    assert b.allow_early(701.1)  # a new outage, a new early probe
