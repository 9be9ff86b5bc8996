"""The crash harness's child program: runs (or resumes) one graph thread on a
`DurableSaver` until it finishes, unless it is killed first.

    python -m tests.crash_worker --thread T --sqlite PATH|'' --redis URL --redis-key-prefix P
        --postgres URL --durability sync|async|exit --effects FILE --acks FILE --steps N
        [--width W] [--trace FILE] [--kill-at-event N] [--seed S] [--sleep-scale F] [--api sync|async]

The graph has several super-steps: ``begin``, then per round a ``plan`` node
that fans out with `Send` to ``width`` ``work`` tasks, two parallel nodes
(``audit``, ``tally``) joined by ``next``, and finally ``finish``. Nodes
sleep small random amounts, so a kill can land inside a node, between
super-steps or in the middle of a put. ``begin``, every ``work`` task,
``audit`` and ``finish`` perform a non-resumable action (both the
``with action(...)`` and the ``@durable_action`` forms) whose side effect
appends its key to ``--effects`` (O_APPEND, fsync) before it returns.

Files the parent reads:

- ``--acks``: one JSON line per ``put`` / ``put_writes`` that *returned*
  (fsynced before the saver call returns to LangGraph): what was acknowledged.
- ``--trace``: one line per event (``<n> <unix time> <thread> B|E|. <name>``), written
  without fsync (a SIGKILL does not lose the page cache), telling where a kill
  landed. ``--kill-at-event N`` makes the worker SIGKILL itself right after
  writing event N: before or after a tier write, inside a node, between steps.

- stdout: JSON lines. ``{"started": "input"|"checkpoint", "api": "sync"|"async"}``
  the moment the worker begins the run (``graph.invoke`` / ``graph.ainvoke``,
  by ``--api``): a kill counts only when this line was written, one before it
  (during imports, opening the saver) is retried, not counted, and a timer
  kill's delay runs from it. Then, at the end, the outcome below.

Exit codes: 0 finished (stdout: ``{"final": state}``); 3 the resume was
rejected because of unconfirmed actions (stdout: ``{"escalated": keys, ...}``).

``python -m tests.crash_worker --serve`` is a fork server: it imports all of
the above once, then forks one fresh worker process per request, so that
hundreds of kills do not each pay the ~1-5 s of imports. Protocol (JSON
lines): stdin ``{"op": "run", "argv": [...], "stdout": path, "stderr": path}``
-> stdout ``{"started": pid}``, then, after an optional ``{"op": "kill"}``,
``{"exit": pid, "code": n}`` (-9 when killed).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import functools
import hashlib
import json
import operator
import os
import random
import select
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Annotated, Any, NoReturn, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from langgraph_durable import DurableSaver, ResumeRejected, action, durable_action
from langgraph_durable.tiers.postgres.tier import PostgresTier
from langgraph_durable.tiers.postgres.tier_async import AsyncPostgresTier
from langgraph_durable.tiers.redis.tier import RedisTier
from langgraph_durable.tiers.redis.tier_async import AsyncRedisTier
from langgraph_durable.tiers.sqlite.tier import SqliteTier
from tests.flat_options import durable_options

EXIT_DONE = 0
EXIT_ESCALATED = 3
MAX_SLEEP_S = 0.04  # per node, times --sleep-scale

# -- events: where a kill landed, and kills at an exact point ---------------------


class Trace:
    """Numbered events, appended to a file; optionally SIGKILL at event N."""

    def __init__(self, path: str | None, kill_at: int = 0) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if path else None
        self.kill_at = kill_at
        self.count = 0
        self.lock = threading.Lock()

    def _emit(self, kind: str, name: str) -> None:
        with self.lock:
            self.count += 1
            n = self.count
            if self.fd is not None:
                os.write(self.fd, f"{n} {time.time():.4f} {threading.get_ident()} {kind} {name}\n".encode())
            if n == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(10)  # never reached: the signal is delivered first

    def event(self, name: str) -> None:
        self._emit(".", name)

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        self._emit("B", name)
        yield
        self._emit("E", name)  # not on an exception: an open span means "died inside"


TRACE = Trace(None)


def _span_name(span: str, args: tuple[Any, ...]) -> str:
    # A ledger write names its action: if the kill lands while it is in
    # flight, the server may still apply it after the worker is dead.
    return f"{span}:{args[1]}" if span.endswith(":write_ledger") else span


def _probe_tier_writes() -> None:
    """Make every tier write an event span, so kills can land before, inside
    (another tier's write still running) and after each one."""
    methods = ("write_checkpoint", "write_writes", "write_ledger", "journal_acked", "delete_checkpoint")
    sync_tiers: tuple[tuple[Any, str], ...] = ((SqliteTier, "sqlite"), (RedisTier, "redis"), (PostgresTier, "postgres"))
    async_tiers: tuple[tuple[Any, str], ...] = ((AsyncRedisTier, "redis"), (AsyncPostgresTier, "postgres"))
    for cls, label in sync_tiers:
        for name in methods:
            orig = getattr(cls, name, None)
            if orig is None or getattr(orig, "_crash_probe", False):
                continue

            def probe(self: Any, *a: Any, _orig: Any = orig, _span: str = f"tier:{label}:{name}", **kw: Any) -> Any:
                with TRACE.span(_span_name(_span, a)):
                    return _orig(self, *a, **kw)

            probe._crash_probe = True  # type: ignore[attr-defined]
            setattr(cls, name, functools.wraps(orig)(probe))
    for cls, label in async_tiers:
        for name in methods:
            orig = getattr(cls, name, None)
            if orig is None or getattr(orig, "_crash_probe", False):
                continue

            async def aprobe(
                self: Any, *a: Any, _orig: Any = orig, _span: str = f"tier:{label}:{name}", **kw: Any
            ) -> Any:
                with TRACE.span(_span_name(_span, a)):
                    return await _orig(self, *a, **kw)

            aprobe._crash_probe = True  # type: ignore[attr-defined]
            setattr(cls, name, functools.wraps(orig)(aprobe))


# -- side effects and acknowledgements ---------------------------------------------


def _append_durably(path: str, line: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def action_result(key: str) -> str:
    """What the action with `key` returns (the operator records the same
    when it resolves an action whose side effect happened)."""
    return f"receipt:{key}:{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def perform_effect(effects: str, key: str) -> str:
    """The non-resumable side effect: durably logged before returning."""
    with TRACE.span(f"effect:{key}"):
        _append_durably(effects, key)
    return action_result(key)


class AckingSaver(DurableSaver):
    """A DurableSaver that records, fsynced, every put / put_writes that returned."""

    def __init__(self, *, acks: str | None, **options: Any) -> None:
        super().__init__(**options)
        self._acks = acks
        self._acks_lock = threading.Lock()

    def _ack(self, record: dict[str, Any]) -> None:
        if self._acks:
            with self._acks_lock:
                _append_durably(self._acks, json.dumps(record))
        TRACE.event(f"acked:{record['kind']}")

    @staticmethod
    def _checkpoint_ack(out: RunnableConfig, metadata: Any) -> dict[str, Any]:
        c = out["configurable"]
        return {
            "kind": "checkpoint",
            "ns": c.get("checkpoint_ns", ""),
            "id": c["checkpoint_id"],
            "step": (metadata or {}).get("step"),
            "source": (metadata or {}).get("source"),
        }

    @staticmethod
    def _writes_ack(config: RunnableConfig, writes: Any, task_id: str) -> dict[str, Any]:
        c = config["configurable"]
        return {
            "kind": "writes",
            "ns": c.get("checkpoint_ns", ""),
            "checkpoint_id": c["checkpoint_id"],
            "task_id": task_id,
            "channels": [ch for ch, _ in writes],
        }

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        with TRACE.span("put"):
            out = super().put(config, checkpoint, metadata, new_versions)
        self._ack(self._checkpoint_ack(out, metadata))
        return out

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        with TRACE.span("put_writes"):
            super().put_writes(config, writes, task_id, task_path)
        if writes:
            self._ack(self._writes_ack(config, writes, task_id))

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> RunnableConfig:
        with TRACE.span("put"):
            out = await super().aput(config, checkpoint, metadata, new_versions)
        self._ack(self._checkpoint_ack(out, metadata))
        return out

    async def aput_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        with TRACE.span("put_writes"):
            await super().aput_writes(config, writes, task_id, task_path)
        if writes:
            self._ack(self._writes_ack(config, writes, task_id))


# -- the graph -----------------------------------------------------------------------


class CrashState(TypedDict, total=False):
    n: int
    log: Annotated[list[str], operator.add]
    receipts: Annotated[list[str], operator.add]
    tally: int


def initial_state() -> CrashState:
    return {"n": 0, "log": [], "receipts": [], "tally": 0}


def expected_action_keys(steps: int, width: int) -> list[str]:
    keys = ["welcome"]
    for r in range(steps):
        keys += [f"charge:{r}:{i}" for i in range(width)] + [f"audit:{r}"]
    return [*keys, "notify:done"]


def build_graph(
    *,
    effects: str,
    steps: int,
    width: int,
    sleep_scale: float = 1.0,
    rng: random.Random | None = None,
    api: str = "sync",
) -> StateGraph:
    """The crash graph; `api="async"` builds async nodes (``async with action``)."""
    rng = rng or random.Random()

    def pause() -> float:
        return rng.uniform(0, MAX_SLEEP_S) * sleep_scale

    def welcome_key() -> str:
        return "welcome"

    def charge_key(round_: int, item: int) -> str:
        return f"charge:{round_}:{item}"

    def route_plan(state: CrashState) -> list[Send]:
        return [Send("work", {"round": state["n"], "item": i}) for i in range(width)]

    def route_next(state: CrashState) -> str:
        return "plan" if state["n"] < steps else "finish"

    def tally_update(state: CrashState) -> dict[str, Any]:
        return {"tally": len(state["receipts"]), "log": [f"tally {state['n']}"]}

    if api == "sync":

        def node(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
                def run(state: Any) -> Any:
                    with TRACE.span(f"node:{name}"):
                        time.sleep(pause())
                        out = fn(state)
                        time.sleep(pause() / 2)
                        return out

                return run

            return wrap

        @durable_action(charge_key)
        def charge(round_: int, item: int) -> str:
            return perform_effect(effects, charge_key(round_, item))

        @durable_action(lambda: "notify:done")
        def notify() -> str:
            return perform_effect(effects, "notify:done")

        @node("begin")
        def begin(state: CrashState) -> dict[str, Any]:
            with action(welcome_key()) as act:
                if not act.done:
                    act.result = perform_effect(effects, welcome_key())
            return {"log": ["begin"], "receipts": [act.result]}

        @node("work")
        def work(arg: dict[str, int]) -> dict[str, Any]:
            receipt = charge(arg["round"], arg["item"])
            return {"receipts": [receipt], "log": [f"work {arg['round']}.{arg['item']}"]}

        @node("audit")
        def audit(state: CrashState) -> dict[str, Any]:
            key = f"audit:{state['n']}"
            with action(key) as act:
                if not act.done:
                    act.result = perform_effect(effects, key)
            return {"receipts": [act.result], "log": [f"audit {state['n']}"]}

        @node("finish")
        def finish(state: CrashState) -> dict[str, Any]:
            return {"receipts": [notify()], "log": ["finish"]}

    else:

        def node(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
            def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
                async def run(state: Any) -> Any:
                    with TRACE.span(f"node:{name}"):
                        await asyncio.sleep(pause())
                        out = await fn(state)
                        await asyncio.sleep(pause() / 2)
                        return out

                return run

            return wrap

        @durable_action(charge_key)
        async def acharge(round_: int, item: int) -> str:
            return perform_effect(effects, charge_key(round_, item))

        @durable_action(lambda: "notify:done")
        async def anotify() -> str:
            return perform_effect(effects, "notify:done")

        @node("begin")
        async def begin(state: CrashState) -> dict[str, Any]:
            async with action(welcome_key()) as act:
                if not act.done:
                    act.result = perform_effect(effects, welcome_key())
            return {"log": ["begin"], "receipts": [act.result]}

        @node("work")
        async def work(arg: dict[str, int]) -> dict[str, Any]:
            receipt = await acharge(arg["round"], arg["item"])
            return {"receipts": [receipt], "log": [f"work {arg['round']}.{arg['item']}"]}

        @node("audit")
        async def audit(state: CrashState) -> dict[str, Any]:
            key = f"audit:{state['n']}"
            async with action(key) as act:
                if not act.done:
                    act.result = perform_effect(effects, key)
            return {"receipts": [act.result], "log": [f"audit {state['n']}"]}

        @node("finish")
        async def finish(state: CrashState) -> dict[str, Any]:
            return {"receipts": [await anotify()], "log": ["finish"]}

    plan = node("plan")(_aplan if api == "async" else _plan)
    tally = node("tally")(_async(tally_update) if api == "async" else tally_update)
    nxt = node("next")(_anext_round if api == "async" else _next_round)

    g = StateGraph(CrashState)
    g.add_node("begin", begin)
    g.add_node("plan", plan)
    g.add_node("work", work)
    g.add_node("audit", audit)
    g.add_node("tally", tally)
    g.add_node("next", nxt)
    g.add_node("finish", finish)
    g.add_edge(START, "begin")
    g.add_edge("begin", "plan")
    g.add_conditional_edges("plan", route_plan, ["work"])
    g.add_edge("work", "audit")
    g.add_edge("work", "tally")
    g.add_edge(["audit", "tally"], "next")
    g.add_conditional_edges("next", route_next, ["plan", "finish"])
    g.add_edge("finish", END)
    return g


def _plan(state: CrashState) -> dict[str, Any]:
    return {"log": [f"plan {state['n']}"]}


def _next_round(state: CrashState) -> dict[str, Any]:
    return {"n": state["n"] + 1, "log": [f"next {state['n']}"]}


def _async(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    async def run(state: Any) -> Any:
        return fn(state)

    return run


_aplan = _async(_plan)
_anext_round = _async(_next_round)


def recursion_limit(steps: int) -> int:
    return 10 + 5 * steps


# -- the worker ----------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.crash_worker", description=__doc__.split("\n\n")[0])
    p.add_argument("--serve", action="store_true", help="run as a fork server (see the module docstring)")
    p.add_argument("--thread")
    p.add_argument("--sqlite", default="", help="local SQLite file, or '' for no local tier")
    p.add_argument("--redis", default="")
    p.add_argument("--redis-key-prefix", default="")
    p.add_argument("--postgres", default="")
    p.add_argument("--durability", choices=["sync", "async", "exit"], default="sync")
    p.add_argument("--effects", help="file the actions' side effects append their key to")
    p.add_argument("--acks", help="file every returned put / put_writes is recorded in")
    p.add_argument("--steps", type=int, default=3, help="rounds of plan -> work x width -> audit+tally -> next")
    p.add_argument("--width", type=int, default=3, help="Send fan-out per round")
    p.add_argument("--trace", default="", help="event file (where kills land)")
    p.add_argument("--kill-at-event", type=int, default=0, help="SIGKILL itself at this event (0: never)")
    p.add_argument("--seed", default="", help="seeds the node sleeps")
    p.add_argument("--sleep-scale", type=float, default=1.0)
    p.add_argument("--api", choices=["sync", "async"], default="sync", help="graph.invoke or graph.ainvoke")
    p.add_argument("--write", choices=["shared", "all", "local"], default="shared", help="the saver's write mode")
    p.add_argument("--lease-linger", type=float, default=0.0, help="seconds a run's lease is kept after it ends")
    p.add_argument("--archive", default="", help="s3://BUCKET/PREFIX of the archive, or '' for none")
    p.add_argument("--archive-env", action="append", default=[], help="NAME=VALUE of the archive's AWS_* variables")
    args = p.parse_args(argv)
    if not args.serve:
        missing = [f"--{n}" for n in ("thread", "effects", "acks") if not getattr(args, n)]
        if missing:
            p.error(f"required: {', '.join(missing)}")
        if not (args.sqlite or args.redis or args.postgres):
            p.error("at least one of --sqlite, --redis, --postgres")
    return args


def make_saver(args: argparse.Namespace) -> AckingSaver:
    options: dict[str, Any] = {"sqlite": args.sqlite or None, "redis": args.redis or None}
    options["postgres"] = args.postgres or None
    options["write"] = args.write
    if args.lease_linger:
        options["lease_linger"] = args.lease_linger
    if args.redis_key_prefix:
        options["redis_key_prefix"] = args.redis_key_prefix
    if args.archive:
        # A forked worker has the fork server's environment, set up before the test's.
        for item in args.archive_env:
            name, _, value = item.partition("=")
            os.environ[name] = value
        options["archive"] = args.archive
    return AckingSaver(acks=args.acks, **durable_options(options))


def _escalation(exc: ResumeRejected, ledger: dict[str, Any]) -> dict[str, Any]:
    return {
        "escalated": list(exc.actions),
        "ledger_intents": sorted(k for k, e in ledger.items() if e.escalated()),
        "reason": exc.reason,
        "validator": exc.validator,
        "message": str(exc),
    }


def _emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _emit_started(api: str, first: bool) -> None:
    """Tell the harness the run has begun: a kill that lands after this line
    was written is a kill inside a run (the harness counts it); one before it
    (imports, opening the saver, the first read) is not. Written after the
    trace's ``B invoke``, so a counted kill's trace always shows the run."""
    _emit({"started": "input" if first else "checkpoint", "api": api})


def run_sync(args: argparse.Namespace) -> int:
    config: RunnableConfig = {
        "configurable": {"thread_id": args.thread},
        "recursion_limit": recursion_limit(args.steps),
    }
    rng = random.Random(f"{args.seed}:sleeps") if args.seed else random.Random()
    with make_saver(args) as saver:
        graph = build_graph(
            effects=args.effects, steps=args.steps, width=args.width, sleep_scale=args.sleep_scale, rng=rng
        ).compile(checkpointer=saver)
        TRACE.event("saver:opened")
        first = saver.get_tuple(config) is None
        TRACE.event(f"start:{'input' if first else 'resume'}")
        try:
            with TRACE.span("invoke"):
                _emit_started("sync", first)
                final = graph.invoke(initial_state() if first else None, config, durability=args.durability)
        except ResumeRejected as exc:
            _emit(_escalation(exc, saver.actions(args.thread)))
            return EXIT_ESCALATED
        _emit({"final": final, "started_from": "input" if first else "checkpoint"})
    return EXIT_DONE


async def run_async(args: argparse.Namespace) -> int:
    config: RunnableConfig = {
        "configurable": {"thread_id": args.thread},
        "recursion_limit": recursion_limit(args.steps),
    }
    rng = random.Random(f"{args.seed}:sleeps") if args.seed else random.Random()
    async with make_saver(args) as saver:
        graph = build_graph(
            effects=args.effects, steps=args.steps, width=args.width, sleep_scale=args.sleep_scale, rng=rng, api="async"
        ).compile(checkpointer=saver)
        TRACE.event("saver:opened")
        first = await saver.aget_tuple(config) is None
        TRACE.event(f"start:{'input' if first else 'resume'}")
        try:
            with TRACE.span("invoke"):
                _emit_started("async", first)
                final = await graph.ainvoke(initial_state() if first else None, config, durability=args.durability)
        except ResumeRejected as exc:
            _emit(_escalation(exc, await saver.aactions(args.thread)))
            return EXIT_ESCALATED
        _emit({"final": final, "started_from": "input" if first else "checkpoint"})
    return EXIT_DONE


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        serve()
        return 0
    global TRACE
    TRACE = Trace(args.trace or None, args.kill_at_event)
    _probe_tier_writes()
    TRACE.event("worker:start")
    if args.api == "async":
        return asyncio.run(run_async(args))
    return run_sync(args)


# -- the fork server -------------------------------------------------------------------


class _Lines:
    """Lines from a raw fd, without a buffer hiding them from select()."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buf = b""
        self.eof = False

    def read_available(self) -> list[str]:
        data = os.read(self.fd, 65536)
        if not data:
            self.eof = True
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        return [line.decode() for line in lines if line.strip()]


def _reply(fd: int, record: dict[str, Any]) -> None:
    os.write(fd, (json.dumps(record) + "\n").encode())


def _become_worker(request: dict[str, Any], protocol_fd: int) -> NoReturn:
    """In the forked child: point stdio at the request's files, run main(),
    and shut down as the interpreter would (atexit hooks, joining every
    non-daemon thread, e.g. LangGraph's and the saver's executors), but
    without finalizing every object: in a forked child that would copy the
    server's whole heap page by page (~1 s) for nothing."""
    os.close(protocol_fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    code = 1
    try:
        code = main(request["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            threading._shutdown()  # type: ignore[attr-defined]  # what Py_Finalize does first
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def serve() -> None:
    """The fork server's loop (see the module docstring). One worker at a time."""
    # Warm up what a worker imports lazily; start no thread (fork safety).
    build_graph(effects=os.devnull, steps=1, width=1).compile()
    build_graph(effects=os.devnull, steps=1, width=1, api="async").compile()
    protocol = os.dup(1)
    os.dup2(2, 1)  # stray prints of the server go to its stderr, not the protocol
    stdin = _Lines(0)
    _reply(protocol, {"ready": os.getpid()})
    while not stdin.eof:
        select.select([0], [], [])
        for line in stdin.read_available():
            request = json.loads(line)
            if request.get("op") != "run":
                continue  # a late "kill" for a worker that already exited
            if threading.active_count() != 1:
                raise RuntimeError("the fork server must not have threads when it forks")
            pid = os.fork()
            if pid == 0:
                _become_worker(request, protocol)  # never returns
            _reply(protocol, {"started": pid})
            _reply(protocol, {"exit": pid, "code": _supervise(pid, stdin)})


def _supervise(pid: int, stdin: _Lines) -> int:
    """Wait for worker `pid`, killing it on request. It is not reaped before
    it exits, so its pid cannot be reused while a kill may arrive."""
    pidfd = os.pidfd_open(pid)
    try:
        while True:
            ready, _, _ = select.select([pidfd, 0], [], [])
            if 0 in ready:
                for line in stdin.read_available():
                    if json.loads(line).get("op") == "kill":
                        os.kill(pid, signal.SIGKILL)
                if stdin.eof:  # the harness is gone: so is its worker
                    os.kill(pid, signal.SIGKILL)
            if pidfd in ready:
                _, status = os.waitpid(pid, 0)
                return os.waitstatus_to_exitcode(status)
    finally:
        os.close(pidfd)


if __name__ == "__main__":
    sys.exit(main())
