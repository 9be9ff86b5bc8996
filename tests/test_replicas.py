"""What one replica deletes, no other replica's local cache serves afterwards."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import CorruptionEvent

from .graphs import loop_graph

TIERS = ["sqlite+redis+postgres", "sqlite+postgres", "sqlite+redis"]


def _run(saver: Any, thread: str, run_id: str | None = None) -> list[Any]:
    cfg: Any = {"configurable": {"thread_id": thread}, **({"metadata": {"run_id": run_id}} if run_id else {})}
    loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg)
    return [t.config for t in saver.list({"configurable": {"thread_id": thread}})]


@pytest.mark.parametrize("tiers", TIERS)
def test_a_thread_deleted_through_one_replica_is_not_served_by_id_from_another(
    tiers: str, make_saver: Any, tmp_path: Path
) -> None:
    events: list[CorruptionEvent] = []
    with (
        make_saver(tiers, sqlite_name="a.sqlite") as a,
        make_saver(tiers, sqlite_name="b.sqlite", on_corruption=events.append) as b,
    ):
        configs = _run(b, "t")  # B wrote it: B's local cache holds every record
        a.delete_thread("t")
        for config in configs:
            assert b.get_tuple(config) is None
        assert b.get_tuple({"configurable": {"thread_id": "t"}}) is None
        assert list(b.list({"configurable": {"thread_id": "t"}})) == []
        for config in configs:  # nothing was copied back into the shared tiers
            assert a.get_tuple(config) is None
    assert events == []
    local = sqlite3.connect(tmp_path / "b.sqlite")
    assert local.execute("SELECT COUNT(*) FROM lgd_checkpoints WHERE thread_id = 't'").fetchone() == (0,)


def test_runs_deleted_through_one_replica_are_not_served_by_id_from_another(make_saver: Any) -> None:
    with (
        make_saver("sqlite+redis+postgres", sqlite_name="a.sqlite") as a,
        make_saver("sqlite+redis+postgres", sqlite_name="b.sqlite") as b,
    ):
        doomed = _run(b, "t", run_id="run-1")
        kept = _run(b, "u", run_id="run-2")
        a.delete_for_runs(["run-1"])
        assert all(b.get_tuple(config) is None for config in doomed)
        assert all(b.get_tuple(config) is not None for config in kept)


def test_a_new_thread_under_a_deleted_id_is_served(make_saver: Any) -> None:
    with (
        make_saver("sqlite+postgres", sqlite_name="a.sqlite") as a,
        make_saver("sqlite+postgres", sqlite_name="b.sqlite") as b,
    ):
        _run(b, "t")
        a.delete_thread("t")
        again = _run(a, "t")  # the id is used again, with newer checkpoints
        assert all(b.get_tuple(config) is not None for config in again)
        assert b.get_tuple({"configurable": {"thread_id": "t"}}) is not None
