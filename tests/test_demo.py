"""The README's main job: `langgraph-durable demo` kills a real worker process
with SIGKILL and resumes the thread in a new one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REDIS_URL


def _demo(tmp_path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
    return subprocess.run(
        [sys.executable, "-m", "langgraph_durable", "demo", "--steps", "5", "--kill-after", "2", *flags],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_demo_on_the_embedded_default(tmp_path: Path) -> None:
    done = _demo(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "tiers sqlite" in out
    assert "SIGKILL -> worker" in out
    assert "last checkpoint on disk: step 2/5" in out
    assert "steps in final state  5/5 (in order: True)" in out
    assert "steps lost            0" in out
    assert (tmp_path / ".langgraph_durable" / "checkpoints.sqlite").exists()


@pytest.mark.parametrize("tiers", ["sqlite+redis+postgres", "postgres"])
def test_demo_with_shared_tiers(tmp_path: Path, postgres_url: str, redis_prefix: str, tiers: str) -> None:
    flags = ["--postgres", postgres_url]
    if tiers == "postgres":
        flags += ["--sqlite", ""]
    else:
        flags += ["--redis", REDIS_URL, "--redis-key-prefix", redis_prefix]
    done = _demo(tmp_path, *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"tiers {tiers.replace('+', ' -> ')}" in done.stdout
    assert "steps lost            0" in done.stdout


def test_demo_json_and_a_tier_switched_off(tmp_path: Path) -> None:
    """--json: the result on stdout, the story on stderr. `--redis ''` switches
    off the Redis tier the environment names, in the workers too."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}
    env["LANGGRAPH_DURABLE_REDIS_URL"] = "redis://127.0.0.1:1/0"  # nothing listens there
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "langgraph_durable",
            "demo",
            "--steps",
            "4",
            "--kill-after",
            "2",
            "--redis",
            "",
            "--json",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    envelope = json.loads(done.stdout)
    assert envelope["command"] == "demo" and envelope["ok"] is True
    result = envelope["report"]
    assert result["ok"] is True and result["tiers"] == ["sqlite"] and result["steps_lost"] == 0
    assert result["killed_at_step"] == 2 and result["steps_in_final_state"] == 4 and result["worker_exit_code"] == 0
    assert "SIGKILL -> worker" in done.stderr and "saved 4/4 steps" in done.stderr
