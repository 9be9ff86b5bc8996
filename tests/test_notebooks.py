"""Every notebook in notebooks/ runs top to bottom (code cells in order, one
namespace, top-level await allowed), so the notebooks move with the code."""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import sys
import types
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    # A real module, as in a kernel: typing resolves annotations through it.
    module = types.ModuleType("__notebook__")
    monkeypatch.setitem(sys.modules, "__notebook__", module)
    namespace = module.__dict__
    loop = asyncio.new_event_loop()
    try:
        for i, cell in enumerate(cells):
            source = "".join(cell["source"])
            code = compile(source, f"{path.name}[{i}]", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)
            if inspect.iscoroutine(result):
                loop.run_until_complete(result)
    finally:
        loop.close()
