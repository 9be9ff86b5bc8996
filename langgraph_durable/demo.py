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
from pathlib import Path
from typing import Annotated, Any, TextIO, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from .saver import DurableSaver

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


def saver_from_args(args: Any, **options: Any) -> DurableSaver:
    """A saver from the command line's tier flags, falling back to the environment."""
    if args.sqlite is not None:
        options["sqlite"] = args.sqlite or None
    if args.redis:
        options["redis"] = args.redis
    if args.postgres:
        options["postgres"] = args.postgres
    if getattr(args, "redis_key_prefix", None):
        options["redis_key_prefix"] = args.redis_key_prefix
    return DurableSaver.from_env(**options)


def worker(args: Any) -> int:
    """Run (or resume) the demo thread to the end. Killed by the parent."""
    with saver_from_args(args) as saver:
        graph = build_graph(args.executions).compile(checkpointer=saver)
        config: RunnableConfig = {"configurable": {"thread_id": args.thread}, "recursion_limit": args.steps + 10}
        start = None if args.resume else {"done": [], "n": 0, "total": args.steps}
        graph.invoke(start, config, durability="sync")
    return 0


def _bar(n: int, total: int, width: int = 30) -> str:
    filled = int(width * n / total) if total else width
    return f"[{'#' * filled}{'.' * (width - filled)}] {n:>3}/{total}"


class _Progress:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last = -1

    def show(self, label: str, n: int, total: int) -> None:
        if n == self.last:
            return
        self.last = n
        line = f"  {label:<10} {_bar(n, total)}"
        if self.tty:
            self.out.write("\r" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def end(self) -> None:
        if self.tty:
            self.out.write("\n")
        self.last = -1


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
    if args.sqlite is not None:
        cmd += ["--sqlite", args.sqlite]
    if args.redis:
        cmd += ["--redis", args.redis]
    if args.postgres:
        cmd += ["--postgres", args.postgres]
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


def run(args: Any, out: TextIO = sys.stdout) -> int:
    """The demo. Returns 0 when the resumed run finished with the right state."""
    args.thread = args.thread or f"demo-{uuid.uuid4().hex[:8]}"
    args.kill_after = max(1, min(args.kill_after, args.steps - 1))
    watcher = saver_from_args(args)
    watcher.setup()
    folder = Path(watcher.sqlite_path).parent if watcher.sqlite_path else Path(".langgraph_durable")
    folder.mkdir(parents=True, exist_ok=True)
    args.executions = str(folder / f"{args.thread}.executions")
    Path(args.executions).unlink(missing_ok=True)
    print(f"langgraph-durable demo: tiers {' -> '.join(watcher.tier_names)}", file=out)
    if watcher.sqlite_path:
        print(f"  local file  {watcher.sqlite_path}", file=out)
    print(f"  thread      {args.thread}, {args.steps} steps of {STEP_SECONDS}s each", file=out)
    progress = _Progress(out)

    proc = _spawn(args, resume=False)
    print(f"\n1. worker pid {proc.pid} starts the graph", file=out)
    try:
        while (n := _checkpointed_step(watcher, args.thread)) < args.kill_after:
            progress.show("saved", n, args.steps)
            if proc.poll() is not None:
                progress.end()
                print(f"worker exited early with code {proc.returncode}", file=out)
                return 1
            time.sleep(0.02)
        progress.show("saved", n, args.steps)
        progress.end()
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
    print(f"\n3. new worker pid {proc.pid} resumes the thread (graph.invoke(None, config))", file=out)
    try:
        while proc.poll() is None:
            progress.show("saved", _checkpointed_step(watcher, args.thread), args.steps)
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
    progress.show("saved", _checkpointed_step(watcher, args.thread), args.steps)
    progress.end()

    final = watcher.get_tuple({"configurable": {"thread_id": args.thread}})
    watcher.close()
    executions = [int(x) for x in Path(args.executions).read_text().split()]
    Path(args.executions).unlink(missing_ok=True)
    values = final.checkpoint["channel_values"] if final else {}
    expected = [f"step {i + 1}" for i in range(args.steps)]
    repeated = sorted({n + 1 for n in executions if executions.count(n) > 1})
    ok = proc.returncode == 0 and values.get("done") == expected
    print("\n4. result", file=out)
    print(f"   worker exit code      {proc.returncode}", file=out)
    print(
        f"   steps in final state  {len(values.get('done', []))}/{args.steps} (in order: {values.get('done') == expected})",
        file=out,
    )
    print(f"   steps lost            {args.steps - len(values.get('done', []))}", file=out)
    print(
        f"   steps run twice       {repeated or 'none'}"
        + (" (cut short by the kill before its checkpoint; run again on resume)" if repeated else ""),
        file=out,
    )
    print(
        f"\n{'OK' if ok else 'FAILED'}: the thread {'resumed and finished' if ok else 'did not finish correctly'}.",
        file=out,
    )
    return 0 if ok else 1
