"""examples/rolling_update.py, the example of the rolling-update guide, runs
in real processes and shows what the guide says: version 1 pods leave a
thread finished, one waiting at an interrupt and one cut off mid-step; a
version 2 pod migrates each as it resumes it (the old checkpoint pinned);
the old pod refuses what version 2 wrote; version 1 rolls a thread back
from its pin. Checked reply by reply, on SQLite alone (what the guide
prints) and on Redis and Postgres, each pod with a SQLite file of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from langgraph_durable import DurableSaver, Tiers

from .conftest import REDIS_URL

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "rolling_update.py"
ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
THREAD_SUFFIX = re.compile(r"\b(finished|waiting|midway)-[0-9a-f]{6}\b")
LINE = re.compile(r"^  \[(?P<pod>[\w-]+)\] (?P<text>.*)$")

TIDE_POOLS_V1 = "topic='tide pools', draft='A short note on tide pools.'"
CAVE_MAPS_V1 = "topic='cave maps', draft='A short note on cave maps.'"
REFUSED = "503 Service Unavailable, Retry-After: 1 (NewerStateVersion: written by state version 2, this pod runs 1)"


def _run(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _replies(out: str) -> dict[tuple[str, str], list[list[str]]]:
    """Each request the example sent, by pod and request (thread ids without
    their per-run suffix), with the lines of each reply in order."""
    replies: dict[tuple[str, str], list[list[str]]] = {}
    current: list[str] = []
    for raw in out.splitlines():
        line = LINE.match(THREAD_SUFFIX.sub(r"\1", raw))
        if line is None:
            current = []
        elif line["text"].startswith("< "):
            current = []
            replies.setdefault((line["pod"], line["text"][2:]), []).append(current)
        else:
            current.append(line["text"])
    return replies


def _check(out: str) -> None:
    replies = _replies(out)

    def reply(pod: str, request: str, nth: int = 0) -> list[str]:
        return replies[(pod, request)][nth]

    # Version 1: one thread finished, one waiting at the interrupt, one cut off in summarize.
    assert reply("v1-a", "start finished tide pools") == [
        "ran draft",
        "waiting at ask: {'question': 'Publish the note?', 'topic': 'tide pools'}",
        f"state version 1: {TIDE_POOLS_V1}",
    ]
    assert reply("v1-a", "answer finished yes") == [
        "ran ask -> summarize",
        f"state version 1: {TIDE_POOLS_V1}, approved=True, summary='Published: A short note on tide pools.'",
    ]
    assert reply("v1-a", "start waiting cave maps")[1:] == [
        "waiting at ask: {'question': 'Publish the note?', 'topic': 'cave maps'}",
        f"state version 1: {CAVE_MAPS_V1}",
    ]
    assert reply("v1-b", "answer midway yes") == ["summarize started"]
    assert "  [v1-b] SIGTERM: exited with status 143" in out.splitlines()
    assert reply("v1-a", "show midway") == [
        "stopped before summarize",
        "state version 1: topic='salt marshes', draft='A short note on salt marshes.', approved=True",
    ]
    # The dry run says what each migration would change, and writes nothing.
    assert [" ".join(line.split()) for line in reply("v2-a", "dry-run finished,waiting,midway")] == [
        "finished would migrate 1 -> 2: renames topic -> subject; drops summary",
        "waiting would migrate 1 -> 2: renames topic -> subject; carries 1 of 1 pending writes",
        "midway would migrate 1 -> 2: renames topic -> subject",
    ]
    # Version 2 migrates as it resumes: the answer reaches the interrupt, the
    # renamed key holds the old value, the removed node's turn goes to finish.
    answered = reply("v2-a", "answer waiting yes")
    assert [ID.sub("ID", line) for line in answered] == [
        "migrated from state version 1 to 2; the checkpoint it was made from, ID, is pinned",
        "ran ask -> finish",
        "state version 2: subject='cave maps', draft='A short note on cave maps.', approved=True, outcome='published'",
    ]
    resumed = reply("v2-a", "continue midway")
    assert [ID.sub("ID", line) for line in resumed] == [
        "migrated from state version 1 to 2; the checkpoint it was made from, ID, is pinned",
        "ran finish",
        "state version 2: subject='salt marshes', draft='A short note on salt marshes.', approved=True, "
        "outcome='published'",
    ]
    # The old pod neither runs nor writes a thread version 2 wrote.
    assert reply("v1-a", "continue waiting", 0) == [REFUSED]
    assert reply("v2-a", "continue waiting")[0] == "ran nothing"
    # Rolled back from the pin of exactly the checkpoint the migration replaced.
    (pinned,) = ID.findall(answered[0])
    assert ID.findall(resumed[0]) != [pinned]
    assert reply("v1-a", "rollback waiting yes") == [
        f"pin {pinned} (before migration to state version 2)",
        "ran ask -> summarize",
        f"state version 1: {CAVE_MAPS_V1}, approved=True, summary='Published: A short note on cave maps.'",
    ]
    assert reply("v1-a", "continue waiting", 1)[0] == "ran nothing"  # its own version again: runs
    assert reply("v1-a", "continue midway") == [REFUSED]  # not rolled back: still refused
    assert out.splitlines()[-1].startswith("OK: ")


def _without_tiers_from_the_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}


def test_the_rolling_update_on_sqlite_alone() -> None:
    out = _run(_without_tiers_from_the_environment())
    assert out.startswith("A rolling update from state version 1 to 2 (SQLite alone, one file every pod shares)")
    assert "  [v2-a] ready: state version 2, tiers sqlite" in out.splitlines()
    _check(out)


def test_the_rolling_update_on_redis_and_postgres(postgres_url: str, redis_prefix: str) -> None:
    env = _without_tiers_from_the_environment()
    env.update(
        LANGGRAPH_DURABLE_REDIS_URL=REDIS_URL,
        LANGGRAPH_DURABLE_REDIS_KEY_PREFIX=redis_prefix,
        LANGGRAPH_DURABLE_POSTGRES_URL=postgres_url,
    )
    out = _run(env)
    assert "  [v2-a] ready: state version 2, tiers sqlite -> redis -> postgres" in out.splitlines()
    _check(out)
    # It leaves no thread behind in the shared tiers.
    with DurableSaver(
        sqlite=None, redis=REDIS_URL, postgres=postgres_url, tiers=Tiers(redis_key_prefix=redis_prefix)
    ) as saver:
        assert saver.thread_ids() == []
