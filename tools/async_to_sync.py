#!/usr/bin/env python
"""Generate the sync twins of langgraph_durable's async sources.

The chain, its rooms and the network tiers are written once, async
(``*_async.py``). Their sync faces are generated from them by transforming
the syntax tree (the approach of psycopg's ``tools/async_to_sync.py``)::

    python tools/async_to_sync.py          # regenerate every twin
    python tools/async_to_sync.py --check  # exit 1, naming the stale twins

Both also check that every file the package's docstrings and comments name
(``chain_async.py``, ``engine/reads.py``) is there, and exit 1 naming the
places that name one that is not.

The transformation:

- ``async def`` / ``async with`` / ``async for`` become their sync forms,
  ``await x`` becomes ``x``;
- names, attributes, arguments and imports are renamed by `NAMES`
  (``AsyncTierChain`` -> ``TierChain``, ``arun_all`` -> ``run_all``, ...),
  and so are the words of docstrings and comments;
- the module docstring's paragraph that starts with "This file is the async
  source" is left out (the twin's header says where it comes from);
- imports the sync code no longer uses are removed, and the result is
  sorted and formatted by ruff (its settings in pyproject.toml), like the
  rest of the code.

Where the two faces must differ, the async source says so with markers:

- ``if True:  # ASYNC`` ... ``else:`` ...: the async file runs the first
  branch; the sync twin gets the ``else`` branch alone (nothing when there
  is no ``else``). The comment must be on the ``if`` line.
- ``# ASYNC ONLY`` at the end of a statement's line (for a ``def``,
  ``class``, ``with``...: at the end of its first line, after the colon;
  for a statement spanning lines: at the end of its last line): the
  statement is left out of the sync twin.

Needs ``ast-comments`` and ``ruff`` (in the ``dev`` and ``test`` extras). The output depends
slightly on the Python version that runs this (its unparser); CI runs it
with the project's own interpreter.
"""

from __future__ import annotations

import argparse
import ast as std_ast
import itertools
import re
import subprocess
import sys
import tokenize
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ast_comments as ast

_ATOM = std_ast._Precedence.ATOM  # type: ignore[attr-defined]
_TUPLE = std_ast._Precedence.TUPLE  # type: ignore[attr-defined]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "langgraph_durable"

# async source -> sync twin, relative to the package
FILES = {
    "engine/chain_async.py": "engine/chain.py",
    "engine/reads_async.py": "engine/reads.py",
    "engine/scan_async.py": "engine/scan.py",
    "engine/maintenance_async.py": "engine/maintenance.py",
    "engine/journal_async.py": "engine/journal.py",
    "engine/resume_async.py": "engine/resume.py",
    "engine/leases/keeper_async.py": "engine/leases/keeper.py",
    "engine/guard_async.py": "engine/guard.py",
    "engine/imports/importer_async.py": "engine/imports/importer.py",
    "tiers/redis/tier_async.py": "tiers/redis/tier.py",
    "tiers/postgres/tier_async.py": "tiers/postgres/tier.py",
    "tiers/protocol_async.py": "tiers/protocol.py",
    "archive/store_async.py": "archive/store.py",
    "archive/archiver_async.py": "archive/archiver.py",
    "faces/ops_async.py": "faces/ops.py",
}

# Async spelling -> sync spelling: identifiers, attributes, arguments,
# module names (dotted ones too), and whole words of docstrings and comments.
NAMES = {
    "AsyncTierChain": "TierChain",
    "AsyncTier": "Tier",
    "AsyncRecords": "Records",
    "AsyncQuarantine": "Quarantine",
    "AsyncLedgerStore": "LedgerStore",
    "AsyncLeases": "Leases",
    "AsyncTierReader": "TierReader",
    "AsyncScanner": "Scanner",
    "AsyncMaintenance": "Maintenance",
    "AsyncJournal": "Journal",
    "AsyncResumeGate": "ResumeGate",
    "AsyncSqliteTier": "SqliteTier",
    "AsyncRedisTier": "RedisTier",
    "AsyncPostgresTier": "PostgresTier",
    "AsyncLeaseKeeper": "LeaseKeeper",
    "AsyncConnectionPool": "ConnectionPool",
    "asynccontextmanager": "contextmanager",
    "AsyncIterator": "Iterator",
    "arun_all": "run_all",
    "ALock": "Lock",
    "amaybe_await": "maybe_await",
    "asleep": "sleep",
    "awith_timeout": "with_timeout",
    "AsyncGuardedTier": "GuardedTier",
    "AsyncImporter": "Importer",
    "aimport_from": "import_from",
    "alist": "list",
    "aput": "put",
    "aput_writes": "put_writes",
    "guard_async": "guard",
    "importer_async": "importer",
    "aclose": "close",
    "aclose_redis": "close_redis",
    "redis.asyncio": "redis",
    "chain_async": "chain",
    "reads_async": "reads",
    "scan_async": "scan",
    "maintenance_async": "maintenance",
    "journal_async": "journal",
    "resume_async": "resume",
    "keeper_async": "keeper",
    "tier_async": "tier",
    "protocol_async": "protocol",
    "AsyncArchiveStore": "ArchiveStore",
    "AsyncArchiver": "Archiver",
    "store_async": "store",
    "archiver_async": "archiver",
    "put_async": "put",
    "get_async": "get",
    "bytes_async": "bytes",
    "delete_async": "delete",
    "list_with_delimiter_async": "list_with_delimiter",
    # the saver's faces (faces/ops_async.py)
    "AsyncSaverOps": "SaverOps",
    "ops_async": "ops",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "asetup": "setup",
    "adrain": "drain",
    "alag": "lag",
    "ahealth": "health",
    "aget_tuple": "get_tuple",
    "adelete_thread": "delete_thread",
    "adelete_for_runs": "delete_for_runs",
    "acopy_thread": "copy_thread",
    "aprune": "prune",
    "aget_delta_channel_history": "get_delta_channel_history",
    "aactions": "actions",
    "arecord_action": "record_action",
    "aresolve_action": "resolve_action",
    "arestore_quarantined": "restore_quarantined",
    "aquarantined": "quarantined",
    "arestore_outcomes": "restore_outcomes",
    "apurge_quarantined": "purge_quarantined",
    "athread_ids": "thread_ids",
    "averify": "verify",
    "arepair": "repair",
    "aapply_retention": "apply_retention",
    "aarchive_idle": "archive_idle",
    "apromote_local": "promote_local",
    "aneeds_promote": "needs_promote",
    "aarchived_threads": "archived_threads",
    "arestore": "restore",
    "adrain_archive": "drain_archive",
    "apin": "pin",
    "aunpin": "unpin",
    "apins": "pins",
    "arelease_thread": "release_thread",
    "_adelete_now": "_delete_now",
    "_ahold_archived": "_hold_archived",
    "_aretention_split": "_retention_split",
    "_aretain_archived": "_retain_archived",
    "_aasking": "_asking",
    "_aarchive_owe": "_archive_owe",
    "_aarchive_forget": "_archive_forget",
    "_arefuse_archived": "_refuse_archived",
    "_abring_back_thread": "_bring_back_thread",
    "_abrought_back": "_brought_back",
    "_aresume_gate": "_resume_gate",
    "_aguard_plain_write": "_guard_plain_write",
    "_await_newer": "_wait_newer",
    "amigrate": "migrate",
    "_amigrate_one": "_migrate_one",
    "_aarchiver": "_archiver",
    "_async_chain": "_sync_chain",
    "_async_leases": "_sync_leases",
    # the runtime's pairs (faces/runtime.py, written by hand with both faces)
    "async_chain": "sync_chain",
    "async_leases": "sync_leases",
    "aarchiver": "archiver",
    "aexclusive": "exclusive",
    "async_tables": "sync_tables",
}

ASYNC_BRANCH = "# ASYNC"
ASYNC_ONLY = "# ASYNC ONLY"
SOURCE_PARAGRAPH = "This file is the async source"

_WORDS = re.compile(r"\b(" + "|".join(re.escape(k) for k in sorted(NAMES, key=len, reverse=True)) + r")\b")


def rename_words(text: str) -> str:
    """`text` with every whole word (or dotted name) of `NAMES` renamed."""
    return _WORDS.sub(lambda m: NAMES[m.group(1)], text)


def header(source: str) -> str:
    return f"# WARNING: this file is generated from {source}; edit that file and run tools/async_to_sync.py. DO NOT EDIT.\n"


# -- the transformation -------------------------------------------------------------


def _is_marker(node: Any, marker: str) -> bool:
    return isinstance(node, ast.Comment) and node.inline and node.value.strip() == marker


def _is_async_branch(node: Any) -> bool:
    """``if True:  # ASYNC``."""
    return (
        isinstance(node, std_ast.If)
        and isinstance(node.test, std_ast.Constant)
        and node.test.value is True
        and bool(node.body)
        and _is_marker(node.body[0], ASYNC_BRANCH)
    )


class Markers(std_ast.NodeTransformer):
    """Applies the markers: keeps the sync branch of ``if True:  # ASYNC``
    blocks, leaves out ``# ASYNC ONLY`` statements."""

    def generic_visit(self, node: std_ast.AST) -> std_ast.AST:
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                setattr(node, field, self._sync_body(stmts))
        return super().generic_visit(node)

    def _sync_body(self, stmts: list[Any]) -> list[Any]:
        out: list[Any] = []
        i = 0
        while i < len(stmts):
            stmt = stmts[i]
            nxt = stmts[i + 1] if i + 1 < len(stmts) else None
            if _is_async_branch(stmt):
                out.extend(self._sync_body(stmt.orelse))
            elif _is_marker(nxt, ASYNC_ONLY) and not isinstance(stmt, ast.Comment):
                i += 1  # the statement and its marker
            elif getattr(stmt, "body", None) and _is_marker(stmt.body[0], ASYNC_ONLY):
                pass  # a compound statement marked on its first line
            else:
                out.append(stmt)
            i += 1
        return out


class AsyncToSync(std_ast.NodeTransformer):
    """``async def/with/for`` -> ``def/with/for``; ``await x`` -> ``x``."""

    def visit_AsyncFunctionDef(self, node: std_ast.AsyncFunctionDef) -> std_ast.AST:
        new = std_ast.FunctionDef(**{f: getattr(node, f) for f in node._fields})
        return self.visit(std_ast.copy_location(new, node))

    def visit_AsyncWith(self, node: std_ast.AsyncWith) -> std_ast.AST:
        new = std_ast.With(**{f: getattr(node, f) for f in node._fields})
        return self.visit(std_ast.copy_location(new, node))

    def visit_AsyncFor(self, node: std_ast.AsyncFor) -> std_ast.AST:
        new = std_ast.For(**{f: getattr(node, f) for f in node._fields})
        return self.visit(std_ast.copy_location(new, node))

    def visit_Await(self, node: std_ast.Await) -> std_ast.AST:
        return self.visit(node.value)

    def visit_comprehension(self, node: std_ast.comprehension) -> std_ast.AST:
        node.is_async = 0
        self.generic_visit(node)
        return node


class Rename(std_ast.NodeTransformer):
    """Renames by `NAMES`: identifiers, docstrings, comments, imports."""

    def visit_Comment(self, node: Any) -> Any:
        node.value = rename_words(node.value)
        return node

    def _docstring(self, node: Any, module: bool = False) -> None:
        body = node.body
        first = next((i for i, s in enumerate(body) if not isinstance(s, ast.Comment)), None)
        if first is None:
            return
        match body[first]:
            case std_ast.Expr(value=std_ast.Constant(value=str(doc))):
                if module:
                    paragraphs = doc.split("\n\n")
                    doc = "\n\n".join(p for p in paragraphs if not p.strip().startswith(SOURCE_PARAGRAPH))
                    if not doc.endswith("\n"):
                        doc += "\n"
                body[first].value.value = rename_words(doc)

    def visit_Module(self, node: std_ast.Module) -> std_ast.AST:
        self._docstring(node, module=True)
        self.generic_visit(node)
        return node

    def visit_ClassDef(self, node: std_ast.ClassDef) -> std_ast.AST:
        self._docstring(node)
        node.name = NAMES.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: Any) -> Any:
        self._docstring(node)
        node.name = NAMES.get(node.name, node.name)
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_arg(self, node: std_ast.arg) -> std_ast.AST:
        node.arg = NAMES.get(node.arg, node.arg)
        self.generic_visit(node)
        return node

    def visit_keyword(self, node: std_ast.keyword) -> std_ast.AST:
        if node.arg is not None:
            node.arg = NAMES.get(node.arg, node.arg)
        self.generic_visit(node)
        return node

    def visit_Name(self, node: std_ast.Name) -> std_ast.AST:
        node.id = NAMES.get(node.id, node.id)
        return node

    def visit_Attribute(self, node: std_ast.Attribute) -> std_ast.AST:
        node.attr = NAMES.get(node.attr, node.attr)
        self.generic_visit(node)
        return node

    def visit_alias(self, node: std_ast.alias) -> std_ast.AST:
        node.name = rename_words(node.name)
        if node.asname is not None:
            node.asname = NAMES.get(node.asname, node.asname)
        return node

    def visit_ImportFrom(self, node: std_ast.ImportFrom) -> std_ast.AST:
        if node.module is not None:
            node.module = rename_words(node.module)
        self.generic_visit(node)
        return node

    def visit_Constant(self, node: std_ast.Constant) -> std_ast.AST:
        # String annotations ("AsyncTierChain") and names in messages.
        if isinstance(node.value, str):
            node.value = rename_words(node.value)
        return node


class Blanks(std_ast.NodeTransformer):
    """Keeps the source's blank lines between statements (as empty comments);
    ruff then settles them as it does everywhere."""

    def generic_visit(self, node: std_ast.AST) -> std_ast.AST:
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list) and stmts:
                _place_inner_comments(stmts)
                out = [stmts[0]]
                for before, after in itertools.pairwise(stmts):
                    if _first_line(after) - _last_line(before) > 1:
                        out.append(ast.Comment(value="", inline=False))
                    out.append(after)
                setattr(node, field, out)
        return super().generic_visit(node)


def _place_inner_comments(stmts: list[Any]) -> None:
    """A comment inside a statement (ast-comments puts it before that
    statement) counts as on the statement's first line: no blank line
    between them."""
    following = None
    for stmt in reversed(stmts):
        if not isinstance(stmt, ast.Comment):
            following = stmt
        elif following is not None and _first_line(following) <= stmt.lineno <= _last_line(following):
            stmt._first = stmt._last = _first_line(following)


def _first_line(node: Any) -> int:
    return int(getattr(node, "_first", node.lineno))


def _last_line(node: Any) -> int:
    return int(getattr(node, "_last", node.end_lineno))


def parse(source: str, filename: str) -> std_ast.Module:
    """The tree with its comments (ast-comments). The statements' own first
    and last lines are kept first: ast-comments stretches those of compound
    statements over the comments around them."""
    tree = std_ast.parse(source, filename=filename)
    for node in std_ast.walk(tree):
        if isinstance(node, std_ast.Constant | std_ast.JoinedStr) and node.col_offset >= 0:
            setattr(node, "_text", _literal_text(std_ast.get_source_segment(source, node) or ""))  # noqa: B010
        if isinstance(node, std_ast.stmt):
            decorators = getattr(node, "decorator_list", [])
            node._first = min([node.lineno, *(d.lineno for d in decorators)])  # type: ignore[attr-defined]
            node._last = node.end_lineno  # type: ignore[attr-defined]
    ast._enrich(source, tree)
    return tree


def _literal_text(segment: str) -> str | None:
    """A literal as the source spells it (``0x10``, ``'a'``, a triple-quoted
    string), adjacent strings on one line (ruff splits them again where
    they do not fit); None if it is not one (``True``, ``...``)."""
    if not segment or segment[0] not in "0123456789.'\"bBrRfFuU":
        return None
    if segment[0].isdigit() or segment[0] == ".":
        return segment
    lines = iter(segment.splitlines(keepends=True))
    try:
        parts = [t.string for t in tokenize.generate_tokens(lambda: next(lines)) if t.type == tokenize.STRING]
    except (tokenize.TokenError, StopIteration):
        return None
    return " ".join(parts) or None


def async_to_sync(tree: std_ast.Module) -> std_ast.Module:
    tree = Blanks().visit(tree)
    tree = Markers().visit(tree)
    tree = Rename().visit(tree)
    tree = AsyncToSync().visit(tree)
    return tree


class Unparser(ast._Unparser):
    """ast-comments' unparser, which also finds a docstring behind the comment
    of a ``def`` line, and leaves out parentheses the source would not have
    (``a and (not b)``, ``any((x for x in y))``, ``return (a, b)``), which
    ruff keeps."""

    def visit_BoolOp(self, node: std_ast.BoolOp) -> None:
        operator = self.boolops[node.op.__class__.__name__]
        precedence = self.boolop_precedence[operator]
        with self.require_parens(precedence, node):
            for value in node.values:
                if isinstance(value, std_ast.BoolOp):  # `a or (b and c)`, as ruff wants it
                    inner = self.boolop_precedence[self.boolops[value.op.__class__.__name__]]
                    self.set_precedence(inner.next(), value)
                else:
                    self.set_precedence(precedence.next(), value)
            self.interleave(lambda: self.write(f" {operator} "), self.traverse, node.values)

    def visit_Call(self, node: std_ast.Call) -> None:
        match node:
            case std_ast.Call(args=[std_ast.GeneratorExp() as only], keywords=[]):
                self.set_precedence(_ATOM, node.func)
                self.traverse(node.func)
                self.traverse(only)  # its parentheses are the call's
            case _:
                super().visit_Call(node)

    def visit_Constant(self, node: std_ast.Constant) -> None:
        self._literal(node, super().visit_Constant)

    def visit_JoinedStr(self, node: std_ast.JoinedStr) -> None:
        self._literal(node, super().visit_JoinedStr)

    def _literal(self, node: Any, otherwise: Callable[[Any], None]) -> None:
        """Spell a literal as the source does (renamed by `NAMES`)."""
        text = getattr(node, "_text", None)
        if text is None or self._avoid_backslashes:
            otherwise(node)
        else:
            self.write(rename_words(text))

    def _bare_tuple(self, value: Any) -> None:
        if isinstance(value, std_ast.Tuple) and value.elts:
            self.set_precedence(_TUPLE, value)

    def visit_Return(self, node: std_ast.Return) -> None:
        self._bare_tuple(node.value)
        super().visit_Return(node)

    def visit_Assign(self, node: std_ast.Assign) -> None:
        self._bare_tuple(node.value)
        super().visit_Assign(node)

    def _write_docstring_and_traverse_body(self, node: Any) -> None:
        body = node.body
        first = next((i for i, s in enumerate(body) if not isinstance(s, ast.Comment)), None)
        if first is not None and (docstring := self.get_raw_docstring(_Body(body[first:]))) is not None:
            self.traverse(body[:first])
            self._write_docstring(docstring)
            self.traverse(body[first + 1 :])
        else:
            self.traverse(body)


class _Body(std_ast.Module):
    def __init__(self, body: list[Any]) -> None:
        super().__init__(body=body, type_ignores=[])


# -- ruff ---------------------------------------------------------------------------


def _ruff(args: list[str], text: str, target: str) -> str:
    from ruff.__main__ import find_ruff_bin

    line_length = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]
    done = subprocess.run(
        [find_ruff_bin(), *args, "--line-length", str(line_length), "--stdin-filename", target, "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    if done.returncode not in (0, 1) or not done.stdout:
        raise RuntimeError(f"ruff {' '.join(args)} failed on {target}: {done.stderr}")
    return done.stdout


def generate(source: str, target: str) -> str:
    """The sync twin of `source` (both relative to the package), formatted."""
    path = ROOT / PACKAGE / source
    tree = async_to_sync(parse(path.read_text(), str(path)))
    text = header(f"{PACKAGE}/{source}") + Unparser().visit(tree) + "\n"
    target_path = f"{PACKAGE}/{target}"
    # Imports only the async face used go; the rest are sorted.
    text = _ruff(["check", "--fix", "--quiet", "--select", "F401,I001", "--exit-zero"], text, target_path)
    return _ruff(["format", "--quiet"], text, target_path)


# A file named in a docstring or a comment: ``reads_async.py``, ``engine/chain.py``.
_FILE_REFERENCE = re.compile(r"(?<![\w/.-])((?:[a-z_]+/)*[a-z_]+\.py)\b")


def stale_references() -> list[str]:
    """The places in the package's code that name a file of it that is not
    there (a module renamed or moved since): ``path:line: name``. Files of
    the repository outside the package (``tools/``, ``tests/``...) are not
    checked here."""
    package = ROOT / PACKAGE
    files = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    stale = []
    for path in sorted(package.rglob("*.py")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for match in _FILE_REFERENCE.finditer(line):
                name = match.group(1)
                if name.startswith(("tools/", "tests/", "benchmarks/", f"{PACKAGE}/")):
                    continue
                if not any(f == name or f.endswith("/" + name) for f in files):
                    stale.append(f"{path.relative_to(ROOT)}:{number}: {name}")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the stale twins")
    opts = parser.parse_args(argv)
    stale = []
    for source, target in FILES.items():
        wanted = generate(source, target)
        path = ROOT / PACKAGE / target
        if path.exists() and path.read_text() == wanted:
            continue
        stale.append(f"{PACKAGE}/{target}")
        if not opts.check:
            path.write_text(wanted)
    if opts.check and stale:
        print(f"out of date: {', '.join(stale)}; run tools/async_to_sync.py", file=sys.stderr)
        return 1
    # The twins' headers and docstrings name files: so do the rest of the code's.
    missing = stale_references()
    for place in missing:
        print(f"{place} names a file the package does not have", file=sys.stderr)
    return 1 if missing else 0


if __name__ == "__main__":
    raise SystemExit(main())
