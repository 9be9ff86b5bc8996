"""Helpers the benchmark scripts use to stay on loopback, make fresh databases
and describe the machine and code they measured."""

from __future__ import annotations

import importlib.metadata
import ipaddress
import os
import platform
import subprocess
from collections.abc import Iterable
from pathlib import Path
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
