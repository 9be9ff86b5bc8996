"""Resume validators and the non-resumable action ledger, on real graphs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, TypedDict

import pytest
from langgraph.graph import END, START, StateGraph

from langgraph_durable import (
    ConfigError,
    ResumeContext,
    ResumeRejected,
    ValidationOutcome,
    action,
    check,
    durable_action,
    max_age,
    paths_exist,
    pin_version,
    reject,
    rewind,
)

from .graphs import LoopState, loop_graph

CFG = {"configurable": {"thread_id": "v"}}


class OrderState(TypedDict, total=False):
    order: int
    receipt: str
    shipped: bool


def _stopping_graph(stop_at: int, total: int = 6) -> tuple[StateGraph, list[int]]:
    """A loop that raises once at `stop_at`, leaving a resumable thread."""
    failures: list[int] = []

    def step(state: LoopState) -> dict[str, Any]:
        n = state["n"]
        if n == stop_at and not failures:
            failures.append(n)
            raise RuntimeError("the container died here")
        return {"messages": [f"step {n + 1}"], "n": n + 1}

    g = StateGraph(LoopState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < total else END)
    return g, failures


# -- when validators run (pins LangGraph's behaviour) -----------------------------------


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
def test_validators_run_once_per_run_and_never_on_inspection(make_saver: Any, tiers: str) -> None:
    seen: list[str] = []

    def record(ctx: ResumeContext) -> None:
        seen.append(ctx.checkpoint_id)

    with make_saver(tiers, validators=[record]) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, CFG)
        assert seen == []  # a new thread has nothing to validate
        graph.invoke({"messages": ["again"], "n": 0}, CFG)
        assert len(seen) == 1
        graph.get_state(CFG)
        list(graph.get_state_history(CFG))
        assert len(seen) == 1  # inspection never validates
        list(graph.stream(None, CFG))
        assert len(seen) == 2
        # Time travel: an explicit checkpoint_id, plus LangGraph's own probe
        # for the latest; validated once, for the checkpoint asked for.
        old = list(graph.get_state_history(CFG))[3]
        graph.invoke(None, old.config)
        assert seen[-1] == old.config["configurable"]["checkpoint_id"] and len(seen) == 3


def test_subgraphs_do_not_validate_again(make_saver: Any) -> None:
    from .graphs import subgraph_graph

    seen: list[str] = []
    with make_saver("sqlite", validators=[lambda ctx: seen.append(ctx.checkpoint_ns)]) as saver:
        graph = subgraph_graph().compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, CFG)
        graph.invoke({"messages": [], "n": 0}, CFG)
        assert seen == [""]


# -- decisions ----------------------------------------------------------------------------


def test_reject_raises_and_writes_nothing(make_saver: Any) -> None:
    outcomes: list[ValidationOutcome] = []
    with make_saver("sqlite+postgres", on_validation=outcomes.append) as saver:
        g, _ = _stopping_graph(3)
        graph = g.compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke({"messages": [], "n": 0}, CFG)
        saver.add_validator(lambda ctx: reject("the branch feature/x was deleted"))
        before = [t.checkpoint["id"] for t in saver.list(CFG)]
        with pytest.raises(ResumeRejected) as info:
            graph.invoke(None, CFG)
        assert info.value.reason == "the branch feature/x was deleted"
        assert info.value.checkpoint.checkpoint["id"] == before[0] == info.value.checkpoint_id
        assert "<lambda>" in str(info.value)
        assert [t.checkpoint["id"] for t in saver.list(CFG)] == before
        assert outcomes[-1].resumed_from is None and outcomes[-1].checkpoint_id == before[0]


async def test_an_async_on_validation_hook_is_awaited_in_the_async_face(
    make_saver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    outcomes: list[ValidationOutcome] = []

    async def record(outcome: ValidationOutcome) -> None:
        await asyncio.sleep(0)
        outcomes.append(outcome)

    async with make_saver("sqlite", on_validation=record) as saver:
        g, _ = _stopping_graph(3)
        graph = g.compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            await graph.ainvoke({"messages": [], "n": 0}, CFG)
        await graph.ainvoke(None, CFG)
        assert [o.resumed_from is not None for o in outcomes] == [True]
        # The sync face cannot wait for it: the run goes on, and the log says why.
        graph = _stopping_graph(3)[0].compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "other"}})
        assert graph.invoke(None, {"configurable": {"thread_id": "other"}})["n"] == 6
        assert len(outcomes) == 1
        assert "use graph.ainvoke" in caplog.text


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_rewind_to_the_newest_passing_checkpoint(make_saver: Any, face: str) -> None:
    """Rewind: the run resumes from the newest checkpoint whose n <= 2 and
    still finishes with the right state, forking the history."""
    async with make_saver(
        "sqlite+redis", validators=[check("n", lambda n: n <= 2, "too far", on_fail="rewind")]
    ) as saver:
        g, _ = _stopping_graph(4)
        graph = g.compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke({"messages": [], "n": 0}, CFG)
        result = graph.invoke(None, CFG) if face == "sync" else await graph.ainvoke(None, CFG)
        assert result["n"] == 6 and result["messages"] == [f"step {i}" for i in range(1, 7)]
        history = [(s.metadata["step"], s.values.get("n")) for s in graph.get_state_history(CFG)]
        assert len(history) > 8  # the abandoned branch is still there


def test_rewind_to_a_named_checkpoint_and_version_pinning(make_saver: Any) -> None:
    with make_saver("sqlite", app_version="v1") as v1:
        g, _ = _stopping_graph(4)
        with pytest.raises(RuntimeError):
            g.compile(checkpointer=v1).invoke({"messages": [], "n": 0}, CFG)
        first = list(v1.list(CFG))[-1]
        assert first.metadata["app_version"] == "v1"
    with make_saver("sqlite", app_version="v2", validators=[pin_version("v2")]) as v2:
        graph = _stopping_graph(99)[0].compile(checkpointer=v2)
        with pytest.raises(ResumeRejected, match="written by version 'v1', this is 'v2'"):
            graph.invoke(None, CFG)
    target = first.checkpoint["id"]
    with make_saver(
        "sqlite", validators=[lambda ctx: None if ctx.checkpoint_id == target else rewind("back", to=target)]
    ) as saver:
        graph = _stopping_graph(99)[0].compile(checkpointer=saver)
        result = graph.invoke(None, CFG)
        assert result["n"] == 6


def test_paths_exist_and_max_age(make_saver: Any, tmp_path: Path) -> None:
    workfile = tmp_path / "draft.txt"
    workfile.write_text("draft")

    def step(state: dict[str, Any]) -> dict[str, Any]:
        return {"files": [str(workfile)], "n": state.get("n", 0) + 1}

    g = StateGraph(dict)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    with make_saver("sqlite", validators=[paths_exist("files")]) as saver:
        graph = g.compile(checkpointer=saver)
        graph.invoke({"n": 0}, CFG)
        graph.invoke({"n": 0}, CFG)  # the file is there: resumes
        workfile.unlink()
        with pytest.raises(ResumeRejected, match=r"draft\.txt"):
            graph.invoke({"n": 0}, CFG)
    workfile.write_text("draft")
    with make_saver("sqlite", sqlite_name="age.sqlite", validators=[max_age(0.0)]) as saver:
        graph = g.compile(checkpointer=saver)
        graph.invoke({"n": 0}, CFG)
        with pytest.raises(ResumeRejected, match="over the limit"):
            graph.invoke({"n": 0}, CFG)


async def test_async_validators(make_saver: Any) -> None:
    async def remote_check(ctx: ResumeContext) -> Any:
        await asyncio.sleep(0)
        return reject("remote says no") if ctx.values.get("n", 0) >= 3 else None

    async with make_saver("sqlite", validators=[remote_check]) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        await graph.ainvoke({"messages": [], "n": 0}, CFG)
        with pytest.raises(ResumeRejected, match="remote says no"):
            await graph.ainvoke({"messages": [], "n": 0}, CFG)
        with pytest.raises(ConfigError, match="async validator"):
            graph.invoke({"messages": [], "n": 0}, CFG)


# -- the action ledger ----------------------------------------------------------------------


@pytest.mark.parametrize("tiers", ["sqlite", "sqlite+redis+postgres"])
def test_a_confirmed_action_is_not_run_again(make_saver: Any, tiers: str) -> None:
    sent: list[str] = []
    calls = {"after": 0}

    @durable_action("charge:order-1")
    def charge() -> str:
        sent.append("charge")
        return "receipt-1"

    def pay(state: dict[str, Any]) -> dict[str, Any]:
        return {"receipt": charge()}

    def ship(state: dict[str, Any]) -> dict[str, Any]:
        calls["after"] += 1
        if calls["after"] == 1:
            raise RuntimeError("crash after paying")
        return {"shipped": True}

    g = StateGraph(OrderState)
    g.add_node("pay", pay)
    g.add_node("ship", ship)
    g.add_edge(START, "pay")
    g.add_edge("pay", "ship")
    g.add_edge("ship", END)
    with make_saver(tiers) as saver:
        graph = g.compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke({"order": 1}, CFG)
        # Replay from before "pay" (time travel): pay runs again, charge does not.
        first = list(graph.get_state_history(CFG))[-2]
        result = graph.invoke(None, first.config)
        assert sent == ["charge"]
        assert result["receipt"] == "receipt-1" and result["shipped"] is True
        assert saver.actions("v")["charge:order-1"].state == "done"


@pytest.mark.parametrize("answer", ["done", "not_done"])
def test_an_unconfirmed_action_is_escalated_until_an_operator_answers(make_saver: Any, answer: str) -> None:
    sent: list[str] = []
    die = [True]

    @durable_action(lambda to: f"email:{to}")
    def send_email(to: str) -> str:
        sent.append(to)
        if die[0]:
            die[0] = False
            raise RuntimeError("process died between sending and confirming")
        return f"id-{len(sent)}"

    g = StateGraph(dict)
    g.add_node("notify", lambda s: {"receipt": send_email("ada@example.com")})
    g.add_edge(START, "notify")
    g.add_edge("notify", END)
    with make_saver("sqlite+postgres") as saver:
        graph = g.compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke({"x": 1}, CFG)
        assert saver.actions("v")["email:ada@example.com"].state == "intent"
        with pytest.raises(ResumeRejected) as info:
            graph.invoke(None, CFG)
        assert info.value.actions == ["email:ada@example.com"] and "resolve_action" in str(info.value)
        assert sent == ["ada@example.com"]  # not repeated
        if answer == "done":
            saver.resolve_action("v", "email:ada@example.com", done=True, result="id-from-operator")
            assert graph.invoke(None, CFG)["receipt"] == "id-from-operator"
            assert sent == ["ada@example.com"]
        else:
            saver.resolve_action("v", "email:ada@example.com", done=False)
            assert graph.invoke(None, CFG)["receipt"] == "id-2"
            assert sent == ["ada@example.com", "ada@example.com"]
        assert saver.actions("v")["email:ada@example.com"].state == "done"


def test_an_idempotent_action_is_retried_without_escalation(make_saver: Any) -> None:
    runs: list[int] = []

    def touch(state: dict[str, Any]) -> dict[str, Any]:
        with action("refresh-cache", idempotent=True) as act:
            if not act.done:
                runs.append(1)
                if len(runs) == 1:
                    raise RuntimeError("died")
                act.result = "fresh"
        return {"cache": act.result}

    g = StateGraph(dict)
    g.add_node("touch", touch)
    g.add_edge(START, "touch")
    g.add_edge("touch", END)
    with make_saver("sqlite") as saver:
        graph = g.compile(checkpointer=saver)
        with pytest.raises(RuntimeError):
            graph.invoke({"x": 1}, CFG)
        assert graph.invoke(None, CFG)["cache"] == "fresh" and len(runs) == 2


async def test_async_actions(make_saver: Any) -> None:
    sent: list[str] = []

    @durable_action("sms:1")
    async def send_sms() -> str:
        sent.append("sms")
        return "ok"

    async def node(state: dict[str, Any]) -> dict[str, Any]:
        first = await send_sms()
        async with action("sms:1") as again:  # same key: already done
            assert again.done
        return {"sms": first, "again": again.result}

    g = StateGraph(dict)
    g.add_node("node", node)
    g.add_edge(START, "node")
    g.add_edge("node", END)
    async with make_saver("sqlite+redis") as saver:
        result = await g.compile(checkpointer=saver).ainvoke({"x": 1}, CFG)
        assert result["sms"] == result["again"] == "ok" and sent == ["sms"]
        assert (await saver.aactions("v"))["sms:1"].result == "ok"


def test_action_outside_a_durable_graph_says_what_to_do() -> None:
    with pytest.raises(ConfigError, match="inside a LangGraph node"), action("x"):
        pass


def test_actions_cli(make_saver: Any) -> None:
    with make_saver("sqlite") as saver:
        from langgraph_durable.ledger import LedgerEntry

        saver.record_action("t", LedgerEntry("email:1", "intent"))
        path = saver.sqlite_path
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "langgraph_durable", *args, "--sqlite", path],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )

    listed = cli("actions", "--thread", "t")
    assert listed.returncode == 0 and "email:1" in listed.stdout and "ESCALATED" in listed.stdout
    resolved = cli("resolve-action", "--thread", "t", "--key", "email:1", "--done")
    assert resolved.returncode == 0, resolved.stderr
    with make_saver("sqlite") as saver:
        entry = saver.actions("t")["email:1"]
        assert entry.state == "done" and entry.resolved_by == "operator"
