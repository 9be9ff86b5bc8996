"""Importing from a source someone else could write to: nothing it names
runs, what cannot be read safely is reported and skipped, the rest arrives;
and an import never merges into a thread that holds another history unless
asked (`--merge`, `--thread-prefix`).

The hostile sources are real stock stores (a SqliteSaver file, a
PostgresSaver database) written by running graphs, then altered with SQL: a
state value that is a msgpack extension naming ``os.system`` (decoded by
LangGraph's default serializer, it runs a shell command), pending writes
that are a msgpack extension naming `hostile_payloads.record` and a pickle
that calls it, a thread id that is not UTF-8 and one holding a terminal
escape sequence.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langgraph_durable import ConfigError, ImportConflict, cli
from langgraph_durable.engine.imports.sources import ImportReport

from . import hostile_payloads as hostile
from .test_import import _stock_sqlite, maker, populated_file

ESCAPE_THREAD = "esc\x1b[2Jape"


@pytest.fixture(autouse=True)
def no_calls_yet() -> None:
    hostile.CALLS.clear()


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """The file the planted ``os.system`` call would create."""
    return tmp_path / "os-system-ran"


@pytest.fixture
def clean_file(tmp_path: Path) -> Path:
    path = tmp_path / "clean.sqlite"
    conn = sqlite3.connect(path, check_same_thread=False)
    maker.populate(SqliteSaver(conn))
    conn.close()
    return path


def _snapshot(saver: Any, thread_id: str) -> list[Any]:
    """What the application reads of a thread: every checkpoint, newest first."""
    return [
        (
            t.config["configurable"]["checkpoint_ns"],
            t.config["configurable"]["checkpoint_id"],
            t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None,
            t.checkpoint["channel_values"],
            t.checkpoint["channel_versions"],
            t.pending_writes,
        )
        for t in saver.list({"configurable": {"thread_id": thread_id}})
    ]


def _newest_root(conn: sqlite3.Connection, thread: str) -> tuple[str, Any]:
    """The id and unpacked record of a SqliteSaver thread's newest root checkpoint."""
    cid, blob = conn.execute(
        "SELECT checkpoint_id, checkpoint FROM checkpoints WHERE thread_id = ? AND checkpoint_ns = '' "
        "ORDER BY checkpoint_id DESC LIMIT 1",
        (thread,),
    ).fetchone()
    return cid, hostile.unpacked(blob)


def _plant_sqlite(clean: Path, hostile_path: Path, marker: Path, *, only_extensions: bool = False) -> dict[str, Any]:
    """A copy of `clean` with hostile rows; returns what was planted where.
    `only_extensions`: only the two msgpack extensions (no pickle, no odd ids)."""
    shutil.copy(clean, hostile_path)
    conn = sqlite3.connect(hostile_path)
    # The newest root checkpoint of "finished": a state value that runs a shell command.
    cid, checkpoint = _newest_root(conn, "finished")
    checkpoint["channel_values"]["n"] = hostile.runs_shell(f"touch {marker}")
    conn.execute(
        "UPDATE checkpoints SET checkpoint = ? WHERE thread_id = 'finished' AND checkpoint_ns = '' AND checkpoint_id = ?",
        (hostile.packed(checkpoint), cid),
    )
    # Two pending writes of "interrupted": a pickle and an extension, each calling `record`.
    (w1, wcid1), (w2, wcid2) = conn.execute(
        "SELECT rowid, checkpoint_id FROM writes WHERE thread_id = 'interrupted' AND channel = 'log' "
        "ORDER BY rowid LIMIT 2"
    ).fetchall()
    conn.execute("UPDATE writes SET value = ? WHERE rowid = ?", (hostile.packed(hostile.calls_record("ext")), w2))
    if only_extensions:
        conn.commit()
        conn.close()
        return {"shell": cid, "ext": wcid2}
    conn.execute("UPDATE writes SET type = 'pickle', value = ? WHERE rowid = ?", (hostile.pickled_call("pickle"), w1))
    # A thread whose id is not UTF-8 text, and one whose id holds a terminal
    # escape (a legal id) with a pickled pending write: copies of a root checkpoint.
    root = "thread_id = 'resumed' AND checkpoint_ns = '' AND parent_checkpoint_id IS NULL"
    for thread in ("CAST(x'fffe41' AS TEXT)", "?"):
        conn.execute(
            f"INSERT INTO checkpoints SELECT {thread}, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, "
            f"checkpoint, metadata FROM checkpoints WHERE {root}",
            (ESCAPE_THREAD,) if thread == "?" else (),
        )
    (root_id,) = conn.execute(f"SELECT checkpoint_id FROM checkpoints WHERE {root}").fetchone()
    conn.execute(
        "INSERT INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, type, value) "
        "VALUES (?, '', ?, 'task', 0, 'n', 'pickle', ?)",
        (ESCAPE_THREAD, root_id, hostile.pickled_call("escape")),
    )
    conn.commit()
    conn.close()
    return {"shell": cid, "pickle": wcid1, "ext": wcid2, "escape": root_id}


@pytest.fixture
def hostile_file(clean_file: Path, tmp_path: Path, marker: Path) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / "hostile.sqlite"
    return path, _plant_sqlite(clean_file, path, marker)


def _check_sqlite_report(report: ImportReport, planted: dict[str, Any], marker: Path) -> None:
    assert hostile.CALLS == [] and not marker.exists()
    why = {(r.thread_id, r.checkpoint_id, r.what.split(" of ")[0]): r.reason for r in report.rejected}
    assert len(why) == report.rejected_count == 5, report.rejected
    assert "os:system" in why[("finished", planted["shell"], "checkpoint")]
    assert "pickle" in why[("interrupted", planted["pickle"], "pending write")]
    assert "tests.hostile_payloads:record" in why[("interrupted", planted["ext"], "pending write")]
    assert "pickle" in why[(ESCAPE_THREAD, planted["escape"], "pending write")]
    assert "UTF-8" in why[(b"\xff\xfeA", None, "thread")]
    assert report.differences == [] and not report.ok
    # 30 checkpoints, one refused, plus the escape thread's one.
    assert (report.threads, report.checkpoints, report.verified) == (4, 30, 30)


def _check_sqlite_arrival(saver: Any, clean_file: Path, planted: dict[str, Any]) -> None:
    clean = SqliteSaver(sqlite3.connect(clean_file, check_same_thread=False))
    assert _snapshot(saver, "resumed") == _snapshot(clean, "resumed")
    finished = _snapshot(clean, "finished")
    assert _snapshot(saver, "finished") == [c for c in finished if c[1] != planted["shell"]]
    # The interrupted thread lacks exactly the two refused writes.
    ours, theirs = _snapshot(saver, "interrupted"), _snapshot(clean, "interrupted")
    assert [c[:5] for c in ours] == [c[:5] for c in theirs]
    assert sum(len(c[5]) for c in theirs) - sum(len(c[5]) for c in ours) == 2


def test_a_sqlite_file_naming_callables_in_its_values_runs_none_of_them(
    clean_file: Path, tmp_path: Path, marker: Path, make_saver: Any
) -> None:
    """A state value naming ``os.system`` and a pending write naming
    `record`: neither is called, both rows are reported."""
    path = tmp_path / "extensions.sqlite"
    planted = _plant_sqlite(clean_file, path, marker, only_extensions=True)
    with make_saver("sqlite") as saver:
        report = saver.import_from(SqliteSaver(sqlite3.connect(path, check_same_thread=False)))
    assert hostile.CALLS == [] and not marker.exists()
    assert sorted((r.checkpoint_id, r.what.split(" of ")[0]) for r in report.rejected) == sorted(
        [(planted["shell"], "checkpoint"), (planted["ext"], "pending write")]
    )
    assert report.checkpoints == 29 and report.differences == []


def test_a_hostile_sqlite_file_runs_nothing_and_the_rest_arrives(
    hostile_file: tuple[Path, dict[str, Any]], clean_file: Path, marker: Path, make_saver: Any
) -> None:
    path, planted = hostile_file
    with make_saver("sqlite") as saver:
        report = saver.import_from(SqliteSaver(sqlite3.connect(path, check_same_thread=False)))
        _check_sqlite_report(report, planted, marker)
        _check_sqlite_arrival(saver, clean_file, planted)
        again = saver.import_from(SqliteSaver(sqlite3.connect(path, check_same_thread=False)))
        assert (again.checkpoints, again.skipped, again.rejected_count, again.differences) == (0, 30, 5, [])
    assert hostile.CALLS == [] and not marker.exists()


async def test_a_hostile_sqlite_file_through_the_async_face(
    hostile_file: tuple[Path, dict[str, Any]], clean_file: Path, marker: Path, make_saver: Any
) -> None:
    path, planted = hostile_file
    async with AsyncSqliteSaver.from_conn_string(str(path)) as source, make_saver("sqlite") as saver:
        report = await saver.aimport_from(source)
        _check_sqlite_report(report, planted, marker)
        _check_sqlite_arrival(saver, clean_file, planted)


def test_the_cli_reports_skipped_rows_escaped_and_exits_1(
    hostile_file: tuple[Path, dict[str, Any]], marker: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, planted = hostile_file
    flags = ["--sqlite", str(tmp_path / "local.sqlite"), "--redis", "", "--postgres", ""]
    code = cli.main(["import", "--from", str(path), *flags])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FINDINGS
    assert hostile.CALLS == [] and not marker.exists()
    skipped = [line for line in out.splitlines() if line.startswith("REJECTED")]
    assert len(skipped) == 5 and "5 source row(s) rejected (not imported)" in out
    assert "\x1b" not in out and "'esc\\x1b[2Jape'" in out and "b'\\xff\\xfeA'" in out
    assert any("os:system" in line and planted["shell"] in line for line in skipped)
    code = cli.main(["import", "--from", str(path), *flags, "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert code == cli.EXIT_FINDINGS and not doc["ok"] and not doc["report"]["ok"]
    assert doc["report"]["rejected_count"] == 5 and doc["report"]["skipped"] == 30


def test_allow_names_a_type_the_import_may_build(clean_file: Path, tmp_path: Path, make_saver: Any) -> None:
    """A value of the application's own type is refused until allowed; once
    allowed, it is built (here: `record` stands for the type's constructor)."""
    path = tmp_path / "own-type.sqlite"
    shutil.copy(clean_file, path)
    conn = sqlite3.connect(path)
    cid, checkpoint = _newest_root(conn, "resumed")
    checkpoint["channel_values"]["extra"] = hostile.calls_record("allowed")
    conn.execute("UPDATE checkpoints SET checkpoint = ? WHERE checkpoint_id = ?", (hostile.packed(checkpoint), cid))
    conn.commit()
    conn.close()
    with make_saver("sqlite") as saver:
        report = saver.import_from(SqliteSaver(sqlite3.connect(path, check_same_thread=False)))
        assert report.rejected_count == 1 and hostile.CALLS == []
        report = saver.import_from(
            SqliteSaver(sqlite3.connect(path, check_same_thread=False)),
            allow=[("tests.hostile_payloads", "record")],
        )
        assert report.rejected_count == 0 and report.checkpoints == 1
        assert hostile.CALLS == [("allowed",)]
    flags = ["--sqlite", str(tmp_path / "x.sqlite"), "--redis", "", "--postgres", ""]
    assert cli.main(["import", "--from", str(path), "--allow", "no-colon", *flags]) == cli.EXIT_CANNOT_RUN


# -- PostgresSaver ------------------------------------------------------------------------


def _plant_postgres(url: str, marker: Path) -> dict[str, Any]:
    """Run the graphs under PostgresSaver, then plant hostile rows."""
    with PostgresSaver.from_conn_string(url) as stock:
        stock.setup()
        maker.populate(stock)
        before = {t: _snapshot(stock, t) for t in ("finished", "interrupted", "resumed")}
    with psycopg.connect(url, autocommit=True) as conn:
        channel, version = conn.execute(
            "SELECT channel, version FROM checkpoint_blobs WHERE thread_id = 'finished' AND checkpoint_ns = '' "
            "AND type = 'msgpack' ORDER BY version DESC LIMIT 1"
        ).fetchone()
        conn.execute(
            "UPDATE checkpoint_blobs SET blob = %s WHERE thread_id = 'finished' AND checkpoint_ns = '' "
            "AND channel = %s AND version = %s",
            (hostile.packed(hostile.runs_shell(f"touch {marker}")), channel, version),
        )
        shell = {
            cid
            for (cid,) in conn.execute(
                "SELECT checkpoint_id FROM checkpoints WHERE thread_id = 'finished' AND checkpoint_ns = '' "
                "AND checkpoint -> 'channel_versions' ->> %s = %s",
                (channel, version),
            )
        }
        writes = conn.execute(
            "SELECT checkpoint_id, task_id, idx FROM checkpoint_writes WHERE thread_id = 'interrupted' "
            "AND channel = 'log' ORDER BY checkpoint_id, task_id, idx LIMIT 2"
        ).fetchall()
        for (cid, task, idx), (tag, blob) in zip(
            writes,
            [("pickle", hostile.pickled_call("pickle")), ("msgpack", hostile.packed(hostile.calls_record("ext")))],
            strict=True,
        ):
            conn.execute(
                "UPDATE checkpoint_writes SET type = %s, blob = %s WHERE thread_id = 'interrupted' "
                "AND checkpoint_id = %s AND task_id = %s AND idx = %s",
                (tag, blob, cid, task, idx),
            )
    return {"shell": shell, "writes": {w[0] for w in writes}, "before": before}


def _check_postgres(report: ImportReport, saver: Any, planted: dict[str, Any], marker: Path) -> None:
    assert hostile.CALLS == [] and not marker.exists()
    refused = [r for r in report.rejected if r.what == "checkpoint"]
    assert {r.checkpoint_id for r in refused} == planted["shell"] and all("os:system" in r.reason for r in refused)
    writes = [r for r in report.rejected if r.what.startswith("pending write")]
    assert {r.checkpoint_id for r in writes} == planted["writes"] and len(writes) == 2
    assert report.rejected_count == len(planted["shell"]) + 2 and report.differences == []
    assert _snapshot(saver, "resumed") == planted["before"]["resumed"]
    finished = [c for c in planted["before"]["finished"] if c[1] not in planted["shell"]]
    assert _snapshot(saver, "finished") == finished


def test_a_hostile_postgres_database_runs_nothing_and_the_rest_arrives(
    postgres_url: str, marker: Path, make_saver: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    planted = _plant_postgres(postgres_url, marker)
    with PostgresSaver.from_conn_string(postgres_url) as source, make_saver("sqlite") as saver:
        report = saver.import_from(source)
        _check_postgres(report, saver, planted, marker)
    code = cli.main(["import", "--from", postgres_url, "--sqlite", str(tmp_path / "cli.sqlite"), "--postgres", ""])
    out = capsys.readouterr().out
    assert code == cli.EXIT_FINDINGS and out.count("REJECTED") == len(planted["shell"]) + 2
    assert hostile.CALLS == [] and not marker.exists()


async def test_a_hostile_postgres_database_through_the_async_face(
    postgres_url: str, marker: Path, make_saver: Any
) -> None:
    planted = _plant_postgres(postgres_url, marker)
    async with AsyncPostgresSaver.from_conn_string(postgres_url) as source, make_saver("sqlite") as saver:
        report = await saver.aimport_from(source)
        _check_postgres(report, saver, planted, marker)


# -- threads that already hold another history ---------------------------------------------


@pytest.fixture
def other_file(tmp_path: Path) -> Path:
    """The same thread ids as `clean_file`, another history (other checkpoint ids)."""
    return populated_file(tmp_path / "other.sqlite")


def test_a_second_history_for_the_same_threads_is_refused_unless_asked(
    clean_file: Path, other_file: Path, make_saver: Any
) -> None:
    with make_saver("sqlite") as saver:
        assert saver.import_from(_stock_sqlite(clean_file)).checkpoints == 30
        again = saver.import_from(_stock_sqlite(clean_file))  # the same history: fine
        assert again.ok and again.skipped == 30
        with pytest.raises(ImportConflict, match="thread_prefix") as caught:
            saver.import_from(_stock_sqlite(other_file))
        assert sorted(caught.value.threads) == ["finished", "interrupted", "resumed"]
        assert isinstance(caught.value, ConfigError)
        assert sum(1 for _ in saver.list(None)) == 30  # nothing written
        renamed = saver.import_from(_stock_sqlite(other_file), thread_prefix="old-")
        assert renamed.ok and renamed.checkpoints == 30
        assert _snapshot(saver, "old-resumed")[0][3] == _snapshot(_stock_sqlite(other_file), "resumed")[0][3]
        merged = saver.import_from(_stock_sqlite(other_file), merge=True)
        assert merged.ok and merged.checkpoints == 30
        assert sum(1 for _ in saver.list(None)) == 90


async def test_the_async_face_refuses_a_second_history_too(clean_file: Path, other_file: Path, make_saver: Any) -> None:
    async with make_saver("sqlite") as saver:
        async with AsyncSqliteSaver.from_conn_string(str(clean_file)) as first:
            assert (await saver.aimport_from(first)).checkpoints == 30
        async with AsyncSqliteSaver.from_conn_string(str(other_file)) as second:
            with pytest.raises(ImportConflict, match="merge=True"):
                await saver.aimport_from(second)
            report = await saver.aimport_from(second, thread_prefix="b/")
            assert report.ok and report.checkpoints == 30
            assert (await saver.aimport_from(second, merge=True)).checkpoints == 30


def test_the_cli_refuses_a_second_history_and_takes_merge_and_thread_prefix(
    clean_file: Path, other_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    flags = ["--sqlite", str(tmp_path / "local.sqlite"), "--redis", "", "--postgres", ""]
    assert cli.main(["import", "--from", str(clean_file), *flags]) == cli.EXIT_OK
    capsys.readouterr()
    assert cli.main(["import", "--from", str(other_file), *flags]) == cli.EXIT_CANNOT_RUN
    err = capsys.readouterr().err
    assert "'finished'" in err and "--thread-prefix" in err and "--merge" in err
    assert cli.main(["import", "--from", str(other_file), *flags, "--thread-prefix", "old-"]) == cli.EXIT_OK
    assert cli.main(["import", "--from", str(other_file), *flags, "--merge"]) == cli.EXIT_OK
    out = capsys.readouterr().out
    assert out.count("30 checkpoint(s) and") == 2


# -- verification reads what the application reads -----------------------------------------


def test_verification_reports_a_copy_the_application_cannot_read(clean_file: Path, make_saver: Any) -> None:
    """The report compares the source with what `list` and `get_tuple`
    return, so an import whose copies do not read back can never report
    success: here the saver's reads are made to miss the copies."""
    from langgraph_durable.engine.imports.importer import Importer
    from langgraph_durable.engine.imports.sources import sync_tables

    source = _stock_sqlite(clean_file)
    with make_saver("sqlite") as saver:
        leases = saver._sync_leases()
        report = Importer(
            source,
            list_target=saver.list,
            get_target=lambda config: None,  # the latest reads as empty
            put=leases.put,
            put_writes=leases.put_writes,
            tables=sync_tables(source),
        ).run()
        assert not report.ok and report.checkpoints == 30
        assert any("reads as empty" in d for d in report.differences), report.differences
        report = saver.import_from(source)
        assert report.ok and report.skipped == 30


def test_a_thread_deleted_then_imported_again_reports_what_the_application_reads(
    clean_file: Path, make_saver: Any
) -> None:
    """After delete_thread, importing the thread again must either read back
    as its source or say that it does not: the report is ok only if
    get_tuple serves the source's latest checkpoint."""
    source = _stock_sqlite(clean_file)
    with make_saver("sqlite+redis") as saver:
        saver.import_from(source)
        saver.delete_thread("finished")
        report = saver.import_from(source)
        latest = saver.get_tuple({"configurable": {"thread_id": "finished", "checkpoint_ns": ""}})
        expected = source.get_tuple({"configurable": {"thread_id": "finished", "checkpoint_ns": ""}})
        assert expected is not None
        reads_right = (
            latest is not None and latest.checkpoint["channel_values"] == expected.checkpoint["channel_values"]
        )
        assert report.ok == reads_right, report.differences


def test_the_safe_decoder_builds_langgraphs_safe_types_and_refuses_the_rest() -> None:
    """What LangGraph's serializer writes for the common state values reads
    back whole; a JSON constructor or an extension naming anything else is
    refused before it is built."""
    import datetime as dt

    from langchain_core.messages import AIMessage, HumanMessage
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from langgraph_durable.engine.imports.sources import Refused, SafeDecoder

    value = {
        "messages": [HumanMessage("hi"), AIMessage("hello")],
        "at": dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC),
        "tags": {"a", "b"},
        "raw": b"\x00\x01",
    }
    decoder = SafeDecoder()
    assert decoder.load(*JsonPlusSerializer().dumps_typed(value)) == value
    assert decoder.load("null", b"") is None
    constructor = {"lc": 2, "type": "constructor", "id": ["os", "system"], "args": ["true"]}
    with pytest.raises(Refused, match="os:system"):
        decoder.load("json", json.dumps({"x": constructor}).encode())
    with pytest.raises(Refused, match="malformed"):
        decoder.load("msgpack", hostile.packed(hostile.ormsgpack.Ext(0, hostile.packed([{"not": "a name"}, 1, 2]))))
    with pytest.raises(Refused, match="not one an import reads"):
        decoder.load("marshal", b"")
    assert hostile.CALLS == []


def test_an_allowed_type_that_cannot_be_imported_here_is_refused_not_flattened() -> None:
    """LangGraph's decoder returns a type it cannot import as plain data;
    an import would store that dict for good, so the row is refused."""
    from langgraph_durable.engine.imports.sources import Refused, SafeDecoder

    ext = hostile.ormsgpack.Ext(2, hostile.packed(["no_such_module_here", "Order", {"id": 1}]))
    with pytest.raises(Refused, match="not importable"):
        SafeDecoder([("no_such_module_here", "Order")]).load("msgpack", hostile.packed({"order": ext}))
