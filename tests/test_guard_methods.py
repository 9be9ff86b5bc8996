"""The guarded tier's explicit methods (guard_async.py, guard.py): one per
method of the tier Protocols, each the tier's method of the same name,
through the breaker's `call`, timed unless in `_UNTIMED`, with its
positional arguments for the metrics' miss check. No servers."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from langgraph_durable.engine import guard, guard_async
from langgraph_durable.metrics import TierCall
from langgraph_durable.model.breaker import Breaker
from langgraph_durable.model.roles import Role
from langgraph_durable.tiers import protocol_async

PROTOCOLS = (
    protocol_async.AsyncRecords,
    protocol_async.AsyncQuarantine,
    protocol_async.AsyncLedgerStore,
    protocol_async.AsyncLeases,
)
# The local tier's own, reached through its guard by the chain and the journal.
LOCAL_ONLY = (
    "version",
    "journal_acked",
    "journal_acked_many",
    "journal_drop",
    "pending_journal",
    "journal_lag",
    "evict",
)
MEMBERS = sorted({m for p in PROTOCOLS for m in vars(p) if not m.startswith("_")})
CALLED = sorted({*MEMBERS, *LOCAL_ONLY} - guard_async._PASSTHROUGH)
TIMEOUT = 5.0


class FakeTier:
    """Records each call: (method, args, kwargs)."""

    name = "fake"
    role = Role.HOT

    def __init__(self, is_async: bool) -> None:
        self.is_async = is_async
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self.closed = False

    def __getattr__(self, method: str) -> Any:
        def sync(*args: Any, **kwargs: Any) -> Any:
            self.calls.append((method, args, kwargs))
            return ("answer", method)

        async def coro(*args: Any, **kwargs: Any) -> Any:
            return sync(*args, **kwargs)

        return coro if self.is_async else sync

    def close(self) -> Any:
        self.closed = True
        if self.is_async:
            return asyncio.sleep(0)
        return None


def _arguments(fn: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A distinct value for each argument of `fn`."""
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for p in inspect.signature(fn).parameters.values():
        if p.kind is inspect.Parameter.KEYWORD_ONLY:
            kwargs[p.name] = f"{p.name}-value"
        else:
            args.append(f"{p.name}-value")
    return tuple(args), kwargs


@pytest.mark.parametrize("cls", [guard_async.AsyncGuardedTier, guard.GuardedTier])
def test_every_protocol_member_is_an_explicit_method(cls: type) -> None:
    assert not hasattr(cls, "__getattr__")
    assert [m for m in [*MEMBERS, *LOCAL_ONLY] if m not in vars(cls) and m != "name"] == []
    assert guard._PASSTHROUGH == guard_async._PASSTHROUGH == {"close", "name", "role"}


@pytest.mark.parametrize("method", CALLED)
def test_sync_methods_call_the_tier_through_the_breaker(method: str) -> None:
    tier = FakeTier(is_async=False)
    guarded = guard.GuardedTier(tier, Breaker("fake"), timeout=TIMEOUT)
    seen: list[tuple[str, float | None, tuple[Any, ...]]] = []
    real_call = guarded.call

    def call(what: str, run: Any, timeout: float | None, args: Any = ()) -> Any:
        seen.append((what, timeout, tuple(args)))
        return real_call(what, run, timeout, args)

    guarded.call = call  # type: ignore[method-assign]
    args, kwargs = _arguments(getattr(guarded, method))
    assert getattr(guarded, method)(*args, **kwargs) == ("answer", method)
    assert seen == [(method, None if method in guard._UNTIMED else TIMEOUT, args)]
    assert [(m, a) for m, a, _ in tier.calls] == [(method, args)]
    assert tier.calls[0][2] == kwargs


@pytest.mark.parametrize("method", CALLED)
async def test_async_methods_call_the_tier_through_the_breaker(method: str) -> None:
    tier = FakeTier(is_async=True)
    guarded = guard_async.AsyncGuardedTier(tier, Breaker("fake"), timeout=TIMEOUT)
    seen: list[tuple[str, float | None, tuple[Any, ...]]] = []
    real_call = guarded.call

    async def call(what: str, run: Any, timeout: float | None, args: Any = ()) -> Any:
        seen.append((what, timeout, tuple(args)))
        return await real_call(what, run, timeout, args)

    guarded.call = call  # type: ignore[method-assign]
    args, kwargs = _arguments(getattr(guarded, method))
    assert await getattr(guarded, method)(*args, **kwargs) == ("answer", method)
    assert seen == [(method, None if method in guard_async._UNTIMED else TIMEOUT, args)]
    assert [(m, a) for m, a, _ in tier.calls] == [(method, args)]
    assert tier.calls[0][2] == kwargs


async def test_passthrough_skips_the_breaker_and_metrics() -> None:
    tier = FakeTier(is_async=True)
    events: list[TierCall] = []
    breaker = Breaker("fake")
    guarded = guard_async.AsyncGuardedTier(tier, breaker, timeout=TIMEOUT, metrics=events.append)  # type: ignore[arg-type]
    breaker.failed(0.0, "down")
    assert (guarded.name, guarded.role) == ("fake", Role.HOT)
    await guarded.close()
    assert tier.closed and events == [] and tier.calls == []


def test_journal_is_passed_to_the_local_tier_only_when_given() -> None:
    tier = FakeTier(is_async=False)
    guarded = guard.GuardedTier(tier, Breaker("fake"), timeout=None)
    guarded.write_checkpoint("row", [], fence=None)  # type: ignore[arg-type]
    guarded.write_writes([], True, journal=True)
    assert [kw for _, _, kw in tier.calls] == [{"fence": None}, {"fence": None, "journal": True}]


def test_a_read_of_fewer_blobs_than_asked_is_a_miss() -> None:
    events: list[TierCall] = []
    tier = FakeTier(is_async=False)
    tier.read_blobs = lambda thread_id, ns, keys: {}  # type: ignore[method-assign]
    guarded = guard.GuardedTier(tier, Breaker("fake"), timeout=None, metrics=events.append)  # type: ignore[arg-type]
    guarded.read_blobs("t", "", [("c", "1")])
    assert [(e.op, e.outcome) for e in events] == [("read_blobs", "miss")]
