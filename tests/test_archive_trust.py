"""Who the archive trusts: a bucket writer can never get a key adopted or a
record accepted, and two stores on one archive prefix never mix.

Two attacks, each on both faces and through the command line:

- *A bucket writer takes over a store after a disaster.* Someone who can
  write the bucket (and read nothing of the victim's) runs the product on a
  scratch prefix of their own, writes the victim's thread with a value
  whose msgpack form names ``os.system``, and copies their ``v1/store-key``
  object and segments over the victim's. After the victim's Redis and
  Postgres are lost, ``restore --all`` must refuse the planted key: no
  planted value is ever decoded (the payload would create a marker file).
- *Two apps on one archive prefix.* The second store pointed at a prefix
  the first one owns is refused at setup, naming both stores; it never
  takes the first one's key.

Real Redis and Postgres, moto's S3 server, no mocks.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis as redis_lib
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from langgraph_durable import Archive, DurableSaver, Tiers, cli
from langgraph_durable.archive.segments import (
    LEGACY_SEGMENT_TAG,
    SEGMENT_TAG,
    _context,
    _legacy_context,
    open_owner,
    segments_prefix,
)
from langgraph_durable.archive.store import ArchiveStore
from langgraph_durable.errors import ConfigError
from langgraph_durable.model.records import open_envelope, seal
from tests import hostile_payloads as hostile
from tests import test_cli
from tests.conftest import POSTGRES_URL, REDIS_URL, SaverFactory, database_url, lose_every_hot_tier, make_bucket
from tests.flat_options import durable_options
from tests.graphs import _history, loop_graph

pytestmark = [pytest.mark.s3]

# test_cli's: no LANGGRAPH_DURABLE_* variable of the environment reaches a command.
no_tier_env = test_cli.no_tier_env

FULL = "sqlite+redis+postgres"
THREAD = "user-42"


def cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}


# -- what the attacker runs ---------------------------------------------------------------


class Planted:
    """A state value the attacker's serializer writes as a msgpack extension
    that LangGraph's default serializer decodes by calling ``os.system``."""

    def __init__(self, command: str) -> None:
        self.command = command


class PlantingSerde(JsonPlusSerializer):
    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        if isinstance(obj, Planted):
            return "msgpack", hostile.packed(hostile.runs_shell(obj.command))
        return super().dumps_typed(obj)


@pytest.fixture
def marker(tmp_path: Path) -> Path:
    """The file the planted value would create if it ever ran."""
    return tmp_path / "os-system-ran"


@pytest.fixture
def other_redis_prefix() -> Iterator[str]:
    """A second Redis key prefix of the test's own (the attacker's, or app B's)."""
    prefix = f"lgd_test_{uuid.uuid4().hex[:16]}"
    yield prefix
    client = redis_lib.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}:*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


@pytest.fixture
def other_postgres_url() -> Iterator[str]:
    """A second empty database of the test's own (app B's)."""
    name = f"lgd_test_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield database_url(POSTGRES_URL, name)
    finally:
        with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def plant(archive_url: str, attacker_redis_prefix: str, marker: Path, *, with_key: bool = True) -> None:
    """The attacker's run on a scratch prefix of the victim's bucket, its
    objects copied over the victim's (their store key too, `with_key`)."""
    bucket = archive_url.removeprefix("s3://").split("/", 1)[0]
    scratch = f"s3://{bucket}/scratch-{uuid.uuid4().hex[:8]}"
    with DurableSaver(
        sqlite=None,
        redis=REDIS_URL,
        archive=scratch,
        serde=PlantingSerde(),
        tiers=Tiers(redis_key_prefix=attacker_redis_prefix),
    ) as attacker:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": Planted(f"touch {marker}"), "messages": ["attacker's state"]}
        checkpoint["channel_versions"] = {"n": 1, "messages": 1}
        attacker.put(cfg(THREAD), checkpoint, {"source": "input", "step": 1}, {"n": 1, "messages": 1})
        assert attacker.drain_archive().caught_up  # type: ignore[union-attr]
    theirs, victims = ArchiveStore(scratch), ArchiveStore(archive_url)
    copied = [key for key in theirs.keys("") if with_key or "/threads/" in key]
    assert any("/threads/" in key for key in copied)
    for key in copied:
        data = theirs.get(key)
        assert data is not None
        victims.put(key, data)


def kept_objects(archive_url: str) -> dict[str, bytes]:
    """The victim's owner object and key copy, as a bucket version the
    operator trusts keeps them (object versioning, a backup)."""
    store = ArchiveStore(archive_url)
    kept = {key: store.get(key) for key in ("v1/store", "v1/store-key")}
    return {key: data for key, data in kept.items() if data is not None}


def put_back(archive_url: str, kept: dict[str, bytes]) -> None:
    store = ArchiveStore(archive_url)
    for key, data in kept.items():
        store.put(key, data)


def victim_store(make_saver: SaverFactory, archive_url: str, **options: Any) -> tuple[list[Any], str | None]:
    """The victim's store: thread `THREAD` run and shipped. Its history,
    and its store key's fingerprint (what `doctor` prints)."""
    with make_saver(FULL, archive=archive_url, **options) as saver:
        graph = loop_graph(3).compile(checkpointer=saver)
        graph.invoke({"messages": ["victim's own"], "n": 0}, cfg(THREAD))
        history = _history(graph, cfg(THREAD))
        assert saver.drain_archive().caught_up  # type: ignore[union-attr]
        fingerprint = getattr(saver.health(), "store_key_fingerprint", None)
    return history, fingerprint


def restore_on(face: str, saver: DurableSaver) -> Any:
    if face == "sync":
        return saver.restore()

    async def arestore() -> Any:
        try:
            return await saver.arestore()
        finally:
            await saver.aclose()

    return asyncio.run(arestore())


def read_thread(saver: DurableSaver) -> Any:
    """What the victim's app reads of the thread (decoding every value)."""
    found = saver.get_tuple(cfg(THREAD))
    return None if found is None else found.checkpoint["channel_values"]


# -- attack 1: a bucket writer's key and segments ------------------------------------------


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_planted_store_key_is_never_adopted_and_the_planted_value_never_runs(
    make_saver: SaverFactory,
    archive_url: str,
    redis_prefix: str,
    postgres_url: str,
    other_redis_prefix: str,
    marker: Path,
    face: str,
) -> None:
    victim_store(make_saver, archive_url)
    plant(archive_url, other_redis_prefix, marker)
    lose_every_hot_tier(postgres_url, redis_prefix)

    refused: ConfigError | None = None
    with make_saver(FULL, archive=archive_url, sqlite_name="after.sqlite") as fresh:
        try:
            restore_on(face, fresh)
        except ConfigError as exc:
            refused = exc
        else:
            read_thread(fresh)  # what the app would do next
    assert not marker.exists(), "the planted value was decoded: os.system ran"
    assert refused is not None, "restore adopted the key the bucket held"
    message = str(refused)
    assert "\n" not in message
    assert "Archive(key_fingerprint=)" in message and "doctor" in message
    # Nothing was written: the hot tiers still hold no key and no record.
    with make_saver("redis+postgres", read_only=True) as looking:
        assert list(looking.list(None)) == []


@pytest.mark.parametrize("face", ["sync", "async"])
def test_with_the_operators_fingerprint_a_replaced_key_is_refused(
    make_saver: SaverFactory,
    archive_url: str,
    redis_prefix: str,
    postgres_url: str,
    other_redis_prefix: str,
    marker: Path,
    face: str,
) -> None:
    _, fingerprint = victim_store(make_saver, archive_url)
    assert fingerprint is not None and len(fingerprint.split(":")[-1]) == 64
    plant(archive_url, other_redis_prefix, marker)
    lose_every_hot_tier(postgres_url, redis_prefix)
    with (
        pytest.raises(ConfigError, match="not the key whose fingerprint you gave") as info,
        make_saver(FULL, archive=archive_url, sqlite_name="after.sqlite", archive_key_fingerprint=fingerprint) as fresh,
    ):
        restore_on(face, fresh)
    # The bucket's key is named by its short fingerprint only: never one to paste back.
    assert fingerprint.split(":")[-1] not in str(info.value)
    assert not marker.exists()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_with_the_operators_fingerprint_planted_segments_are_left_out(
    make_saver: SaverFactory,
    archive_url: str,
    redis_prefix: str,
    postgres_url: str,
    other_redis_prefix: str,
    marker: Path,
    face: str,
) -> None:
    history, fingerprint = victim_store(make_saver, archive_url)
    plant(archive_url, other_redis_prefix, marker, with_key=False)
    lose_every_hot_tier(postgres_url, redis_prefix)
    with make_saver(
        FULL, archive=archive_url, sqlite_name="after.sqlite", archive_key_fingerprint=fingerprint
    ) as fresh:
        report = restore_on(face, fresh)
        assert report.threads == 1 and len(report.bad_segments) == 1
        assert _history(loop_graph(3).compile(checkpointer=fresh), cfg(THREAD)) == history
    assert not marker.exists()
    # The store is whole again: the app starts with no option at all.
    with make_saver(FULL, archive=archive_url, sqlite_name="app.sqlite") as app:
        assert read_thread(app)["messages"][0] == "victim's own"


def test_with_the_victims_signing_key_planted_segments_are_refused(
    make_saver: SaverFactory,
    archive_url: str,
    redis_prefix: str,
    postgres_url: str,
    other_redis_prefix: str,
    marker: Path,
) -> None:
    key = b"k" * 32
    history, _ = victim_store(make_saver, archive_url, signing_key=key)
    kept = kept_objects(archive_url)
    assert list(kept) == ["v1/store"]  # a key of the user's stays the user's
    plant(archive_url, other_redis_prefix, marker)
    lose_every_hot_tier(postgres_url, redis_prefix)
    # The attacker's owner object over the victim's: refused, naming it.
    with (
        pytest.raises(ConfigError, match="belongs to another store"),
        make_saver(FULL, archive=archive_url, sqlite_name="after.sqlite", signing_key=key) as fresh,
    ):
        fresh.restore()
    assert not marker.exists()
    put_back(archive_url, kept)
    with make_saver(FULL, archive=archive_url, sqlite_name="after.sqlite", signing_key=key) as fresh:
        report = fresh.restore()
        assert report.threads == 1 and len(report.bad_segments) == 1
        assert _history(loop_graph(3).compile(checkpointer=fresh), cfg(THREAD)) == history
    assert not marker.exists()


def test_the_cli_restore_says_what_it_needs_in_one_line(
    make_saver: SaverFactory,
    archive_url: str,
    redis_prefix: str,
    postgres_url: str,
    other_redis_prefix: str,
    marker: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, fingerprint = victim_store(make_saver, archive_url)
    kept = kept_objects(archive_url)
    plant(archive_url, other_redis_prefix, marker)
    lose_every_hot_tier(postgres_url, redis_prefix)
    flags = [
        "--sqlite", str(tmp_path / "cli.sqlite"), "--redis", REDIS_URL, "--redis-key-prefix", redis_prefix,
        "--postgres", postgres_url, "--archive", archive_url,
    ]  # fmt: skip
    code = cli.main(["restore", "--all", *flags])
    out, err = capsys.readouterr()
    if code != cli.EXIT_CANNOT_RUN:  # restored: the app reads the thread next
        with make_saver(FULL, archive=archive_url, sqlite_name="app.sqlite") as app:
            read_thread(app)
    assert not marker.exists(), "the planted value was decoded: os.system ran"
    assert code == cli.EXIT_CANNOT_RUN, out
    assert len(err.strip().splitlines()) == 1 and "--archive-key-fingerprint" in err and "doctor" in err
    assert fingerprint is not None
    code = cli.main(["restore", "--all", *flags, "--archive-key-fingerprint", fingerprint])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_CANNOT_RUN and len(err.strip().splitlines()) == 1
    assert "not the key whose fingerprint you gave" in err
    # The operator puts the bucket's key and owner objects back from a version they trust.
    assert sorted(kept) == ["v1/store", "v1/store-key"]
    put_back(archive_url, kept)
    code = cli.main(["restore", "--all", *flags, "--archive-key-fingerprint", fingerprint])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_FINDINGS, err  # the planted segment does not verify: left out, named
    assert "UNUSABLE" in out and "1 thread(s) restored (" in out
    with make_saver(FULL, archive=archive_url, sqlite_name="app.sqlite") as app:
        assert read_thread(app)["messages"][0] == "victim's own"
    assert not marker.exists()


@pytest.mark.parametrize("payload", ["os.system", "record", "pickle"])
def test_no_hostile_payload_in_a_planted_segment_constructs_anything(
    make_saver: SaverFactory,
    archive_url: str,
    redis_prefix: str,
    postgres_url: str,
    other_redis_prefix: str,
    marker: Path,
    payload: str,
) -> None:
    """Each of the import tests' hostile payloads, planted as the attacker's
    value over a victim restored with its own fingerprint: none runs."""
    hostile.CALLS.clear()
    _, fingerprint = victim_store(make_saver, archive_url)
    values: dict[str, Callable[[], tuple[str, bytes]]] = {
        "os.system": lambda: ("msgpack", hostile.packed(hostile.runs_shell(f"touch {marker}"))),
        "record": lambda: ("msgpack", hostile.packed(hostile.calls_record("ext"))),
        "pickle": lambda: ("pickle", hostile.pickled_call("pickle")),
    }

    class Serde(JsonPlusSerializer):
        def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
            return values[payload]() if isinstance(obj, Planted) else super().dumps_typed(obj)

    bucket = archive_url.removeprefix("s3://").split("/", 1)[0]
    scratch = f"s3://{bucket}/scratch"
    with DurableSaver(
        sqlite=None, redis=REDIS_URL, archive=scratch, serde=Serde(), tiers=Tiers(redis_key_prefix=other_redis_prefix)
    ) as attacker:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"n": Planted("")}
        checkpoint["channel_versions"] = {"n": 1}
        attacker.put(cfg(THREAD), checkpoint, {"source": "input", "step": 1}, {"n": 1})
        attacker.drain_archive()
    theirs, victims = ArchiveStore(scratch), ArchiveStore(archive_url)
    for key in theirs.keys("v1/threads/"):
        victims.put(key, theirs.get(key) or b"")
    lose_every_hot_tier(postgres_url, redis_prefix)
    with make_saver(
        FULL, archive=archive_url, sqlite_name="after.sqlite", archive_key_fingerprint=fingerprint
    ) as fresh:
        report = fresh.restore()
        assert len(report.bad_segments) == 1
        assert read_thread(fresh)["messages"][0] == "victim's own"
    assert hostile.CALLS == [] and not marker.exists()


# -- attack 2: two stores on one archive prefix ----------------------------------------------


def other_store(tmp_path: Path, redis_prefix: str, postgres_url: str) -> dict[str, Any]:
    """The tiers of a second store (B): its own file, Redis prefix and database."""
    return {
        "sqlite": str(tmp_path / "b.sqlite"),
        "redis": REDIS_URL,
        "redis_key_prefix": redis_prefix,
        "postgres": postgres_url,
    }


def test_a_second_store_on_an_owned_prefix_is_refused_and_never_mixes(
    make_saver: SaverFactory,
    archive_url: str,
    other_redis_prefix: str,
    other_postgres_url: str,
    tmp_path: Path,
) -> None:
    with make_saver(FULL, archive=archive_url) as a:
        graph = loop_graph(2).compile(checkpointer=a)
        graph.invoke({"messages": ["A's private data"], "n": 0}, cfg(THREAD))
        assert a.drain_archive().caught_up  # type: ignore[union-attr]
        a_fingerprint = getattr(a.health(), "store_key_fingerprint", None)

    b_tiers = other_store(tmp_path, other_redis_prefix, other_postgres_url)
    refused: ConfigError | None = None
    try:
        with DurableSaver(**durable_options(b_tiers), archive=archive_url) as b:
            loop_graph(2).compile(checkpointer=b).invoke({"messages": ["B's data"], "n": 0}, cfg(THREAD))
            b.drain_archive()
    except ConfigError as exc:
        refused = exc

    with make_saver(FULL, archive=archive_url) as a:
        assert a.archive_idle(0.0, thread_ids=[THREAD]).archived == [THREAD]
        values = read_thread(a)  # brought back from the archive
        assert a.archive_restores == 1
        assert values["messages"][0] == "A's private data", "A brought back B's thread"
    assert refused is not None, "the second store took the first one's prefix (and key)"
    message = str(refused)
    assert "\n" not in message
    assert a_fingerprint is not None and a_fingerprint.split(":")[-1][:16] in message
    assert "own archive prefix" in message


def test_two_new_stores_claiming_one_empty_prefix_at_once_one_wins(
    make_saver: SaverFactory,
    archive_url: str,
    other_redis_prefix: str,
    other_postgres_url: str,
    tmp_path: Path,
) -> None:
    """A finds the prefix unowned; before it writes its owner object, B
    claims it. A's write is conditional: A is refused naming B, and B's
    claim stands (a plain write would have taken the prefix from B)."""
    a = make_saver(FULL, archive=archive_url)
    b = DurableSaver(
        **durable_options(other_store(tmp_path, other_redis_prefix, other_postgres_url)), archive=archive_url
    )
    try:
        chain = a._sync_chain()
        store = a._archiver().store
        claimed: list[str] = []

        def b_claims_first(write: Callable[[str, bytes], Any]) -> Callable[[str, bytes], Any]:
            def written(key: str, data: bytes) -> Any:
                if key == "v1/store" and not claimed:
                    claimed.append(key)
                    b._sync_chain().ensure_setup()  # B's whole claim, between A's look and A's write
                return write(key, data)

            return written

        store.put = b_claims_first(store.put)  # type: ignore[method-assign]
        if hasattr(store, "create"):
            store.create = b_claims_first(store.create)  # type: ignore[method-assign]
        with pytest.raises(ConfigError, match="own archive prefix"):
            chain.ensure_setup()
        assert claimed
        owner = open_owner(ArchiveStore(archive_url).get("v1/store") or b"", b._sync_chain().codec.keys)
        assert owner["store"] == b._archiver().store_id
        loop_graph(2).compile(checkpointer=b).invoke({"messages": ["B's"], "n": 0}, cfg(THREAD))
        assert b.drain_archive().caught_up
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_store_with_its_own_key_pointed_at_an_owned_prefix_is_refused_naming_both(
    make_saver: SaverFactory,
    archive_url: str,
    other_redis_prefix: str,
    other_postgres_url: str,
    tmp_path: Path,
    face: str,
) -> None:
    with make_saver(FULL, archive=archive_url) as a:
        loop_graph(2).compile(checkpointer=a).invoke({"messages": ["A"], "n": 0}, cfg(THREAD))
        assert a.drain_archive().caught_up  # type: ignore[union-attr]
        a_fingerprint = a.health().store_key_fingerprint  # type: ignore[attr-defined]
    b_tiers = {"sqlite": None, "redis": REDIS_URL, "redis_key_prefix": other_redis_prefix}
    b_tiers["postgres"] = other_postgres_url
    with DurableSaver(**durable_options(b_tiers)) as b:  # B ran before, without an archive: it has its own key
        loop_graph(2).compile(checkpointer=b).invoke({"messages": ["B"], "n": 0}, cfg(THREAD))
        b_fingerprint = b.health().store_key_fingerprint  # type: ignore[attr-defined]

    b = DurableSaver(**durable_options(b_tiers), archive=archive_url)
    with pytest.raises(ConfigError) as info:
        if face == "sync":
            b.setup()
        else:

            async def asetup() -> None:
                try:
                    await b.asetup()
                finally:
                    await b.aclose()

            asyncio.run(asetup())
    b.close()
    message = str(info.value)
    assert a_fingerprint.split(":")[-1][:16] in message and b_fingerprint.split(":")[-1][:16] in message
    assert "own archive prefix" in message
    with make_saver(FULL, archive=archive_url) as a:
        assert read_thread(a)["messages"][0] == "A"


def test_a_segment_of_another_store_with_the_same_signing_key_never_verifies(
    make_saver: SaverFactory,
    archive_url: str,
    other_redis_prefix: str,
    other_postgres_url: str,
    tmp_path: Path,
) -> None:
    """Two apps given one signing key, each with its own prefix: a segment
    copied from one into the other's is bound to its own store and refused."""
    key = b"s" * 32
    bucket = archive_url.removeprefix("s3://").split("/", 1)[0]
    b_url = f"s3://{bucket}/app-b"
    b_tiers = {"redis": REDIS_URL, "redis_key_prefix": other_redis_prefix, "postgres": other_postgres_url}
    with DurableSaver(
        sqlite=str(tmp_path / "b.sqlite"), **durable_options(b_tiers), archive=b_url, signing_key=key
    ) as b:
        loop_graph(2).compile(checkpointer=b).invoke({"messages": ["B's data"], "n": 0}, cfg(THREAD))
        assert b.drain_archive().caught_up  # type: ignore[union-attr]
    with make_saver(FULL, archive=archive_url, signing_key=key) as a:
        loop_graph(2).compile(checkpointer=a).invoke({"messages": ["A's private data"], "n": 0}, cfg(THREAD))
        assert a.drain_archive().caught_up  # type: ignore[union-attr]
        theirs, ours = ArchiveStore(b_url), ArchiveStore(archive_url)
        (copied,) = theirs.keys(segments_prefix(THREAD))
        ours.put(copied, theirs.get(copied) or b"")
        bad: list[str] = []
        a._archiver().image(THREAD, bad=bad)
        assert bad == [copied]
        assert a.archive_idle(0.0, thread_ids=[THREAD]).archived == [THREAD]
        assert read_thread(a)["messages"][0] == "A's private data"


def test_segments_an_older_version_wrote_are_read_under_a_trusted_key_never_unsigned(
    make_saver: SaverFactory, archive_url: str
) -> None:
    """Segments from before they named their store (bound to their thread
    and name only) still verify under the store's key, so an archive keeps
    its threads across the upgrade; unsigned, they never do."""
    with make_saver(FULL, archive=archive_url) as saver:
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": ["kept"], "n": 0}, cfg(THREAD))
        assert saver.drain_archive().caught_up  # type: ignore[union-attr]
        archiver, store = saver._archiver(), ArchiveStore(archive_url)
        key, store_id = saver._codec.key, archiver.store_id
        assert key and store_id
        (name,) = store.keys(segments_prefix(THREAD))
        _, payload = open_envelope(_context(store_id, THREAD, name), store.get(name) or b"", key=key)
        store.put(name, seal(_legacy_context(THREAD, name), LEGACY_SEGMENT_TAG, payload, key=key))
        bad: list[str] = []
        assert archiver.image(THREAD, bad=bad).checkpoints and bad == []
        store.put(name, seal(_legacy_context(THREAD, name), LEGACY_SEGMENT_TAG, payload))  # unsigned
        assert not archiver.image(THREAD, bad=bad).checkpoints and bad == [name]
        # Nor is a segment of this store's own shape sealed without a key.
        store.put(name, seal(_context(store_id, THREAD, name), SEGMENT_TAG, payload))
        bad = []
        assert not archiver.image(THREAD, bad=bad).checkpoints and bad == [name]


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_restore_with_the_owner_object_gone_still_reads_the_stores_segments(
    make_saver: SaverFactory, archive_url: str, redis_prefix: str, postgres_url: str, face: str
) -> None:
    """The key object names the store's id too: deleting ``v1/store`` from
    the bucket does not make a restore take the store for a new one."""
    history, fingerprint = victim_store(make_saver, archive_url)
    ArchiveStore(archive_url).delete(["v1/store"])
    lose_every_hot_tier(postgres_url, redis_prefix)
    with make_saver(
        FULL, archive=archive_url, sqlite_name="after.sqlite", archive_key_fingerprint=fingerprint
    ) as fresh:
        report = restore_on(face, fresh)
        assert report.threads == 1 and report.bad_segments == []
        assert _history(loop_graph(3).compile(checkpointer=fresh), cfg(THREAD)) == history
    assert ArchiveStore(archive_url).get("v1/store") is not None  # claimed again, under the same id


@pytest.mark.parametrize("face", ["sync", "async"])
def test_a_store_that_took_its_key_but_never_claimed_still_reads_its_segments(
    make_saver: SaverFactory, archive_url: str, redis_prefix: str, postgres_url: str, face: str
) -> None:
    """A process takes the archive's key, then dies (or loses the object
    store) before it claims the prefix: the next process finds the key in
    its tiers and learns the store's id from the bucket, not a new one that
    would leave every segment unreadable. Two faces or replicas setting up
    at once meet the same window."""
    history, fingerprint = victim_store(make_saver, archive_url)
    ArchiveStore(archive_url).delete(["v1/store"])
    lose_every_hot_tier(postgres_url, redis_prefix)
    with make_saver(
        FULL, archive=archive_url, sqlite_name="first.sqlite", archive_key_fingerprint=fingerprint
    ) as first:
        first._runtime.archive_replica = None  # no background pass claims either
        chain = first._sync_chain()
        chain.claim_archive = None  # the claim never happens
        chain.ensure_setup()
    with make_saver(FULL, archive=archive_url, sqlite_name="next.sqlite") as after:
        report = restore_on(face, after)
        assert report.threads == 1 and report.bad_segments == []
        assert _history(loop_graph(3).compile(checkpointer=after), cfg(THREAD)) == history


def test_doctor_prints_the_fingerprint_the_option_takes(
    make_saver: SaverFactory,
    archive_url: str,
    redis_prefix: str,
    postgres_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, fingerprint = victim_store(make_saver, archive_url)
    assert fingerprint is not None
    flags = [
        "--sqlite", str(tmp_path / "doctor.sqlite"), "--redis", REDIS_URL, "--redis-key-prefix", redis_prefix,
        "--postgres", postgres_url, "--archive", archive_url,
    ]  # fmt: skip
    assert cli.main(["doctor", *flags]) == cli.EXIT_OK
    assert f"store key fingerprint: {fingerprint} " in capsys.readouterr().out
    assert cli.main(["doctor", *flags, "--json"]) == cli.EXIT_OK
    assert json.loads(capsys.readouterr().out)["report"]["store_key_fingerprint"] == fingerprint
    # What the option and its variable take, and what they refuse (savers made, never opened).
    digits = fingerprint.removeprefix("hmac-sha256:")
    given = DurableSaver(
        sqlite=":memory:",
        archive=Archive(archive_url, key_fingerprint=digits.upper()),
    )
    assert given.archive_key_fingerprint == fingerprint
    given.close()
    with pytest.raises(ConfigError, match="16-digit form"):
        DurableSaver(
            sqlite=":memory:",
            archive=Archive(archive_url, key_fingerprint=fingerprint[:28]),
        )
    monkeypatch.setenv("LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT", "not-a-fingerprint")
    with pytest.raises(ConfigError, match="LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT"):
        DurableSaver.from_env(sqlite=":memory:", archive=archive_url)
    monkeypatch.setenv("LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT", fingerprint)
    given = DurableSaver.from_env(sqlite=":memory:", archive=archive_url)
    assert given.archive_key_fingerprint == fingerprint
    given.close()
    # On tiers that hold their own key, a fingerprint of another key is a mistake said at setup.
    other = "hmac-sha256:" + "0" * 64
    with (
        pytest.raises(ConfigError, match="names another key than this store's"),
        make_saver(FULL, archive=archive_url, archive_key_fingerprint=other) as saver,
    ):
        saver.setup()


def _without_conditional_writes(upstream: str) -> tuple[Any, str]:
    """An S3 endpoint in front of `upstream` that answers a PUT with
    ``If-None-Match`` as some S3 look-alikes do (501 Not Implemented)."""
    import http.client
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from urllib.parse import urlsplit

    from tests.servers import free_port

    up = urlsplit(upstream)
    refusal = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>A header you '
        b"provided implies functionality that is not implemented</Message><Header>If-None-Match</Header></Error>"
    )

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            pass

        def _forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if self.command == "PUT" and self.headers.get("If-None-Match"):
                self.send_response(501)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(refusal)))
                self.end_headers()
                self.wfile.write(refusal)
                return
            conn = http.client.HTTPConnection(up.hostname, up.port, timeout=10)
            conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
            answer = conn.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for name, value in answer.getheaders():
                if name.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
            conn.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _forward

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


def test_an_object_store_without_conditional_writes_still_archives(
    make_saver: SaverFactory, s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that answers ``If-None-Match`` with 501 gets a plain write of
    the owner object: the store claims its prefix and archives as before."""
    bucket = make_bucket(s3_env)
    server, endpoint = _without_conditional_writes(s3_env)
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    try:
        with make_saver(FULL, archive=f"s3://{bucket}/archive") as saver:
            loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, cfg(THREAD))
            assert saver.archive_idle(0.0, thread_ids=[THREAD]).archived == [THREAD]
            assert saver.drain_archive().caught_up
            assert saver.get_tuple(cfg(THREAD)) is not None  # brought back
    finally:
        server.shutdown()
        server.server_close()
