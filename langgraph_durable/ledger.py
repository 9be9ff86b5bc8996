"""The ledger of non-resumable actions: send an email, charge a card, post a
message. Things a resumed thread must never silently do twice.

Inside a node, declare the action with a stable key::

    with action(f"charge:{order_id}") as act:     # `async with` in async nodes
        if not act.done:
            act.result = charge_card(order_id)
    receipt = act.result

or decorate the function that does it::

    @durable_action(lambda order_id: f"charge:{order_id}")
    def charge(order_id): ...

The intent is written to every tier *before* the body runs and the
confirmation (with the result) after it returns. On a later run:

- a confirmed action is not run again: ``act.done`` is True and ``act.result``
  is the recorded result;
- an intent without a confirmation (the process died in between, or the body
  raised) is escalated: the next run of the thread raises `ResumeRejected`
  naming the action, until an operator says whether it happened
  (`DurableSaver.resolve_action`, or ``langgraph-durable resolve-action``),
  unless the action was declared ``idempotent=True``, in which case it runs again.
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar, cast, runtime_checkable

from .errors import ConfigError, CorruptCheckpoint, ResumeRejected


def _run_config() -> Any:
    """The running step's config (`langgraph.config.get_config`), imported on
    first use: `langgraph.config` brings LangChain's tracers and LangSmith,
    which a command that never runs a graph should not pay to import."""
    from langgraph.config import get_config

    return get_config()


ActionState = Literal["intent", "done", "not_done"]
CHECKPOINTER_KEY = "__pregel_checkpointer"  # where Pregel puts the saver in a node's config

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """The recorded state of one action of one thread.

    ``intent``: started, not confirmed. ``done``: confirmed (by the code or an
    operator), `result` holds what it returned. ``not_done``: an operator
    said it did not happen; the next run may do it.
    """

    key: str
    state: ActionState
    idempotent: bool = False
    result: Any = None
    updated_at: float = 0.0
    resolved_by: str = ""  # "" (the code) or "operator"

    def escalated(self) -> bool:
        return self.state == "intent" and not self.idempotent


def unconfirmed_message(thread_id: str, keys: list[str]) -> str:
    names = ", ".join(repr(k) for k in keys)
    return (
        f"thread {thread_id!r} has non-resumable action(s) {names} that started but were never confirmed, "
        "so they may or may not have happened. Check, then record the answer with "
        "saver.resolve_action(thread_id, key, done=True|False) or "
        "`langgraph-durable resolve-action ... --key ... --done|--not-done`, and run the thread again."
    )


@runtime_checkable
class ActionLedger(Protocol):
    """What `action` needs of the run's checkpointer (DurableSaver has it).
    A Protocol rather than the saver's class: the saver imports this module."""

    def actions(self, thread_id: str) -> dict[str, LedgerEntry]: ...
    async def aactions(self, thread_id: str) -> dict[str, LedgerEntry]: ...
    def record_action(self, thread_id: str, entry: LedgerEntry) -> None: ...
    async def arecord_action(self, thread_id: str, entry: LedgerEntry) -> None: ...


def _saver_and_thread() -> tuple[ActionLedger, str]:
    try:
        config = _run_config()
    except RuntimeError as exc:
        raise ConfigError("action() must be used inside a LangGraph node (it reads the run's config).") from exc
    configurable = config.get("configurable") or {}
    saver = configurable.get(CHECKPOINTER_KEY)
    if not isinstance(saver, ActionLedger):
        raise ConfigError(
            "action() needs the graph to be compiled with checkpointer=DurableSaver(...); "
            f"this run's checkpointer is {type(saver).__name__}."
        )
    return saver, str(configurable["thread_id"])


class action:
    """Declare a non-resumable action; see the module docstring."""

    def __init__(self, key: str, *, idempotent: bool = False) -> None:
        if not key:
            raise ConfigError("an action needs a stable, non-empty key, e.g. f'email:welcome:{user_id}'.")
        self.key = key
        self.idempotent = idempotent
        self.done = False
        self.result: Any = None
        self._saver: ActionLedger | None = None
        self._thread = ""

    def _plan(self, entry: LedgerEntry | None) -> LedgerEntry | None:
        """The intent to record, or None when the action already happened."""
        if entry is not None and entry.state == "done":
            self.done, self.result = True, entry.result
            return None
        if entry is not None and entry.escalated():
            raise ResumeRejected(
                unconfirmed_message(self._thread, [self.key]),
                reason="unconfirmed non-resumable action",
                validator="action",
                actions=[self.key],
            )
        return LedgerEntry(self.key, "intent", self.idempotent, None, time.time())

    def _confirmation(self) -> LedgerEntry:
        return LedgerEntry(self.key, "done", self.idempotent, self.result, time.time())

    def __enter__(self) -> action:
        self._saver, self._thread = _saver_and_thread()
        intent = self._plan(self._saver.actions(self._thread).get(self.key))
        if intent is not None:
            self._saver.record_action(self._thread, intent)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # On an exception the intent stays unconfirmed: whether the side
        # effect happened is unknown, so the next run escalates it.
        if exc_type is None and not self.done and self._saver is not None:
            self._saver.record_action(self._thread, self._confirmation())
            self.done = True

    async def __aenter__(self) -> action:
        self._saver, self._thread = _saver_and_thread()
        intent = self._plan((await self._saver.aactions(self._thread)).get(self.key))
        if intent is not None:
            await self._saver.arecord_action(self._thread, intent)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is None and not self.done and self._saver is not None:
            await self._saver.arecord_action(self._thread, self._confirmation())
            self.done = True


def durable_action(key: str | Callable[..., str], *, idempotent: bool = False) -> Callable[[F], F]:
    """Decorator form of `action`: the wrapped function runs at most once per
    key and thread; later calls return its recorded result. `key` is a string
    or a function of the call's arguments."""

    def decorate(fn: F) -> F:
        def key_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
            return key(*args, **kwargs) if callable(key) else key

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def arun(*args: Any, **kwargs: Any) -> Any:
                async with action(key_of(args, kwargs), idempotent=idempotent) as act:
                    if not act.done:
                        act.result = await fn(*args, **kwargs)
                return act.result

            return arun  # type: ignore[return-value]

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            with action(key_of(args, kwargs), idempotent=idempotent) as act:
                if not act.done:
                    act.result = fn(*args, **kwargs)
            return act.result

        return run  # type: ignore[return-value]

    return decorate


class Pinning(Protocol):
    def pin(self, config: Any, *, label: str = "", check: bool = True) -> Any: ...
    async def apin(self, config: Any, *, label: str = "", check: bool = True) -> Any: ...


def _root_checkpoint(what: str) -> tuple[Pinning, dict[str, Any]]:
    try:
        config = _run_config()
    except RuntimeError as exc:
        raise ConfigError(f"{what}() must be used inside a LangGraph node (it reads the run's config).") from exc
    configurable = config.get("configurable") or {}
    saver = configurable.get(CHECKPOINTER_KEY)
    root = (configurable.get("checkpoint_map") or {}).get("")
    if not hasattr(saver, "pin") or root is None:
        raise ConfigError(
            f"{what}() needs the graph to be compiled with checkpointer=DurableSaver(...); "
            f"this run's checkpointer is {type(saver).__name__}."
        )
    target = {"thread_id": str(configurable["thread_id"]), "checkpoint_ns": "", "checkpoint_id": root}
    return cast(Pinning, saver), {"configurable": target}


def pin_here(label: str = "") -> Any:
    """Inside a node: pin the root graph's checkpoint this step started
    from, before the node does something risky. Retention, ``prune``,
    ``delete_for_runs`` and archiving keep it until it is unpinned, and
    ``graph.invoke(None, pin.config)`` resumes from it. Returns the `Pin`."""
    saver, config = _root_checkpoint("pin_here")
    return saver.pin(config, label=label, check=False)  # it may still be on its way (durability="async")


async def apin_here(label: str = "") -> Any:
    """`pin_here` in an async node."""
    saver, config = _root_checkpoint("apin_here")
    return await saver.apin(config, label=label, check=False)


def ledger_record_key(thread_id: str, key: str) -> str:
    """How `CorruptCheckpoint.key` names a ledger entry damaged in every tier."""
    return f"{thread_id}/ledger/{key}"


def refusal(
    thread_id: str,
    key: str,
    entries: Mapping[str, LedgerEntry],
    *,
    force: bool = False,
    force_hint: str = "force=True (`--force` on the command line)",
) -> str | None:
    """Why an operator's answer for action `key` may not be recorded, or None
    if it may: the thread has no such action, or the action is already
    answered (confirmed done, or answered by an operator) and `force` is not
    set. Only an unconfirmed intent is open to an answer: changing a
    confirmed action could make a resumed thread repeat or skip a side effect.
    `force_hint` names the way to force it, in the message."""
    entry = entries.get(key)
    if entry is None:
        known = ", ".join(repr(k) for k in sorted(entries)) or "none"
        return (
            f"thread {thread_id!r} has no action {key!r} (its actions: {known}); "
            "`langgraph-durable actions ...` or saver.actions(thread_id) lists them."
        )
    if entry.state != "intent" and not force:
        what = "confirmed done" if entry.state == "done" else "answered not done"
        by = "an operator" if entry.resolved_by else "the code that ran it"
        return (
            f"action {key!r} of thread {thread_id!r} is already {what} (by {by}); changing the answer could make "
            f"the thread repeat or skip the side effect. Pass {force_hint} to change it anyway."
        )
    return None


def resolved(entry: LedgerEntry | None, key: str, *, done: bool, result: Any = None) -> LedgerEntry:
    """The entry an operator's answer produces (`entry` None: the entry was
    damaged in every tier, and the answer replaces it)."""
    base = entry or LedgerEntry(key, "intent")
    return replace(
        base, state="done" if done else "not_done", result=result, updated_at=time.time(), resolved_by="operator"
    )


def operator_answer(
    thread_id: str,
    key: str,
    entries: Mapping[str, LedgerEntry] | None,
    *,
    done: bool,
    result: Any = None,
    force: bool = False,
) -> LedgerEntry:
    """The entry `DurableSaver.resolve_action` records for an operator's
    answer. Raises `ConfigError` (nothing is written) for the reasons
    `refusal` gives. `entries` None: the thread's ledger could not be read
    because this very entry is damaged in every tier (`damaged_entry`); the
    answer replaces it, which is what the error reporting the damage asks for."""
    if entries is None:
        return resolved(None, key, done=done, result=result)
    reason = refusal(thread_id, key, entries, force=force)
    if reason is not None:
        raise ConfigError(reason)
    return resolved(entries[key], key, done=done, result=result)


def damaged_entry(exc: BaseException, thread_id: str, key: str) -> bool:
    """Whether `exc` is the read error saying that the ledger entry `key` of
    the thread is damaged in every tier (so only an operator's answer can
    replace it)."""
    return isinstance(exc, CorruptCheckpoint) and exc.key == ledger_record_key(thread_id, key)


def newest_entry(copies: Sequence[tuple[LedgerEntry, T]]) -> tuple[LedgerEntry, T]:
    """Of several tiers' copies of one entry, the one to believe: an entry
    never moves backwards, so a confirmed action stays confirmed whatever
    another tier (one that lost or rolled back its copy) says; otherwise the
    most recent answer wins (an operator's, or a new intent after it)."""
    return max(copies, key=lambda c: (c[0].state == "done", c[0].updated_at))
