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
