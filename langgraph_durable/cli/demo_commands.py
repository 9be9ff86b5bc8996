"""The crash-and-resume demo: ``demo``, and the worker process it kills."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .lazy import lazy
from .output import (
    EXIT_FINDINGS,
    EXIT_OK,
    Output,
    progress_bar,
)
from .parsing import (
    Command,
    at_least,
)

# The saver, LangGraph and the drivers load when a command runs.
if TYPE_CHECKING:
    from . import demo
else:
    demo = lazy("langgraph_durable.cli.demo")


def _demo(args: argparse.Namespace, out: Output) -> int:
    # With --json the story goes to stderr; stdout carries the result.
    stream = sys.stderr if out.json else sys.stdout
    result = demo.run(args, stream, progress=lambda label, unit: progress_bar(label, unit=unit, file=stream))
    out.document(result)
    return EXIT_OK if result.ok else EXIT_FINDINGS


def _demo_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--steps", type=at_least(2), default=12, help="super-steps in the demo graph (default 12)")
    p.add_argument(
        "--kill-after", type=int, default=5, help="kill the worker once this step is checkpointed (default 5)"
    )
    p.add_argument("--thread", default=None, help="thread id (default: a new one)")


def _demo_worker(args: argparse.Namespace, out: Output) -> int:
    return demo.worker(args)


def _worker_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--thread", required=True, help="thread id")
    p.add_argument("--steps", type=int, required=True, help="super-steps")
    p.add_argument("--executions", required=True, help="file the worker logs each execution to")
    p.add_argument("--resume", action="store_true", help="resume the thread instead of starting it")


COMMANDS: list[Command] = [
    Command(
        "demo",
        "kill a running graph with SIGKILL and resume it from its last checkpoint",
        "Run a small graph in a worker process, kill the worker with SIGKILL in the middle of a step, start a "
        "new worker and watch the thread resume from its last checkpoint, then check that no step was lost. "
        "Uses the tiers the flags or the environment name (default: a local SQLite file). With --json the "
        "narration goes to stderr and the result to stdout.",
        _demo_args,
        _demo,
    ),
    # Internal: the process the demo kills.
    Command("_demo-worker", "", "", _worker_args, _demo_worker, json=False, internal=True),
]
