"""Settings read from the environment, and call shapes other callers use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis as redis_lib

from langgraph_durable import Archive, DurableSaver, Integrity, Leases, Memory, RetentionPolicy, Tiers

from .conftest import REDIS_URL
from .graphs import loop_graph


@pytest.mark.redis
def test_from_env_takes_the_redis_key_prefix(redis_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANGGRAPH_DURABLE_SQLITE", "")
    monkeypatch.setenv("LANGGRAPH_DURABLE_REDIS_URL", REDIS_URL)
    monkeypatch.setenv("LANGGRAPH_DURABLE_REDIS_KEY_PREFIX", redis_prefix)
    with DurableSaver.from_env() as saver:
        assert saver.redis_key_prefix == redis_prefix
        loop_graph(2).compile(checkpointer=saver).invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})
    keys = redis_lib.Redis.from_url(REDIS_URL).keys(f"{redis_prefix}*")
    assert any(b"{t}" in k or b":t:" in k for k in keys), keys


def test_list_before_without_the_configurable_wrapper(make_saver: Any) -> None:
    """LangGraph's server passes `before` as a bare {"checkpoint_id": ...}."""
    with make_saver("sqlite") as saver:
        graph = loop_graph(4).compile(checkpointer=saver)
        cfg = {"configurable": {"thread_id": "t"}}
        graph.invoke({"messages": [], "n": 0}, cfg)
        ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg)]
        bare: Any = {"checkpoint_id": ids[2]}
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg, before=bare)] == ids[3:]
        wrapped: Any = {"configurable": {"checkpoint_id": ids[2]}}
        assert [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg, before=wrapped)] == ids[3:]


def test_the_options_come_back_grouped_by_concern(tmp_path: Any) -> None:
    key = b"k" * 32
    with DurableSaver(
        sqlite=str(tmp_path / "c.sqlite"), signing_key=key, memory=Memory(list_snapshot_every=5)
    ) as saver:
        options = saver.options
        assert options.tiers.sqlite == str(tmp_path / "c.sqlite")
        assert not options.tiers.shared
        assert options.integrity.signing_keys == [key]
        assert not options.integrity.store_key
        assert (options.write.mode, options.write.list_snapshot_every) == ("shared", 5)
        assert options.retention.policy is None


def test_the_environment_is_read_in_one_place(monkeypatch: pytest.MonkeyPatch) -> None:
    from langgraph_durable.options import env_options

    env = {
        "LANGGRAPH_DURABLE_SQLITE": "",
        "LANGGRAPH_DURABLE_REDIS_URL": "redis://h:6379/0",
        "LANGGRAPH_DURABLE_REDIS_TTL": "30",
        "LANGGRAPH_DURABLE_POSTGRES_PREPARED_STATEMENTS": "off",
        "LANGGRAPH_DURABLE_OLD_SIGNING_KEYS": "unsigned",
    }
    assert env_options(env, "default.sqlite") == {
        "sqlite": None,
        "redis": "redis://h:6379/0",
        "postgres": None,
        "redis_ttl": 30.0,
        "postgres_prepared_statements": False,
        "signing_keys": [None, None],
    }
    assert env_options({}, "default.sqlite")["sqlite"] == "default.sqlite"


@pytest.mark.parametrize(
    ("options", "synchronous"),
    [
        ({}, "NORMAL"),  # write="shared": the shared tiers hold what was acknowledged
        ({"write": "local"}, "FULL"),  # the journal is the only copy until it ships
        ({"write": "local", "tiers": Tiers(local_fsync=False)}, "NORMAL"),  # process crashes only, as documented
        ({"tiers": Tiers(local_fsync=True)}, "FULL"),
    ],
)
def test_local_fsync_sets_how_the_local_file_commits(
    make_saver: Any, options: dict[str, Any], synchronous: str
) -> None:
    with make_saver("sqlite+postgres", **options) as saver:
        saver.setup()
        level = saver._runtime.local._connect().execute("PRAGMA synchronous").fetchone()[0]
        assert {1: "NORMAL", 2: "FULL"}[level] == synchronous
        graph = loop_graph(2).compile(checkpointer=saver)
        assert graph.invoke({"messages": [], "n": 0}, {"configurable": {"thread_id": "t"}})["n"] == 2


@pytest.mark.parametrize(
    "bad",
    [
        {"tiers": Tiers(local_fsync="yes")},
        {"tiers": Tiers(local_fsync=1)},
        {"tiers": Tiers(local_fsync=False), "sqlite": None},
    ],  # type: ignore[arg-type]
)
def test_local_fsync_is_checked(tmp_path: Any, bad: dict[str, Any]) -> None:
    from langgraph_durable import ConfigError

    kwargs: dict[str, Any] = {"sqlite": str(tmp_path / "l.sqlite"), "redis": REDIS_URL} | bad
    with pytest.raises(ConfigError, match=r"Tiers\(local_fsync=\)") as info:
        DurableSaver(**kwargs)
    assert "True, False, or None" in str(info.value)
    assert list(tmp_path.iterdir()) == []  # nothing left on disk


# One bad value per option the constructor checks, each beside options that
# start background work when the construction succeeds (a retention sweep, a
# hand-off listener, an archive replica). Built inside the test: a group
# checks some of its values as it is made.
BAD_VALUES: dict[str, Callable[[], dict[str, Any]]] = {
    "lease_ttl": lambda: {"leases": Leases(ttl=-1)},
    "lease_ttl_text": lambda: {"leases": Leases(ttl="soon")},  # type: ignore[arg-type]
    "lease_linger": lambda: {"leases": Leases(linger=-1)},
    "lease_wait": lambda: {"leases": Leases(wait=-1)},
    "on_busy": lambda: {"leases": Leases(on_busy="shrug")},  # type: ignore[arg-type]
    "archive_lag": lambda: {"archive": Archive("s3://bucket/prefix", lag=0)},
    "archive": lambda: {"archive": "ftp://bucket/prefix"},
    "archive_key_fingerprint": lambda: {"archive": Archive("s3://bucket/prefix", key_fingerprint="hmac-sha256:abc")},
    "memory_budget": lambda: {"memory": Memory(budget=-5)},
    "drain_timeout": lambda: {"tiers": Tiers(drain_timeout=-1)},
    "call_timeout": lambda: {"tiers": Tiers(call_timeout=0)},
    "write": lambda: {"write": "sometimes"},
    "retention_rate": lambda: {"retention": RetentionPolicy(keep_last=3, every=3600, rate=-1)},
    "retention_every": lambda: {"retention": RetentionPolicy(keep_last=3, every=0)},
    "max_record_bytes": lambda: {"integrity": Integrity(max_record_bytes=0)},
    "redis_ttl": lambda: {"tiers": Tiers(redis_ttl=-1)},
    "a_group_of_the_wrong_kind": lambda: {"leases": Tiers()},
    # Each field of a group is checked for its type and range, not only its sign.
    "permissive_decoding_text": lambda: {"integrity": Integrity(permissive_decoding="false")},  # type: ignore[arg-type]
    "redis_cluster_text": lambda: {"tiers": Tiers(redis_cluster="no")},  # type: ignore[arg-type]
    "max_record_bytes_nan": lambda: {"integrity": Integrity(max_record_bytes=float("nan"))},  # type: ignore[arg-type]
    "max_record_bytes_text": lambda: {"integrity": Integrity(max_record_bytes="1")},  # type: ignore[arg-type]
    "call_timeout_text": lambda: {"tiers": Tiers(call_timeout="1")},  # type: ignore[arg-type]
    "call_timeout_nan": lambda: {"tiers": Tiers(call_timeout=float("nan"))},
    "call_timeout_true": lambda: {"tiers": Tiers(call_timeout=True)},
    "drain_timeout_inf": lambda: {"tiers": Tiers(drain_timeout=float("inf"))},
    "drain_timeout_nan": lambda: {"tiers": Tiers(drain_timeout=float("nan"))},
    "postgres_pool_size_half": lambda: {"tiers": Tiers(postgres_pool_size=2.5)},  # type: ignore[arg-type]
    "postgres_pool_size_true": lambda: {"tiers": Tiers(postgres_pool_size=True)},
    "connect_timeout_text": lambda: {"tiers": Tiers(connect_timeout="5")},  # type: ignore[arg-type]
    "connect_timeout_negative": lambda: {"tiers": Tiers(connect_timeout=-1)},
    "sqlite_busy_timeout_nan": lambda: {"tiers": Tiers(sqlite_busy_timeout=float("nan"))},
    "redis_key_prefix_none": lambda: {"tiers": Tiers(redis_key_prefix=None)},  # type: ignore[arg-type]
    "local_max_bytes_true": lambda: {"memory": Memory(local_max_bytes=True)},
    "lease_ttl_inf": lambda: {"leases": Leases(ttl=float("inf"))},
    "retention_every_inf": lambda: {"retention": RetentionPolicy(keep_last=3, every=float("inf"))},
    "retention_every_spins": lambda: {"retention": RetentionPolicy(keep_last=3, every=1e-9)},
    "retention_keep_last_true": lambda: {"retention": RetentionPolicy(keep_last=True)},
    "archive_without_url": lambda: {"archive": Archive(None)},  # type: ignore[arg-type]
    "validators": lambda: {"validators": [42]},
    "metrics": lambda: {"metrics": 42},
    "no_local_tier": lambda: {"sqlite": "", "write": "local"},  # '' names no file: write-behind has no local tier
}


@pytest.mark.parametrize("bad", BAD_VALUES)
def test_a_constructor_that_refuses_an_option_leaves_nothing_running(tmp_path: Any, bad: str) -> None:
    """Every option is checked before anything starts: a ConfigError, and no
    thread, file or folder left behind."""
    import threading

    from langgraph_durable import ConfigError

    before = set(threading.enumerate())
    with pytest.raises(ConfigError):
        kwargs: dict[str, Any] = {
            "sqlite": str(tmp_path / "store" / "l.sqlite"),
            "redis": REDIS_URL,
            "retention": RetentionPolicy(keep_last=3, every=3600),
            "leases": Leases(linger=30.0),
        } | BAD_VALUES[bad]()
        DurableSaver(**kwargs)
    assert [t.name for t in set(threading.enumerate()) - before] == []
    assert list(tmp_path.iterdir()) == []


def test_a_wrong_archive_key_fingerprint_is_said_even_without_an_archive(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It means nothing without an archive, but a wrong one is a mistake to
    tell, not to drop: from the environment, from a flag, from from_env."""
    from langgraph_durable import ConfigError

    monkeypatch.delenv("LANGGRAPH_DURABLE_ARCHIVE_URL", raising=False)
    monkeypatch.setenv("LANGGRAPH_DURABLE_SQLITE", str(tmp_path / "f.sqlite"))
    with pytest.raises(ConfigError, match=r"Archive\(key_fingerprint=\) got 'garbage'"):
        DurableSaver.from_env(archive_key_fingerprint="garbage")
    monkeypatch.setenv("LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT", "garbage")
    with pytest.raises(ConfigError, match="LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT"):
        DurableSaver.from_env()
    assert list(tmp_path.iterdir()) == []
