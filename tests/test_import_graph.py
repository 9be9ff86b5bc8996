"""The package's modules import each other without a cycle, at run time
and counting the imports under ``if TYPE_CHECKING:`` too. A cycle makes
the order of imports matter and a module's job unclear."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import langgraph_durable

ROOT = Path(langgraph_durable.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    found = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


def _imports(name: str, path: Path, modules: dict[str, Path], *, typing: bool = False) -> set[str]:
    """The package's modules `name` imports when it runs, at any depth of its
    code (with `typing`, also those it imports for the type checker only)."""
    tree = ast.parse(path.read_text())
    type_only = (
        set()
        if typing
        else {
            id(sub)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for sub in ast.walk(node)
        }
    )
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in modules}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = {f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in modules}
            out |= subs
            if len(subs) < len(node.names) and target in modules:
                out.add(target)
    return out - {name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


@pytest.mark.parametrize("typing", [False, True], ids=["at-run-time", "for-the-type-checker-too"])
def test_no_import_cycles(typing: bool) -> None:
    modules = _modules()
    graph = {name: _imports(name, path, modules, typing=typing) for name, path in modules.items()}
    assert graph["langgraph_durable.saver"], "the reader of imports found nothing: it is broken"
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_one() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
