"""Corruption handling end to end: real tiers, real graphs, bytes damaged
directly in the stores (never through the saver)."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
from typing import Any

import psycopg
import pytest
import redis as redis_lib
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph

from langgraph_durable import ConfigError, CorruptCheckpoint, CorruptionEvent, DurableSaver, RecordTooLarge

from .conftest import REDIS_URL
from .faces import FACES, On, run
from .graphs import LoopState

ALL = "sqlite+redis+postgres"


# -- damaging stored bytes directly ------------------------------------------------


def _flip(data: bytes, mask: int = 0x55) -> bytes:
    damaged = bytearray(data)
    damaged[len(damaged) // 2] ^= mask
    return bytes(damaged)


def damage_checkpoint(saver: DurableSaver, thread_id: str, checkpoint_id: str, tiers: set[str]) -> None:
    """Flip a byte in the stored checkpoint record in each named tier, each
    tier differently (identical bad bytes everywhere look like a key mismatch,
    which the saver reads around without quarantining: see test_tamper)."""
    if "sqlite" in tiers:
        with sqlite3.connect(saver.sqlite_path) as conn:
            conn.execute(
                "UPDATE lgd_checkpoints SET record = ? WHERE thread_id = ? AND checkpoint_id = ?",
                (
                    _flip(
                        conn.execute(
                            "SELECT record FROM lgd_checkpoints WHERE thread_id = ? AND checkpoint_id = ?",
                            (thread_id, checkpoint_id),
                        ).fetchone()[0]
                    ),
                    thread_id,
                    checkpoint_id,
                ),
            )
    if "postgres" in tiers:
        with psycopg.connect(saver.postgres_url) as conn:
            conn.execute(
                "UPDATE lgd_checkpoints SET record = set_byte(record, length(record) / 2, "
                "get_byte(record, length(record) / 2) # 51) WHERE thread_id = %s AND checkpoint_id = %s",
                (thread_id, checkpoint_id),
            )
    if "redis" in tiers:
        import ormsgpack

        r = redis_lib.Redis.from_url(REDIS_URL)
        key = f"{saver.redis_key_prefix}:{{{thread_id}}}:cp"
        field = f"\x00{checkpoint_id}"
        parts = ormsgpack.unpackb(r.hget(key, field))
        parts[-1] = _flip(parts[-1], 0x0F)
        r.hset(key, field, ormsgpack.packb(parts))
        r.close()


# -- a real graph resumes from the newest intact checkpoint -------------------------


def _flaky_graph(fail_at: int, failures: list[int]) -> StateGraph:
    def step(state: LoopState) -> dict[str, Any]:
        n = state["n"]
        if n == fail_at and not failures:
            failures.append(n)
            raise RuntimeError("the container died here")
        return {"messages": [f"step {n + 1}"], "n": n + 1}

    g = StateGraph(LoopState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s["n"] < 6 else END)
    return g


@pytest.mark.parametrize("tiers", ["sqlite", ALL])
def test_graph_resumes_from_the_previous_step_when_its_latest_checkpoint_is_corrupt_everywhere(
    make_saver: Any, tiers: str
) -> None:
    expected = [f"step {i}" for i in range(1, 7)]
    events: list[CorruptionEvent] = []
    with make_saver(tiers, on_corruption=events.append) as saver:
        failures: list[int] = []
        graph = _flaky_graph(4, failures).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "flaky"}}
        with pytest.raises(RuntimeError, match="died"):
            graph.invoke({"messages": [], "n": 0}, cfg, durability="sync")
        latest = saver.get_tuple(cfg)
        assert latest.checkpoint["channel_values"]["n"] == 4
        assert saver.drain(10).caught_up  # Redis is written behind: every tier holds it now
        damage_checkpoint(saver, "flaky", latest.checkpoint["id"], set(tiers.split("+")))

        result = graph.invoke(None, cfg, durability="sync")

        assert result["messages"] == expected and result["n"] == 6
        assert {e.tier for e in events} == set(tiers.split("+"))
        assert all(e.kind == "checkpoint" and e.reason.startswith("checksum mismatch") for e in events)
        assert all(e.served_instead.startswith("ancestor checkpoint ") for e in events)
        assert saver.corruptions_detected == len(events)
        assert len(saver.quarantined("flaky")) == len(events)
        ids = [t.checkpoint["id"] for t in saver.list(cfg)]
        assert latest.checkpoint["id"] not in ids  # withdrawn, never served again


async def test_an_async_on_corruption_hook_is_awaited_in_the_async_face(
    make_saver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    events: list[CorruptionEvent] = []

    async def record(event: CorruptionEvent) -> None:
        await asyncio.sleep(0)
        events.append(event)

    async with make_saver("sqlite", on_corruption=record) as saver:
        cfg = {"configurable": {"thread_id": "flaky"}}
        with pytest.raises(RuntimeError, match="died"):
            await _flaky_graph(4, []).compile(checkpointer=saver).ainvoke({"messages": [], "n": 0}, cfg)
        latest = await saver.aget_tuple(cfg)
        damage_checkpoint(saver, "flaky", latest.checkpoint["id"], {"sqlite"})
        older = await saver.aget_tuple(cfg)
        assert older is not None and older.checkpoint["id"] != latest.checkpoint["id"]
        assert [e.kind for e in events] == ["checkpoint"]
        # The sync face cannot wait for it: the read goes on, and the log says why.
        damage_checkpoint(saver, "flaky", older.checkpoint["id"], {"sqlite"})
        assert saver.get_tuple(cfg) is not None
        assert len(events) == 1 and "use graph.ainvoke" in caplog.text


def test_raise_policy_refuses_instead_of_falling_back(make_saver: Any) -> None:
    with make_saver(ALL, on_corruption="raise") as saver:
        first = saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(step=0), {})
        second = saver.put(first, generate_checkpoint(), generate_metadata(step=1), {})
        damage_checkpoint(saver, "t", second["configurable"]["checkpoint_id"], {"sqlite", "redis", "postgres"})
        with pytest.raises(CorruptCheckpoint, match=r"Integrity\(on_corruption='fallback'\)") as info:
            saver.get_tuple(generate_config("t"))
        assert len(info.value.reasons) == 3
        with pytest.raises(CorruptCheckpoint):
            list(saver.list(generate_config("t")))
        # Nothing was withdrawn: the damaged record is still there to repair.
        assert saver.get_tuple(first) is not None
        assert saver.corruptions_detected >= 3


@pytest.mark.parametrize("face", FACES)
def test_one_intact_copy_is_enough(make_saver: Any, face: str) -> None:
    events: list[CorruptionEvent] = []
    saver = make_saver(ALL, on_corruption=events.append)

    async def body() -> None:
        async with On(saver, face) as on:
            stored = await on.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
            cid = stored["configurable"]["checkpoint_id"]
            damage_checkpoint(saver, "t", cid, {"sqlite", "redis"})
            assert (await on.get_tuple(generate_config("t"))).checkpoint["id"] == cid
            assert sorted(e.tier for e in events) == ["redis", "sqlite"]
            assert {e.served_instead for e in events} == {"intact copy from postgres"}
            # Both bad copies were overwritten by the intact one (not only taken away).
            report = await on.verify("t")
            assert report.bad == [] and report.missing == []

    run(face, body)


def test_a_failing_hook_never_breaks_a_read(make_saver: Any, caplog: pytest.LogCaptureFixture) -> None:
    def hook(event: CorruptionEvent) -> None:
        raise ValueError("hook bug")

    with make_saver("sqlite+redis", on_corruption=hook) as saver:
        stored = saver.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
        damage_checkpoint(saver, "t", stored["configurable"]["checkpoint_id"], {"sqlite"})
        assert saver.get_tuple(stored) is not None
        assert "on_corruption hook failed" in caplog.text


# -- tamper evidence ------------------------------------------------------------------


class RecordingSerde(JsonPlusSerializer):
    def __init__(self) -> None:
        super().__init__()
        self.loaded: list[bytes] = []

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        self.loaded.append(data[1])
        return super().loads_typed(data)


def test_a_value_planted_in_redis_without_the_key_is_never_deserialized(make_saver: Any) -> None:
    serde = RecordingSerde()
    events: list[CorruptionEvent] = []
    with make_saver("redis", signing_key=b"k" * 32, serde=serde, on_corruption=events.append) as signed:
        real = signed.put(
            generate_config("t"),
            generate_checkpoint(channel_values={"v": "real"}) | {"channel_versions": {"v": 1}},
            generate_metadata(),
            {"v": 1},
        )
        # Someone with Redis access but not the key writes a newer checkpoint
        # (dropping the store's key fingerprint, which would stop their saver).
        r = redis_lib.Redis.from_url(REDIS_URL)
        r.delete(f"{signed.redis_key_prefix}:meta")
        r.close()
        with make_saver("redis") as attacker:
            attacker.put(
                real,
                generate_checkpoint(channel_values={"v": "planted"}) | {"channel_versions": {"v": 2}},
                generate_metadata(step=9),
                {"v": 2},
            )
        serde.loaded.clear()
        tup = signed.get_tuple(generate_config("t"))
        assert tup.checkpoint["channel_values"] == {"v": "real"}
        assert events and all(e.reason == "checksum mismatch" for e in events)
        assert not any(b"planted" in payload for payload in serde.loaded)


def test_signing_key_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("LANGGRAPH_DURABLE_SQLITE", str(tmp_path / "x.sqlite"))
    monkeypatch.setenv("LANGGRAPH_DURABLE_SIGNING_KEY", "s" * 32)
    with DurableSaver.from_env() as keyed:
        keyed.put(generate_config("t"), generate_checkpoint(), generate_metadata(), {})
    monkeypatch.delenv("LANGGRAPH_DURABLE_SIGNING_KEY")
    # A replica that forgot the variable is a configuration error, found
    # before it reads (or quarantines) anything.
    with DurableSaver.from_env() as unkeyed, pytest.raises(ConfigError, match="LANGGRAPH_DURABLE_SIGNING_KEY"):
        unkeyed.get_tuple(generate_config("t"))
    monkeypatch.setenv("LANGGRAPH_DURABLE_SIGNING_KEY", "s" * 32)
    with DurableSaver.from_env() as keyed:
        assert keyed.get_tuple(generate_config("t")) is not None


# -- size guard -------------------------------------------------------------------------


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("tiers", ["sqlite", ALL])
def test_a_state_over_the_size_limit_names_the_channel_and_writes_nothing(
    make_saver: Any, tiers: str, face: str
) -> None:
    saver = make_saver(tiers, max_record_bytes=10_000)

    async def body() -> None:
        async with On(saver, face) as on:
            cp = generate_checkpoint(channel_values={"small": "x", "document": "y" * 50_000})
            cp["channel_versions"] = {"small": 1, "document": 1}
            with pytest.raises(
                RecordTooLarge,
                match=r"'document' serializes to 50,0\d\d bytes, over Integrity\(max_record_bytes=10,000\)",
            ) as info:
                await on.put(generate_config("big"), cp, generate_metadata(), {"small": 1, "document": 1})
            assert info.value.channel == "document" and info.value.size > 50_000
            assert await on.list(generate_config("big")) == []
            stored = await on.put(generate_config("big"), generate_checkpoint(), generate_metadata(), {})
            with pytest.raises(RecordTooLarge, match="'upload'"):
                await on.put_writes(stored, [("upload", b"z" * 20_000)], "task")
            assert (await on.get_tuple(stored)).pending_writes == []

    run(face, body)


# -- verify / repair ----------------------------------------------------------------------


def _cli(saver: DurableSaver, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
    flags = ["--sqlite", saver.sqlite_path or "", "--redis-key-prefix", saver.redis_key_prefix]
    if saver.redis_url:
        flags += ["--redis", saver.redis_url]
    if saver.postgres_url:
        flags += ["--postgres", saver.postgres_url]
    return subprocess.run(
        [sys.executable, "-m", "langgraph_durable", *args, *flags], env=env, capture_output=True, text=True, timeout=60
    )


def test_verify_and_repair_commands(make_saver: Any) -> None:
    with make_saver(ALL) as saver:
        cfg = generate_config("t")
        cp = generate_checkpoint(channel_values={"v": "value"})
        cp["channel_versions"] = {"v": 1}
        first = saver.put(cfg, cp, generate_metadata(), {"v": 1})
        second = saver.put(first, generate_checkpoint(), generate_metadata(step=1), {})
        saver.put_writes(second, [("ch", "w")], "task")
        saver.put(generate_config("clean"), generate_checkpoint(), generate_metadata(), {})
        damage_checkpoint(saver, "t", first["configurable"]["checkpoint_id"], {"redis"})
        damage_checkpoint(saver, "t", second["configurable"]["checkpoint_id"], {"sqlite", "redis", "postgres"})

    verify = _cli(saver, "verify")
    assert verify.returncode == 1, verify.stdout + verify.stderr
    lines = verify.stdout.splitlines()
    assert sum("checksum mismatch" in line for line in lines) == 4
    assert any(
        line.startswith("redis: thread 't' checkpoint " + first["configurable"]["checkpoint_id"]) for line in lines
    )
    assert "2 thread(s)" in lines[-1] and "4 bad" in lines[-1]
    assert "threads" in verify.stderr  # progress

    repair = _cli(saver, "repair")
    assert repair.returncode == 1, repair.stdout + repair.stderr  # the second checkpoint has no intact copy
    assert "1 restored, 3 could not be restored" in repair.stdout
    assert sum(line.startswith("NOT RESTORED") for line in repair.stdout.splitlines()) == 3

    after = _cli(saver, "verify", "--thread", "t")
    assert "3 bad" in after.stdout and after.returncode == 1
    clean = _cli(saver, "verify", "--thread", "clean")
    assert clean.returncode == 0 and "0 bad" in clean.stdout
