"""Importing threads from the stock savers (`import_from` / `aimport_from`),
and checkpoints written by older LangGraph versions.

The sources are real: a SqliteSaver file written by LangGraph 0.2 (older
checkpoint format, `tests/data/make_langgraph_0_2_threads.py`), and SqliteSaver
files and PostgresSaver databases made here by running the same graphs under
today's LangGraph. "Same results" means: after the import, resuming a thread
under DurableSaver gives what resuming it under the original saver gives.
"""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
import sys
from pathlib import Path
from typing import Any

import pytest
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.types import Command

from langgraph_durable import ConfigError, CorruptionEvent
from langgraph_durable.engine.imports.sources import open_source

from .graphs import _ahistory, _history

DATA = Path(__file__).parent / "data"
OLD_FILE = DATA / "langgraph_0_2_threads.sqlite"


def _load_maker() -> Any:
    spec = importlib.util.spec_from_file_location("make_langgraph_0_2_threads", DATA / "make_langgraph_0_2_threads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # typing resolves the state's annotations through it
    spec.loader.exec_module(module)
    return module


maker = _load_maker()
THREADS = ("finished", "interrupted", "resumed")


@pytest.fixture
def old_file(tmp_path: Path) -> Path:
    path = tmp_path / "old.sqlite"
    shutil.copy(OLD_FILE, path)
    return path


def populated_file(path: Path) -> Path:
    """A SqliteSaver file at `path` with today's format, made by running the graphs."""
    conn = sqlite3.connect(path, check_same_thread=False)
    maker.populate(SqliteSaver(conn))
    conn.close()
    return path


@pytest.fixture
def new_file(tmp_path: Path) -> Path:
    return populated_file(tmp_path / "stock.sqlite")


def _stock_sqlite(path: Path) -> SqliteSaver:
    return SqliteSaver(sqlite3.connect(path, check_same_thread=False))


def _trace(saver: Any, *, resume: bool) -> dict[str, Any]:
    """Each thread's state and history; with `resume`, then the interrupted
    thread resumed, a finished thread replayed from its second-newest
    checkpoint, and the histories again."""
    out: dict[str, Any] = {}
    asking = maker.build(with_question=True, checkpointer=saver)
    plain = maker.build(with_question=False, checkpointer=saver)
    for thread in THREADS:
        cfg = {"configurable": {"thread_id": thread}}
        state = asking.get_state(cfg, subgraphs=True)
        out[f"{thread}.state"] = (state.values, state.next, [i.value for t in state.tasks for i in t.interrupts])
        out[f"{thread}.history"] = _history(asking, cfg)
    if resume:
        cfg = {"configurable": {"thread_id": "interrupted"}}
        out["interrupted.resumed"] = asking.invoke(Command(resume="yes"), cfg)
        out["interrupted.after"] = _history(asking, cfg)
        cfg = {"configurable": {"thread_id": "finished"}}
        second = list(plain.get_state_history(cfg))[1]
        out["finished.replayed"] = plain.invoke(None, second.config)
        out["finished.after"] = _history(plain, cfg)
    return out


def test_old_format_threads_import_and_resume_as_under_the_stock_saver(old_file: Path, make_saver: Any) -> None:
    """LangGraph 0.2 checkpoints: after the import, resuming (which makes
    LangGraph migrate the old channels in memory, so the next checkpoint
    carries versions no put stored) gives what the stock saver gives, and
    nothing is reported as lost."""
    events: list[CorruptionEvent] = []
    with make_saver("sqlite+redis+postgres", on_corruption=events.append) as saver:
        report = saver.import_from(_stock_sqlite(old_file))
        assert report.ok, report.differences
        assert (report.threads, report.namespaces, report.checkpoints, report.skipped) == (3, 5, 30, 0)
        assert report.writes > 0 and report.verified == 30
        ours = _trace(saver, resume=True)
    theirs = _trace(_stock_sqlite(old_file), resume=True)
    assert ours == theirs
    assert events == []


@pytest.mark.parametrize("tiers", ["sqlite", "redis+postgres"])
def test_import_from_a_sqlite_saver_file_then_resume(tiers: str, new_file: Path, make_saver: Any) -> None:
    with make_saver(tiers) as saver:
        report = saver.import_from(_stock_sqlite(new_file))
        assert report.ok and report.checkpoints == 30 and report.namespaces == 5, report
        assert _trace(saver, resume=False) == _trace(_stock_sqlite(new_file), resume=False)
        ours = _trace(saver, resume=True)
    assert ours == _trace(_stock_sqlite(new_file), resume=True)


def test_import_from_a_postgres_saver_database_then_resume(postgres_url: str, make_saver: Any) -> None:
    with PostgresSaver.from_conn_string(postgres_url) as stock:
        stock.setup()
        maker.populate(stock)
        with make_saver("sqlite") as saver:
            report = saver.import_from(stock)
            assert report.ok and report.checkpoints == 30, report
            ours = _trace(saver, resume=True)
        assert ours == _trace(stock, resume=True)


def test_import_again_skips_everything_and_an_interrupted_import_resumes(new_file: Path, make_saver: Any) -> None:
    source = _stock_sqlite(new_file)

    def stop_after_first(done: int, total: int) -> None:
        if done == 1:
            raise KeyboardInterrupt

    with make_saver("sqlite+postgres") as saver:
        with pytest.raises(KeyboardInterrupt):
            saver.import_from(source, progress=stop_after_first)
        first = sum(1 for _ in saver.list(None))
        assert 0 < first < 30
        calls: list[tuple[int, int]] = []
        report = saver.import_from(source, progress=lambda d, t: calls.append((d, t)))
        assert report.ok and report.skipped == first and report.checkpoints == 30 - first
        assert calls == [(0, 3), (1, 3), (2, 3), (3, 3)]
        again = saver.import_from(source)
        assert (again.checkpoints, again.skipped, again.writes, again.ok) == (0, 30, 0, True)
        assert sum(1 for _ in saver.list(None)) == 30


def test_an_import_puts_back_pending_writes_a_copy_lacks(new_file: Path, make_saver: Any, tmp_path: Path) -> None:
    with make_saver("sqlite") as saver:
        saver.import_from(_stock_sqlite(new_file))
    conn = sqlite3.connect(tmp_path / "local.sqlite")
    lost = conn.execute("DELETE FROM lgd_writes").rowcount
    conn.commit()
    conn.close()
    assert lost > 0
    with make_saver("sqlite") as saver:
        report = saver.import_from(_stock_sqlite(new_file))
        assert report.ok and report.checkpoints == 0 and report.writes == lost
        assert _trace(saver, resume=False) == _trace(_stock_sqlite(new_file), resume=False)


def test_a_value_lost_after_an_import_is_still_reported_as_lost(
    old_file: Path, make_saver: Any, tmp_path: Path
) -> None:
    """Telling "never written" apart from "lost" must not hide a real loss:
    the newest checkpoint's `log` record deleted from the only tier is
    reported, and its parent is served."""
    with make_saver("sqlite") as saver:
        saver.import_from(_stock_sqlite(old_file))
        newest = saver.get_tuple({"configurable": {"thread_id": "finished", "checkpoint_ns": ""}})
        assert newest is not None and newest.parent_config is not None
    version = newest.checkpoint["channel_versions"]["log"]
    conn = sqlite3.connect(tmp_path / "local.sqlite")
    assert conn.execute("DELETE FROM lgd_blobs WHERE channel = 'log' AND version = ?", (version,)).rowcount == 1
    conn.commit()
    conn.close()
    events: list[CorruptionEvent] = []
    with make_saver("sqlite", on_corruption=events.append) as saver:
        served = saver.get_tuple({"configurable": {"thread_id": "finished", "checkpoint_ns": ""}})
    assert (
        served is not None
        and served.config["configurable"]["checkpoint_id"] != newest.config["configurable"]["checkpoint_id"]
    )
    assert [e.reason for e in events if e.kind == "blob"] == ["missing in every tier"]


def test_a_put_carrying_versions_its_parent_lacks_stores_what_it_carries(make_saver: Any) -> None:
    """The unit of the fix, through the public API: a checkpoint that carries
    a channel version no put stored reads back with the value it carried (as
    SqliteSaver reads it) instead of being withdrawn as damaged; a carried
    channel without a value reads back empty."""
    events: list[CorruptionEvent] = []
    with make_saver("sqlite+redis", on_corruption=events.append) as saver:
        base = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        root = _checkpoint(ROOT_ID, {"a": "1.x"}, {"a": [1]})
        first = saver.put(base, root, {"step": 0}, {"a": "1.x"})
        # `b` appears at a version no put stored (as after LangGraph's migration).
        child = _checkpoint(CHILD_ID, {"a": "1.x", "b": "3.y", "c": "4.z"}, {"a": [1], "b": "moved"})
        second = saver.put(first, child, {"step": 1}, {})
        got = saver.get_tuple(second)
        assert got is not None and got.config["configurable"]["checkpoint_id"] == CHILD_ID
        assert got.checkpoint["channel_values"] == {"a": [1], "b": "moved"}
        assert got.checkpoint["channel_versions"] == {"a": "1.x", "b": "3.y", "c": "4.z"}
    stock = SqliteSaver(sqlite3.connect(":memory:", check_same_thread=False))
    stock_first = stock.put(base, root, {"step": 0}, {"a": "1.x"})
    stock_got = stock.get_tuple(stock.put(stock_first, child, {"step": 1}, {}))
    assert stock_got is not None and stock_got.checkpoint["channel_values"] == got.checkpoint["channel_values"]
    assert events == []


# Checkpoint ids as LangGraph writes them (uuid6, time-ordered as strings).
ROOT_ID = "1ef4f797-8335-6428-8001-8a1503f9b875"
CHILD_ID = "1ef4f797-8335-6428-8002-8a1503f9b875"


def _checkpoint(cid: str, versions: dict[str, str], values: dict[str, Any]) -> Any:
    return {
        "v": 4,
        "id": cid,
        "ts": "2026-01-01T00:00:00+00:00",
        "channel_values": values,
        "channel_versions": versions,
        "versions_seen": {},
        "updated_channels": None,
    }


async def test_aimport_from_async_stock_savers(new_file: Path, postgres_url: str, make_saver: Any) -> None:
    async with AsyncSqliteSaver.from_conn_string(str(new_file)) as source:
        async with make_saver("sqlite", sqlite_name="a.sqlite") as saver:
            report = await saver.aimport_from(source)
            assert report.ok and report.checkpoints == 30 and report.threads == 3, report
            graph = maker.build(with_question=True, checkpointer=saver)
            stock_graph = maker.build(with_question=True, checkpointer=source)
            for thread in THREADS:
                cfg = {"configurable": {"thread_id": thread}}
                assert await _ahistory(graph, cfg) == await _ahistory(stock_graph, cfg)
    async with AsyncPostgresSaver.from_conn_string(postgres_url) as stock:
        await stock.setup()
        for thread in THREADS:  # some threads in Postgres as well: copy them across
            cfg = {"configurable": {"thread_id": thread}}
            await maker.build(with_question=True, checkpointer=stock).ainvoke({"log": [], "n": 0}, cfg)
        async with make_saver("postgres") as saver:
            report = await saver.aimport_from(stock)
            assert report.ok and report.threads == 3, report
            cfg = {"configurable": {"thread_id": "interrupted"}}
            ours = await maker.build(with_question=True, checkpointer=saver).ainvoke(Command(resume="no"), cfg)
            theirs = await maker.build(with_question=True, checkpointer=stock).ainvoke(Command(resume="no"), cfg)
            assert ours == theirs


async def test_aimport_from_reads_a_sync_stock_saver_and_refuses_a_saver_without_alist(
    new_file: Path, make_saver: Any
) -> None:
    """A SqliteSaver has no async face, but the import reads its tables
    directly, so aimport_from takes it too; a saver that cannot list on
    the async face is told to use import_from."""

    class SyncOnly(BaseCheckpointSaver[str]):
        def list(self, config: Any, **kwargs: Any) -> Any:
            return iter(())

    async with make_saver("sqlite") as saver:
        report = await saver.aimport_from(_stock_sqlite(new_file))
        assert report.ok and report.checkpoints == 30, report
        with pytest.raises(ConfigError, match="import_from"):
            await saver.aimport_from(SyncOnly())


def test_open_source_reads_paths_and_urls_and_says_what_is_wrong(new_file: Path, tmp_path: Path) -> None:
    for spec in (str(new_file), f"sqlite:///{new_file}"):
        with open_source(spec) as source:
            assert len(list(source.list(None))) == 30
    with pytest.raises(ConfigError, match="not a SqliteSaver file"):
        with open_source(str(tmp_path / "missing.sqlite")):
            pass
    with pytest.raises(ConfigError, match="postgresql://"):
        with open_source("mysql://somewhere/db"):
            pass
    assert not (tmp_path / "missing.sqlite").exists()  # opening read-only creates nothing


def test_open_source_from_postgres(postgres_url: str) -> None:
    with PostgresSaver.from_conn_string(postgres_url) as stock:
        stock.setup()
        maker.populate(stock)
    with open_source(postgres_url) as source:
        assert {t.config["configurable"]["thread_id"] for t in source.list(None)} == set(THREADS)


def test_durable_saver_as_a_source(make_saver: Any, new_file: Path) -> None:
    """Any BaseCheckpointSaver is a source, DurableSaver included (a move
    from one set of tiers to another)."""
    with make_saver("sqlite", sqlite_name="from.sqlite") as first:
        first.import_from(_stock_sqlite(new_file))
        with make_saver("redis", sqlite_name="unused.sqlite") as second:
            report = second.import_from(first)
            assert report.ok and report.checkpoints == 30
            assert _trace(second, resume=False) == _trace(first, resume=False)
