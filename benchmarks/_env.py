"""Helpers the benchmark scripts use to stay on loopback, make fresh databases
and Redis key prefixes and remove them again, and describe the machine and
code they measured."""

from __future__ import annotations

import datetime as dt
import importlib.metadata
import ipaddress
import os
import platform
import shlex
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

POSTGRES_URL = os.environ.get("LANGGRAPH_DURABLE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("LANGGRAPH_DURABLE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def is_loopback(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return True
    host = parts.hostname or ""
    if host in ("", "localhost"):
        return True  # libpq: empty host = local unix socket
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def database_url(base: str, name: str) -> str:
    head, _, tail = base.rpartition("/")
    query = "?" + tail.split("?", 1)[1] if "?" in tail else ""
    return f"{head}/{name}{query}"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def machine() -> str:
    """CPUs, CPU model and OS, as the results files print them."""
    return (
        f"{os.cpu_count()} CPUs (nproc {len(os.sched_getaffinity(0))}), {cpu_model()}, "
        f"{platform.system()} {platform.release()}"
    )


def python_version() -> str:
    return f"{platform.python_implementation()} {platform.python_version()}"


def package_versions(names: Iterable[str]) -> str:
    """``name version`` for each installed distribution, ``name not installed`` otherwise."""
    out = []
    for n in names:
        try:
            out.append(f"{n} {importlib.metadata.version(n)}")
        except importlib.metadata.PackageNotFoundError:
            out.append(f"{n} not installed")
    return ", ".join(out)


def git_state(root: Path, package: str = "langgraph_durable") -> str:
    """Commit of the checkout, and whether the package differs from it (figures are for the working tree)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", package],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not head:
        return "unknown"
    return head + (f" + uncommitted changes in {package}/" if dirty else " (clean)")


def run_lines(
    script: str,
    *,
    quick: bool,
    started: dt.datetime,
    wall: float,
    load: tuple[float, float],
    code: str,
    packages: Iterable[str],
) -> list[str]:
    """The lines every results file opens with: when, the command as run,
    the machine and its load (start, end), Python, the code and packages."""
    cmd = f"python benchmarks/{script}" + "".join(" " + shlex.quote(a) for a in sys.argv[1:])
    return [
        f"- Date: {started.strftime('%Y-%m-%d %H:%M:%S %Z')} (run took {wall:.0f} s)",
        f"- Command: `{cmd}`" + (" (quick mode)" if quick else ""),
        f"- Machine: {machine()}; 1-minute load average {load[0]:.2f} at start, {load[1]:.2f} at end",
        f"- Python: {python_version()}",
        f"- Code measured: langgraph_durable at git {code} (at start of run)",
        f"- Packages: {package_versions(packages)}",
    ]


def exit_on_sigterm() -> None:
    """SIGTERM -> SystemExit, so a script's ``finally`` still drops databases and keys (Ctrl-C already
    raises KeyboardInterrupt)."""

    def on_term(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_term)


class Resources:
    """Everything a run creates outside the process, and its cleanup.

    Every database, Redis key prefix and the temp dir of a run are named ``<name>_<run id>[_<tag>]``,
    so that cleanup finds all of them by that name: databases are dropped ``WITH (FORCE)``, Redis keys
    matching ``<name>_<run id>_*`` are deleted, the temp dir is removed.
    """

    def __init__(self, name: str, run_id: str, postgres_url: str = POSTGRES_URL, redis_url: str = REDIS_URL) -> None:
        self.name = name
        self.run_id = run_id
        self.postgres_url = postgres_url
        self.redis_url = redis_url
        self.databases: list[str] = []
        self.redis_prefixes: list[str] = []
        self.tmp = tempfile.TemporaryDirectory(prefix=f"{name}_{run_id}_")
        self.tmp_path = Path(self.tmp.name)
        self.postgres_down: str | None = None  # None = reachable, else why not
        self.redis_down: str | None = None
        self.server_versions: dict[str, str] = {}

    @property
    def down(self) -> list[str]:
        """Why each unusable server is unusable (empty once probe() found both usable)."""
        return [why for why in (self.postgres_down, self.redis_down) if why]

    def probe(self) -> bool:
        """Check both servers (loopback only) and note their versions; whether both are usable."""
        import psycopg
        import redis as redis_lib

        if not is_loopback(self.postgres_url):
            self.postgres_down = "LANGGRAPH_DURABLE_TEST_POSTGRES_URL is not a loopback address (refused)"
        else:
            try:
                with psycopg.connect(self.postgres_url, autocommit=True, connect_timeout=5) as c:
                    row = c.execute("SHOW server_version").fetchone()
                    version = str(row[0]) if row else "?"
                    # Whether a commit waits for the disk: it sets what a
                    # Postgres write costs, so every ratio to PostgresSaver.
                    settings = [
                        f"{name} {c.execute(f'SHOW {name}').fetchone()[0]}"  # type: ignore[index]
                        for name in ("fsync", "synchronous_commit")
                    ]
                    self.server_versions["postgres"] = f"{version} ({', '.join(settings)})"
            except Exception as exc:
                self.postgres_down = f"Postgres unreachable: {exc}"
        if not is_loopback(self.redis_url):
            self.redis_down = "LANGGRAPH_DURABLE_TEST_REDIS_URL is not a loopback address (refused)"
        else:
            try:
                client = redis_lib.Redis.from_url(self.redis_url, socket_connect_timeout=5)
                try:
                    self.server_versions["redis"] = str(client.info("server").get("redis_version"))
                    self.redis_probed(client)
                finally:
                    client.close()
            except Exception as exc:
                self.redis_down = f"Redis unreachable: {exc}"
        return not self.down

    def redis_probed(self, client: Any) -> None:
        """Hook: more questions to the reachable Redis during probe() (nothing by default)."""

    def unavailable(self, needs: Iterable[str]) -> str | None:
        """Why a configuration needing these servers cannot run, or None."""
        needs = set(needs)
        if "postgres" in needs and self.postgres_down:
            return self.postgres_down
        if "redis" in needs and self.redis_down:
            return self.redis_down
        return None

    def new_database(self, tag: str | None = None) -> str:
        """A fresh database ``<name>_<run id>[_<tag>]``; its URL."""
        import psycopg

        name = f"{self.name}_{self.run_id}" + (f"_{tag}" if tag else "")
        self.databases.append(name)  # before CREATE: cleanup uses IF EXISTS
        with psycopg.connect(self.postgres_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        return database_url(self.postgres_url, name)

    def new_prefix(self, tag: str) -> str:
        """The Redis key prefix ``<name>_<run id>_<tag>``."""
        prefix = f"{self.name}_{self.run_id}_{tag}"
        self.redis_prefixes.append(prefix)
        return prefix

    def cleanup(self) -> list[str]:
        """Remove all the run created; what could not be removed, as notes."""
        notes: list[str] = []
        if self.databases:
            try:
                import psycopg

                with psycopg.connect(self.postgres_url, autocommit=True, connect_timeout=5) as admin:
                    for name in self.databases:
                        try:
                            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                        except Exception as exc:
                            notes.append(f"could not drop database {name}: {exc}")
            except Exception as exc:
                notes.append(f"could not connect to drop databases {self.databases}: {exc}")
        if self.redis_prefixes:
            pattern = f"{self.name}_{self.run_id}_*"  # every prefix of this run
            try:
                import redis as redis_lib

                client = redis_lib.Redis.from_url(self.redis_url, socket_connect_timeout=5)
                try:
                    keys = list(client.scan_iter(match=pattern, count=1000))
                    for i in range(0, len(keys), 500):
                        client.delete(*keys[i : i + 500])
                    left = sum(1 for _ in client.scan_iter(match=pattern, count=1000))
                    if left:
                        notes.append(f"{left} Redis keys {pattern} left after delete")
                finally:
                    client.close()
            except Exception as exc:
                notes.append(f"could not delete Redis keys {pattern}: {exc}")
        try:
            self.tmp.cleanup()
        except Exception as exc:
            notes.append(f"could not remove the temp dir {self.tmp_path.name}: {exc}")
        return notes


def target_line(number: int, what: str, measured: str, met: bool | None) -> str:
    """One line of a script's ``## Targets`` section: the project's target
    `number` (as `benchmarks/README.md` lists them), what was measured, and
    the verdict as the line's last words, ``met``, ``missed`` or ``not
    measured`` (`met` None), which `bench_all.py` collects."""
    verdict = "not measured" if met is None else "met" if met else "missed"
    return f"- ({number}) {what}: {measured}: {verdict}"
