"""A graph the stock savers run, DurableSaver runs the same: a value of a
class that can never be imported by the module and name LangGraph stores
with it (a class defined inside a function, a nested class) comes back as
its stored data, as LangGraph hands it back, reported once per type; a class
that was importable when its record was written and is not now still
raises `UndecodableRecord` (test_types_come_back.py)."""

# No `from __future__ import annotations`: the state schema below names
# classes of its function, which a string annotation could not find.
import dataclasses
import functools
import logging
import operator
import sqlite3
import subprocess
import sys
import textwrap
import types
from typing import Annotated, Any

import pydantic
import pytest
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from typing_extensions import TypedDict

from langgraph_durable import DurableSaver, SerializationError, UndecodableRecord
from langgraph_durable.metrics import PlainData, TierStats
from langgraph_durable.model.codec import _mark_tag, split_tag
from langgraph_durable.model.records import DIGEST_SIZE, MAGIC, blob_context, open_envelope, seal

from . import typed_state
from .conftest import CONFIGS, REDIS_URL
from .tamper import SEP, RedisStore

KEY = "k" * 32


def build() -> StateGraph:
    """A pydantic state schema whose fields' classes are defined here, in a
    function: LangGraph stores them as ``tests.test_drop_in_decoding.Item``,
    a name that leads nowhere."""

    class Item(pydantic.BaseModel):
        name: str

    @dataclasses.dataclass
    class Note:
        text: str

    class State(pydantic.BaseModel):
        items: Annotated[list[Item], operator.add] = []
        latest: Item | None = None
        notes: dict[str, Any] = {}
        n: int = 0
        answer: str = ""

    def step(state: State) -> dict[str, Any]:
        item = Item(name=f"i{state.n}")
        return {"items": [item], "latest": item, "notes": {"last": Note(f"n{state.n}")}, "n": state.n + 1}

    def ask(state: State) -> dict[str, Any]:
        # The node sees what the schema rebuilt: attribute access works.
        return {"answer": f"{interrupt('ok?')}:{state.latest.name if state.latest else '-'}"}

    g = StateGraph(State)
    g.add_node("step", step)
    g.add_node("ask", ask)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.n < 3 else "ask")
    g.add_edge("ask", END)
    return g


class Both(TypedDict):
    value: Any


def config(thread: str) -> Any:
    return {"configurable": {"thread_id": thread}}


def run(checkpointer: Any, thread: str) -> tuple[Any, Any, list[Any]]:
    """Up to the interrupt, then resumed: (the run's output, the state, the
    history's values) as a user sees them."""
    graph = build().compile(checkpointer=checkpointer)
    graph.invoke({"n": 0}, config(thread))
    out = graph.invoke(Command(resume="yes"), config(thread))
    return out, graph.get_state(config(thread)).values, [s.values for s in graph.get_state_history(config(thread))]


async def arun(checkpointer: Any, thread: str) -> tuple[Any, Any, list[Any]]:
    graph = build().compile(checkpointer=checkpointer)
    await graph.ainvoke({"n": 0}, config(thread))
    out = await graph.ainvoke(Command(resume="yes"), config(thread))
    history = [s.values async for s in graph.aget_state_history(config(thread))]
    return out, (await graph.aget_state(config(thread))).values, history


def stock() -> tuple[Any, Any, list[Any]]:
    return run(InMemorySaver(), "t")


@pytest.mark.parametrize("tiers", CONFIGS)
@pytest.mark.parametrize("key", [None, KEY], ids=["no-key", "key"])
def test_a_class_defined_in_a_function_comes_back_as_with_a_stock_saver(
    make_saver: Any, tiers: str, key: str | None
) -> None:
    expected = stock()
    out = expected[0]
    assert out["answer"] == "yes:i2" and _plain(out["items"]) == [{"name": "i0"}, {"name": "i1"}, {"name": "i2"}]
    assert expected[1]["items"] == [{"name": "i0"}, {"name": "i1"}, {"name": "i2"}]  # what LangGraph hands back
    with make_saver(tiers, signing_key=key) as saver:
        assert _same(run(saver, "t"), expected)
    # Another replica (a fresh local file, where there are shared tiers), or
    # the same file reopened: the records alone say what was never importable.
    fresh = "local.sqlite" if tiers == "sqlite" else "fresh.sqlite"
    with make_saver(tiers, signing_key=key, sqlite_name=fresh) as other:
        graph = build().compile(checkpointer=other)
        assert graph.get_state(config("t")).values == expected[1]
        assert [s.values for s in graph.get_state_history(config("t"))] == expected[2]


@pytest.mark.parametrize("tiers", ["sqlite", "redis", "postgres", "sqlite+redis+postgres"])
async def test_the_async_face_hands_back_the_same(make_saver: Any, tiers: str) -> None:
    expected = stock()
    async with make_saver(tiers) as saver:
        assert _same(await arun(saver, "t"), expected)


def test_each_type_is_reported_once_through_the_log_and_the_metrics(
    make_saver: Any, caplog: pytest.LogCaptureFixture
) -> None:
    stats = TierStats()
    seen: list[Any] = []
    with make_saver("sqlite+redis+postgres", metrics=[stats, seen.append]) as saver:
        with caplog.at_level(logging.WARNING, logger="langgraph_durable"):
            run(saver, "t")
            run(saver, "u")
    plain = stats.plain_data()
    module = __name__
    assert sorted(p.type_name for p in plain) == [f"{module}.Item", f"{module}.Note"]
    assert all(p.record.startswith("channel value 't//") for p in plain)
    assert sorted(e.type_name for e in seen if isinstance(e, PlainData)) == [f"{module}.Item", f"{module}.Note"]
    lines = [r.getMessage() for r in caplog.records if "handed back as their stored data" in r.getMessage()]
    assert len(lines) == 2 and {f"holds {module}.Item," in line or f"holds {module}.Note," in line for line in lines}


def test_only_the_types_never_importable_come_back_as_data(make_saver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """One value holding both: a class defined in a function (stored data,
    as LangGraph hands it back) and a class of the app's that was importable
    when written and is gone now (an error naming that class alone)."""

    class Local(pydantic.BaseModel):
        x: int

    def both(state: dict[str, Any]) -> dict[str, Any]:
        return {"value": {"local": Local(x=1), "app": typed_state.Item("i1", 2)}}

    g = StateGraph(Both)
    g.add_node("both", both)
    g.add_edge(START, "both")
    g.add_edge("both", END)
    with make_saver("sqlite+redis+postgres") as saver:
        g.compile(checkpointer=saver).invoke({"value": None}, config("t"))
        monkeypatch.delattr(typed_state, "Item")
        with pytest.raises(UndecodableRecord, match=r"cannot rebuild: tests\.typed_state\.Item") as exc:
            saver.get_tuple(config("t"))
        assert exc.value.unbuildable == ["tests.typed_state.Item"]
        monkeypatch.undo()
        tup = saver.get_tuple(config("t"))
        assert tup is not None
        assert tup.checkpoint["channel_values"]["value"] == {"local": {"x": 1}, "app": typed_state.Item("i1", 2)}


def test_a_copy_planted_in_one_tier_to_pass_a_class_as_data_is_read_around(
    make_saver: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Someone who can write Redis but has no signing key re-tags the copy of
    a value whose class has since moved, as if it had never been importable:
    the copy fails verification, the intact one in Postgres is read, and the
    moved class still raises instead of coming back as a dict."""
    with make_saver("sqlite+redis+postgres", signing_key=KEY) as saver:
        typed_state.build().compile(checkpointer=saver).invoke({"log": []}, config("t"))
    redis = RedisStore(REDIS_URL, saver.redis_key_prefix)
    try:
        planted = 0
        for field, raw in redis.client.hgetall(redis._k("t", "blob")).items():
            ns, channel, version = field.decode().split(SEP)
            if channel != "order":
                continue
            raw = bytes(raw)
            tag_len = raw[len(MAGIC) + 1]
            tag = raw[len(MAGIC) + 2 : len(MAGIC) + 2 + tag_len].decode()
            payload = raw[len(MAGIC) + 2 + tag_len + DIGEST_SIZE :]
            context = blob_context("t", ns, channel, version)
            assert split_tag(tag) == (tag, frozenset())  # the class was importable: no mark
            marked = _mark_tag(tag, ["tests.typed_state.Order"])
            redis.client.hset(redis._k("t", "blob"), field, seal(context, marked, payload))
            planted += 1
        assert planted == 1
    finally:
        redis.close()
    monkeypatch.delattr(typed_state, "Order")
    events: list[Any] = []
    with make_saver(
        "sqlite+redis+postgres", signing_key=KEY, sqlite_name="fresh.sqlite", on_corruption=events.append
    ) as reader:
        with pytest.raises(UndecodableRecord, match=r"cannot rebuild: tests\.typed_state\.Order"):
            reader.get_tuple(config("t"))
        assert [e.tier for e in events] == ["redis"]


def test_a_record_says_which_of_its_types_were_never_importable(make_saver: Any) -> None:
    """The marks are in the record's type tag, which its checksum (or its
    signature) covers: one per type, none for a type that was importable."""
    with make_saver("sqlite", signing_key=KEY) as saver:
        run(saver, "t")
        key = saver._codec.key
    with sqlite3.connect(str(saver.sqlite_path)) as conn:
        rows = conn.execute("SELECT channel, version, record FROM lgd_blobs WHERE thread_id = 't'").fetchall()
    tags = {}
    for channel, version, record in rows:
        tag, _ = open_envelope(blob_context("t", "", channel, version), bytes(record), key=key)
        tags.setdefault(channel, set()).add(split_tag(tag)[1])
    assert tags["n"] == {frozenset()}
    assert all(len(marks) == 1 for marks in tags["items"] | tags["latest"] | tags["notes"])
    assert tags["items"] != tags["notes"]


def _same(got: tuple[Any, Any, list[Any]], expected: tuple[Any, Any, list[Any]]) -> bool:
    out, values, history = got
    e_out, e_values, e_history = expected
    assert _plain(out) == _plain(e_out)
    assert values == e_values
    assert history == e_history
    return True


def _plain(value: Any) -> Any:
    """A run's output with the objects the graph built as their data."""
    if isinstance(value, pydantic.BaseModel):
        return value.model_dump()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def test_a_saver_that_cannot_tell_still_raises_for_an_unmarked_record(make_saver: Any) -> None:
    """A record holding a class defined in a function, written without the
    marks (by a version of the saver before them): nothing says the class
    was never importable, so it raises, as for a class that moved."""

    class Local(pydantic.BaseModel):
        x: int

    with make_saver("sqlite") as saver:
        codec = saver._codec
        _, blobs = codec.encode_checkpoint(*_put_args(saver, {"v": Local(x=1)}))
        (blob,) = [b for b in blobs if b.channel == "v"]
        tag, payload = open_envelope(blob.context, blob.envelope, key=codec.key)
        base, marks = split_tag(tag)
        assert marks
        unmarked = dataclasses.replace(blob, envelope=seal(blob.context, base, payload, key=codec.key))
        with pytest.raises(UndecodableRecord, match="cannot rebuild"):
            codec.decode_blob(unmarked)
        assert codec.decode_blob(blob) == {"x": 1}


def _put_args(saver: DurableSaver, values: dict[str, Any]) -> tuple[Any, ...]:
    from langgraph.checkpoint.base import empty_checkpoint

    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = {k: 1 for k in values}
    return {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {}, {k: 1 for k in values}


def test_open_telemetry_counts_each_type_once(make_saver: Any) -> None:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    from langgraph_durable.metrics import OpenTelemetryMetrics

    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        with make_saver("sqlite", metrics=OpenTelemetryMetrics(meter=provider.get_meter("test"))) as saver:
            run(saver, "t")
            run(saver, "u")
        points = [
            p
            for resource in reader.get_metrics_data().resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == "langgraph_durable.plain_data"
            for p in metric.data.data_points
        ]
        assert {p.attributes["type"]: p.value for p in points} == {f"{__name__}.Item": 1, f"{__name__}.Note": 1}
    finally:
        provider.shutdown()


# -- what is marked, and what is not ---------------------------------------------------


def _marks(saver: DurableSaver, value: Any) -> frozenset[str]:
    tag, _ = saver._codec._dump(value, channel="c", what="state key")
    return split_tag(tag)[1]


@functools.cache
class Cached(pydantic.BaseModel):
    """A class whose module-level name is a decorator's wrapper, which
    LangGraph can still call to rebuild it: never marked."""

    x: int


def test_a_name_that_leads_to_anything_is_not_marked(make_saver: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    class Local(pydantic.BaseModel):
        x: int

    with make_saver("sqlite") as saver:
        assert len(_marks(saver, Local(x=1))) == 1
        assert _marks(saver, Cached(x=1)) == frozenset()  # the name is a callable, not a class
        assert _marks(saver, typed_state.Item("i", 1)) == frozenset()
        # A module that cannot be looked into (its __getattr__ raises), or
        # that is not loaded: cannot tell, so not marked, and the write works.
        lazy = types.ModuleType("lazy_models")

        def refuse(name: str) -> Any:
            raise RuntimeError(f"lazy import of {name} failed")

        lazy.__getattr__ = refuse  # type: ignore[method-assign]
        monkeypatch.setitem(sys.modules, "lazy_models", lazy)
        Hidden = pydantic.create_model("Hidden", x=(int, ...), __module__="lazy_models")
        assert _marks(saver, Hidden(x=1)) == frozenset()
        Unloaded = pydantic.create_model("Unloaded", x=(int, ...), __module__="not_loaded_anywhere")
        assert _marks(saver, Unloaded(x=1)) == frozenset()


def test_more_classes_than_a_record_can_note_is_refused_before_anything_is_written(make_saver: Any) -> None:
    """Each record notes its never-importable classes in its type tag, which
    holds about twenty: a value holding more is refused at the write, with
    what to do, and the thread is left as it was."""
    many = [pydantic.create_model(f"Kind{i}", x=(int, ...))(x=i) for i in range(40)]

    class Few(pydantic.BaseModel):
        x: int

    def step(state: Both) -> dict[str, Any]:
        return {"value": Few(x=2)}

    g = StateGraph(Both)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_edge("step", END)
    with make_saver("sqlite+redis+postgres") as saver:
        graph = g.compile(checkpointer=saver)
        graph.invoke({"value": Few(x=1)}, config("t"))  # one class: noted, written
        before = saver.get_tuple(config("t"))
        with pytest.raises(
            SerializationError, match=r"40 classes .* more than one record can note\. Define them at a module"
        ):
            saver.put(
                before.config,
                {**before.checkpoint, "id": str(uuid6()), "channel_values": {"value": many}},
                {"source": "update", "step": 9, "parents": {}},
                {"value": "99"},
            )
        assert saver.get_tuple(config("t")).checkpoint["id"] == before.checkpoint["id"]


def test_reloading_the_codec_leaves_langgraph_s_serializer_working() -> None:
    """The codec wraps functions of LangGraph's serializer module: loading it
    again wraps LangGraph's own, never its earlier wrappers. (In a process of
    its own: a reload replaces the module's objects for everything else.)"""
    script = textwrap.dedent(
        """
        import datetime, importlib
        from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
        from langgraph_durable.model import codec
        importlib.reload(codec)
        importlib.reload(codec)
        serde = JsonPlusSerializer()
        when = datetime.datetime(2026, 1, 2, 3, 4, 5)
        assert serde.loads_typed(serde.dumps_typed({"when": when})) == {"when": when}
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
