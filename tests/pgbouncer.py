"""A private PgBouncer in transaction pooling mode, in front of the test
Postgres, on a free loopback port: what many replicas of an agent usually
reach Postgres through. Started and killed by the test that uses it.

Every database of the server is reachable through it under its own name
(a ``*`` entry), so a fresh database made by the `postgres_url` fixture is
too: `url_for` turns that fixture's URL into one through the pooler.
"""

from __future__ import annotations

import getpass
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from urllib.parse import quote

import psycopg
from psycopg.conninfo import conninfo_to_dict

from .conftest import unavailable
from .servers import free_port

# PgBouncer tracks protocol-level prepared statements from 1.21 on, when
# max_prepared_statements > 0; it is 200 by default from 1.22. Set to 0 there,
# so prepared statements break as they do on older versions (which know no
# such setting and refuse to start with it).
_TRACKS_PREPARED = (1, 21)


def _version(binary: str) -> tuple[int, ...]:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    m = re.search(r"PgBouncer (\d+)\.(\d+)", out)
    if m is None:
        raise RuntimeError(f"cannot tell the version of {binary} from {out!r}")
    return int(m.group(1)), int(m.group(2))


class PrivateBouncer:
    """``with PrivateBouncer(server_url) as b: b.url_for(database_url) ...``.

    Locally a missing ``pgbouncer`` binary skips the test; under CI=true it
    fails it (CI must never pass by skipping).
    """

    def __init__(self, server_url: str) -> None:
        # Debian installs it in sbin, which a non-root PATH may lack.
        binary = shutil.which("pgbouncer", path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin"]))
        if binary is None:
            unavailable("pgbouncer is not installed (apt-get install pgbouncer)")
        self.binary = binary
        self.version = _version(binary)
        server = conninfo_to_dict(server_url)
        self.server_url = server_url
        self.user = str(server.get("user") or getpass.getuser())
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="lgd-pgbouncer-"))
        self.log = self.dir / "pgbouncer.log"
        self.proc: subprocess.Popen[bytes] | None = None
        target = f"host={server.get('host') or '127.0.0.1'} port={server.get('port') or 5432}"
        password = str(server.get("password") or "")
        (self.dir / "users.txt").write_text(f'"{self.user}" "{password}"\n')
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": str(self.port),
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": str(self.dir / "users.txt"),
            "pool_mode": "transaction",
            "max_client_conn": "1000",
            "default_pool_size": "8",
        }
        if self.version >= _TRACKS_PREPARED:
            settings["max_prepared_statements"] = "0"
        ini = [f"[databases]\n* = {target}\n[pgbouncer]\n"] + [f"{k} = {v}\n" for k, v in settings.items()]
        self.ini = self.dir / "pgbouncer.ini"
        self.ini.write_text("".join(ini))

    def url_for(self, database_url: str) -> str:
        """The same database and user as `database_url`, through the pooler."""
        dbname = conninfo_to_dict(database_url).get("dbname") or self.user
        return f"postgresql://{quote(self.user, safe='')}@127.0.0.1:{self.port}/{quote(str(dbname), safe='')}"

    def start(self) -> None:
        # PgBouncer refuses to run as root; it reads its files first, then
        # becomes `nobody`.
        user = ["-u", "nobody"] if os.geteuid() == 0 else []
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [self.binary, *user, str(self.ini)], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        probe = self.url_for(self.server_url)
        deadline = time.monotonic() + 15
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                with psycopg.connect(probe, connect_timeout=2, autocommit=True) as conn:
                    conn.execute("SELECT 1")
                return
            except psycopg.OperationalError as exc:
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"pgbouncer on port {self.port} did not answer ({exc}):\n{self.tail()}") from exc
                time.sleep(0.05)

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()  # SIGTERM: PgBouncer exits at once, closing every connection
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def __enter__(self) -> PrivateBouncer:
        self.start()
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)
