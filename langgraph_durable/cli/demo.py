"""The crash-and-resume demo: a worker process runs a multi-step graph, the
demo kills it with SIGKILL mid-run, starts a fresh worker, and the thread
resumes from its last checkpoint.

The parent watches progress through the checkpoints themselves (its own
DurableSaver on the same tiers), so what it reports is what survived.
"""

from __future__ import annotations

import operator
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TextIO, TypedDict

from langchain_core.runnables import RunnableConfig

from ..tiers.registry import kinds
from .store import saver_from_args

if TYPE_CHECKING:
    from langgraph.graph import StateGraph

    from ..saver import DurableSaver

STEP_SECONDS = 0.3


class DemoState(TypedDict):
    done: Annotated[list[str], operator.add]
    n: int
    total: int


def build_graph(executions_log: str) -> StateGraph:
    """One node that does one unit of work per super-step, `total` times.

    Each execution is appended to `executions_log` *before* the work, so a
    step that was cut short by the kill and run again shows up twice.
    """
    # Imported here: only the demo builds a graph.
    from langgraph.graph import END, START, StateGraph

    def work(state: DemoState) -> dict[str, Any]:
        n = state["n"]
        with open(executions_log, "a") as f:
            f.write(f"{n}\n")
        time.sleep(STEP_SECONDS)
        return {"done": [f"step {n + 1}"], "n": n + 1}

    g = StateGraph(DemoState)
    g.add_node("work", work)
    g.add_edge(START, "work")
    g.add_conditional_edges("work", lambda s: "work" if s["n"] < s["total"] else END)
    return g


def worker(args: Any) -> int:
    """Run (or resume) the demo thread to the end. Killed by the parent."""
    with saver_from_args(args) as saver:
        graph = build_graph(args.executions).compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": args.thread}, "recursion_limit": args.steps + 10}
        start = None if args.resume else {"done": [], "n": 0, "total": args.steps}
        graph.invoke(start, config, durability="sync")
    return 0


# A progress display: `progress(label, unit)` is a context manager giving a
# `show(done, total)` callback (the CLI passes `cli.progress_bar`).
ProgressFactory = Callable[[str, str], AbstractContextManager[Callable[[int, int], None]]]


def _no_progress(label: str, unit: str) -> AbstractContextManager[Callable[[int, int], None]]:
    return nullcontext(lambda done, total: None)


@dataclass(frozen=True, slots=True)
class DemoResult:
    """What the demo saw; ``langgraph-durable demo --json`` prints it."""

    ok: bool
    thread: str
    tiers: list[str]
    steps: int
    killed_at_step: int | None  # the last step checkpointed when the first worker was killed
    worker_exit_code: int | None  # of the worker that resumed the thread
    steps_in_final_state: int
    in_order: bool
    steps_lost: int
    steps_run_twice: list[int]  # cut short by the kill before their checkpoint, run again on resume
    error: str | None = None


def _spawn(args: Any, *, resume: bool) -> subprocess.Popen[bytes]:
    cmd = [
        sys.executable,
        "-m",
        "langgraph_durable",
        "_demo-worker",
        "--thread",
        args.thread,
        "--steps",
        str(args.steps),
        "--executions",
        args.executions,
    ]
    # '' is passed on too: the worker must not fall back to a tier the
    # environment names but the command line switched off.
    for kind in kinds():
        if getattr(args, kind.keyword, None) is not None:
            cmd += [kind.flag, getattr(args, kind.keyword)]
    if args.archive is not None:
        cmd += ["--archive", args.archive]
    if args.redis_key_prefix:
        cmd += ["--redis-key-prefix", args.redis_key_prefix]
    if resume:
        cmd.append("--resume")
    return subprocess.Popen(cmd)


def _checkpointed_step(saver: DurableSaver, thread: str) -> int:
    tup = saver.get_tuple({"configurable": {"thread_id": thread}})
    if tup is None:
        return 0
    return int(tup.checkpoint["channel_values"].get("n", 0))


def run(args: Any, out: TextIO = sys.stdout, *, progress: ProgressFactory | None = None) -> DemoResult:
    """The demo, narrated on `out`, with `progress` drawing the steps saved.
    `DemoResult.ok` when the resumed run finished with the right state."""
    show_progress = progress or _no_progress
    args.thread = args.thread or f"demo-{uuid.uuid4().hex[:8]}"
    args.kill_after = max(1, min(args.kill_after, args.steps - 1))
    watcher = saver_from_args(args)
    watcher.setup()
    tiers = watcher.tier_names
    folder = Path(watcher.sqlite_path).parent if watcher.sqlite_path else Path(".langgraph_durable")
    folder.mkdir(parents=True, exist_ok=True)
    args.executions = str(folder / f"{args.thread}.executions")
    Path(args.executions).unlink(missing_ok=True)
    print(f"langgraph-durable demo: tiers {' -> '.join(tiers)}", file=out)
    if watcher.sqlite_path:
        print(f"  local file  {watcher.sqlite_path}", file=out)
    print(f"  thread      {args.thread}, {args.steps} steps of {STEP_SECONDS}s each", file=out)

    def failed(error: str, exit_code: int | None) -> DemoResult:
        watcher.close()
        print(error, file=out)
        return DemoResult(False, args.thread, tiers, args.steps, None, exit_code, 0, False, args.steps, [], error)

    proc = _spawn(args, resume=False)
    print(f"\n1. worker pid {proc.pid} starts the graph", file=out, flush=True)
    try:
        with show_progress("saved", "steps") as show:
            while (n := _checkpointed_step(watcher, args.thread)) < args.kill_after:
                show(n, args.steps)
                if proc.poll() is not None:
                    break
                time.sleep(0.02)
            show(n, args.steps)
        if proc.poll() is not None:
            return failed(f"worker exited early with code {proc.returncode}", proc.returncode)
        # Let the worker get into the middle of the next step, then kill it.
        time.sleep(STEP_SECONDS / 2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    at_kill = _checkpointed_step(watcher, args.thread)
    print(f"\n2. SIGKILL -> worker {proc.pid} in the middle of step {at_kill + 1}", file=out)
    print(f"   last checkpoint on disk: step {at_kill}/{args.steps}", file=out)

    proc = _spawn(args, resume=True)
    print(f"\n3. new worker pid {proc.pid} resumes the thread (graph.invoke(None, config))", file=out, flush=True)
    try:
        with show_progress("saved", "steps") as show:
            while proc.poll() is None:
                show(_checkpointed_step(watcher, args.thread), args.steps)
                time.sleep(0.02)
            show(_checkpointed_step(watcher, args.thread), args.steps)
    finally:
        if proc.poll() is None:
            proc.kill()

    final = watcher.get_tuple({"configurable": {"thread_id": args.thread}})
    watcher.close()
    executions = [int(x) for x in Path(args.executions).read_text().split()]
    Path(args.executions).unlink(missing_ok=True)
    values = final.checkpoint["channel_values"] if final else {}
    expected = [f"step {i + 1}" for i in range(args.steps)]
    done = values.get("done", [])
    in_order = done == expected
    repeated = sorted({n + 1 for n in executions if executions.count(n) > 1})
    ok = proc.returncode == 0 and in_order
    print("\n4. result", file=out)
    print(f"   worker exit code      {proc.returncode}", file=out)
    print(f"   steps in final state  {len(done)}/{args.steps} (in order: {in_order})", file=out)
    print(f"   steps lost            {args.steps - len(done)}", file=out)
    print(
        f"   steps run twice       {repeated or 'none'}"
        + (" (cut short by the kill before its checkpoint; run again on resume)" if repeated else ""),
        file=out,
    )
    print(
        f"\n{'OK' if ok else 'FAILED'}: the thread {'resumed and finished' if ok else 'did not finish correctly'}.",
        file=out,
    )
    return DemoResult(
        ok,
        args.thread,
        tiers,
        args.steps,
        at_kill,
        proc.returncode,
        len(done),
        in_order,
        args.steps - len(done),
        repeated,
    )
