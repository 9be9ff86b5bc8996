"""A thread another saver of the store archived, met by a saver without an
archive: never taken for an empty thread. Real tiers, moto's S3 server,
real compiled graphs, both faces."""

from __future__ import annotations

from typing import Any

import pytest

from langgraph_durable import ThreadArchived, cli
from tests.conftest import POSTGRES_URL, SaverFactory  # noqa: F401
from tests.faces import FACES, On, OnGraph, run
from tests.graphs import loop_graph

FULL = "sqlite+redis+postgres"


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


@pytest.mark.parametrize("tiers", ["sqlite", FULL])
@pytest.mark.parametrize("face", FACES)
def test_a_saver_without_the_archive_refuses_an_archived_thread_and_writes_nothing(
    make_saver: SaverFactory, archive_url: str, tiers: str, face: str
) -> None:
    with make_saver(tiers, archive=archive_url) as keeper:
        graph = loop_graph(2).compile(checkpointer=keeper)
        graph.invoke({"messages": ["mine"], "n": 0}, cfg("t"))
        history = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("t"))]
        values = graph.get_state(cfg("t")).values
        assert keeper.archive_idle(0.0, thread_ids=["t"]).archived == ["t"]
        bucket_prefix = archive_url.removeprefix("s3://")

    with make_saver(tiers) as plain:  # the same store, no archive= (a replica deployed without it)

        async def body() -> list[ThreadArchived]:
            on, graph = On(plain, face), OnGraph(loop_graph(2).compile(checkpointer=plain), face)
            caught: list[ThreadArchived] = []
            try:
                for call in (
                    lambda: on.get_tuple(cfg("t")),
                    lambda: on.list(cfg("t")),
                    lambda: graph.get_state(cfg("t")),
                    lambda: graph.invoke({"messages": ["theirs"], "n": 0}, cfg("t")),
                ):
                    with pytest.raises(ThreadArchived) as info:
                        await call()
                    caught.append(info.value)
                return caught
            finally:
                await on.close()

        caught = run(face, body)
        for error in caught:
            assert error.thread_id == "t" and error.archive == bucket_prefix
            assert f"archive='s3://{bucket_prefix}'" in str(error) and "\n" not in str(error)
        assert plain.get_tuple(cfg("other")) is None  # a thread that is merely new is still new

    with make_saver(tiers, archive=archive_url) as keeper:
        graph = loop_graph(2).compile(checkpointer=keeper)
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("t"))] == history
        assert graph.get_state(cfg("t")).values == values  # one history, the archived one


def test_the_command_line_without_archive_says_the_thread_is_archived(
    make_saver: SaverFactory, archive_url: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "local.sqlite")
    with make_saver("sqlite", archive=archive_url) as keeper:
        loop_graph(2).compile(checkpointer=keeper).invoke({"messages": [], "n": 0}, cfg("t"))
        assert keeper.archive_idle(0.0, thread_ids=["t"]).archived == ["t"]
    code = cli.main(["history", "t", "--sqlite", path, "--redis", "", "--postgres", ""])
    err = capsys.readouterr().err
    assert code == cli.EXIT_CANNOT_RUN and "is archived" in err and "--archive" in err, err


@pytest.mark.parametrize("face", FACES)
def test_a_restore_never_merges_two_histories_into_one_thread(
    make_saver: SaverFactory, archive_url: str, tmp_path: Any, capsys: pytest.CaptureFixture[str], face: str
) -> None:
    """A new history was written on an archived thread's id by something
    that read nothing first (a direct ``put``): a restore reports the thread
    and leaves both histories as they were, rather than one thread with two
    roots."""
    from langgraph.checkpoint.base import empty_checkpoint

    with make_saver("sqlite", archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        graph.invoke({"messages": ["old"], "n": 0}, cfg("t"))
        assert saver.archive_idle(0.0, thread_ids=["t"]).archived == ["t"]
    with make_saver("sqlite") as plain:
        plain.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, empty_checkpoint(), {"step": -1}, {})
    with make_saver("sqlite", archive=archive_url) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)
        before = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("t"))]
        roots = [s for s in graph.get_state_history(cfg("t")) if s.parent_config is None]
        assert len(roots) == 1

        async def body() -> Any:
            on = On(saver, face)
            try:
                return await on.restore(["t"]), await on.restore(None)
            finally:
                await on.close()

        one, every = run(face, body)
        assert one.conflicts == ["t"] and one.threads == 0
        assert every.conflicts == ["t"] and every.threads == 0
        after = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("t"))]
        assert after == before
        # Its replica does not ship the new history over the archive copy:
        # the thread is reported failing, the copy is left as it was.
        drained = saver.drain_archive()
        assert "t" in drained.failing and not drained.caught_up
        with pytest.raises(ThreadArchived, match="another history"):
            saver.copy_thread("t", "t-copy")  # no bring-back merges them either
    flags = ["--sqlite", str(tmp_path / "local.sqlite"), "--redis", "", "--postgres", "", "--archive", archive_url]
    code = cli.main(["restore", "t", *flags])
    out, err = capsys.readouterr()
    assert code == 1 and "CONFLICT  thread 't'" in out, (out, err)
