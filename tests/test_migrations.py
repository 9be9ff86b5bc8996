"""Rolling updates: state versions, migrations on resume, and the guard that
keeps an old replica off a thread a newer one wrote (`migrations.py`).

Every test runs real compiled graphs of two versions of one app
(`versioned_app.py`) against the same tiers, as two replicas of a rolling
update would, on every tier configuration.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import operator
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from pydantic import BaseModel

from langgraph_durable import (
    ConfigError,
    DurableSaver,
    Leases,
    Migration,
    MigrationFailed,
    Migrations,
    NewerStateVersion,
    ResumeRejected,
    rewind,
)
from langgraph_durable.migrations import MIGRATED_FROM_KEY, STATE_VERSION_KEY

from .conftest import CONFIGS, REDIS_URL, SaverFactory
from .faces import FACES
from .test_delta import DELTA_CHANNELS, RUNS, delta_graph
from .versioned_app import cfg, graph_v1, graph_v2, v1_migrations, v2_migrations

ROOT = Path(__file__).resolve().parent.parent


def _start_waiting(saver: DurableSaver, thread: str) -> dict[str, Any]:
    """A v1 thread stopped at its interrupt (draft done, ask waiting)."""
    out = graph_v1().compile(checkpointer=saver).invoke({"topic": "cats"}, cfg(thread))
    assert out["__interrupt__"] and out["log"] == ["draft:cats"]
    return out


def _checkpoints(saver: DurableSaver, thread: str) -> list[str]:
    return [t.checkpoint["id"] for t in saver.list(cfg(thread))]


async def _resume(graph: Any, face: str, inputs: Any, config: dict[str, Any]) -> Any:
    if face == "async":
        return await graph.ainvoke(inputs, config)
    return graph.invoke(inputs, config)


# -- the rolling update, on every tier configuration and both faces -----------------------


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_rolling_update_migrates_on_resume_and_the_old_replica_refuses(
    make_saver: SaverFactory, tiers: str, face: str
) -> None:
    # Each replica its own local file, sharing whatever shared tiers there are
    # (SQLite alone: one file, as two processes on one volume would).
    shared = tiers != "sqlite"
    old = make_saver(tiers, migrations=v1_migrations(), sqlite_name="old.sqlite")
    new = make_saver(tiers, migrations=v2_migrations(), sqlite_name="new.sqlite" if shared else "old.sqlite")
    with old, new:
        _start_waiting(old, "t")
        old.release_thread("t")  # its run is over (a kept lease would be asked for; SQLite alone has no one to ask)
        before = _checkpoints(old, "t")
        source = old.get_tuple(cfg("t"))
        assert source is not None and source.metadata[STATE_VERSION_KEY] == 1

        async def body() -> Any:
            graph = graph_v2().compile(checkpointer=new)
            try:
                return await _resume(graph, face, Command(resume="yes"), cfg("t"))
            finally:
                if face == "async":
                    await new.aclose()

        out = asyncio.run(body())
        # Resumed on version 2: the interrupt answered, summarize's turn went
        # to finish, draft's output kept, the renamed key read by v2's nodes.
        assert out == {"subject": "cats", "log": ["draft:cats", "ask2:yes", "finish:cats"], "answer": "yes"}
        latest = new.get_tuple(cfg("t"))
        assert latest is not None and latest.metadata[STATE_VERSION_KEY] == 2
        migrated = [t for t in new.list(cfg("t")) if MIGRATED_FROM_KEY in t.metadata]
        assert len(migrated) == 1
        m = migrated[0]
        assert m.metadata[MIGRATED_FROM_KEY] == {"checkpoint_id": source.checkpoint["id"], STATE_VERSION_KEY: 1}
        assert m.parent_config == source.parent_config  # beside the old one, not after it
        assert "topic" not in m.checkpoint["channel_values"] and m.checkpoint["channel_values"]["subject"] == "cats"
        # The old one is still there, pinned, and everything it was is intact.
        assert set(before) <= set(_checkpoints(new, "t"))
        assert [p.checkpoint_id for p in new.pins("t")] == [source.checkpoint["id"]]
        # The old replica neither runs nor writes the thread now.
        g1 = graph_v1().compile(checkpointer=old)
        with pytest.raises(NewerStateVersion) as refused:
            g1.invoke(Command(resume="no"), cfg("t"))
        assert (refused.value.version, refused.value.running, refused.value.thread_id) == (2, 1, "t")
        with pytest.raises(NewerStateVersion):
            g1.update_state(cfg("t"), {"topic": "dogs"})
        assert old.get_tuple(cfg("t")).checkpoint["id"] == latest.checkpoint["id"]  # type: ignore[union-attr]
        # Reads still work where the values decode.
        assert g1.get_state(cfg("t")).values["log"] == ["draft:cats", "ask2:yes", "finish:cats"]


def _replica(version: int, action: str, thread: str, env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "tests.versioned_app", str(version), action, thread],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("tiers", CONFIGS)
def test_two_processes_of_two_versions_through_a_rolling_update(
    tmp_path: Path, tiers: str, request: pytest.FixtureRequest
) -> None:
    parts = tiers.split("+")
    env = {**os.environ, "LANGGRAPH_DURABLE_SQLITE": str(tmp_path / "replica.sqlite") if "sqlite" in parts else ""}
    for name in ("LANGGRAPH_DURABLE_REDIS_URL", "LANGGRAPH_DURABLE_POSTGRES_URL"):
        env.pop(name, None)
    if "redis" in parts:
        env["LANGGRAPH_DURABLE_REDIS_URL"] = REDIS_URL
        env["LANGGRAPH_DURABLE_REDIS_KEY_PREFIX"] = request.getfixturevalue("redis_prefix")
    if "postgres" in parts:
        env["LANGGRAPH_DURABLE_POSTGRES_URL"] = request.getfixturevalue("postgres_url")
    # Old replicas start two threads; one of them is still waiting when the
    # new version comes up.
    assert _replica(1, "start", "a", env) == {"log": ["draft:cats"], "waiting": True, "state_version": 1, "pins": 0}
    assert _replica(1, "start", "b", env)["waiting"]
    # The new replica resumes "a": migrated, run on version 2.
    assert _replica(2, "resume", "a", env) == {
        "log": ["draft:cats", "ask2:yes", "finish:cats"],
        "waiting": False,
        "state_version": 2,
        "pins": 1,
    }
    # An old replica still in service refuses "a" but still runs "b".
    assert _replica(1, "resume", "a", env) == {"refused": True, "version": 2, "running": 1}
    assert _replica(1, "resume", "b", env)["log"] == ["draft:cats", "ask1:yes", "summarize:cats"]


# -- what a migration carries ----------------------------------------------------------


class Order(BaseModel):
    customer: str
    count: str  # version 1: a string
    done: list[str] = []


class OrderV2(BaseModel):
    customer: str
    quantity: int  # version 2: renamed and an int
    done: list[str] = []


def _order_graph(schema: type[BaseModel], key: str) -> StateGraph:
    g = StateGraph(schema)
    g.add_node("take", lambda s: {"done": [*s.done, f"take:{getattr(s, key)!r}"]})
    g.add_node("ship", lambda s: {"done": [*s.done, f"ship:{getattr(s, key)!r}"]})
    g.add_edge(START, "take")
    g.add_edge("take", "ship")
    g.add_edge("ship", END)
    return g


@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_pydantic_field_renamed_and_retyped(make_saver: SaverFactory, tiers: str) -> None:
    m2 = Migrations(version=2)

    @m2.step(from_version=1)
    def quantity(step: Migration) -> None:
        step.rename("count", "quantity")
        step.convert("quantity", int)

    with make_saver(tiers, migrations=Migrations(version=1)) as v1:
        g1 = _order_graph(Order, "count").compile(checkpointer=v1, interrupt_before=["ship"])
        g1.invoke(Order(customer="ann", count="3"), cfg("o"))
    with make_saver(tiers, migrations=m2) as v2:
        g2 = _order_graph(OrderV2, "quantity").compile(checkpointer=v2, interrupt_before=["ship"])
        out = g2.invoke(None, cfg("o"))
        assert out == {"customer": "ann", "quantity": 3, "done": ["take:'3'", "ship:3"]}
        assert isinstance(g2.get_state(cfg("o")).values["quantity"], int)


class _Three(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _three(nodes: list[str]) -> StateGraph:
    g = StateGraph(_Three)
    for n in nodes:
        g.add_node(n, lambda s, n=n: {"log": [n]})
    g.add_edge(START, nodes[0])
    for a, b in itertools.pairwise(nodes):
        g.add_edge(a, b)
    g.add_edge(nodes[-1], END)
    return g


@pytest.mark.parametrize("reroute", [None, "report"])
@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_node_removed_while_its_turn_is_pending(make_saver: SaverFactory, tiers: str, reroute: str | None) -> None:
    m2 = Migrations(version=2)

    @m2.step(from_version=1)
    def no_summary(step: Migration) -> None:
        assert "summarize" in step.nodes
        step.remove_node("summarize", reroute_to=reroute)

    with make_saver(tiers, migrations=Migrations(version=1)) as v1:
        g1 = _three(["fetch", "summarize"]).compile(checkpointer=v1, interrupt_before=["summarize"])
        g1.invoke({"log": []}, cfg("n"))
        assert g1.get_state(cfg("n")).next == ("summarize",)
    with make_saver(tiers, migrations=m2) as v2:
        g2 = _three(["fetch", "report"]).compile(checkpointer=v2)
        out = g2.invoke(None, cfg("n"))
        assert out["log"] == (["fetch", "report"] if reroute else ["fetch"])
        assert g2.get_state(cfg("n")).next == ()


class _Fan(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    topic: str


def _fan(ask_key: str) -> StateGraph:
    """Two branches in one step: `quick` finishes, `ask` waits at an interrupt."""
    g = StateGraph(_Fan if ask_key == "topic" else _FanV2)
    ran: list[str] = []

    def quick(s: dict[str, Any]) -> dict[str, Any]:
        ran.append("quick")
        return {"log": [f"quick:{s.get(ask_key)}"]}

    def ask(s: dict[str, Any]) -> dict[str, Any]:
        return {"log": [f"ask:{s.get(ask_key)}:{interrupt('go?')}"]}

    g.add_node("quick", quick)
    g.add_node("ask", ask)
    g.add_edge(START, "quick")
    g.add_edge(START, "ask")
    g.add_edge("quick", END)
    g.add_edge("ask", END)
    g.ran = ran  # type: ignore[attr-defined]
    return g


class _FanV2(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    subject: str


@pytest.mark.parametrize("tiers", CONFIGS)
def test_an_interrupt_resumed_across_versions_keeps_its_finished_sibling(make_saver: SaverFactory, tiers: str) -> None:
    m2 = Migrations(version=2)

    @m2.step(from_version=1)
    def subject(step: Migration) -> None:
        step.rename("topic", "subject")
        (waiting,) = step.interrupts
        assert waiting.node == "ask" and waiting.value == "go?"
        waiting.value = "go, on version 2?"

    with make_saver(tiers, migrations=Migrations(version=1)) as v1:
        g1 = _fan("topic")
        out = g1.compile(checkpointer=v1).invoke({"topic": "cats"}, cfg("f"))
        assert out["__interrupt__"][0].value == "go?" and g1.ran == ["quick"]  # type: ignore[attr-defined]
    with make_saver(tiers, migrations=m2) as v2:
        g2 = _fan("subject")
        graph = g2.compile(checkpointer=v2)
        out = graph.invoke(Command(resume="yes"), cfg("f"))
        # quick's write was carried to its task on the migrated checkpoint:
        # it did not run again, and its output is there once.
        assert g2.ran == []  # type: ignore[attr-defined]
        assert sorted(out["log"]) == ["ask:cats:yes", "quick:cats"]


@pytest.mark.parametrize("tiers", CONFIGS)
def test_an_interrupt_waiting_after_a_migration_shows_its_new_id_and_value(
    make_saver: SaverFactory, tiers: str
) -> None:
    m2 = v2_migrations()
    m2.steps[1] = _and_reword(m2.steps[1])
    with make_saver(tiers, migrations=Migrations(version=1)) as v1:
        _start_waiting(v1, "w")
    with make_saver(tiers, migrations=m2) as v2:
        # A replica of version 2 migrates it (here by hand, as `migrate` does).
        report = v2.migrate()
        assert [(t.thread_id, t.outcome) for t in report.threads] == [("w", "migrated")]
        graph = graph_v2().compile(checkpointer=v2)
        (waiting,) = graph.get_state(cfg("w")).interrupts
        assert waiting.value == {"question": "PUBLISH 'CATS'?"}
        # Answered by the id `get_state` shows now.
        out = graph.invoke(Command(resume={waiting.id: "yes"}), cfg("w"))
        assert out["log"] == ["draft:cats", "ask2:yes", "finish:cats"]


def _and_reword(step: Any) -> Any:
    def reworded(m: Migration) -> None:
        step(m)
        for waiting in m.interrupts:
            waiting.value = {"question": waiting.value["question"].upper()}

    return reworded


# -- failures, races, rollbacks ---------------------------------------------------------


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_migration_that_raises_writes_nothing(make_saver: SaverFactory, tiers: str, face: str) -> None:
    broken = Migrations(version=2)

    @broken.step(from_version=1)
    def needs_a_lookup(step: Migration) -> None:
        step.rename("topic", "subject")
        raise LookupError("catalogue unreachable")

    with make_saver(tiers, migrations=v1_migrations()) as v1:
        _start_waiting(v1, "x")
        before = _checkpoints(v1, "x")
    with make_saver(tiers, migrations=broken) as v2:
        graph = graph_v2().compile(checkpointer=v2)
        with pytest.raises(MigrationFailed) as failed:
            asyncio.run(_resume(graph, face, Command(resume="yes"), cfg("x")))
        assert failed.value.thread_id == "x" and failed.value.step == "needs_a_lookup"
        assert failed.value.from_version == 1 and isinstance(failed.value.__cause__, LookupError)
        assert "needs_a_lookup" in str(failed.value) and "catalogue unreachable" in str(failed.value)
        assert _checkpoints(v2, "x") == before and v2.pins("x") == []
        # A missing step is as clear, and writes nothing either.
        with make_saver(tiers, migrations=Migrations(version=3, steps={2: lambda m: None})) as v3:
            with pytest.raises(MigrationFailed, match=r"no migration step is registered from version 1"):
                graph_v2().compile(checkpointer=v3).invoke(Command(resume="yes"), cfg("x"))
    # The thread is as it was: version 1 still runs it.
    with make_saver(tiers, migrations=v1_migrations()) as v1:
        out = graph_v1().compile(checkpointer=v1).invoke(Command(resume="yes"), cfg("x"))
        assert out["log"] == ["draft:cats", "ask1:yes", "summarize:cats"]


@pytest.mark.parametrize("tiers", CONFIGS)
def test_two_replicas_racing_to_migrate_one_thread_migrate_it_once(make_saver: SaverFactory, tiers: str) -> None:
    shared = tiers != "sqlite"
    with make_saver(tiers, migrations=v1_migrations()) as v1:
        for t in ("r0", "r1", "r2"):
            _start_waiting(v1, t)
    waiting = Leases(on_busy="wait", wait=60.0)
    a = make_saver(
        tiers, migrations=v2_migrations(), leases=waiting, sqlite_name="a.sqlite" if shared else "local.sqlite"
    )
    b = make_saver(
        tiers, migrations=v2_migrations(), leases=waiting, sqlite_name="b.sqlite" if shared else "local.sqlite"
    )
    results: dict[tuple[str, str], Any] = {}
    with a, b:
        go = threading.Barrier(2)

        def replica(name: str, saver: DurableSaver) -> None:
            graph = graph_v2().compile(checkpointer=saver)
            for t in ("r0", "r1", "r2"):
                go.wait()
                try:
                    results[(name, t)] = graph.invoke(Command(resume=name), cfg(t))
                except Exception as exc:
                    results[(name, t)] = exc

        runners = [threading.Thread(target=replica, args=(n, s)) for n, s in (("a", a), ("b", b))]
        for r in runners:
            r.start()
        for r in runners:
            r.join(120)
        for t in ("r0", "r1", "r2"):
            migrated = [c for c in a.list(cfg(t)) if MIGRATED_FROM_KEY in c.metadata]
            assert len(migrated) == 1, (t, results)
            assert len(a.pins(t)) == 1
            # Both runs went ahead on version 2, one after the other.
            outs = [results[(n, t)] for n in ("a", "b")]
            assert all(isinstance(o, dict) for o in outs), outs
            assert a.get_tuple(cfg(t)).metadata[STATE_VERSION_KEY] == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_rollback_resumes_from_the_pinned_checkpoint(make_saver: SaverFactory, tiers: str) -> None:
    with make_saver(tiers, migrations=v1_migrations()) as v1:
        _start_waiting(v1, "rb")
    with make_saver(tiers, migrations=v2_migrations()) as v2:
        assert v2.migrate().count("migrated") == 1
        (pin,) = v2.pins("rb")
    # The deploy is rolled back: version 1 resumes from the pinned checkpoint
    # it wrote (time travel), and the thread is version 1's again.
    with make_saver(tiers, migrations=v1_migrations()) as v1:
        g1 = graph_v1().compile(checkpointer=v1)
        with pytest.raises(NewerStateVersion):
            g1.invoke(Command(resume="yes"), cfg("rb"))
        out = g1.invoke(Command(resume="back"), pin.config)
        assert out["log"] == ["draft:cats", "ask1:back", "summarize:cats"]
        assert v1.get_tuple(cfg("rb")).metadata[STATE_VERSION_KEY] == 1  # type: ignore[union-attr]
    # Rolled forward again, the thread migrates from its newest checkpoint.
    with make_saver(tiers, migrations=v2_migrations()) as v2:
        report = v2.migrate(dry_run=True)
        assert [(t.outcome, t.from_version) for t in report.threads] == [("would migrate", 1)]


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
def test_on_newer_wait_waits_for_the_thread_to_be_taken_or_come_back(make_saver: SaverFactory, tiers: str) -> None:
    with make_saver(tiers, migrations=v1_migrations()) as v1:
        _start_waiting(v1, "wt")
    with make_saver(tiers, migrations=v2_migrations()) as v2:
        v2.migrate()
    # Nobody takes it: the wait ends, then the error.
    patient = v1_migrations(on_newer="wait", newer_wait=1.0)
    with make_saver(tiers, migrations=patient) as v1:
        started = time.monotonic()
        with pytest.raises(NewerStateVersion) as refused:
            graph_v1().compile(checkpointer=v1).invoke(Command(resume="no"), cfg("wt"))
        assert time.monotonic() - started >= 1.0 and not refused.value.taken
    # A replica of version 2 takes it while version 1 waits: `taken`.
    patient = v1_migrations(on_newer="wait", newer_wait=30.0)
    with make_saver(tiers, migrations=patient) as v1, make_saver(tiers, migrations=v2_migrations()) as v2:
        caught: list[BaseException] = []

        def old_replica() -> None:
            try:
                graph_v1().compile(checkpointer=v1).invoke(Command(resume="no"), cfg("wt"))
            except BaseException as exc:
                caught.append(exc)

        waiter = threading.Thread(target=old_replica)
        waiter.start()
        time.sleep(0.3)
        graph_v2().compile(checkpointer=v2).invoke(Command(resume="yes"), cfg("wt"))
        waiter.join(30)
        assert len(caught) == 1 and isinstance(caught[0], NewerStateVersion) and caught[0].taken


# -- everywhere a thread can be ---------------------------------------------------------


@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_migrated_archived_thread(make_saver: SaverFactory, archive_url: str, tiers: str) -> None:
    with make_saver(tiers, migrations=v1_migrations(), archive=archive_url) as v1:
        _start_waiting(v1, "arc")
        assert v1.archive_idle(0.0).archived == ["arc"]
    with make_saver(tiers, migrations=v2_migrations(), archive=archive_url) as v2:
        assert [t.outcome for t in v2.migrate().threads] == ["archived"]
        out = graph_v2().compile(checkpointer=v2).invoke(Command(resume="yes"), cfg("arc"))
        assert out["log"] == ["draft:cats", "ask2:yes", "finish:cats"]
        assert len(v2.pins("arc")) == 1
        assert v2.get_tuple(cfg("arc")).metadata[STATE_VERSION_KEY] == 2  # type: ignore[union-attr]


@pytest.mark.parametrize("tiers", CONFIGS)
def test_an_imported_thread_with_no_version_starts_at_the_declared_one(make_saver: SaverFactory, tiers: str) -> None:
    stock = InMemorySaver()
    graph_v1().compile(checkpointer=stock).invoke({"topic": "cats"}, cfg("imp"))
    with make_saver(tiers, migrations=v2_migrations()) as v2:
        v2.import_from(stock)
        assert STATE_VERSION_KEY not in v2.get_tuple(cfg("imp")).metadata  # type: ignore[union-attr]
        report = v2.migrate(dry_run=True)
        assert [(t.outcome, t.from_version) for t in report.threads] == [("would migrate", 1)]
        out = graph_v2().compile(checkpointer=v2).invoke(Command(resume="yes"), cfg("imp"))
        assert out["log"] == ["draft:cats", "ask2:yes", "finish:cats"]
    # Declared as version 2 already: nothing to migrate, and v1 refuses nothing
    # unstamped either (an old replica reads it as its own unversioned).
    with make_saver(tiers, migrations=Migrations(version=2, unversioned=2)) as v2:
        assert v2.migrate(["imp"]).count("current") == 1


class _DeltaV2(TypedDict, total=False):
    pass


@pytest.mark.parametrize("tiers", ["sqlite", "redis", "sqlite+redis+postgres"])
def test_a_delta_channel_thread_migrates_its_other_keys(make_saver: SaverFactory, tiers: str) -> None:
    m2 = Migrations(version=2)

    @m2.step(from_version=1)
    def limit_as_int(step: Migration) -> None:
        assert set(DELTA_CHANNELS) <= step.history_keys
        with pytest.raises(ValueError, match="DeltaChannel"):
            step.rename("items", "entries")
        step.convert("limit", lambda v: v + 5)

    with make_saver(tiers, migrations=Migrations(version=1)) as v1:
        graph = delta_graph().compile(checkpointer=v1)
        graph.invoke(RUNS[0], cfg("d"))
        before = graph.get_state(cfg("d")).values
    with make_saver(tiers, migrations=m2) as v2:
        graph = delta_graph().compile(checkpointer=v2)
        out = graph.invoke({}, cfg("d"))  # a new run: migrated first, then on to the new limit
        assert out["limit"] == before["limit"] + 5 and out["n"] == before["limit"] + 5
        assert out["items"] == before["items"] + [f"item {n}" for n in range(before["n"], out["n"])]
        assert graph.get_state(cfg("d")).values["items"] == out["items"]


class _Inner(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


class _Outer(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    topic: str


class _OuterV2(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    subject: str


def _with_subgraph(key: str) -> StateGraph:
    inner = StateGraph(_Inner)
    inner.add_node("inner", lambda s: {"log": ["inner"]})
    inner.add_edge(START, "inner")
    inner.add_edge("inner", END)
    g = StateGraph(_Outer if key == "topic" else _OuterV2)
    g.add_node("prepare", lambda s: {"log": [f"prepare:{s.get(key)}"]})
    g.add_node("sub", inner.compile())
    g.add_edge(START, "prepare")
    g.add_edge("prepare", "sub")
    g.add_edge("sub", END)
    return g


@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_thread_with_a_subgraph_migrates_and_runs_it(make_saver: SaverFactory, tiers: str) -> None:
    m2 = Migrations(version=2, steps={1: lambda step: step.rename("topic", "subject")})
    with make_saver(tiers, migrations=Migrations(version=1)) as v1:
        g1 = _with_subgraph("topic").compile(checkpointer=v1, interrupt_before=["sub"])
        g1.invoke({"topic": "cats"}, cfg("s"))
    with make_saver(tiers, migrations=m2) as v2:
        g2 = _with_subgraph("subject").compile(checkpointer=v2)
        out = g2.invoke(None, cfg("s"))
        # As the same run does on version 2 alone, with the stock saver.
        stock = _with_subgraph("subject").compile(checkpointer=InMemorySaver(), interrupt_before=["sub"])
        stock.invoke({"subject": "cats"}, cfg("s"))
        assert out == stock.invoke(None, cfg("s")) and out["log"][-1] == "inner"
        # The subgraph's own checkpoints were written by version 2 too.
        subs = [t for t in v2.list(None) if t.config["configurable"]["checkpoint_ns"]]
        assert subs and all(t.metadata[STATE_VERSION_KEY] == 2 for t in subs)


def _inner_waiting(ran: list[str]) -> Any:
    g = StateGraph(_Inner)

    def first(s: dict[str, Any]) -> dict[str, Any]:
        ran.append("first")
        return {"log": ["first"]}

    g.add_node("first", first)
    g.add_node("asks", lambda s: {"log": [f"asked:{interrupt('ok?')}"]})
    g.add_edge(START, "first")
    g.add_edge("first", "asks")
    g.add_edge("asks", END)
    return g.compile()


def _waiting_inside(key: str, ran: list[str]) -> StateGraph:
    g = StateGraph(_Outer if key == "topic" else _OuterV2)
    g.add_node("prepare", lambda s: {"log": [f"prepare:{s.get(key)}"]})
    g.add_node("sub", _inner_waiting(ran))
    g.add_edge(START, "prepare")
    g.add_edge("prepare", "sub")
    g.add_edge("sub", END)
    return g


@pytest.mark.parametrize("by_id", [False, True])
@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_subgraph_waiting_at_an_interrupt_resumes_where_it_stopped_after_a_migration(
    make_saver: SaverFactory, tiers: str, by_id: bool
) -> None:
    m2 = Migrations(version=2, steps={1: lambda step: step.rename("topic", "subject")})
    ran: list[str] = []
    with make_saver(tiers, migrations=Migrations(version=1)) as v1:
        out = _waiting_inside("topic", ran).compile(checkpointer=v1).invoke({"topic": "cats"}, cfg("si"))
        assert out["__interrupt__"] and ran == ["first"]
    with make_saver(tiers, migrations=m2) as v2:
        graph = _waiting_inside("subject", ran).compile(checkpointer=v2)
        if by_id:  # migrated first, then answered by the id get_state shows
            assert v2.migrate().count("migrated") == 1
            (waiting,) = graph.get_state(cfg("si"), subgraphs=True).interrupts
            out = graph.invoke(Command(resume={waiting.id: "yes"}), cfg("si"))
        else:
            out = graph.invoke(Command(resume="yes"), cfg("si"))
    # The subgraph went on from its own checkpoint: its first node did not
    # run again, and the run ends as the same graph's does on the stock saver.
    assert ran == ["first"]
    stock = _waiting_inside("subject", []).compile(checkpointer=InMemorySaver())
    stock.invoke({"subject": "cats"}, cfg("si"))
    assert out == stock.invoke(Command(resume="yes"), cfg("si"))


@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "sqlite+postgres"])
def test_a_replica_whose_lease_ran_out_during_a_slow_step_writes_nothing(make_saver: SaverFactory, tiers: str) -> None:
    entered, b_done = threading.Event(), threading.Event()

    def slow(step: Migration) -> None:
        # Past the lease's TTL: another replica takes the thread over and
        # runs it meanwhile (waited for, not slept on: on a busy machine a
        # sleep may end before the other replica got to it).
        entered.set()
        assert b_done.wait(60)
        v2_migrations().steps[1](step)

    with make_saver(tiers, migrations=v1_migrations(), sqlite_name="old.sqlite") as v1:
        _start_waiting(v1, "slow")
    a_leases = Leases(linger=0, ttl=2.0)
    b_leases = Leases(linger=0, ttl=2.0, on_busy="wait", wait=30)  # until a's lease has run out
    a = make_saver(tiers, migrations=Migrations(version=2, steps={1: slow}), leases=a_leases, sqlite_name="a.sqlite")
    b = make_saver(tiers, migrations=v2_migrations(), leases=b_leases, sqlite_name="b.sqlite")
    with a, b:
        outcome: dict[str, Any] = {}

        def replica(name: str, saver: DurableSaver) -> None:
            try:
                outcome[name] = graph_v2().compile(checkpointer=saver).invoke(Command(resume=name), cfg("slow"))
            except Exception as exc:
                outcome[name] = exc

        first = threading.Thread(target=replica, args=("a", a))
        first.start()
        try:
            assert entered.wait(30)
            replica("b", b)
        finally:
            b_done.set()
        first.join(60)
        assert outcome["b"]["log"] == ["draft:cats", "ask2:b", "finish:cats"]
        assert type(outcome["a"]).__name__ == "LeaseLost", outcome["a"]
        # b's run is the thread's latest state; a's migration reached no tier.
        assert graph_v2().compile(checkpointer=b).get_state(cfg("slow")).values["answer"] == "b"
        assert len([c for c in b.list(cfg("slow")) if MIGRATED_FROM_KEY in c.metadata]) == 1


class _Join(TypedDict, total=False):
    log: Annotated[list[str], operator.add]


def _join(second: str) -> StateGraph:
    """`a` (which asks) and `second` both lead to `j`, which waits for both."""
    g = StateGraph(_Join)
    g.add_node("a", lambda s: {"log": [f"a:{interrupt('go?')}"]})
    g.add_node(second, lambda s: {"log": [second]})
    g.add_node("j", lambda s: {"log": ["j"]})
    g.add_edge(START, "a")
    g.add_edge(START, second)
    g.add_edge(["a", second], "j")
    g.add_edge("j", END)
    return g


@pytest.mark.parametrize("tiers", CONFIGS)
def test_a_node_a_join_waits_for_renamed_while_the_join_waits(make_saver: SaverFactory, tiers: str) -> None:
    m2 = Migrations(version=2)

    @m2.step(from_version=1)
    def b_is_b2(step: Migration) -> None:
        with pytest.raises(ValueError, match="a join edge waits for it"):
            step.remove_node("b")
        with pytest.raises(ValueError, match="LangGraph's own"):
            step.rename("log", "branch:to:j")
        step.rename_node("b", "b2")

    with make_saver(tiers, migrations=Migrations(version=1)) as v1:
        assert _join("b").compile(checkpointer=v1).invoke({"log": []}, cfg("j"))["__interrupt__"]
    with make_saver(tiers, migrations=m2) as v2:
        out = _join("b2").compile(checkpointer=v2).invoke(Command(resume="yes"), cfg("j"))
        # The join knew b had finished: under its new name, it still does.
        assert sorted(out["log"]) == ["a:yes", "b", "j"]


def test_a_step_setting_langgraph_s_own_channels_fails_and_writes_nothing(make_saver: SaverFactory) -> None:
    def meddles(step: Migration) -> None:
        step.values["__pregel_tasks"] = ["junk"]

    with make_saver("sqlite", migrations=v1_migrations()) as v1:
        _start_waiting(v1, "m")
        before = _checkpoints(v1, "m")
    with make_saver("sqlite", migrations=Migrations(version=2, steps={1: meddles})) as v2:
        with pytest.raises(MigrationFailed, match="LangGraph's own channels"):
            graph_v2().compile(checkpointer=v2).invoke(Command(resume="yes"), cfg("m"))
        assert _checkpoints(v2, "m") == before and v2.pins("m") == []


def test_on_newer_wait_does_not_wait_for_a_checkpoint_named_by_id(make_saver: SaverFactory) -> None:
    with make_saver("sqlite", migrations=v1_migrations()) as v1:
        _start_waiting(v1, "n")
    with make_saver("sqlite", migrations=v2_migrations()) as v2:
        v2.migrate()
        migrated = v2.get_tuple(cfg("n"))
        assert migrated is not None
    with make_saver("sqlite", migrations=v1_migrations(on_newer="wait", newer_wait=30.0)) as v1:
        started = time.monotonic()
        with pytest.raises(NewerStateVersion) as refused:
            graph_v1().compile(checkpointer=v1).invoke(Command(resume="no"), migrated.config)
        assert time.monotonic() - started < 5.0 and not refused.value.taken


# -- composition and configuration -----------------------------------------------------


def test_validators_judge_the_migrated_state_and_a_rewind_is_migrated_too(make_saver: SaverFactory) -> None:
    seen: list[dict[str, Any]] = []

    def records(ctx: Any) -> None:
        seen.append(dict(ctx.values))

    with make_saver("sqlite", migrations=v1_migrations()) as v1:
        _start_waiting(v1, "v")
        first = list(v1.list(cfg("v")))[-1].checkpoint["id"]
    with make_saver("sqlite", migrations=v2_migrations(), validators=[records]) as v2:
        graph_v2().compile(checkpointer=v2).invoke(Command(resume="yes"), cfg("v"))
        assert seen[0]["subject"] == "cats" and "topic" not in seen[0]
    # A validator that rewinds to version 1's first checkpoint resumes from a
    # migrated fork of it.
    with make_saver("sqlite", migrations=v1_migrations()) as v1:
        _start_waiting(v1, "v2")
        first = list(v1.list(cfg("v2")))[-1].checkpoint["id"]

    def back(ctx: Any) -> Any:
        return None if ctx.metadata.get(MIGRATED_FROM_KEY, {}).get("checkpoint_id") == first else rewind("x", to=first)

    with make_saver("sqlite", migrations=v2_migrations(), validators=[back]) as v2:
        out = graph_v2().compile(checkpointer=v2).invoke({"subject": "dogs"}, cfg("v2"))
        head = v2.get_tuple(cfg("v2"))
        assert head.metadata[STATE_VERSION_KEY] == 2  # type: ignore[union-attr]
        assert out["subject"] == "dogs"


def test_the_guard_comes_before_validators_and_migrations(make_saver: SaverFactory) -> None:
    called: list[str] = []
    with make_saver("sqlite", migrations=v2_migrations()) as v2:
        graph_v2().compile(checkpointer=v2).invoke({"subject": "x"}, cfg("g"))
    with make_saver("sqlite", migrations=v1_migrations(), validators=[lambda ctx: called.append("v")]) as v1:
        with pytest.raises(ResumeRejected):  # NewerStateVersion is one
            graph_v1().compile(checkpointer=v1).invoke(None, cfg("g"))
    assert called == []


def test_bad_migrations_are_refused_when_declared() -> None:
    with pytest.raises(ConfigError, match="integer from 1"):
        Migrations(version=0)
    with pytest.raises(ConfigError, match="unversioned"):
        Migrations(version=2, unversioned=3)
    m = Migrations(version=3)
    m.add(1, lambda step: None)
    with pytest.raises(ConfigError, match="two migration steps from version 1"):
        m.add(1, lambda step: None)
    with pytest.raises(ConfigError, match="cannot run on state version 3"):
        m.add(3, lambda step: None)
    with pytest.raises(ConfigError, match="on_newer"):
        Migrations(version=2, on_newer="hope")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="migrations= takes a Migrations"):
        DurableSaver(sqlite=":memory:", migrations={1: lambda step: None})  # type: ignore[arg-type]
    assert m.missing(1) == [2] and m.missing(2) == [2] and Migrations(version=1).missing(1) == []
