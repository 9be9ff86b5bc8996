"""Hearing the hand-off channel of a Redis tier: SUBSCRIBE on a connection
of its own (`engine.leases.handoff` runs the listener; the tier's kind
makes these, `tiers/redis/kind.py`)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from ..pools import shut_down


class RedisEars:
    """SUBSCRIBE on a connection of its own, through the tier's sync client
    (a server, a Sentinel master or a cluster)."""

    def __init__(self, client: Any, channel: str) -> None:
        self.client = client
        self.channel = channel
        self.pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            self.pubsub.subscribe(channel)
        except BaseException:
            self.pubsub.close()
            raise

    def hear(self, until: float) -> Iterator[str]:
        while (left := until - time.monotonic()) > 0:
            message = self.pubsub.get_message(timeout=left)
            if message is not None and message.get("type") == "message":
                data = message["data"]
                yield data.decode() if isinstance(data, bytes) else str(data)

    def interrupt(self) -> None:
        """(Another thread.) Make a call waiting on the connection return."""
        with contextlib.suppress(Exception):  # not connected, or closed already
            shut_down(self.pubsub.connection._sock.fileno())

    def close(self) -> None:
        self.pubsub.close()
