"""Shared fixtures: real Redis and Postgres, a fresh database / key prefix per test.

Servers come from LANGGRAPH_DURABLE_TEST_POSTGRES_URL and
LANGGRAPH_DURABLE_TEST_REDIS_URL. When one is missing, its tests skip
locally but FAIL under CI=true: CI must never pass by skipping. The
archive's tests start moto's S3 server on loopback themselves (or use
LANGGRAPH_DURABLE_TEST_S3_ENDPOINT), with a bucket of their own.
"""

from __future__ import annotations

import os
import queue
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NoReturn
from urllib.parse import urlsplit

import psycopg
import pytest
import redis as redis_lib
from hypothesis import settings

from langgraph_durable import DurableSaver
from tests.flat_options import durable_options

POSTGRES_URL = os.environ.get("LANGGRAPH_DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("LANGGRAPH_DURABLE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Hypothesis' own "ci" profile (loaded whenever CI is set) derandomizes: every
# CI run would replay the same examples and explore nothing new. Ours draws
# fresh examples on every run, keeps no example database (the checkout is
# fresh), and prints the `@reproduce_failure` line that replays a failure.
settings.register_profile("explore", settings.get_profile("ci"), derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("LANGGRAPH_DURABLE_HYPOTHESIS_PROFILE", "explore"))

# Every non-empty combination of tiers, nearest first.
CONFIGS = [
    "sqlite",
    "redis",
    "postgres",
    "sqlite+redis",
    "sqlite+postgres",
    "redis+postgres",
    "sqlite+redis+postgres",
]


# A pytest-xdist worker may start with COLUMNS and LINES set that the command
# line never had (GNU readline exports them when something imports it), and
# the CLI's output is as wide as COLUMNS says. The controller notes what the
# command line had; each worker puts that back before any test.
_TERMINAL = ("COLUMNS", "LINES")


def pytest_configure(config: pytest.Config) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:
        for name in _TERMINAL:
            os.environ[f"LGD_TEST_GIVEN_{name}"] = os.environ.get(name, "")
        return
    for name in _TERMINAL:
        given = os.environ.get(f"LGD_TEST_GIVEN_{name}")
        if given == "":
            os.environ.pop(name, None)
        elif given is not None:
            os.environ[name] = given


# The longest tests, started first: on several workers the suite then ends
# with short tests instead of waiting for one long one that began last.
LONG_FIRST = ("test_benchmarks.py", "test_crash_harness.py", "test_load.py", "test_stalled.py", "test_lease.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: i for i, name in enumerate(LONG_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONG_FIRST)))  # stable: the rest keep their order


def unavailable(message: str) -> NoReturn:
    """A server or program a test needs is missing: skip locally, FAIL under
    CI=true (CI must never pass by skipping). Every such skip goes through here."""
    if IN_CI:
        pytest.fail(message)
    pytest.skip(message)


def _missing(what: str, exc: Exception) -> NoReturn:
    unavailable(f"{what} is not reachable ({exc}); start it or set its LANGGRAPH_DURABLE_TEST_* URL")


def database_url(base: str, name: str) -> str:
    head, _, tail = base.rpartition("/")
    query = ""
    if "?" in tail:
        query = "?" + tail.split("?", 1)[1]
    return f"{head}/{name}{query}"


class DatabaseSupply:
    """Fresh, empty test databases made ahead and dropped behind.

    Creating a database and dropping it again costs up to a second on a busy
    server. A thread of the worker's own keeps a few made before they are
    asked for and drops the used ones while the next tests run, so a test
    waits for neither. Each database is still new and empty (no template: the
    tests of what a command creates need nothing there).
    """

    AHEAD = 2

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._ready: queue.Queue[str | BaseException] = queue.Queue()
        self._drop: queue.Queue[str] = queue.Queue()
        self._wanted = threading.Semaphore(self.AHEAD)
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._work, name="test-databases", daemon=True)
        self._thread.start()

    def _work(self) -> None:
        try:
            admin = psycopg.connect(self.base_url, autocommit=True, connect_timeout=5)
        except psycopg.OperationalError as exc:
            self._ready.put(exc)
            return
        with admin:
            while not self._closing.is_set():
                while True:  # drops first: they free what the server holds
                    try:
                        name = self._drop.get_nowait()
                    except queue.Empty:
                        break
                    self._drop_now(admin, name)
                if self._wanted.acquire(timeout=0.05):
                    name = f"lgd_test_{uuid.uuid4().hex[:16]}"
                    try:
                        admin.execute(f'CREATE DATABASE "{name}"')
                    except psycopg.Error as exc:
                        self._ready.put(exc)
                        return
                    self._ready.put(name)
            # close() comes after every give_back: what is queued is all there is.
            while True:
                try:
                    name = self._drop.get_nowait()
                except queue.Empty:
                    break
                self._drop_now(admin, name)
            while True:  # made ahead and never used
                try:
                    made = self._ready.get_nowait()
                except queue.Empty:
                    break
                if isinstance(made, str):
                    self._drop_now(admin, made)

    @staticmethod
    def _drop_now(admin: psycopg.Connection[Any], name: str) -> None:
        try:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        except psycopg.Error as exc:  # one database left behind must not stop the supply
            print(f"test database {name} not dropped: {exc}", file=sys.stderr)

    def take(self) -> str:
        """The name of a new, empty database; the test's to use, then `give_back`."""
        made = self._ready.get(timeout=60)
        if isinstance(made, BaseException):
            self._ready.put(made)  # every later test sees the same cause
            raise made
        self._wanted.release()
        return made

    def give_back(self, name: str) -> None:
        self._drop.put(name)

    def close(self) -> None:
        self._closing.set()  # the thread sees it within a poll, drops what is queued, and ends
        self._thread.join(timeout=120)


@pytest.fixture(scope="session")
def database_supply() -> Iterator[DatabaseSupply]:
    supply = DatabaseSupply(POSTGRES_URL)
    try:
        yield supply
    finally:
        supply.close()


@pytest.fixture
def postgres_url(database_supply: DatabaseSupply) -> Iterator[str]:
    """A URL to a fresh, empty database, dropped after the test."""
    try:
        name = database_supply.take()
    except psycopg.OperationalError as exc:
        _missing("Postgres", exc)
    try:
        yield database_url(POSTGRES_URL, name)
    finally:
        database_supply.give_back(name)


@pytest.fixture
def postgres_proxy(postgres_url: str) -> Iterator[tuple[Any, str]]:
    """A TCP proxy in front of the test's Postgres (`tests.proxy.TcpProxy`)
    and the test database's URL through it: cut it to cut Postgres off."""
    from tests.proxy import TcpProxy

    parts = urlsplit(postgres_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5432
    with TcpProxy(host, port) as proxy:
        yield proxy, postgres_url.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")


@pytest.fixture
def redis_proxy() -> Iterator[tuple[Any, str]]:
    """A TCP proxy in front of the test Redis and its URL through it."""
    from tests.proxy import TcpProxy

    parts = urlsplit(REDIS_URL)
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    with TcpProxy(host, port) as proxy:
        yield proxy, REDIS_URL.replace(f"{host}:{port}", f"127.0.0.1:{proxy.port}")


@pytest.fixture
def redis_prefix() -> Iterator[str]:
    """A key prefix no other test uses; its keys are deleted afterwards."""
    prefix = f"lgd_test_{uuid.uuid4().hex[:16]}"
    client = redis_lib.Redis.from_url(REDIS_URL, socket_connect_timeout=5)
    try:
        client.ping()
    except redis_lib.exceptions.ConnectionError as exc:
        client.close()
        _missing("Redis", exc)
    try:
        yield prefix
    finally:
        keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
        if keys:
            client.delete(*keys)
        client.close()


def lose_every_hot_tier(postgres_url: str, redis_prefix: str) -> None:
    """A disaster for the archive's tests: the test's Postgres database
    dropped and created empty, its Redis keys flushed."""
    name = postgres_url.rsplit("/", 1)[1].split("?", 1)[0]
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        admin.execute(f'CREATE DATABASE "{name}"')
    client = redis_lib.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{redis_prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """An S3-compatible endpoint: LANGGRAPH_DURABLE_TEST_S3_ENDPOINT, else a
    moto server started for the session on a free loopback port."""
    given = os.environ.get("LANGGRAPH_DURABLE_TEST_S3_ENDPOINT")
    if given:
        yield given
        return
    from tests.servers import S3Server

    with S3Server() as server:
        yield server.endpoint


def make_bucket(endpoint: str) -> str:
    """A new bucket on `endpoint` (moto accepts unsigned requests)."""
    import urllib.request

    bucket = f"lgd-test-{uuid.uuid4().hex[:16]}"
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/{bucket}", method="PUT"), timeout=10).close()
    return bucket


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The AWS_* variables pointing at the test endpoint; the endpoint."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    return s3_endpoint


@pytest.fixture
def archive_url(s3_env: str) -> str:
    """``s3://BUCKET/PREFIX`` of a bucket of the test's own."""
    try:
        bucket = make_bucket(s3_env)
    except OSError as exc:
        _missing("the S3 test server", exc)
    return f"s3://{bucket}/archive"


SaverFactory = Callable[..., DurableSaver]


@pytest.fixture
def make_saver(request: pytest.FixtureRequest, tmp_path: Path) -> SaverFactory:
    """make_saver("sqlite+redis", **options) -> an unopened DurableSaver.

    Savers made in one test share the same storage (file, prefix, database)
    unless `sqlite_name` differs, as replicas sharing Redis/Postgres would.
    """
    state: dict[str, Any] = {}

    def make(which: str, /, *, sqlite_name: str = "local.sqlite", **options: Any) -> DurableSaver:
        parts = set(which.split("+"))
        unknown = parts - {"sqlite", "redis", "postgres"}
        assert not unknown, unknown
        kwargs: dict[str, Any] = {"sqlite": str(tmp_path / sqlite_name) if "sqlite" in parts else None}
        if "redis" in parts:
            if "redis_prefix" not in state:
                state["redis_prefix"] = request.getfixturevalue("redis_prefix")
            kwargs["redis"] = REDIS_URL
            kwargs["redis_key_prefix"] = state["redis_prefix"]
        if "postgres" in parts:
            if "postgres_url" not in state:
                state["postgres_url"] = request.getfixturevalue("postgres_url")
            kwargs["postgres"] = state["postgres_url"]
        kwargs.update(options)
        return DurableSaver(**durable_options(kwargs))

    return make
