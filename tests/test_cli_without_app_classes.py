"""The operator's commands on a store whose state holds the application's
own classes, run where those classes cannot be imported (a class defined
in the app's ``__main__``): every command works on records, ids and
checksums, and nothing it does turns an object into plain data for the
application."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from langgraph_durable import cli

APP = textwrap.dedent(
    """
    import operator, sys
    from dataclasses import dataclass
    from typing import Annotated
    from typing_extensions import TypedDict
    from langgraph.graph import END, START, StateGraph
    from langgraph_durable import DurableSaver

    @dataclass
    class Item:
        id: str
        qty: int

    class State(TypedDict, total=False):
        item: Item
        log: Annotated[list[str], operator.add]

    g = StateGraph(State)
    g.add_node("a", lambda s: {"item": Item("x", 1), "log": ["a"]})
    g.add_node("b", lambda s: {"item": Item("y", 2), "log": ["b"]})
    g.add_edge(START, "a"); g.add_edge("a", "b"); g.add_edge("b", END)
    cfg = {"configurable": {"thread_id": "t"}}
    with DurableSaver(sqlite=sys.argv[1]) as saver:
        graph = g.compile(checkpointer=saver)
        if sys.argv[2] == "write":
            for _ in range(3):
                graph.invoke({"log": []}, cfg)
        item = graph.get_state(cfg).values["item"]
        assert type(item) is Item and item == Item("y", 2), repr(item)
        print(len(list(graph.get_state_history(cfg))))
    """
)


def _app(tmp_path: Path, store: Path, mode: str) -> int:
    script = tmp_path / "app.py"
    script.write_text(APP)
    done = subprocess.run(
        [sys.executable, str(script), str(store), mode], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


def test_pin_prune_repair_verify_need_none_of_the_apps_classes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "store.sqlite"
    checkpoints = _app(tmp_path, store, "write")
    flags = ["--sqlite", str(store), "--redis", "", "--postgres", ""]
    for command in (["pin", "t"], ["prune", "--keep-last", "3", "--dry-run"], ["repair"], ["verify"], ["show", "t"]):
        code = cli.main([*command, *flags])
        out, err = capsys.readouterr()
        assert code == cli.EXIT_OK, (command, out, err)
        assert "UNDECODABLE" not in out and "--serde" not in out, (command, out)
    assert cli.main(["prune", "--keep-last", "3", *flags]) == cli.EXIT_OK
    capsys.readouterr()
    # The application still reads its objects back as themselves, what was kept only.
    assert _app(tmp_path, store, "read") == 3 < checkpoints  # 3 kept (the pinned one is the newest)


def test_serde_is_found_in_the_current_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--serde app_serde:make`` finds a module of the directory the command
    runs in, as ``python -m`` would, without PYTHONPATH."""
    (tmp_path / "app_serde_here.py").write_text(
        "from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer\n"
        "def make():\n    return JsonPlusSerializer()\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd(), str(tmp_path))])
    store = tmp_path / "s.sqlite"
    _app(tmp_path, store, "write")
    code = cli.main(
        ["threads", "--sqlite", str(store), "--redis", "", "--postgres", "", "--serde", "app_serde_here:make"]
    )
    err = capsys.readouterr().err
    assert code == cli.EXIT_OK, err
    assert sys.path[-1] == str(tmp_path)
