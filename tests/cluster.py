"""A real Redis Cluster of three primaries on free loopback ports, and a
Sentinel-watched primary, for the tests to use and to kill.

Each node is a `redis-server` of our own (no persistence, like the shared
server), so a node killed with SIGKILL comes back empty but, from its
``nodes-<port>.conf``, with the same id and slots: the rest of the cluster
takes it back as it was.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Self

import redis as redis_lib

from .conftest import unavailable
from .servers import free_port

STARTUP_TIMEOUT_S = 20.0
CLUSTER_BUS_OFFSET = 10000  # a node also listens on its port + 10000


def _cluster_port() -> int:
    """A free loopback port whose cluster bus port (+10000) is free too."""
    for _ in range(100):
        port = free_port()
        if port + CLUSTER_BUS_OFFSET > 65535:
            continue
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + CLUSTER_BUS_OFFSET))
        except OSError:
            continue
        return port
    raise RuntimeError("no free pair of loopback ports for a cluster node")


def _binary(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        unavailable(f"{name} is not installed (apt-get install redis-server)")
    return path


def _ask(port: int, *command: str, timeout: float = 1.0) -> Any:
    """One command to one node, the reply as redis-py parses it; None if the
    node does not answer."""
    client = redis_lib.Redis(host="127.0.0.1", port=port, socket_timeout=timeout, socket_connect_timeout=timeout)
    try:
        return client.execute_command(*command)
    except redis_lib.RedisError:
        return None
    finally:
        client.close()


def _wait(what: str, ready: Any, timeout: float = STARTUP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not happen within {timeout:.0f} s")


class _Processes:
    """Private servers: `start` them (stopping what did start if that
    fails) on entry, `stop` them on exit."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.stop()


class RedisClusterProcesses(_Processes):
    """``with RedisClusterProcesses() as c: c.url ... c.kill(port) ... c.restart(port)``."""

    def __init__(self, primaries: int = 3) -> None:
        self.server = _binary("redis-server")
        self.cli = _binary("redis-cli")
        self.ports = [_cluster_port() for _ in range(primaries)]
        self.dir = tempfile.mkdtemp(prefix="lgd-cluster-")
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        """A plain ``redis://`` URL of one node: the saver finds the rest."""
        return f"redis://127.0.0.1:{self.ports[0]}/0"

    def url_of(self, port: int) -> str:
        return f"redis://127.0.0.1:{port}/0"

    def _spawn(self, port: int) -> None:
        self.procs[port] = subprocess.Popen(
            [self.server, "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-config-file", f"nodes-{port}.conf", "--cluster-node-timeout", "2000",
             "--appendonly", "no", "--save", "", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _wait(f"redis-server on port {port} answering", lambda: _ask(port, "PING") is True)

    def start(self) -> None:
        for port in self.ports:
            self._spawn(port)
        create = subprocess.run(
            [self.cli, "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports),
             "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            timeout=60,
        )  # fmt: skip
        if create.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {create.stdout.decode()} {create.stderr.decode()}")
        self.wait_ok()

    def state_ok(self, port: int) -> bool:
        info = _ask(port, "CLUSTER INFO")
        return isinstance(info, dict) and info.get("cluster_state") == "ok"

    def wait_ok(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """Every node reports ``cluster_state:ok`` and knows every node."""
        _wait("cluster_state:ok on every node", lambda: all(self.state_ok(p) for p in self.ports), timeout)

    def wait_failed(self, port: int, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """The node on `port` reports ``cluster_state:fail`` (a primary it
        counts on is gone: past --cluster-node-timeout and agreed by a majority)."""
        _wait(f"cluster_state:fail on port {port}", lambda: not self.state_ok(port), timeout)

    def slot_ranges(self) -> list[tuple[int, int, int]]:
        """(first slot, last slot, port of the primary serving them)."""
        ranges = []
        for address, node in (_ask(self.ports[0], "CLUSTER NODES") or {}).items():
            if "master" in node["flags"]:
                port = int(address.rsplit(":", 1)[1])
                ranges += [(int(low), int(high), port) for low, high in node["slots"]]
        return ranges

    def kill(self, port: int) -> None:
        """SIGKILL one node: what it held is gone (no persistence)."""
        proc = self.procs.pop(port, None)
        if proc is not None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def restart(self, port: int) -> None:
        """Start a killed node again on its port, from its nodes.conf (same id
        and slots, no data), and wait until the cluster is ok again."""
        self._spawn(port)
        self.wait_ok()

    def stop(self) -> None:
        for port in list(self.procs):
            self.kill(port)
        shutil.rmtree(self.dir, ignore_errors=True)


class SentinelProcesses(_Processes):
    """A primary and one `redis-server --sentinel` watching it as ``mymaster``."""

    SERVICE = "mymaster"

    def __init__(self) -> None:
        self.server = _binary("redis-server")
        self.port = free_port()
        self.sentinel_port = free_port()
        self.dir = tempfile.mkdtemp(prefix="lgd-sentinel-")
        self.procs: list[subprocess.Popen[bytes]] = []

    @property
    def url(self) -> str:
        return f"redis+sentinel://127.0.0.1:{self.sentinel_port}/{self.SERVICE}/0"

    def start(self) -> None:
        command = [self.server, "--port", str(self.port), "--bind", "127.0.0.1", "--appendonly", "no", "--save", "",
                   "--dir", self.dir]  # fmt: skip
        self.procs.append(subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        _wait(f"redis-server on port {self.port}", lambda: _ask(self.port, "PING") is True)
        conf = os.path.join(self.dir, "sentinel.conf")
        with open(conf, "w") as f:
            f.write(
                f"port {self.sentinel_port}\nbind 127.0.0.1\ndir {self.dir}\n"
                f"sentinel monitor {self.SERVICE} 127.0.0.1 {self.port} 1\n"
                f"sentinel down-after-milliseconds {self.SERVICE} 2000\n"
            )
        self.procs.append(
            subprocess.Popen([self.server, conf, "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        )
        _wait(
            "the sentinel knowing its primary",
            lambda: _ask(self.sentinel_port, "SENTINEL GET-MASTER-ADDR-BY-NAME", self.SERVICE) is not None,
        )

    def stop(self) -> None:
        for proc in self.procs:
            proc.kill()
            proc.wait()
        self.procs = []
        shutil.rmtree(self.dir, ignore_errors=True)


def started(factory: Any, what: str) -> Iterator[Any]:
    """Yield a started set of servers; one that cannot start fails the tests
    under CI and skips them elsewhere (like a missing shared server)."""
    try:
        servers = factory()
        servers.__enter__()
    except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
        unavailable(f"{what} could not be started: {exc}")
    try:
        yield servers
    finally:
        servers.stop()
