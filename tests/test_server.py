"""LangGraph's own server (`langgraph dev`, the in-memory Agent Server) with
``langgraph_durable.server.checkpointer`` as its checkpointer, end to end.

A real ``langgraph dev`` process serves two graphs from a temporary project;
runs go through ``langgraph_sdk``. The checkpoints it writes are then read
straight from each tier (SQLite file, Redis, Postgres) by savers of our own.
The server is stopped with SIGTERM and started again on the same project: the
in-memory runtime keeps its threads and runs in ``.langgraph_api/`` (pickled
on shutdown), our tiers keep the checkpoints, and the interrupted thread is
resumed with ``Command(resume=...)``.

The server takes its tiers from the environment (`DurableSaver.from_env`),
its Redis keys under the test's own prefix (``LANGGRAPH_DURABLE_REDIS_KEY_PREFIX``),
deleted afterwards by the `redis_prefix` fixture.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest
from langgraph_sdk import get_client
from langgraph_sdk.schema import Command, ThreadState

from langgraph_durable import ConfigError, DurableSaver, Tiers, TierUnavailable
from langgraph_durable.server import checkpointer

from .conftest import REDIS_URL
from .servers import free_port

pytestmark = [pytest.mark.redis, pytest.mark.postgres]

START_TIMEOUT_S = 45.0
STOP_TIMEOUT_S = 25.0

GRAPHS = """
import operator
from typing import Annotated, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class Items(TypedDict):
    items: Annotated[list[str], operator.add]


def ask(state: Items) -> dict:
    if "ask" in state["items"]:
        answer = interrupt("approve?")
        return {"items": [f"answer:{answer}"]}
    return {"items": ["no-ask"]}


def done(state: Items) -> dict:
    return {"items": ["done"]}


builder = StateGraph(Items)
builder.add_node("ask", ask)
builder.add_node("done", done)
builder.add_edge(START, "ask")
builder.add_edge("ask", "done")
builder.add_edge("done", END)
interrupting = builder.compile()


class Count(TypedDict):
    n: int


def inc(state: Count) -> dict:
    return {"n": state["n"] + 1}


counting = StateGraph(Count)
counting.add_node("inc", inc)
counting.add_edge(START, "inc")
counting.add_edge("inc", END)
counter = counting.compile()
"""


class DevServer:
    """``langgraph dev`` on a free loopback port, in `project`, logging to a file."""

    def __init__(self, project: Path, log: Path) -> None:
        self.project = project
        self.log = log
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LANGGRAPH_DURABLE_", "LANGSMITH_", "LANGCHAIN_", "LANGGRAPH_CLOUD_"))
        }
        # Nothing that talks to the internet: analytics, version check, tracing.
        env.update(
            LANGGRAPH_CLI_NO_ANALYTICS="1",
            LANGGRAPH_NO_VERSION_CHECK="true",
            LANGSMITH_TRACING="false",
            LANGCHAIN_TRACING_V2="false",
            PYTHONUNBUFFERED="1",
        )
        return env

    def start(self) -> None:
        langgraph = Path(sys.executable).with_name("langgraph")
        with self.log.open("ab") as out:
            out.write(f"\n---- langgraph dev on port {self.port} ----\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [str(langgraph), "dev", "--no-browser", "--no-reload", "--host", "127.0.0.1",
                 "--port", str(self.port), "--config", str(self.project / "langgraph.json")],
                cwd=self.project,
                env=self.env(),
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"langgraph dev exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/ok", timeout=1) as resp:
                    if resp.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise AssertionError(f"langgraph dev did not answer /ok within {START_TIMEOUT_S} s:\n{self.tail()}")

    def stop(self) -> None:
        """SIGTERM and wait for a clean exit (uvicorn shuts down, then dies of
        the signal it re-raises); SIGKILL the whole group if it hangs."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is not None:
            raise AssertionError(f"langgraph dev had exited with {proc.returncode}:\n{self.tail()}")
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise AssertionError(f"langgraph dev ignored SIGTERM for {STOP_TIMEOUT_S} s:\n{self.tail()}") from None
        assert proc.returncode in (0, -signal.SIGTERM), f"exit code {proc.returncode}:\n{self.tail()}"

    def ensure_stopped(self) -> None:
        """For `finally`: whatever happened, no server is left running."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()

    def tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


@contextlib.asynccontextmanager
async def tier_savers(sqlite: str, redis_prefix: str, postgres: str) -> AsyncIterator[dict[str, DurableSaver]]:
    """One saver per tier, each reading that tier alone (Redis given the
    store's own key, which Postgres keeps)."""
    far = DurableSaver(sqlite=None, postgres=postgres)
    await far.asetup()
    savers = {
        "sqlite": DurableSaver(sqlite=sqlite),
        "redis": DurableSaver(
            sqlite=None, redis=REDIS_URL, signing_key=far._codec.key, tiers=Tiers(redis_key_prefix=redis_prefix)
        ),
        "postgres": far,
    }
    try:
        yield savers
    finally:
        for saver in savers.values():
            await saver.aclose()


async def stored(saver: DurableSaver, thread_id: str) -> tuple[Any, list[Any]]:
    """(head tuple, every checkpoint newest first) of `thread_id` as the server keys it."""
    config: Any = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    head = await saver.aget_tuple(config)
    history = [t async for t in saver.alist(config)]
    return head, history


async def check_tiers(
    savers: dict[str, DurableSaver], thread_id: str, state: ThreadState, history: list[ThreadState]
) -> None:
    """Every tier holds what the SDK reports for `thread_id`: its head
    checkpoint (id, parent, values, interrupts) and its whole history."""
    sdk = cast(dict[str, Any], state)
    for name, saver in savers.items():
        # Redis is written behind: it has the run within a replicator pass
        # (or when the run's end is seen), so it is given a few seconds.
        deadline = time.monotonic() + 5
        while True:
            head, listed = await stored(saver, thread_id)
            caught_up = (
                head is not None and head.config["configurable"]["checkpoint_id"] == sdk["checkpoint"]["checkpoint_id"]
            )
            if caught_up and len([w for w in head.pending_writes if w[1] == "__interrupt__"]) == len(sdk["interrupts"]):
                break
            if time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
        assert head is not None, f"{name}: no checkpoint for thread {thread_id}"
        conf = head.config["configurable"]
        assert conf["thread_id"] == thread_id, name
        assert conf["checkpoint_ns"] == "", name
        assert conf["checkpoint_id"] == sdk["checkpoint"]["checkpoint_id"], name
        assert head.parent_config is not None, name
        assert head.parent_config["configurable"]["checkpoint_id"] == sdk["parent_checkpoint"]["checkpoint_id"], name
        values = {k: v for k, v in head.checkpoint["channel_values"].items() if k in sdk["values"]}
        assert values == sdk["values"], name
        interrupts = [w for w in head.pending_writes if w[1] == "__interrupt__"]
        assert len(interrupts) == len(sdk["interrupts"]), (name, head.pending_writes)
        for (_, _, value), reported in zip(interrupts, sdk["interrupts"]):
            assert [i.value for i in value] == [reported["value"]], name
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == [
            cast(dict[str, Any], h)["checkpoint"]["checkpoint_id"] for h in history
        ], name
        assert head.metadata["step"] == sdk["metadata"]["step"], name
        assert head.metadata.get("graph_id") == sdk["metadata"]["graph_id"], name


async def test_langgraph_dev_with_durable_checkpointer(tmp_path: Path, redis_prefix: str, postgres_url: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    (project / "graphs.py").write_text(GRAPHS)
    sqlite = str(tmp_path / "tiers" / "local.sqlite")
    (tmp_path / "tiers").mkdir()
    (project / "langgraph.json").write_text(
        json.dumps(
            {
                "dependencies": ["."],
                "graphs": {"interrupting": "./graphs.py:interrupting", "counter": "./graphs.py:counter"},
                "checkpointer": {"path": "langgraph_durable.server.checkpointer"},
                "env": {
                    "LANGGRAPH_DURABLE_SQLITE": sqlite,
                    "LANGGRAPH_DURABLE_REDIS_URL": REDIS_URL,
                    "LANGGRAPH_DURABLE_REDIS_KEY_PREFIX": redis_prefix,
                    "LANGGRAPH_DURABLE_POSTGRES_URL": postgres_url,
                },
            },
            indent=2,
        )
    )
    log = tmp_path / "server.log"
    server = DevServer(project, log)
    try:
        # -- first server: a finished run and an interrupted one --------------------
        server.start()
        async with get_client(url=server.url) as client:
            counted = await client.threads.create()
            asked = await client.threads.create()

            out = await client.runs.wait(counted["thread_id"], "counter", input={"n": 1})
            assert out == {"n": 2}, server.tail()
            out = await client.runs.wait(asked["thread_id"], "interrupting", input=cast(Any, {"items": ["ask"]}))
            assert isinstance(out, dict) and out["items"] == ["ask"], out
            assert [i["value"] for i in out["__interrupt__"]] == ["approve?"], out

            counted_state = await client.threads.get_state(counted["thread_id"])
            assert counted_state["values"] == {"n": 2} and counted_state["next"] == []
            asked_state = await client.threads.get_state(asked["thread_id"])
            assert asked_state["values"] == {"items": ["ask"]} and asked_state["next"] == ["ask"]
            assert [i["value"] for i in asked_state["interrupts"]] == ["approve?"]
            assert (await client.threads.get(asked["thread_id"]))["status"] == "interrupted"

            async with tier_savers(sqlite, redis_prefix, postgres_url) as savers:
                for tid, state in ((counted["thread_id"], counted_state), (asked["thread_id"], asked_state)):
                    history = await client.threads.get_history(tid, limit=100)
                    await check_tiers(savers, tid, state, history)

        server.stop()
        assert (project / ".langgraph_api" / ".langgraph_ops.pckl").exists()

        # -- second server, same project: the threads are back, the interrupt resumes --
        server.start()
        async with get_client(url=server.url) as client:
            found = {t["thread_id"]: t["status"] for t in await client.threads.search(limit=100)}
            assert found == {counted["thread_id"]: "idle", asked["thread_id"]: "interrupted"}, found
            again = await client.threads.get_state(asked["thread_id"])
            assert again["checkpoint"] == asked_state["checkpoint"]
            assert again["values"] == {"items": ["ask"]} and again["next"] == ["ask"]

            out = await client.runs.wait(asked["thread_id"], "interrupting", command=Command(resume="yes"))
            assert out == {"items": ["ask", "answer:yes", "done"]}, server.tail()
            resumed = await client.threads.get_state(asked["thread_id"])
            assert resumed["values"] == {"items": ["ask", "answer:yes", "done"]}
            assert resumed["next"] == [] and resumed["interrupts"] == []
            assert (await client.threads.get(asked["thread_id"]))["status"] == "idle"
            # the other thread goes on from its stored state
            assert await client.runs.wait(counted["thread_id"], "counter", input=None) == {"n": 2}
            assert await client.runs.wait(counted["thread_id"], "counter", input={"n": 40}) == {"n": 41}

            async with tier_savers(sqlite, redis_prefix, postgres_url) as savers:
                for tid in (counted["thread_id"], asked["thread_id"]):
                    state = await client.threads.get_state(tid)
                    history = await client.threads.get_history(tid, limit=100)
                    await check_tiers(savers, tid, state, history)
                # the resumed run went on from the interrupted checkpoint
                _, listed = await stored(savers["postgres"], asked["thread_id"])
                ids = [t.config["configurable"]["checkpoint_id"] for t in listed]
                assert asked_state["checkpoint"]["checkpoint_id"] in ids[1:]

        server.stop()
        text = log.read_text(errors="replace")
        assert text.count("Using custom checkpointer: DurableSaver") == 2, server.tail()
        assert text.count("serving checkpoints from sqlite -> redis -> postgres") == 2, server.tail()
        assert "BlockingError" not in text, server.tail()
        assert "Traceback" not in text, server.tail()
    finally:
        server.ensure_stopped()


# -- the context manager itself, without a server ------------------------------------


@pytest.fixture
def durable_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No LANGGRAPH_DURABLE_* variable from the outside."""
    for key in list(os.environ):
        if key.startswith("LANGGRAPH_DURABLE_"):
            monkeypatch.delenv(key)
    return monkeypatch


def dead_url(scheme: str) -> str:
    """A URL on a loopback port nothing listens on."""
    return f"{scheme}://127.0.0.1:{free_port()}/0"


async def test_checkpointer_sets_up_yields_and_closes(
    tmp_path: Path, durable_env: pytest.MonkeyPatch, redis_prefix: str, postgres_url: str
) -> None:
    durable_env.setenv("LANGGRAPH_DURABLE_SQLITE", str(tmp_path / "local.sqlite"))
    durable_env.setenv("LANGGRAPH_DURABLE_REDIS_URL", REDIS_URL)
    durable_env.setenv("LANGGRAPH_DURABLE_POSTGRES_URL", postgres_url)
    config: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    async with checkpointer(redis_key_prefix=redis_prefix) as saver:
        assert isinstance(saver, DurableSaver)
        assert saver.tier_names == ["sqlite", "redis", "postgres"]
        assert saver.redis_key_prefix == redis_prefix
        assert (await saver.ahealth()).ok
        assert await saver.aget_tuple(config) is None
    assert saver._runtime._async is None and saver._runtime._sync is None  # closed
    # a second call builds a second saver: the server may call it once per thread
    async with checkpointer(redis_key_prefix=redis_prefix) as other:
        assert other is not saver


async def test_checkpointer_fails_when_no_tier_it_must_write_answers(durable_env: pytest.MonkeyPatch) -> None:
    durable_env.setenv("LANGGRAPH_DURABLE_SQLITE", "")
    durable_env.setenv("LANGGRAPH_DURABLE_POSTGRES_URL", dead_url("postgresql"))
    with pytest.raises(TierUnavailable) as caught:
        async with checkpointer(connect_timeout=2):
            pytest.fail("entered without a reachable tier")
    assert caught.value.tier == "postgres"


async def test_checkpointer_starts_with_one_shared_tier_down(
    tmp_path: Path, durable_env: pytest.MonkeyPatch, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    durable_env.setenv("LANGGRAPH_DURABLE_SQLITE", str(tmp_path / "local.sqlite"))
    durable_env.setenv("LANGGRAPH_DURABLE_REDIS_URL", dead_url("redis"))
    durable_env.setenv("LANGGRAPH_DURABLE_POSTGRES_URL", postgres_url)
    with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
        async with checkpointer(connect_timeout=2) as saver:
            assert saver.tier_names == ["sqlite", "redis", "postgres"]
    assert [r.getMessage().startswith("redis tier is down (") for r in caplog.records].count(True) == 1, caplog.text


async def test_checkpointer_rejects_a_malformed_variable(durable_env: pytest.MonkeyPatch) -> None:
    durable_env.setenv("LANGGRAPH_DURABLE_SQLITE", "")
    durable_env.setenv("LANGGRAPH_DURABLE_REDIS_URL", "127.0.0.1:6379")
    with pytest.raises(ConfigError, match="redis"):
        async with checkpointer():
            pytest.fail("entered with a malformed URL")
