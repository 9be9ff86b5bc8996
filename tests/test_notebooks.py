"""Every notebook in notebooks/ runs top to bottom (code cells in order, one
namespace, top-level await allowed), so the notebooks move with the code.

Each runs twice: on the embedded default (no tier configured in the
environment: SQLite alone) and with the test Redis and a fresh Postgres
database named by ``LANGGRAPH_DURABLE_REDIS_URL`` /
``LANGGRAPH_DURABLE_POSTGRES_URL``, as `DurableSaver.from_env` reads them.
A notebook keeps its Redis keys under a prefix of its own run
(``REDIS_KEY_PREFIX``, since from_env takes a prefix only as the
``Tiers(redis_key_prefix=)`` option) and removes them; the test checks that it did,
and removes what a failed run left. On Redis and Postgres the test also
checks, after each cell, that the notebook wrote there: keys under its
prefix, checkpoints in the database (a notebook that ignored the environment
would run on SQLite alone twice).
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis as redis_lib

from langgraph_durable.saver import (
    ENV_OLD_SIGNING_KEYS,
    ENV_POSTGRES_URL,
    ENV_REDIS_URL,
    ENV_SIGNING_KEY,
    ENV_SQLITE,
    ENV_WRITE,
)

from .conftest import REDIS_URL

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))
MODES = ["embedded", "redis+postgres"]


def test_there_are_notebooks() -> None:
    assert NOTEBOOKS


@pytest.fixture(params=MODES)
def tiers(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The environment a notebook runs in: no tier configured, or the test
    Redis and a fresh Postgres database."""
    for var in (ENV_SQLITE, ENV_REDIS_URL, ENV_POSTGRES_URL, ENV_WRITE, ENV_SIGNING_KEY, ENV_OLD_SIGNING_KEYS):
        monkeypatch.delenv(var, raising=False)
    if request.param == "redis+postgres":
        request.getfixturevalue("redis_prefix")  # skips (fails under CI) if Redis is not reachable
        monkeypatch.setenv(ENV_REDIS_URL, REDIS_URL)
        monkeypatch.setenv(ENV_POSTGRES_URL, request.getfixturevalue("postgres_url"))
    yield request.param


def _redis_keys(prefix: str) -> list[bytes]:
    client = redis_lib.Redis.from_url(REDIS_URL)
    try:
        return list(client.scan_iter(match=f"{prefix}:*", count=1000))
    finally:
        client.close()


def _postgres_checkpoints(url: str) -> int:
    """Checkpoint rows in the run's own database (none before its tables exist)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('lgd_checkpoints')").fetchone()
        if row is None or row[0] is None:
            return 0
        (count,) = conn.execute("SELECT count(*) FROM lgd_checkpoints").fetchone() or (0,)
        return int(count)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path: Path, tiers: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # also restores the working directory a notebook changes
    cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
    # A real module, as in a kernel: typing resolves annotations through it.
    module = types.ModuleType("__notebook__")
    monkeypatch.setitem(sys.modules, "__notebook__", module)
    namespace = module.__dict__
    postgres_url = os.environ.get(ENV_POSTGRES_URL)
    # Whether the notebook's Redis keys / Postgres rows were there after some
    # cell: it removes them at its end, so they are looked for along the way.
    wrote = {"redis": False, "postgres": False}
    loop = asyncio.new_event_loop()
    try:
        for i, cell in enumerate(cells):
            source = "".join(cell["source"])
            code = compile(source, f"{path.name}[{i}]", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            result = eval(code, namespace)
            if inspect.iscoroutine(result):
                loop.run_until_complete(result)
            if tiers != "embedded":
                prefix = namespace.get("REDIS_KEY_PREFIX")
                wrote["redis"] = wrote["redis"] or (isinstance(prefix, str) and bool(_redis_keys(prefix)))
                wrote["postgres"] = wrote["postgres"] or (
                    postgres_url is not None and _postgres_checkpoints(postgres_url) > 0
                )
    finally:
        loop.close()
        prefix = namespace.get("REDIS_KEY_PREFIX")
        left = _redis_keys(prefix) if tiers != "embedded" and isinstance(prefix, str) else []
        if left:
            client = redis_lib.Redis.from_url(REDIS_URL)
            client.delete(*left)
            client.close()
    assert left == [], f"{path.name} left {len(left)} Redis key(s) behind"
    if tiers != "embedded":
        assert wrote == {"redis": True, "postgres": True}, f"{path.name} did not use the tiers it was given: {wrote}"
