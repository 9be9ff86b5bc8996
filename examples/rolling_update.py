"""A rolling update that changes a graph's state, in real processes.

Version 1 of the app keeps the note's subject under the state key ``topic``
and runs draft -> ask -> summarize; ``ask`` waits for a person with
``interrupt()``. Version 2 calls the key ``subject``, the node ``draft`` is
now ``write``, and ``summarize`` is gone: its work is done by ``finish``.
Version 2 declares ``Migrations(version=2)`` and one step from version 1.

Run it with no arguments::

    python examples/rolling_update.py

It starts "pods", each a process of its own running one version of the
code (``python examples/rolling_update.py --version 1 --sqlite FILE``),
and sends them requests on their standard input as a load balancer would
send HTTP requests: two pods of version 1 start three threads (one
finished, one waiting at the interrupt, one cut off in the middle of
``summarize`` when the rollout stops its pod), a pod of version 2 answers
and resumes them (each migrated as it resumes), the old pod still running
refuses a thread version 2 wrote (``NewerStateVersion``, answered with a
503 for the load balancer to retry elsewhere), and a version 1 pod rolls a
thread back to the checkpoint its migration pinned.

By default every pod shares one SQLite file in a temporary folder. With
``LANGGRAPH_DURABLE_REDIS_URL`` and / or ``LANGGRAPH_DURABLE_POSTGRES_URL``
set, each pod has a SQLite file of its own in front of those tiers, as pods
with their own volumes do, the thread ids get a suffix of their own, and
the threads are deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from langgraph_durable import DurableSaver, Migration, Migrations, NewerStateVersion
from langgraph_durable.shutdown import drain_on_sigterm

END_OF_REPLY = "."  # the line a pod ends each reply with

# -- version 1 ----------------------------------------------------------------------------


class StateV1(TypedDict, total=False):
    topic: str
    draft: str
    approved: bool
    summary: str


SLOW_SUMMARIZE_S = 0.0  # a pod started with --slow-summarize spends this long in summarize


def draft_v1(state: StateV1) -> StateV1:
    return {"draft": f"A short note on {state['topic']}."}


def ask_v1(state: StateV1) -> StateV1:
    answer = interrupt({"question": "Publish the note?", "topic": state["topic"]})
    return {"approved": answer == "yes"}


def summarize(state: StateV1) -> StateV1:
    if SLOW_SUMMARIZE_S:
        print("summarize started", flush=True)
        time.sleep(SLOW_SUMMARIZE_S)
    return {"summary": f"Published: {state['draft']}" if state["approved"] else "Shelved."}


def graph_v1() -> StateGraph:
    graph = StateGraph(StateV1)
    graph.add_node("draft", draft_v1)
    graph.add_node("ask", ask_v1)
    graph.add_node("summarize", summarize)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", "ask")
    graph.add_edge("ask", "summarize")
    graph.add_edge("summarize", END)
    return graph


# -- version 2 ----------------------------------------------------------------------------


class StateV2(TypedDict, total=False):
    subject: str
    draft: str
    approved: bool
    outcome: str


def write(state: StateV2) -> StateV2:
    return {"draft": f"A short note on {state['subject']}."}


def ask_v2(state: StateV2) -> StateV2:
    answer = interrupt({"question": "Publish the note?", "subject": state["subject"]})
    return {"approved": answer == "yes"}


def finish(state: StateV2) -> StateV2:
    return {"outcome": "published" if state["approved"] else "shelved"}


def graph_v2() -> StateGraph:
    graph = StateGraph(StateV2)
    graph.add_node("write", write)
    graph.add_node("ask", ask_v2)
    graph.add_node("finish", finish)
    graph.add_edge(START, "write")
    graph.add_edge("write", "ask")
    graph.add_edge("ask", "finish")
    graph.add_edge("finish", END)
    return graph


# Version 1 declares its version too: a pod that declares none does not
# know that a thread was written by a newer one, and would run it.
MIGRATIONS_V1 = Migrations(version=1)
MIGRATIONS_V2 = Migrations(version=2)


@MIGRATIONS_V2.step(from_version=1)
def topic_is_now_subject(m: Migration) -> None:
    m.rename("topic", "subject")  # the value, and any pending write to it
    m.rename_node("draft", "write")
    m.remove_node("summarize", reroute_to="finish")  # a thread about to summarize finishes instead
    m.values.pop("summary", None)  # a key version 2 no longer has
    for waiting in m.interrupts:  # what a client reading the pending question is shown
        waiting.value = {"question": waiting.value["question"], "subject": waiting.value["topic"]}


VERSIONS = {1: (graph_v1, MIGRATIONS_V1, "topic"), 2: (graph_v2, MIGRATIONS_V2, "subject")}


# -- a pod: one version of the app, taking requests on stdin ------------------------------


def serve(version: int, sqlite: str) -> None:
    build, migrations, key = VERSIONS[version]
    with DurableSaver.from_env(sqlite=sqlite, migrations=migrations) as saver:
        drain_on_sigterm(saver)
        graph = build().compile(checkpointer=saver)
        print(f"ready: state version {version}, tiers {' -> '.join(saver.tier_names)}")
        print(END_OF_REPLY, flush=True)
        for line in sys.stdin:
            request, *args = line.strip().split(maxsplit=2)
            try:
                handle(saver, graph, key, request, args)
            except NewerStateVersion as exc:
                # What an HTTP handler answers: another replica can run it.
                print(
                    f"503 Service Unavailable, Retry-After: 1 (NewerStateVersion: written by state version "
                    f"{exc.version}, this pod runs {exc.running})"
                )
            print(END_OF_REPLY, flush=True)


def handle(saver: DurableSaver, graph: Any, key: str, request: str, args: list[str]) -> None:
    if request == "dry-run":  # what `langgraph-durable migrate --dry-run` reports
        for t in saver.migrate(args[0].split(","), dry_run=True).threads:
            print(f"{t.thread_id:<10} {t.outcome} {t.from_version} -> {t.to_version}: {t.detail}")
        return
    if request == "show":  # get_state: a read, which neither migrates nor is refused
        report(saver, graph, args[0], None, None)
        return
    if request == "delete":
        for thread_id in args[0].split(","):
            saver.delete_thread(thread_id)
        print("deleted", args[0])
        return
    thread_id = args[0]
    config: dict[str, Any] = {"configurable": {"thread_id": thread_id}}
    if request == "start":
        run_input: Any = {key: args[1]}
    elif request == "answer":
        run_input = Command(resume=args[1])
    elif request == "continue":
        run_input = None
    elif request == "rollback":  # answer from the checkpoint the migration pinned
        pin = next(p for p in reversed(saver.pins(thread_id)) if p.label.startswith("before migration"))
        print(f"pin {pin.checkpoint_id} ({pin.label})")
        config, run_input = pin.config, Command(resume=args[1])
    else:
        raise SystemExit(f"unknown request {request!r}")
    before = saver.get_tuple({"configurable": {"thread_id": thread_id}})
    ran = [node for update in graph.stream(run_input, config, stream_mode="updates") for node in update]
    # A run that stops at interrupt() keeps the thread's writer lease until
    # Python's garbage collector frees it: give it back now, so that the
    # answer may go to any pod.
    saver.release_thread(thread_id)
    report(saver, graph, thread_id, before, [n for n in ran if n != "__interrupt__"])


def report(saver: DurableSaver, graph: Any, thread_id: str, before: Any, ran: list[str] | None) -> None:
    config = {"configurable": {"thread_id": thread_id}}
    if before is not None:  # did this run migrate the checkpoint it began from?
        pinned = {pin.checkpoint_id for pin in saver.pins(thread_id)}
        for snapshot in graph.get_state_history(config):
            made_from = snapshot.metadata.get("migrated_from")
            if made_from and made_from["checkpoint_id"] == before.checkpoint["id"]:
                source = made_from["checkpoint_id"]
                print(
                    f"migrated from state version {made_from['state_version']} to "
                    f"{snapshot.metadata['state_version']}; the checkpoint it was made from, {source}, is "
                    f"{'pinned' if source in pinned else 'NOT pinned'}"
                )
    state = graph.get_state(config)
    if ran is not None:
        print("ran", " -> ".join(ran) or "nothing")
    if state.interrupts:
        print(f"waiting at {state.next[0]}: {state.interrupts[0].value}")
    elif state.next:
        print(f"stopped before {state.next[0]}")
    values = ", ".join(f"{k}={v!r}" for k, v in state.values.items())
    print(f"state version {state.metadata['state_version']}: {values}")


# -- the rollout: starts the pods and sends them requests ---------------------------------


class Pod:
    def __init__(self, version: int, name: str, folder: Path, shared: bool, *extra: str) -> None:
        self.name = name
        sqlite = folder / (f"{name}.sqlite" if shared else "checkpoints.sqlite")
        command = [sys.executable, __file__, "--version", str(version), "--sqlite", str(sqlite)]
        self.process = subprocess.Popen(
            [*command, *extra],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )

    def ready(self) -> Pod:
        self.read_until(END_OF_REPLY, "ready")
        return self

    def read_until(self, last: str, request: str) -> list[str]:
        assert self.process.stdout is not None
        lines = []
        for line in self.process.stdout:
            line = line.rstrip("\n")
            if line == END_OF_REPLY:
                break
            lines.append(line)
            print(f"  [{self.name}] {line}", flush=True)
            if line == last:
                break
        else:
            raise SystemExit(f"pod {self.name} exited ({self.process.wait()}) during {request!r}")
        return lines

    def send(self, request: str, until: str = END_OF_REPLY) -> list[str]:
        assert self.process.stdin is not None
        print(f"  [{self.name}] < {request}", flush=True)
        self.process.stdin.write(request + "\n")
        self.process.stdin.flush()
        return self.read_until(until, request)

    def stop(self) -> int:
        """What the rollout does to an old pod: SIGTERM, then wait."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=60)

    def close(self) -> int:
        assert self.process.stdin is not None
        self.process.stdin.close()
        return self.process.wait(timeout=60)


def rollout(folder: Path) -> int:
    shared = bool(os.environ.get("LANGGRAPH_DURABLE_REDIS_URL") or os.environ.get("LANGGRAPH_DURABLE_POSTGRES_URL"))
    suffix = f"-{uuid.uuid4().hex[:6]}" if shared else ""
    finished, waiting, midway = (f"{name}{suffix}" for name in ("finished", "waiting", "midway"))
    store = (
        "one SQLite file per pod in front of the shared tiers" if shared else "SQLite alone, one file every pod shares"
    )
    print(f"A rolling update from state version 1 to 2 ({store})")

    print("\n1. Version 1: key `topic`, nodes draft -> ask -> summarize. Two pods start three threads.")
    v1a, v1b = Pod(1, "v1-a", folder, shared), Pod(1, "v1-b", folder, shared, "--slow-summarize", "60")
    v1a.ready(), v1b.ready()
    v1a.send(f"start {finished} tide pools")
    v1a.send(f"answer {finished} yes")
    v1a.send(f"start {waiting} cave maps")
    v1b.send(f"start {midway} salt marshes")
    v1b.send(f"answer {midway} yes", until="summarize started")

    print("\n2. The rollout starts a pod of version 2 and stops v1-b, in the middle of summarize.")
    v2a = Pod(2, "v2-a", folder, shared).ready()
    print(f"  [v1-b] SIGTERM: exited with status {v1b.stop()}")
    v1a.send(f"show {midway}")
    v2a.send(f"dry-run {finished},{waiting},{midway}")

    print("\n3. Requests during the rollout: version 2 resumes each thread it is sent, migrating it first.")
    answered = v2a.send(f"answer {waiting} yes")
    resumed = v2a.send(f"continue {midway}")
    print("   A request for a migrated thread reaches the old pod still running:")
    refused = v1a.send(f"continue {waiting}")
    print("   The load balancer retries it on a pod of version 2:")
    v2a.send(f"continue {waiting}")

    print("\n4. Roll back: version 1 answers `waiting` again, from the checkpoint its migration pinned.")
    rolled_back = v1a.send(f"rollback {waiting} yes")
    print("   `waiting` is at state version 1 again: version 1 runs it. `midway` was not rolled back:")
    v1a.send(f"continue {waiting}")
    still_refused = v1a.send(f"continue {midway}")

    if shared:
        v1a.send(f"delete {finished},{waiting},{midway}")
    statuses = [v1a.close(), v2a.close()]
    expected = [
        any(line.startswith("migrated from state version 1 to 2") for line in answered),
        any(line == "ran finish" for line in resumed),
        any(line.startswith("503 ") for line in refused),
        any(line == "ran ask -> summarize" for line in rolled_back),
        any(line.startswith("503 ") for line in still_refused),
    ]
    if statuses != [0, 0] or not all(expected):
        print(f"\nFAILED: pod exit statuses {statuses}, expected outcomes {expected}")
        return 1
    print("\nOK: migrated on resume, refused by the old version, rolled back from the pin.")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", type=int, choices=sorted(VERSIONS), help="run a pod of this version")
    parser.add_argument("--sqlite", help="the pod's SQLite file")
    parser.add_argument("--slow-summarize", type=float, default=0.0, help="seconds summarize takes (a pod)")
    args = parser.parse_args(argv)
    if args.version is not None:
        global SLOW_SUMMARIZE_S
        SLOW_SUMMARIZE_S = args.slow_summarize
        serve(args.version, args.sqlite)
        return 0
    with tempfile.TemporaryDirectory(prefix="rolling-update-") as folder:
        return rollout(Path(folder))


if __name__ == "__main__":
    sys.exit(main())
