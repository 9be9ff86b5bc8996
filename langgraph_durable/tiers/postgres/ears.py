"""Hearing the hand-off channel of a Postgres tier: LISTEN on a connection
of its own (`engine.leases.handoff` runs the listener; the tier's kind
makes these, `tiers/postgres/kind.py`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import psycopg
from psycopg import sql

from ..pools import shut_down, watched
from .tier import _KEEPALIVES


class PostgresEars:
    """LISTEN on a connection of its own (autocommit, so a NOTIFY is sent at
    once), with TCP keepalives. The LISTEN is bounded by `call_timeout`
    (None: `connect_timeout`), past which its socket is shut down."""

    def __init__(self, url: str, connect_timeout: float, channel: str, *, call_timeout: float | None = None) -> None:
        bound = connect_timeout if call_timeout is None else call_timeout
        self.conn = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=max(1, int(connect_timeout)),
            application_name="lgd-hand-off",
            **_KEEPALIVES,
            tcp_user_timeout=int(1000 * max(bound, connect_timeout)),
        )
        try:
            with watched(self.conn, bound):
                self.conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        except BaseException:
            self.conn.close()
            raise

    def hear(self, until: float) -> Iterator[str]:
        left = until - time.monotonic()
        if left > 0:
            for notify in self.conn.notifies(timeout=left):
                yield notify.payload

    def interrupt(self) -> None:
        """(Another thread.) Make a call waiting on the connection return."""
        with contextlib.suppress(Exception):  # closed already: nothing waits on it
            shut_down(self.conn.pgconn.socket)

    def close(self) -> None:
        self.conn.close()
