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
        with pytest.raises(ThreadArchived):
            plain.delete_thread("t")  # it would leave the archive copy, served again

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
    # Given the archive, a read command still only looks: it says how to bring the thread back.
    code = cli.main(["history", "t", "--sqlite", path, "--redis", "", "--postgres", "", "--archive", archive_url])
    err = capsys.readouterr().err
    assert code == cli.EXIT_CANNOT_RUN and "restore THREAD" in err, err


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


@pytest.mark.parametrize("change", ["pruned", "runs deleted", "deleted and written again"])
def test_a_thread_whose_oldest_checkpoints_went_is_one_history(
    make_saver: SaverFactory, archive_url: str, postgres_url: str, redis_prefix: str, change: str
) -> None:
    """The archive lags (or was down) while a thread loses its oldest
    checkpoints: retention, delete_for_runs, or a delete and a new run on
    the id. Its next ship is no second history: it goes through, and a
    restore onto empty tiers brings back what the thread holds now."""
    from langgraph_durable import RetentionPolicy
    from tests.conftest import lose_every_hot_tier

    with make_saver(FULL, archive=archive_url, archive_lag=3600) as saver:
        graph = loop_graph(2).compile(checkpointer=saver)

        def step(text: str, run_id: str) -> None:
            graph.invoke({"messages": [text], "n": 0}, {**cfg("t"), "metadata": {"run_id": run_id}})

        step("first", "r1")
        assert saver.drain_archive().caught_up
        if change == "deleted and written again":
            saver.delete_thread("t")
            step("new", "r2")
        else:
            step("second", "r2")
            step("third", "r3")
            if change == "pruned":
                saver.apply_retention(RetentionPolicy(keep_last=2))
            else:
                saver.delete_for_runs(["r1", "r2"])
        drained = saver.drain_archive()
        assert drained.caught_up and not drained.failing, drained
        history = [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("t"))]
        values = graph.get_state(cfg("t")).values
        fingerprint = saver.health().store_key_fingerprint
    lose_every_hot_tier(postgres_url, redis_prefix)
    with make_saver(FULL, archive=archive_url, sqlite_name="new.sqlite", archive_key_fingerprint=fingerprint) as fresh:
        report = fresh.restore(None)
        assert report.conflicts == [] and report.threads == 1
        graph = loop_graph(2).compile(checkpointer=fresh)
        assert [s.config["configurable"]["checkpoint_id"] for s in graph.get_state_history(cfg("t"))] == history
        assert graph.get_state(cfg("t")).values == values
