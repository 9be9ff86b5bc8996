"""Retention reaches archived threads: a sweep judges each one on its
archive copy as it judges a hot thread, deletes an idle one, and prunes one
by bringing it back, sweeping it and archiving it again; a thread no rule
can touch is passed over without reading its copy. Real compiled graphs,
real Redis, Postgres and an S3 server, both faces."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command

from langgraph_durable import DurableSaver, RetentionPolicy
from langgraph_durable.archive.archiver import Archiver
from langgraph_durable.archive.judging import untouched
from langgraph_durable.archive.segments import segments_prefix
from langgraph_durable.archive.store import ArchiveStore
from tests.conftest import SaverFactory, lose_every_hot_tier
from tests.faces import FACES, On, run
from tests.graphs import interrupt_graph, loop_graph
from tests.test_delta import RUNS, _cfg, delta_graph

FULL = "sqlite+redis+postgres"
DAY = 86400.0


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def archive(saver: DurableSaver, thread_id: str, steps: int = 6) -> tuple[int, dict[str, Any]]:
    """Run a thread and archive it: how many checkpoints it has, and its state."""
    graph = loop_graph(steps).compile(checkpointer=saver)
    graph.invoke({"messages": [], "n": 0}, cfg(thread_id))
    count = len(list(saver.list(cfg(thread_id))))
    values = graph.get_state(cfg(thread_id)).values
    assert saver.archive_idle(0.0, thread_ids=[thread_id]).archived == [thread_id]
    return count, values


def copies_read(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads whose archive copy is read from now on, in order."""
    reads: list[str] = []
    image = Archiver.image

    def counted(self: Archiver, thread_id: str, **kwargs: Any) -> Any:
        reads.append(thread_id)
        return image(self, thread_id, **kwargs)

    monkeypatch.setattr(Archiver, "image", counted)
    return reads


@pytest.mark.parametrize("face", FACES)
def test_keep_last_prunes_an_archived_thread_and_it_stays_archived(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        count, values = archive(saver, "t-old")
        assert count > 3

        async def body() -> Any:
            on = On(saver, face)
            try:
                return await on.apply_retention(RetentionPolicy(keep_last=2))
            finally:
                await on.close()

        report = run(face, body)
        assert report.threads == 1 and report.checkpoints_deleted == count - 2 and report.checkpoints_kept == 2
        assert saver.archived_threads() == ["t-old"]  # pruned, and archived again
        assert len(saver._archiver().image("t-old").checkpoints) == 2  # the archive copy lost them too
        graph = loop_graph(6).compile(checkpointer=saver)
        assert len(list(saver.list(cfg("t-old")))) == 2  # brought back: what the sweep kept
        assert graph.get_state(cfg("t-old")).values == values


@pytest.mark.parametrize("face", FACES)
def test_an_idle_archived_thread_is_deleted_for_good(make_saver: SaverFactory, archive_url: str, face: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        archive(saver, "t-idle")
        archive(saver, "t-other")
        later = time.time() + 2 * DAY

        async def body() -> Any:
            on = On(saver, face)
            try:
                return await on.apply_retention(
                    RetentionPolicy(delete_idle_after=DAY), thread_ids=["t-idle"], now=later
                )
            finally:
                await on.close()

        report = run(face, body)
        assert report.threads == 1 and report.threads_deleted == 1
        assert saver.archived_threads() == ["t-other"]  # only the thread asked for
        assert loop_graph(6).compile(checkpointer=saver).get_state(cfg("t-idle")).values == {}
        saver.drain_archive()
        assert saver.restore(["t-idle"]).threads == 0  # deleted after its copy: it stays deleted
        assert len(list(saver.list(cfg("t-idle")))) == 0


def test_an_archived_thread_waiting_at_an_interrupt_is_not_idle(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        graph = interrupt_graph().compile(checkpointer=saver)
        ref = interrupt_graph().compile(checkpointer=InMemorySaver())
        for g in (graph, ref):
            g.invoke({"messages": [], "n": 0}, cfg("ask"))
        assert saver.archive_idle(0.0, thread_ids=["ask"]).archived == ["ask"]
        report = saver.apply_retention(RetentionPolicy(keep_last=1, delete_idle_after=DAY), now=time.time() + 365 * DAY)
        assert report.threads_deleted == 0  # waiting for a human is not idle
        assert graph.get_state(cfg("ask")).next == ref.get_state(cfg("ask")).next
        assert graph.invoke(Command(resume="yes"), cfg("ask")) == ref.invoke(Command(resume="yes"), cfg("ask"))


def test_a_dry_run_counts_and_changes_nothing(make_saver: SaverFactory, archive_url: str) -> None:
    with make_saver(FULL, archive=archive_url) as saver:
        count, _ = archive(saver, "t-dry")
        segments = ArchiveStore(archive_url).keys(segments_prefix("t-dry"))
        report = saver.apply_retention(RetentionPolicy(keep_last=1), dry_run=True)
        assert report.dry_run and report.checkpoints_deleted == count - 1
        assert ArchiveStore(archive_url).keys(segments_prefix("t-dry")) == segments
        assert saver.archived_threads() == ["t-dry"]
        assert len(list(saver.list(cfg("t-dry")))) == count


def test_a_thread_no_rule_touches_is_not_read(
    make_saver: SaverFactory, archive_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The flag says enough: a sweep over many archived threads reads none
    of their copies unless a rule may remove something."""
    with make_saver(FULL, archive=archive_url) as saver:
        count, _ = archive(saver, "t-few")
        reads = copies_read(monkeypatch)
        report = saver.apply_retention(RetentionPolicy(keep_last=count, keep_for=DAY, delete_idle_after=DAY))
        assert reads == [] and report.threads == 1 and report.checkpoints_kept == count
        assert saver.apply_retention(RetentionPolicy(keep_last=count - 1), dry_run=True).checkpoints_deleted == 1
        assert reads == ["t-few"]


def test_the_flags_summary_rules_out_only_what_no_rule_touches() -> None:
    now = time.time()

    def iso(seconds_ago: float) -> str:
        from datetime import UTC, datetime

        return datetime.fromtimestamp(now - seconds_ago, UTC).isoformat()

    found = {"checkpoints": 7, "most": 5, "newest_ts": iso(100), "oldest_ts": iso(1000)}
    assert untouched(RetentionPolicy(keep_last=5), found, now)
    assert not untouched(RetentionPolicy(keep_last=4), found, now)
    assert untouched(RetentionPolicy(keep_for=1001), found, now)
    assert not untouched(RetentionPolicy(keep_for=999), found, now)
    assert untouched(RetentionPolicy(keep_last=4, keep_for=1001), found, now)  # either rule keeping all is enough
    assert not untouched(RetentionPolicy(delete_idle_after=99), found, now)
    assert untouched(RetentionPolicy(delete_idle_after=101), found, now)
    assert untouched(RetentionPolicy(archive_idle_after=1), found, now)
    assert not untouched(RetentionPolicy(keep_last=100), None, now)  # archived by an earlier version: read
    assert not untouched(RetentionPolicy(keep_last=100), {**found, "oldest_ts": ""}, now)


def test_an_archived_thread_with_a_segment_that_does_not_verify_is_left_alone(
    make_saver: SaverFactory, archive_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Damage in one place (the archive copy): the sweep neither deletes nor
    prunes what it cannot read, and says so."""
    with make_saver(FULL, archive=archive_url) as saver:
        archive(saver, "t-bad")
        store = ArchiveStore(archive_url)
        (name,) = store.keys(segments_prefix("t-bad"))
        damaged = bytearray(store.get(name) or b"")
        damaged[len(damaged) // 2] ^= 0xFF
        store.put(name, bytes(damaged))
        with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
            report = saver.apply_retention(RetentionPolicy(keep_last=1, delete_idle_after=1.0), now=time.time() + DAY)
        assert report.threads_deleted == 0 and report.checkpoints_deleted == 0
        assert any("do not verify" in r.getMessage() and "t-bad" in r.getMessage() for r in caplog.records)
        assert saver.archived_threads() == ["t-bad"] and store.get(name) == bytes(damaged)


@pytest.mark.parametrize("face", FACES)
def test_an_archived_delta_thread_is_pruned_as_its_hot_twin(
    make_saver: SaverFactory, archive_url: str, face: str
) -> None:
    """Two threads with one history, one archived: a sweep removes the same
    checkpoints from each, and both read back what LangGraph's own saver
    reads (a DeltaChannel's ancestors survive in the archive too)."""
    with make_saver(FULL, archive=archive_url) as saver:
        graph = delta_graph().compile(checkpointer=saver)
        ref = delta_graph().compile(checkpointer=InMemorySaver())
        for inputs in RUNS:
            for g, thread in ((graph, "d-hot"), (graph, "d-cold"), (ref, "d-ref")):
                g.invoke(inputs, _cfg(thread))
        assert saver.archive_idle(0.0, thread_ids=["d-cold"]).archived == ["d-cold"]
        policy = RetentionPolicy(keep_last=3)

        async def body() -> tuple[Any, Any]:
            on = On(saver, face)
            try:
                hot = await on.apply_retention(policy, thread_ids=["d-hot"])
                cold = await on.apply_retention(policy, thread_ids=["d-cold"])
                return hot, cold
            finally:
                await on.close()

        hot, cold = run(face, body)
        assert hot.checkpoints_deleted > 0
        assert (cold.checkpoints_deleted, cold.checkpoints_kept) == (hot.checkpoints_deleted, hot.checkpoints_kept)
        assert saver.archived_threads() == ["d-cold"]
        expected = ref.get_state(_cfg("d-ref")).values
        for thread in ("d-hot", "d-cold"):
            assert graph.get_state(_cfg(thread)).values == expected
        assert len(list(saver.list(_cfg("d-cold")))) == len(list(saver.list(_cfg("d-hot"))))


@pytest.mark.parametrize("how", ["sweep", "prune"])
def test_what_a_sweep_prunes_from_a_hot_thread_never_comes_back_from_the_archive(
    make_saver: SaverFactory, archive_url: str, postgres_url: str, redis_prefix: str, how: str
) -> None:
    """The archive learns that pruned checkpoints were deleted, not lost:
    a restore onto empty tiers brings back what was kept, no more."""
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(6).compile(checkpointer=saver)
        graph.invoke({"messages": [], "n": 0}, cfg("t-hot"))
        assert saver.drain_archive().caught_up
        if how == "sweep":
            saver.apply_retention(RetentionPolicy(keep_last=2))
        else:
            saver.prune(["t-hot"])
        assert saver.drain_archive().caught_up
        kept = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t-hot"))]
        values = graph.get_state(cfg("t-hot")).values
        fingerprint = saver.health().store_key_fingerprint
    assert len(kept) == (2 if how == "sweep" else 1)
    lose_every_hot_tier(postgres_url, redis_prefix)
    with make_saver(
        FULL, archive=archive_url, sqlite_name="after.sqlite", archive_key_fingerprint=fingerprint
    ) as fresh:
        assert fresh.restore().threads == 1
        assert [t.config["configurable"]["checkpoint_id"] for t in fresh.list(cfg("t-hot"))] == kept
        assert loop_graph(6).compile(checkpointer=fresh).get_state(cfg("t-hot")).values == values


# -- what happens between a thread's judgement and the sweep acting on it ---------------------


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("meanwhile", ["run", "pin"])
def test_a_run_or_a_pin_after_the_judgement_wins_over_the_sweep(
    make_saver: SaverFactory, archive_url: str, monkeypatch: pytest.MonkeyPatch, face: str, meanwhile: str
) -> None:
    """The sweep judged the archived thread idle; before it deletes it, a run
    resumes the thread (or an operator pins it), bringing it back. The
    sweep leaves it: the run's work and the pin stay."""
    from langgraph_durable.archive.archiver_async import AsyncArchiver

    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        archive(saver, "t", steps=3)
        later = time.time() + 10 * DAY

        def act() -> None:
            if meanwhile == "run":
                graph.invoke({"messages": ["new work"], "n": 0}, cfg("t"))
            else:
                saver.pin(cfg("t"), label="keep me")

        if face == "sync":
            judge = Archiver.judge

            def judged_then(self: Archiver, *args: Any) -> Any:
                verdict = judge(self, *args)
                act()
                return verdict

            monkeypatch.setattr(Archiver, "judge", judged_then)
        else:
            ajudge = AsyncArchiver.judge

            async def ajudged_then(self: AsyncArchiver, *args: Any) -> Any:
                verdict = await ajudge(self, *args)
                if meanwhile == "run":
                    await graph.ainvoke({"messages": ["new work"], "n": 0}, cfg("t"))
                else:
                    await saver.apin(cfg("t"), label="keep me")
                return verdict

            monkeypatch.setattr(AsyncArchiver, "judge", ajudged_then)

        async def body() -> Any:
            on = On(saver, face)
            try:
                return await on.apply_retention(RetentionPolicy(delete_idle_after=DAY), now=later)
            finally:
                await on.close()

        report = run(face, body)
        monkeypatch.undo()
        assert report.threads_deleted == 0 and report.checkpoints_deleted == 0
        assert saver.get_tuple(cfg("t")) is not None
        if meanwhile == "run":
            assert "new work" in graph.get_state(cfg("t")).values["messages"]
        else:
            assert [p.label for p in saver.pins("t")] == ["keep me"]


def test_a_malformed_summary_is_read_as_missing_and_the_sweep_goes_on(
    make_saver: SaverFactory, archive_url: str
) -> None:
    """A flag whose summary is not one this library wrote (a tier damaged
    or written by hand): the thread's copy is read instead, and the other
    threads are swept as ever."""
    import json

    from langgraph_durable.tiers.base import archived_key

    with make_saver(FULL, archive=archive_url) as saver:
        count_a, _ = archive(saver, "a1")
        count_b, _ = archive(saver, "b2")
        chain = saver._sync_chain()
        for tier in chain.tiers:
            flag = json.loads(tier.read_meta(archived_key("a1")) or "{}")
            tier.write_meta(archived_key("a1"), json.dumps({**flag, "summary": {"most": "many", "settled": 3}}))
        report = saver.apply_retention(RetentionPolicy(keep_last=2))
        assert report.threads == 2 and report.checkpoints_deleted == (count_a - 2) + (count_b - 2)


def test_a_verdict_of_nothing_goes_is_remembered(
    make_saver: SaverFactory, archive_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """keep_for prunes an archived thread to its newest checkpoint; the next
    sweeps under the same rules do not read its copy again (the flag notes
    the verdict) until the verdict may have changed."""
    with make_saver(FULL, archive=archive_url) as saver:
        count, _ = archive(saver, "t")
        reads = copies_read(monkeypatch)
        policy = RetentionPolicy(keep_for=DAY)
        start = time.time() + 2 * DAY
        assert saver.apply_retention(policy, now=start).checkpoints_deleted == count - 1
        assert saver.archived_threads() == ["t"]
        reads.clear()
        first = saver.apply_retention(policy, now=start + 60)  # reads it once: nothing goes, noted
        assert first.checkpoints_deleted == 0 and first.checkpoints_kept == 1 and reads == ["t"]
        reads.clear()
        again = saver.apply_retention(policy, now=start + 120)
        assert again.checkpoints_kept == 1 and reads == []
        assert saver.apply_retention(RetentionPolicy(keep_for=2 * DAY), now=start + 180).checkpoints_deleted == 0
        assert reads == ["t"]  # other rules: judged again
        reads.clear()
        saver.apply_retention(policy, now=start + 2 * DAY)
        assert reads == ["t"]  # a day on, keep_for's verdict is looked at again


def test_the_notes_of_pruned_checkpoints_go_with_their_thread(
    make_saver: SaverFactory, archive_url: str, postgres_url: str, redis_prefix: str
) -> None:
    """Each checkpoint a sweep removes leaves a note of its id in every
    tier; deleting the thread removes them, and only them (not those of a
    thread whose id starts the same)."""
    import psycopg
    import redis as redis_lib

    from langgraph_durable.tiers.base import gone_range
    from langgraph_durable.tiers.postgres import sql as pg_sql
    from tests.conftest import REDIS_URL

    def notes() -> dict[str, int]:
        with psycopg.connect(postgres_url) as conn:
            rows = [r[0] for r in conn.execute("SELECT key FROM lgd_meta WHERE key LIKE '[\"gone\"%'")]
        client = redis_lib.Redis.from_url(REDIS_URL)
        try:
            in_redis = {key.decode(): client.scard(key) for key in client.scan_iter(match=f"{redis_prefix}*gone*")}
        finally:
            client.close()
        counted: dict[str, int] = {}
        for key in rows:
            thread = __import__("json").loads(key)[1]
            counted[f"pg:{thread}"] = counted.get(f"pg:{thread}", 0) + 1
        counted["redis"] = sum(in_redis.values())
        return counted

    ids = ["t", "t2", 't"x']
    with make_saver(FULL, archive=archive_url) as saver:
        graph = loop_graph(5).compile(checkpointer=saver)
        for thread in ids:
            graph.invoke({"messages": [], "n": 0}, cfg(thread))
        report = saver.apply_retention(RetentionPolicy(keep_last=1))
        per_thread = report.checkpoints_deleted // len(ids)
        assert per_thread > 0 and notes() == {**{f"pg:{t}": per_thread for t in ids}, "redis": 3 * per_thread}
        local = saver._sync_chain().raw_local
        assert local is not None and all(local.gone(t, "", ["x"]) == set() for t in ids)
        saver.delete_thread("t")
        assert notes() == {"pg:t2": per_thread, 'pg:t"x': per_thread, "redis": 2 * per_thread}
        low, high = gone_range("t")
        sqlite_rows = local._connect().execute("SELECT count(*) FROM lgd_meta WHERE key >= ? AND key < ?", (low, high))
        assert sqlite_rows.fetchone()[0] == 0
        assert local._connect().execute("SELECT count(*) FROM lgd_meta WHERE key LIKE '[\"gone\"%'").fetchone()[0] == (
            2 * per_thread
        )
    with psycopg.connect(postgres_url) as conn:  # the notes are found through an index, not a scan of every key
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + pg_sql.DELETE_GONE_NOTES, gone_range("t2")))
    assert "lgd_meta_key_bytes" in plan, plan


@pytest.mark.parametrize("face", FACES)
@pytest.mark.parametrize("kind", ["plain", "async"])
def test_pace_runs_once_per_thread_on_both_faces(
    make_saver: SaverFactory, archive_url: str, face: str, kind: str
) -> None:
    """`pace` (the sweep's rate limit) runs before each thread a sweep or
    `archive_idle` visits, hot or archived, on either face; an async `pace`
    is awaited on the async face and refused, naming it, on the sync one."""
    with make_saver(FULL, archive=archive_url) as saver:
        for thread in ("p-hot", "p-cold", "p-idle"):
            loop_graph(3).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg(thread))
        assert saver.archive_idle(0.0, thread_ids=["p-cold"]).archived == ["p-cold"]
        paced: list[str] = []

        def plain_pace() -> None:
            paced.append("pace")

        async def async_pace() -> None:
            paced.append("pace")

        pace = plain_pace if kind == "plain" else async_pace

        async def body() -> tuple[Any, Any, Any]:
            on = On(saver, face)
            try:
                ids = await on.thread_ids()
                swept = await on.apply_retention(
                    RetentionPolicy(keep_last=2), thread_ids=["p-hot", "p-cold"], pace=pace
                )
                moved = await on.archive_idle(0.0, thread_ids=["p-idle"], pace=pace)
                return ids, swept, moved
            finally:
                await on.close()

        if face == "sync" and kind == "async":
            from langgraph_durable import ConfigError

            before = len(list(saver.list(cfg("p-hot"))))
            with pytest.raises(ConfigError, match="an async pace was given to a sync method"):
                run(face, body)
            assert len(list(saver.list(cfg("p-hot")))) == before  # refused before any thread was touched
            return
        ids, swept, moved = run(face, body)
        assert ids == ["p-hot", "p-idle"]  # what the hot tiers hold
        assert swept.checkpoints_deleted > 0 and moved.archived == ["p-idle"]
        assert len(paced) == 3  # p-hot, p-cold (archived), p-idle
