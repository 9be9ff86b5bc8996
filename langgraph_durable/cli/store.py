"""The saver a command works on: the tier flags (`tier_flags`), the saver
they and the environment name (`saver_from_args`), set up (`open_saver`),
and what the read and maintenance commands ask of it (`LOOK`, `STRICT`)."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from ..environment import (
    ENV_MIGRATIONS,
    ENV_SIGNING_KEY,
)
from ..errors import ConfigError, no_store_at
from ..option_table import flags, plain
from ..tiers.registry import DEFAULT_SQLITE_PATH, SQLITE, kinds
from .parsing import wrapped

if TYPE_CHECKING:
    from ..saver import DurableSaver


def switched_off_by_empty(name: str) -> bool:
    """Whether a flag given as '' switches its tier (or the archive) off,
    even when the environment names one."""
    return name == "archive" or any(kind.keyword == name for kind in kinds())


NO_MIGRATIONS = (
    "no migrations given: name the app's Migrations with --migrations MODULE:ATTR (for example "
    f"myapp.graph:migrations) or {ENV_MIGRATIONS}=MODULE:ATTR."
)


# Maintenance needs every tier: write="all" makes setup fail on one that is down.
STRICT: dict[str, Any] = {"write": "all"}


# The read commands only look: nothing is repaired, quarantined, shipped or
# recorded in any tier while they run (`DurableSaver(read_only=True)`), and
# nothing owed is shipped at exit either.
LOOK: dict[str, Any] = {"drain_timeout": 0, "read_only": True}


def tier_flags(p: argparse.ArgumentParser) -> None:
    """The options naming the tiers and how to read them (default: the
    environment): the flags of the option table and of the registered tier
    kinds (`option_table.flags`)."""
    g = p.add_argument_group(
        "tiers",
        wrapped(
            f"default: the environment (`langgraph-durable --help` lists it, and {ENV_SIGNING_KEY} for signed "
            "stores); '' switches a tier off"
        ),
    )
    for option in flags():
        assert option.flag is not None
        if switched_off_by_empty(option.name):
            off = "" if option.name == SQLITE.keyword else ", or '' for none"
        else:
            off = ""
        default = f"${option.env}" if option.env else "none"
        if option.name == SQLITE.keyword:
            default += f", else {DEFAULT_SQLITE_PATH}"
        elif option.default is not None:
            default += f", else {option.default!r}"
        g.add_argument(
            option.flag,
            dest=option.flat,
            metavar=option.metavar,
            default=None,
            help=f"{plain(option.flag_help or option.doc)}{off} (default {default})",
        )


def saver_from_args(args: Any, **options: Any) -> DurableSaver:
    """A saver from the command line's tier flags, falling back to the
    environment (`DurableSaver.from_env`). A flag given as '' switches its
    tier off, even when the environment names one."""
    # Loaded when a command runs, not for --help or a usage error.
    from ..model.codec import serde_from_spec
    from ..options import migrations_from_spec
    from ..saver import DurableSaver

    for option in flags():
        value = getattr(args, option.flat, None)
        if value is None:
            continue
        if switched_off_by_empty(option.name):
            options[option.flat] = value or None
        elif value and option.reading == "serde":
            options[option.flat] = serde_from_spec(value, what=option.flag or option.name)
        elif value and option.reading == "migrations":
            options[option.flat] = migrations_from_spec(value, what=option.flag or option.name)
        elif value:
            options[option.flat] = value
    # By their flat names, as the environment's are (`options.env_options`).
    return DurableSaver.from_env(**options)


def open_saver(
    args: argparse.Namespace, *, rebuilds: bool = False, needs_migrations: bool = False, **options: Any
) -> DurableSaver:
    """The saver the tier flags and the environment name, set up (an
    unreachable tier fails here, before any output). One that
    `needs_migrations` (``migrate``) and is given none fails first
    (`NO_MIGRATIONS`).

    Every command but `rebuilds` ones (``import``, which encodes the values
    it reads) works on records, ids and checksums, never writing a decoded
    value back: a class of the application this process cannot import is
    read as its stored data, as LangGraph would hand it back, so showing,
    pinning, pruning, repairing, archiving and restoring need none of the
    application's classes."""
    if needs_migrations and not migrations_named(args):
        raise ConfigError(NO_MIGRATIONS)  # before anything is loaded, let alone created
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


def migrations_named(args: argparse.Namespace) -> bool:
    """Whether the flag or the environment names the app's migrations (as
    `saver_from_args` takes them: a flag given as '' leaves it to the environment)."""
    return bool(getattr(args, "migrations", None) or os.environ.get(ENV_MIGRATIONS))


def missing_local_store(args: argparse.Namespace) -> str | None:
    """The local file a command that only looks would read, if it is not
    there and no shared tier is named (the flags, else the environment, as
    `saver_from_args` takes them): what the read-only saver refuses
    with `no_store_at`, told without loading it."""

    def named(flag: str, env: str, default: str | None = None) -> str | None:
        value = getattr(args, flag, None)
        return (value or None) if value is not None else (os.environ.get(env, default or "") or None)

    sqlite = named(SQLITE.keyword, SQLITE.env, DEFAULT_SQLITE_PATH)
    if sqlite is None or sqlite == ":memory:" or any(named(k.keyword, k.env) for k in kinds() if k is not SQLITE):
        return None
    return None if os.path.exists(sqlite) else sqlite
