"""Private servers a test may kill: a `redis-server` of its own on a free
loopback port (no persistence, like the shared one), restartable on the
same port; a PostgreSQL server of its own that asks for passwords."""

from __future__ import annotations

import contextlib
import glob
import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from types import TracebackType

import psycopg
import pytest

# Ports for the servers tests start, handed out below the kernel's ephemeral
# range (32768-60999 on Linux), so a port given to a test is never the one
# the kernel picks for a TcpProxy's bind(0) or an outgoing connection. Each
# pytest-xdist worker owns a block of its own: between asking for a port and
# the server binding it, no other worker can be handed the same one. A
# random start inside the block keeps two sessions on one machine apart too.
PORT_BLOCK = 800
PORT_BASE = 10000  # + 10000 for a cluster node's bus port stays below 32768
_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
_BLOCK_START = PORT_BASE + (int(_WORKER) % 12 if _WORKER.isdigit() else 0) * PORT_BLOCK
_next_port = random.randrange(PORT_BLOCK)


def free_port() -> int:
    """A loopback port nothing listens on now and no other worker is handed."""
    global _next_port
    for _ in range(PORT_BLOCK):
        port = _BLOCK_START + _next_port % PORT_BLOCK
        _next_port += 1
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free loopback port in {_BLOCK_START}-{_BLOCK_START + PORT_BLOCK - 1}")


class PrivateRedis:
    """``with PrivateRedis() as r: r.url ... r.kill() ... r.start()``."""

    def __init__(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.fail("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.dir = tempfile.mkdtemp(prefix="lgd-redis-")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        raise RuntimeError(f"private redis-server on port {self.port} did not start")

    def kill(self) -> None:
        """SIGKILL: the server and everything it held are gone."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


class S3Server:
    """An S3-compatible server on a free loopback port: moto's (the ``test``
    extra installs it), in a process of its own that a test may kill.
    ``with S3Server() as s3: s3.endpoint ...``."""

    def __init__(self) -> None:
        import sys

        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.command = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(self.port)]
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        try:
            import moto.server  # noqa: F401
        except ImportError:
            from tests.conftest import unavailable

            unavailable("moto's S3 server is not installed (pip install 'moto[server]', part of the test extra)")
        self.proc = subprocess.Popen(self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"moto's S3 server on port {self.port} did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> S3Server:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.kill()


class PrivatePostgres:
    """A PostgreSQL server of its own on a free loopback port, in a temp
    directory, whose ``pg_hba.conf`` asks every TCP client for a password
    (scram-sha-256): the shared server trusts 127.0.0.1, so it accepts a
    wrong password. ``with PrivatePostgres() as pg: pg.url(password=...)``.

    Role `USER` has password `PASSWORD`; database `DB` exists."""

    USER = "lgd_user"
    PASSWORD = "right-password"
    DB = "lgd_db"

    def __init__(self) -> None:
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        found = shutil.which("initdb")
        initdb = found or (bins[-1] if bins else None)
        if initdb is None:
            pytest.fail("initdb is not installed (apt-get install postgresql)")
        self.bin = os.path.dirname(initdb)
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="lgd-pg-")
        self.data = os.path.join(self.dir, "data")
        # initdb and postgres refuse to run as root: run them as `postgres`.
        self.user: str | None = None
        if os.geteuid() == 0:
            self.user = "postgres"
            shutil.chown(self.dir, user=self.user)

    def _run(self, *argv: str) -> None:
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, user=self.user)

    def url(self, *, user: str | None = None, password: str | None = None, db: str | None = None) -> str:
        auth = f"{user or self.USER}:{self.PASSWORD if password is None else password}"
        return f"postgresql://{auth}@127.0.0.1:{self.port}/{db or self.DB}"

    def start(self) -> None:
        pwfile = os.path.join(self.dir, "pw")
        with open(pwfile, "w") as f:
            f.write("superpw\n")
        if self.user is not None:
            shutil.chown(pwfile, user=self.user)
        self._run(os.path.join(self.bin, "initdb"), "-D", self.data, "-U", "lgd_super", "--pwfile", pwfile,
                  "--auth-local=trust", "--auth-host=scram-sha-256")  # fmt: skip
        sock = os.path.join(self.dir, "sock")
        os.mkdir(sock)
        if self.user is not None:
            shutil.chown(sock, user=self.user)
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={sock} -c fsync=off"
        self._run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-o", opts, "-w", "-l",
                  os.path.join(self.dir, "log"), "start")  # fmt: skip
        with psycopg.connect(f"postgresql://lgd_super:superpw@127.0.0.1:{self.port}/postgres", autocommit=True) as c:
            c.execute(f"CREATE ROLE {self.USER} LOGIN PASSWORD '{self.PASSWORD}'")
            c.execute(f"CREATE DATABASE {self.DB} OWNER {self.USER}")

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._run(os.path.join(self.bin, "pg_ctl"), "-D", self.data, "-m", "immediate", "stop")

    def __enter__(self) -> PrivatePostgres:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
