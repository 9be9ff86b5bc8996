"""A small run of the growth benchmark: it works end to end and its checks pass.

Timings are never asserted (the machine's noise is larger than any
threshold worth having); what is asserted is that every measurement ran on
real servers, read back what it wrote, and cleaned up after itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from .conftest import POSTGRES_URL, REDIS_URL

ROOT = Path(__file__).resolve().parent.parent


def test_a_small_growth_benchmark_runs_and_every_check_passes() -> None:
    tiny = [
        "--quick", "--long-steps", "20", "--threads", "1", "--reads", "5", "--history", "60",
        "--list-reads", "3", "--concurrent", "3", "--rounds", "1", "--resume-repeats", "1",
        "--only", "sqlite_stock,pg_stock,d_s,d_srp", "--no-write",
    ]  # fmt: skip
    env = {
        **os.environ,
        "LANGGRAPH_DURABLE_TEST_POSTGRES_URL": POSTGRES_URL,
        "LANGGRAPH_DURABLE_TEST_REDIS_URL": REDIS_URL,
    }
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_growth.py"), *tiny],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    problems = out[out.rindex("## Problems") :]
    assert "None." in problems, problems
    for section in ("Time per super-step", "get_state", "limit=10", "concurrent", "restart", "Bytes stored"):
        assert section in out, section
    assert "Durable sqlite+redis+postgres" in out


def test_the_checksum_benchmark_runs_and_its_patch_counts_add_up() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_checksums.py"), "--quick", "--no-write"],
        cwd=ROOT,
        env={
            **os.environ,
            "LANGGRAPH_DURABLE_TEST_POSTGRES_URL": POSTGRES_URL,
            "LANGGRAPH_DURABLE_TEST_REDIS_URL": REDIS_URL,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "No problems." in done.stdout[done.stdout.rindex("### Checks") :]
    assert "sqlite+redis+postgres" in done.stdout


def test_the_hand_off_benchmark_runs_and_each_replica_reads_the_others_state() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_handoff.py"), "--threads", "3", "--no-write"],
        cwd=ROOT,
        env={
            **os.environ,
            "LANGGRAPH_DURABLE_TEST_POSTGRES_URL": POSTGRES_URL,
            "LANGGRAPH_DURABLE_TEST_REDIS_URL": REDIS_URL,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "None." in done.stdout[done.stdout.rindex("## Problems") :]
    # Every thread A kept was handed off to B: 3 timed and 3 untimed.
    assert "| Durable sqlite+redis+postgres, A with lease_linger=30 |" in done.stdout
    assert done.stdout.count("| 6 |") == 2, done.stdout
