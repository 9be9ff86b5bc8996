"""Helpers both benchmark scripts use to stay on loopback and make fresh databases."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


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
