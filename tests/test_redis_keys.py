"""The Redis key layout: every id in a key name is encoded (`key_part`), so
no thread id, namespace, checkpoint id or prefix can make a key of another
thread or of another saver sharing the database, and a saver reads, moves
and deletes only keys that parse exactly under its own prefix. Stores
written with the older layout (ids as they were) are moved at `setup`."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis as redis_lib
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
from redis.cluster import RedisCluster
from redis.crc import key_slot

from langgraph_durable import DurableSaver, RetentionPolicy, Tiers, cli
from langgraph_durable.tiers.redis import tier as redis_sync
from langgraph_durable.tiers.redis import tier_async as redis_async
from langgraph_durable.tiers.redis.tier import key_part, parse_key_part

from .cluster import RedisClusterProcesses, started
from .conftest import REDIS_URL
from .graphs import run_scenarios, subgraph_graph

pytestmark = [pytest.mark.redis]

# Everything the older layout let through into a key name as it was.
SPECIAL = ":{}*?[]\\% \t\n\x7f%3A%7B|/@é€😀"
ID_CHARS = st.sampled_from(list(SPECIAL) + list("ab-_."))
IDS = st.text(ID_CHARS, min_size=1, max_size=8)


# URLs of the private clusters started here (`cluster`): their clients are RedisCluster.
_CLUSTERS: set[str] = set()


def _client(url: str = REDIS_URL) -> Any:
    return (RedisCluster if url in _CLUSTERS else redis_lib.Redis).from_url(url)


@pytest.fixture
def base(redis_prefix: str) -> Iterator[str]:
    """A prefix of this test's own to build others on (``base``, ``base:{x}``,
    ...); every key starting with it is deleted afterwards."""
    yield redis_prefix
    client = _client()
    keys = list(client.scan_iter(match=redis_prefix + "*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def _saver(prefix: str, url: str = REDIS_URL) -> DurableSaver:
    return DurableSaver(sqlite=None, redis=url, tiers=Tiers(redis_key_prefix=prefix))


def _put(
    saver: DurableSaver, thread: str, ns: str = "", step: int = 0, parent: Any = None, odd_ids: bool = False
) -> Any:
    """A checkpoint with one channel value and one pending write; with
    `odd_ids`, its channel and task id hold special characters too (a
    checkpoint id is a uuid: `put` refuses anything else)."""
    cfg = generate_config(thread)
    cfg["configurable"]["checkpoint_ns"] = ns
    if parent is not None:
        cfg["configurable"]["checkpoint_id"] = parent["configurable"]["checkpoint_id"]
    channel = f"k:{{{ns}}}*" if odd_ids else "k"
    cp = generate_checkpoint(channel_values={channel: f"{thread}/{ns}/{step}"})
    cp["channel_versions"] = {channel: f"{step + 1:032}.0"}
    stored = saver.put(cfg, cp, generate_metadata(step=step), {channel: cp["channel_versions"][channel]})
    task = f"task:{{{ns}}}[{step}]" if odd_ids else f"task-{step}"
    saver.put_writes(stored, [("ch", f"w{step}")], task)
    return stored


def _fill(saver: DurableSaver, threads: list[tuple[str, str]], odd_ids: bool = False) -> None:
    """Two checkpoints (with a pending write each) per (thread, ns)."""
    for thread, ns in threads:
        first = _put(saver, thread, ns, odd_ids=odd_ids)
        _put(saver, thread, ns, step=1, parent=first, odd_ids=odd_ids)


def _contents(client: Any, name: bytes) -> tuple[str, Any]:
    """A key's type and contents, in an order of their own (DUMP's order of
    a hash or set depends on how it was built)."""
    kind = client.type(name).decode()
    if kind == "hash":
        return kind, sorted(client.hgetall(name).items())
    if kind == "set":
        return kind, sorted(client.smembers(name))
    if kind == "zset":
        return kind, client.zrange(name, 0, -1, withscores=True)
    return kind, client.get(name)


def _keys_of(prefix: str, url: str = REDIS_URL) -> dict[bytes, tuple[str, Any]]:
    """Every key of a saver's (its encoded prefix, then ``:``) and what it holds."""
    return _matching(key_part(prefix) + ":*", url)


def _matching(pattern: str, url: str = REDIS_URL) -> dict[bytes, tuple[str, Any]]:
    client = _client(url)
    try:
        return {name: _contents(client, name) for name in client.scan_iter(match=pattern, count=1000)}
    finally:
        client.close()


def _listed(saver: DurableSaver) -> set[tuple[str, str]]:
    return {
        (t.config["configurable"]["thread_id"], t.config["configurable"]["checkpoint_ns"]) for t in saver.list(None)
    }


# -- the encoding ---------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    ["", "alice", "thread-1_v2.0", "1ef4f797-8335-6428-8001-8a1503f9b875", "user@example.com", "org/42", "a|b"],
)
def test_ordinary_ids_keep_their_names(text: str) -> None:
    assert key_part(text) == text
    assert parse_key_part(text) == text


def test_special_characters_are_escaped() -> None:
    assert key_part("x}:cp") == "x%7D%3Acp"
    assert key_part("app:{x}") == "app%3A%7Bx%7D"
    assert key_part("a b\t*?[]\\%") == "a%20b%09%2A%3F%5B%5D%5C%25"
    assert key_part("é") == "%C3%A9"


@given(st.text())
def test_every_id_round_trips_and_makes_no_separator(text: str) -> None:
    encoded = key_part(text)
    assert parse_key_part(encoded) == text
    assert not set(encoded) & set(":{}*?[]\\ ") and encoded.isascii() and encoded.isprintable()


@pytest.mark.parametrize("text", ["a:b", "%3a", "%41", "%C3", "%ZZ", "%", "a%7", "x}", "é", "a b"])
def test_names_no_id_encodes_to_do_not_parse(text: str) -> None:
    assert parse_key_part(text) is None


@given(st.text(min_size=0, max_size=12))
@settings(max_examples=60, deadline=None)
def test_the_scripts_encode_as_python_does(text: str) -> None:
    """The scripts name write hashes and id indexes from ids they read."""
    client = _client()
    try:
        script = redis_async._LUA_KEY_PART + "return key_part(ARGV[1])"
        assert client.eval(script, 0, text).decode() == key_part(text)
    finally:
        client.close()


# -- what was seen: a nested prefix's threads taken for one's own -----------------


def test_a_nested_prefix_is_not_scanned_as_ones_own(base: str) -> None:
    """A saver with prefix ``app`` and one with ``app:{x}`` share a
    database: the first one's `list(None)`, `verify`, `repair` and retention
    see only its own thread and leave the other's 7 threads as they are."""
    outer, inner = base, base + ":{x}"
    with _saver(outer) as app, _saver(inner) as nested:
        _fill(nested, [(f"t{i}", "") for i in range(7)])
        _fill(app, [("mine", "")])
        theirs = _keys_of(inner)
        assert _listed(app) == {("mine", "")}
        assert app.thread_ids() == ["mine"]
        assert app.verify().bad == [] and app.repair().bad == []
        app.apply_retention(RetentionPolicy(keep_last=1))
        app.delete_thread("mine")
        assert app.thread_ids() == []
        assert _keys_of(inner) == theirs
        assert nested.thread_ids() == [f"t{i}" for i in range(7)]
        assert len(list(nested.list(None))) == 14


async def test_a_nested_prefix_is_not_scanned_as_ones_own_async(base: str) -> None:
    outer, inner = base + "_a", base + "_a:{x}"
    async with _saver(outer) as app, _saver(inner) as nested:
        for i in range(3):
            cfg = generate_config(f"t{i}")
            cp = generate_checkpoint()
            await nested.aput(cfg, cp, generate_metadata(step=0), {})
        await app.aput(generate_config("mine"), generate_checkpoint(), generate_metadata(step=0), {})
        theirs = _keys_of(inner)
        assert {t.config["configurable"]["thread_id"] async for t in app.alist(None)} == {"mine"}
        assert (await app.averify()).bad == [] and (await app.arepair()).bad == []
        await app.aapply_retention(RetentionPolicy(keep_last=1))
        await app.adelete_thread("mine")
        assert _keys_of(inner) == theirs
        assert {t.config["configurable"]["thread_id"] async for t in nested.alist(None)} == {"t0", "t1", "t2"}


# -- what was seen: a namespace making another thread's key ------------------------


def test_a_namespace_cannot_take_another_threads_key(base: str) -> None:
    """Namespace ``x}:cp`` of thread ``alice`` and thread ``alice}:ids:x``
    once named the same key; now both are written and read back."""
    with _saver(base) as saver:
        _fill(saver, [("alice", "x}:cp"), ("alice}:ids:x", "")])
        assert _listed(saver) == {("alice", "x}:cp"), ("alice}:ids:x", "")}
        tup = saver.get_tuple({"configurable": {"thread_id": "alice}:ids:x", "checkpoint_ns": ""}})
        assert tup is not None and tup.checkpoint["channel_values"] == {"k": "alice}:ids:x//1"}
        assert tup.pending_writes == [("task-1", "ch", "w1")]


async def test_a_namespace_makes_no_phantom_thread(base: str) -> None:
    """Namespace ``q}:nss`` once made a key that SCAN took for a thread
    ``q``'s, and whole-store operations then failed on it."""
    async with _saver(base) as saver:
        cfg = generate_config("t")
        cfg["configurable"]["checkpoint_ns"] = "q}:nss"
        stored = await saver.aput(cfg, generate_checkpoint(), generate_metadata(step=0), {})
        await saver.aput_writes(stored, [("ch", "v")], "task")
        assert [t.config["configurable"]["checkpoint_ns"] async for t in saver.alist(None)] == ["q}:nss"]
        assert {t.config["configurable"]["thread_id"] async for t in saver.alist(None)} == {"t"}
        report = await saver.averify()
        assert report.bad == []
        await saver.aapply_retention(RetentionPolicy(keep_last=1))
        assert [t.pending_writes async for t in saver.alist(None)] == [[("task", "ch", "v")]]


def test_a_stray_key_under_the_prefix_is_left_alone(base: str) -> None:
    """A key that looks like a thread's to SCAN but does not parse (a brace
    in the thread part, a needless escape) is no thread of this saver's."""
    client = _client()
    strays = [f"{base}:{{a}}b}}:nss", f"{base}:{{%61}}:nss", f"{base}:{{a%3a}}:nss"]
    with _saver(base) as saver:
        saver.setup()  # (a store in this layout: the older one's keys were moved then)
        for name in strays:
            client.sadd(name, "")
        _fill(saver, [("a", "")])
        assert saver.thread_ids() == ["a"]
        assert saver.verify().bad == [] and saver.repair().bad == []
        saver.apply_retention(RetentionPolicy(delete_idle_after=1e-6))
        assert all(client.smembers(name) == {b""} for name in strays)
    client.close()


# -- two savers, any ids, any prefixes ------------------------------------------------

PREFIX_TAILS = st.sampled_from(["", ":{x}", ":b", "{", "}", ":", "*", "?", "[a]", "\\", "%", "%3A", " ", "é"])


@given(
    tails=st.tuples(PREFIX_TAILS, PREFIX_TAILS).filter(lambda p: p[0] != p[1]),
    nested=st.booleans(),
    mine=st.lists(
        st.tuples(IDS, st.sampled_from(["", "x}:cp", "q}:nss", ":", "a:b|c:d"]) | IDS), min_size=1, max_size=3
    ),
    theirs=st.lists(st.tuples(IDS, IDS | st.just("")), min_size=1, max_size=3),
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_two_savers_see_exactly_their_own(
    base: str, tails: tuple[str, str], nested: bool, mine: list[tuple[str, str]], theirs: list[tuple[str, str]]
) -> None:
    """Two savers on one database, prefixes nested or not, ids full of
    special characters: each lists exactly its own threads, and nothing of
    the other's changes under `list(None)`, `verify`, `repair`, retention
    and `delete_thread`."""
    first = base + tails[0]
    second = (first if nested else base) + tails[1]
    assume(first != second)
    _two_savers(REDIS_URL, base, first, second, mine, theirs)


@pytest.mark.parametrize("ids", [[("%", "")], [("a", ""), ("%25", "x")]])
def test_a_prefix_written_as_another_prefixs_name_does_not_take_its_keys(base: str, ids: list[tuple[str, str]]) -> None:
    """``P:`` is written ``P%3A``: a second saver whose prefix is ``P%3A``
    as typed must not take the first's keys (nor its store settings) for
    keys of its own in an older layout when it sets up after the first
    wrote (a case the property tests above found)."""
    _two_savers(REDIS_URL, base, base + ":", base + "%3A", ids, [("\\[[\n", "")])


def _two_savers(
    url: str,
    base: str,
    first: str,
    second: str,
    mine: list[tuple[str, str]],
    theirs: list[tuple[str, str]],
) -> None:
    _drop_all(url, base)
    with _saver(first, url) as a, _saver(second, url) as b:
        _fill(a, mine, odd_ids=True)
        _fill(b, theirs, odd_ids=True)
        assert _listed(a) == set(mine) and _listed(b) == set(theirs)
        assert a.thread_ids() == sorted({t for t, _ in mine})
        assert b.thread_ids() == sorted({t for t, _ in theirs})
        for acting, other in ((a, b), (b, a)):
            before = _keys_of(other.redis_key_prefix, url)
            assert acting.verify().bad == []
            assert acting.repair().bad == []
            acting.apply_retention(RetentionPolicy(keep_last=1))
            assert _keys_of(other.redis_key_prefix, url) == before
        for thread in a.thread_ids():
            before = _keys_of(second, url)
            a.delete_thread(thread)
            assert _keys_of(second, url) == before
        assert a.thread_ids() == [] and _listed(b) == set(theirs)


def _drop_all(url: str, base: str) -> None:
    client = _client(url)
    try:
        for stale in client.scan_iter(match=base + "*", count=1000):
            client.delete(stale)
    finally:
        client.close()


# -- stores written with the older layout ----------------------------------------------


def _old_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Name keys as the older version did: ids and prefix as they are."""
    for module in (redis_sync, redis_async):
        monkeypatch.setattr(module, "key_part", lambda text: text)
        monkeypatch.setattr(module, "parse_key_part", lambda text: text)


def _snapshot(saver: DurableSaver, threads: list[str]) -> list[tuple[Any, ...]]:
    out = []
    for thread in threads:
        for t in saver.list({"configurable": {"thread_id": thread}}):
            out.append((t.config, t.checkpoint, t.metadata, t.parent_config, sorted(t.pending_writes or [], key=repr)))
    return sorted(out, key=repr)


def _write_old_store(
    monkeypatch: pytest.MonkeyPatch, prefix: str, thread_prefix: str, url: str = REDIS_URL
) -> tuple[list[Any], list[str]]:
    """Graph runs (subgraphs, interrupts, fan-out) written in the old layout,
    with a lease and a quarantined copy, as the older version left them."""
    client = _client(url)
    with monkeypatch.context() as patch:
        _old_layout(patch)
        with _saver(prefix, url) as old:
            run_scenarios(old, "sync", thread_prefix)
            threads = old.thread_ids()
            before = _snapshot(old, threads)
        client.hdel(f"{prefix}:meta", "key_layout")  # the older version never wrote it
    names = {k.decode() for k in client.scan_iter(match=prefix.replace("[", "\\[").replace("*", "\\*") + ":*")}
    client.close()
    assert any(":{" + thread_prefix in n and "w:" in n for n in names)  # old names, ids as they were
    assert any("ids:child:" in n for n in names)
    return before, threads


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_a_store_in_the_older_layout_is_moved_at_setup(
    base: str, monkeypatch: pytest.MonkeyPatch, face: str
) -> None:
    prefix = base + ":app"
    before, threads = _write_old_store(monkeypatch, prefix, "u:{1}*")
    assert len(threads) == 5 and all(t.startswith("u:{1}*") for t in threads)
    if face == "sync":
        with _saver(prefix) as saver:
            assert saver.thread_ids() == threads
            assert _snapshot(saver, threads) == before
            assert saver.verify().bad == []
            state = (
                subgraph_graph()
                .compile(checkpointer=saver)
                .get_state({"configurable": {"thread_id": "u:{1}*-sub"}}, subgraphs=True)
            )
            assert state.values["n"] == 2
    else:
        async with _saver(prefix) as saver:
            assert sorted({t.config["configurable"]["thread_id"] async for t in saver.alist(None)}) == threads
            assert (await saver.averify()).bad == []
            with _saver(prefix) as reader:
                assert _snapshot(reader, threads) == before
    client = _client()
    try:
        assert client.hget(key_part(prefix) + ":meta", "key_layout") == b"2"
        assert not list(client.scan_iter(match=f"{base}:app:*"))  # nothing left under the old names
    finally:
        client.close()


async def test_two_replicas_moving_at_once_or_a_move_cut_short_end_the_same(
    base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two tiers run the move together; then the old keys come back (a move
    cut off after copying, before deleting) and the next setup finishes it."""
    prefix = base + ":{r}"
    before, threads = _write_old_store(monkeypatch, prefix, "v}:w")
    client = _client()
    dumps = {n: client.dump(n) for n in client.scan_iter(match=f"{base}:{{r}}:*")}
    tiers = [redis_async.AsyncRedisTier(REDIS_URL, key_prefix=prefix) for _ in range(2)]
    try:
        await asyncio.gather(*(t.setup() for t in tiers))
    finally:
        for t in tiers:
            await t.close()
    moved = _keys_of(prefix)
    assert moved and not list(client.scan_iter(match=f"{base}:{{r}}:*"))
    for name, dump in dumps.items():
        client.restore(name, 0, dump)
    client.hdel(key_part(prefix) + ":meta", "key_layout")
    with _saver(prefix) as saver:
        assert saver.thread_ids() == threads
        assert _snapshot(saver, threads) == before
    assert _keys_of(prefix) == moved
    assert not list(client.scan_iter(match=f"{base}:{{r}}:*"))
    client.close()


def test_the_move_leaves_a_nested_prefixs_old_keys_alone(base: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Old-layout keys of ``P:{x}`` match the older layout's glob for ``P``:
    the move of ``P`` does not take them."""
    before, threads = _write_old_store(monkeypatch, base + ":{x}", "n")
    theirs = _matching(f"{base}:{{x}}:*")
    with _saver(base) as saver:
        assert saver.thread_ids() == []
    assert _matching(f"{base}:{{x}}:*") == theirs
    with _saver(base + ":{x}") as saver:
        assert saver.thread_ids() == threads
        assert _snapshot(saver, threads) == before


def test_the_layout_is_recorded_once(base: str) -> None:
    with _saver(base) as saver:
        saver.setup()
    client = _client()
    assert client.hget(f"{base}:meta", "key_layout") == b"2"
    client.close()


# -- the same on Redis Cluster ---------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A private Redis Cluster of three primaries: its URL."""
    for servers in started(RedisClusterProcesses, "a Redis Cluster of three primaries"):
        _CLUSTERS.add(servers.url)
        try:
            yield servers.url
        finally:
            _CLUSTERS.discard(servers.url)


@pytest.fixture
def cluster_base(cluster: str) -> Iterator[str]:
    base = f"lgd_test_{uuid.uuid4().hex[:16]}"
    yield base
    _drop_all(cluster, base)


@given(
    tails=st.tuples(PREFIX_TAILS, PREFIX_TAILS).filter(lambda p: p[0] != p[1]),
    nested=st.booleans(),
    mine=st.lists(st.tuples(IDS, IDS | st.just("")), min_size=1, max_size=3),
    theirs=st.lists(st.tuples(IDS, IDS | st.just("")), min_size=1, max_size=3),
)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_two_savers_see_exactly_their_own_on_a_cluster(
    cluster: str,
    cluster_base: str,
    tails: tuple[str, str],
    nested: bool,
    mine: list[tuple[str, str]],
    theirs: list[tuple[str, str]],
) -> None:
    first = cluster_base + tails[0]
    second = (first if nested else cluster_base) + tails[1]
    assume(first != second)
    _two_savers(cluster, cluster_base, first, second, mine, theirs)


def test_the_examples_on_a_cluster(cluster: str, cluster_base: str) -> None:
    """``app`` and ``app:{x}`` (whose keys the older layout all put on the
    slot of ``x``), and ``alice`` / ``alice}:ids:x``, on a cluster: each
    thread's keys on one slot of its own."""
    mine, theirs = [("alice", "x}:cp"), ("alice}:ids:x", "")], [("t", "")]
    _two_savers(cluster, cluster_base, cluster_base, cluster_base + ":{x}", mine, theirs)
    with _saver(cluster_base + ":{x}", cluster) as saver:
        _fill(saver, [(f"t{i}", "") for i in range(7)])
        slots: dict[str, set[int]] = {}
        for name in _keys_of(cluster_base + ":{x}", cluster):
            if not name.endswith(b":meta"):
                thread = parse_key_part(name.decode().split("{", 1)[1].split("}", 1)[0])
                slots.setdefault(str(thread), set()).add(key_slot(name))
        # The hash tag is the (encoded) thread id, not the brace of the prefix.
        assert set(slots) == {"t"} | {f"t{i}" for i in range(7)}
        assert all(found == {key_slot(b"{" + key_part(t).encode() + b"}")} for t, found in slots.items())


@pytest.mark.parametrize("face", ["sync", "async"])
async def test_an_older_layout_store_is_moved_on_a_cluster(
    cluster: str, cluster_base: str, monkeypatch: pytest.MonkeyPatch, face: str
) -> None:
    """The move crosses slots (a thread's old hash tag was its raw id's):
    key by key, without a transaction."""
    prefix = cluster_base + ":app"
    before, threads = _write_old_store(monkeypatch, prefix, "c:{1}", cluster)
    if face == "sync":
        with _saver(prefix, cluster) as saver:
            assert saver.thread_ids() == threads
            assert saver.verify().bad == []
    else:
        async with _saver(prefix, cluster) as saver:
            assert sorted({t.config["configurable"]["thread_id"] async for t in saver.alist(None)}) == threads
            assert (await saver.averify()).bad == []
    with _saver(prefix, cluster) as saver:
        assert _snapshot(saver, threads) == before
    assert not _matching(f"{cluster_base}:app:*", cluster)


def test_the_command_line_keeps_to_its_prefix(base: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``threads``, ``verify`` and ``repair`` for prefix ``app`` leave the
    threads of ``app:{x}`` out, and untouched."""
    with _saver(base + ":{x}") as nested:
        _fill(nested, [(f"t{i}", "") for i in range(7)])
    with _saver(base) as app:
        _fill(app, [("mine", "x}:cp")])
    theirs = _keys_of(base + ":{x}")
    store = ["--sqlite", "", "--redis", REDIS_URL, "--redis-key-prefix", base, "--json"]
    assert cli.main(["threads", *store]) == cli.EXIT_OK
    assert [t["thread_id"] for t in json.loads(capsys.readouterr().out)["report"]["threads"]] == ["mine"]
    for command in ("verify", "repair"):
        assert cli.main([command, *store]) == cli.EXIT_OK
        assert json.loads(capsys.readouterr().out)["report"]["threads"] == 1
    assert _keys_of(base + ":{x}") == theirs


def test_a_key_the_move_cannot_attribute_is_left_and_warned_of(base: str, caplog: pytest.LogCaptureFixture) -> None:
    """``P:{a}:ids:b}:ids:c`` was namespace ``b}:ids:c`` of thread ``a`` or
    namespace ``c`` of thread ``a}:ids:b``: both id indexes, so the move
    cannot tell; it leaves the key where it is and says so."""
    client = _client()
    ambiguous = f"{base}:{{a}}:ids:b}}:ids:c"
    client.zadd(ambiguous, {"1": 0})
    client.hset(f"{base}:{{a}}:ids:x}}:cp", "f", "v")  # a hash: thread ``a}:ids:x``'s checkpoints
    with caplog.at_level("WARNING", logger="langgraph_durable"), _saver(base) as saver:
        saver.setup()
    assert client.zrange(ambiguous, 0, -1) == [b"1"]
    assert client.hgetall(f"{base}:{{a%7D%3Aids%3Ax}}:cp") == {b"f": b"v"}
    assert not client.exists(f"{base}:{{a}}:ids:x}}:cp")
    client.close()
    assert "1 key(s) under prefix" in caplog.text and "left as they are" in caplog.text
