"""Command line: ``langgraph-durable`` (also ``python -m langgraph_durable``)."""

from __future__ import annotations

import argparse
import sys

from . import demo


def _tier_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--sqlite", default=None, help="local SQLite file ('' for none; default from LANGGRAPH_DURABLE_SQLITE)"
    )
    p.add_argument("--redis", default=None, help="redis:// URL (default from LANGGRAPH_DURABLE_REDIS_URL)")
    p.add_argument("--postgres", default=None, help="postgresql:// URL (default from LANGGRAPH_DURABLE_POSTGRES_URL)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="langgraph-durable", description="Tiered, checksummed LangGraph checkpoints.")
    commands = parser.add_subparsers(dest="command", required=True)

    p = commands.add_parser("demo", help="kill a running graph with SIGKILL and resume it from its last checkpoint")
    _tier_flags(p)
    p.add_argument("--steps", type=int, default=12, help="super-steps in the demo graph (default 12)")
    p.add_argument("--kill-after", type=int, default=5, help="kill the worker once this step is checkpointed")
    p.add_argument("--thread", default=None, help="thread id (default: a new one)")

    w = commands.add_parser("_demo-worker")  # internal: the process the demo kills
    _tier_flags(w)
    w.add_argument("--thread", required=True)
    w.add_argument("--steps", type=int, required=True)
    w.add_argument("--executions", required=True)
    w.add_argument("--resume", action="store_true")

    args = parser.parse_args(argv)
    if args.command == "demo":
        if args.steps < 2:
            parser.error("--steps must be at least 2")
        return demo.run(args)
    return demo.worker(args)


if __name__ == "__main__":
    sys.exit(main())
