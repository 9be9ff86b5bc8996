"""A store that ran on SQLite alone, given Redis and Postgres: it refuses
to start until its history was copied there (``promote``), so no replica
ever serves part of a thread's history; after that every replica sees all
of it. Real tiers, real compiled graphs, both faces."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
import pytest

from langgraph_durable import ConfigError, DurableSaver, Tiers, cli
from tests.conftest import REDIS_URL, SaverFactory
from tests.faces import FACES, On, run
from tests.graphs import loop_graph

FULL = "sqlite+redis+postgres"


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def embedded_history(make_saver: SaverFactory) -> dict[str, Any]:
    """The README's quickstart, twice, on SQLite alone: each thread's history."""
    with make_saver("sqlite") as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        for thread in ("t", "u"):
            graph.invoke({"messages": [thread], "n": 0}, cfg(thread))
            graph.invoke({"messages": ["again"], "n": 0}, cfg(thread))
        return {t: [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg(t))] for t in "tu"}


def shared_rows(postgres_url: str) -> int:
    with psycopg.connect(postgres_url) as conn:
        exists = conn.execute("SELECT to_regclass('lgd_checkpoints')").fetchone()
        if exists is None or exists[0] is None:
            return 0
        return int(conn.execute("SELECT count(*) FROM lgd_checkpoints").fetchone()[0])  # type: ignore[index]


def test_adding_shared_tiers_to_an_embedded_store_stops_until_promoted(
    make_saver: SaverFactory, postgres_url: str
) -> None:
    history = embedded_history(make_saver)
    with make_saver(FULL) as saver, pytest.raises(ConfigError, match="langgraph-durable promote") as info:
        loop_graph(3).compile(checkpointer=saver).get_state(cfg("t"))
    assert "\n" not in str(info.value)
    assert shared_rows(postgres_url) == 0  # nothing half-written
    with make_saver("sqlite") as alone:  # the file is as it was, and still serves alone
        graph = loop_graph(3).compile(checkpointer=alone)
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("t"))] == history["t"]


@pytest.mark.parametrize("face", FACES)
def test_promote_gives_every_replica_the_whole_history(make_saver: SaverFactory, postgres_url: str, face: str) -> None:
    history = embedded_history(make_saver)

    async def body() -> int:
        saver = make_saver(FULL)
        on = On(saver, face)
        try:
            return int(await on.promote_local())
        finally:
            await on.close()

    assert run(face, body) == 2
    with make_saver(FULL) as app, make_saver(FULL, sqlite_name="replica.sqlite") as replica:
        for saver in (app, replica):
            graph = loop_graph(3).compile(checkpointer=saver)
            for thread, ids in history.items():
                assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg(thread))] == ids
        graph = loop_graph(3).compile(checkpointer=replica)
        graph.invoke({"messages": ["on a replica"], "n": 0}, cfg("t"))  # goes on from the whole history
        assert len(list(graph.get_state_history(cfg("t")))) > len(history["t"])
    assert shared_rows(postgres_url) > 0


def test_the_command_line_promotes_and_verify_finds_nothing_missing(
    make_saver: SaverFactory, postgres_url: str, redis_prefix: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    history = embedded_history(make_saver)
    flags = [
        "--sqlite",
        str(tmp_path / "local.sqlite"),
        "--redis",
        REDIS_URL,
        "--redis-key-prefix",
        redis_prefix,
        "--postgres",
        postgres_url,
    ]
    with make_saver(FULL) as app, pytest.raises(ConfigError, match="promote"):
        app.setup()  # the app started with its new tiers: refused
    code = cli.main(["verify", *flags])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FINDINGS and "promote" in out, out
    code = cli.main(["promote", *flags])
    out = capsys.readouterr().out
    assert code == cli.EXIT_OK and "2 thread(s) copied" in out
    # Again, once it is done: refused, nothing copied (the file is a cache now).
    assert cli.main(["promote", *flags]) == cli.EXIT_CANNOT_RUN
    assert "is a cache of the shared tiers" in capsys.readouterr().err
    assert cli.main(["verify", *flags]) == cli.EXIT_OK
    capsys.readouterr()
    with DurableSaver(
        sqlite=None, postgres=postgres_url, redis=REDIS_URL, tiers=Tiers(redis_key_prefix=redis_prefix)
    ) as shared_only:
        graph = loop_graph(3).compile(checkpointer=shared_only)
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("u"))] == history["u"]


def test_a_replicas_cache_file_opened_alone_stays_a_cache(make_saver: SaverFactory) -> None:
    """A file that was a cache of the shared tiers, opened alone (read, or
    even written to by a script), is no store of its own: the replica starts
    with its shared tiers as before. A file promoted is such a cache too."""
    with make_saver(FULL) as app:
        loop_graph(2).compile(checkpointer=app).invoke({"messages": [], "n": 0}, cfg("t"))
    with make_saver("sqlite") as alone:
        assert alone.get_tuple(cfg("t")) is not None
        loop_graph(2).compile(checkpointer=alone).invoke({"messages": ["alone"], "n": 0}, cfg("t"))
    with make_saver(FULL) as app:
        assert app.get_tuple(cfg("t")) is not None
    embedded_history_file = "own.sqlite"
    with make_saver("sqlite", sqlite_name=embedded_history_file) as alone:
        loop_graph(2).compile(checkpointer=alone).invoke({"messages": [], "n": 0}, cfg("u"))
    with make_saver(FULL, sqlite_name=embedded_history_file) as app:
        assert app.promote_local() == 1
    with make_saver("sqlite", sqlite_name=embedded_history_file) as alone:
        loop_graph(2).compile(checkpointer=alone).invoke({"messages": ["alone"], "n": 0}, cfg("u"))
    with make_saver(FULL, sqlite_name=embedded_history_file) as app:
        assert app.get_tuple(cfg("u")) is not None


def test_promote_again_never_brings_back_what_the_shared_tiers_deleted(make_saver: SaverFactory) -> None:
    """After the move the file is a cache; a replica deletes a thread; a
    second promote (an operator running the command twice) refuses instead
    of copying the cache's stale copy back over the live store."""
    embedded_history(make_saver)
    with make_saver(FULL) as app:
        assert app.promote_local() == 2
        assert app.get_tuple(cfg("u")) is not None  # cached in the file again
    with make_saver(FULL, sqlite_name="replica.sqlite") as replica:
        replica.delete_thread("u")
    with make_saver(FULL) as app, pytest.raises(ConfigError, match="is a cache of the shared tiers"):
        app.promote_local()
    with make_saver(FULL, sqlite_name="replica.sqlite") as replica:
        assert replica.get_tuple(cfg("u")) is None


def test_promote_never_merges_another_history_on_the_same_id(make_saver: SaverFactory) -> None:
    """The shared tiers already hold thread "t" of another app: the file's
    "t" is not copied into it (one thread with two roots), the others are,
    and the file still refuses the shared tiers until that is settled."""
    with make_saver(FULL, sqlite_name="other-app.sqlite") as other:
        loop_graph(2).compile(checkpointer=other).invoke({"messages": ["theirs"], "n": 0}, cfg("t"))
        theirs = [s.config["configurable"]["checkpoint_id"] for s in other.list(cfg("t"))]
    history = embedded_history(make_saver)
    with make_saver(FULL) as app, pytest.raises(ConfigError, match="another history") as info:
        app.promote_local()
    assert "'t'" in str(info.value) and "\n" not in str(info.value)
    with make_saver(FULL, sqlite_name="replica.sqlite") as replica:
        assert [s.config["configurable"]["checkpoint_id"] for s in replica.list(cfg("t"))] == theirs
        graph = loop_graph(3).compile(checkpointer=replica)
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("u"))] == history["u"]
    with make_saver(FULL) as app, pytest.raises(ConfigError, match="promote"):
        app.get_tuple(cfg("u"))


def test_a_permissive_repair_after_the_move_stops_the_store_accepting_unsigned_records(
    make_saver: SaverFactory, postgres_url: str
) -> None:
    """The guide's last step: the file's unsigned copies (with the app's own
    classes) sealed, and no tier records "unsigned" as a key any more."""
    from tests import typed_state

    with make_saver("sqlite") as alone:
        typed_state.build().compile(checkpointer=alone).invoke({"log": []}, cfg("typed"))
    with make_saver(FULL) as app:
        assert app.promote_local() == 1

    def fingerprints() -> str:
        with psycopg.connect(postgres_url) as conn:
            row = conn.execute("SELECT value FROM lgd_meta WHERE key = 'key_fingerprints'").fetchone()
        return str(row[0]) if row else ""

    assert "unsigned" in fingerprints()  # the file's copies are unsigned still
    with make_saver(FULL, permissive_decoding=True) as app:
        report = app.repair()
        assert report.unrestorable == [] and report.undecodable == []
    assert fingerprints() and "unsigned" not in fingerprints()
    with make_saver(FULL) as app:
        values = typed_state.build().compile(checkpointer=app).get_state(cfg("typed")).values
    assert values["order"] == typed_state.EXPECTED["order"]
