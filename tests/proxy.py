"""A loopback TCP proxy for fault injection: put it between the saver and a
real server, then cut it to make the server vanish mid-run."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from types import TracebackType


class TcpProxy:
    """Forwards 127.0.0.1:<port> to target. `cut()` drops every connection
    and refuses new ones; `stall()` keeps them open but forwards nothing (a
    server that hangs); `restore()` ends both. `connect_delay` seconds pass
    before a new connection reaches the server (a slow connect); `delay`
    seconds before each chunk is forwarded, either way (a slow server)."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._up = True
        self._stalled = False
        self._closed = False
        self.connect_delay = 0.0
        self.delay = 0.0
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            if not self._up:
                client.close()
                continue
            if self.connect_delay:
                threading.Thread(target=self._open, args=(client, self.connect_delay), daemon=True).start()
            else:
                self._open(client, 0.0)

    def _open(self, client: socket.socket, delay: float) -> None:
        time.sleep(delay)
        try:
            upstream = socket.create_connection(self.target, timeout=5)
        except OSError:
            client.close()
            return
        # The timeout was for connecting only: a stalled proxy must keep its
        # connections open however long nothing is forwarded.
        upstream.settimeout(None)
        with self._lock:
            # Accepted before a cut() but still connecting upstream while it
            # ran: it must not outlive the cut (cut() holds the lock too).
            if not self._up:
                for s in (client, upstream):
                    s.close()
                return
            self._conns += [client, upstream]
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._seen(data)
                while self._stalled and not self._closed:
                    time.sleep(0.02)
                if self.delay:
                    time.sleep(self.delay)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def _seen(self, data: bytes) -> None:
        """What one side sent, before it is forwarded (a subclass may stall here)."""

    def cut(self) -> None:
        with self._lock:
            self._up = False
            conns, self._conns = self._conns, []
        for s in conns:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()

    def stall(self) -> None:
        self._stalled = True

    def restore(self) -> None:
        self._stalled = False
        self._up = True

    def close(self) -> None:
        self._closed = True
        self.cut()
        self._server.close()

    def __enter__(self) -> TcpProxy:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()
