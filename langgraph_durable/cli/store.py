"""The saver a command works on: the tier flags (`tier_flags`), the saver
they and the environment name (`saver_from_args`), set up (`open_saver`),
and what the read and maintenance commands ask of it (`LOOK`, `STRICT`)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from ..environment import (
    DEFAULT_KEY_PREFIX,
    ENV_ARCHIVE_KEY_FINGERPRINT,
    ENV_ARCHIVE_URL,
    ENV_REDIS_KEY_PREFIX,
    ENV_SERDE,
    ENV_SIGNING_KEY,
)
from ..errors import no_store_at
from ..tiers.registry import DEFAULT_SQLITE_PATH, KINDS, POSTGRES, REDIS, SQLITE
from .parsing import wrapped

if TYPE_CHECKING:
    from ..saver import DurableSaver


# Maintenance needs every tier: write="all" makes setup fail on one that is down.
STRICT: dict[str, Any] = {"write": "all"}


# The read commands only look: nothing is repaired, quarantined, shipped or
# recorded in any tier while they run (`DurableSaver(read_only=True)`), and
# nothing owed is shipped at exit either.
LOOK: dict[str, Any] = {"drain_timeout": 0, "read_only": True}


def tier_flags(p: argparse.ArgumentParser) -> None:
    """The options naming the tiers (default: the environment)."""
    g = p.add_argument_group(
        "tiers",
        wrapped(
            f"default: the environment (`langgraph-durable --help` lists it, and {ENV_SIGNING_KEY} for signed "
            "stores); '' switches a tier off"
        ),
    )
    for kind in KINDS:
        default = f"${kind.env}, else {DEFAULT_SQLITE_PATH}" if kind is SQLITE else f"${kind.env}"
        off = "" if kind is SQLITE else ", or '' for none"
        g.add_argument(
            kind.flag,
            metavar="URL" if kind.schemes else "PATH",
            default=None,
            help=f"{kind.what}{off} (default {default})",
        )
    g.add_argument(
        "--archive",
        metavar="URL",
        default=None,
        help=f"s3://BUCKET/PREFIX of the archive, or '' for none (default ${ENV_ARCHIVE_URL}); endpoint and "
        "credentials from the AWS_* variables",
    )
    g.add_argument(
        "--archive-key-fingerprint",
        metavar="FINGERPRINT",
        default=None,
        help="the full fingerprint of the store's key (hmac-sha256:<64 hex digits>, as `doctor` printed it), "
        "to rebuild a store that lost every hot tier from its archive: the key the archive keeps is taken on "
        f"this word alone (default ${ENV_ARCHIVE_KEY_FINGERPRINT})",
    )
    g.add_argument(
        "--serde",
        metavar="MODULE:ATTR",
        default=None,
        help="the application's serializer, for a store it wrote with its own (an EncryptedSerializer, say): "
        "a serializer object, or a function returning one, importable as MODULE:ATTR "
        f"(default ${ENV_SERDE}; without it, records another serializer wrote are reported, never moved)",
    )
    g.add_argument(
        "--redis-key-prefix",
        metavar="PREFIX",
        default=None,
        help=f"prefix of the saver's Redis keys (default ${ENV_REDIS_KEY_PREFIX}, else {DEFAULT_KEY_PREFIX!r})",
    )


def saver_from_args(args: Any, **options: Any) -> DurableSaver:
    """A saver from the command line's tier flags, falling back to the
    environment (`DurableSaver.from_env`). A flag given as '' switches its
    tier off, even when the environment names one."""
    # Loaded when a command runs, not for --help or a usage error.
    from ..model.codec import serde_from_spec
    from ..saver import DurableSaver

    for tier in ("sqlite", "redis", "postgres", "archive"):
        value = getattr(args, tier, None)
        if value is not None:
            options[tier] = value or None
    if getattr(args, "redis_key_prefix", None):
        options["redis_key_prefix"] = args.redis_key_prefix
    if getattr(args, "archive_key_fingerprint", None):
        options["archive_key_fingerprint"] = args.archive_key_fingerprint
    if getattr(args, "serde", None):
        options["serde"] = serde_from_spec(args.serde, what="--serde")
    return DurableSaver.from_env(**options)


def open_saver(args: argparse.Namespace, *, rebuilds: bool = False, **options: Any) -> DurableSaver:
    """The saver the tier flags and the environment name, set up (an
    unreachable tier fails here, before any output).

    Every command but `rebuilds` ones (``import``, which encodes the values
    it reads) works on records, ids and checksums, never writing a decoded
    value back: a class of the application this process cannot import is
    read as its stored data, as LangGraph would hand it back, so showing,
    pinning, pruning, repairing, archiving and restoring need none of the
    application's classes."""
    if options.get("read_only"):
        missing = missing_local_store(args)
        if missing is not None:
            raise no_store_at(missing)  # before loading the saver: a wrong path answers at once
    saver = saver_from_args(args, **options)
    if not rebuilds:
        saver.unbuildable_as_data = True
    try:
        saver.setup()
    except BaseException:
        saver.close()
        raise
    return saver


def missing_local_store(args: argparse.Namespace) -> str | None:
    """The local file a command that only looks would read, if it is not
    there and no shared tier is named (the flags, else the environment, as
    `saver_from_args` takes them): what the read-only saver refuses
    with `no_store_at`, told without loading it."""

    def named(flag: str, env: str, default: str | None = None) -> str | None:
        value = getattr(args, flag, None)
        return (value or None) if value is not None else (os.environ.get(env, default or "") or None)

    sqlite = named("sqlite", SQLITE.env, DEFAULT_SQLITE_PATH)
    if sqlite is None or sqlite == ":memory:" or named("redis", REDIS.env) or named("postgres", POSTGRES.env):
        return None
    return None if os.path.exists(sqlite) else sqlite
