"""Every option of `DurableSaver`, in one table: its keyword, default,
environment variable, command-line flag and one line of documentation.

From this table come `DurableSaver.from_env` (`options.env_options`), the
command line's tier flags and the environment part of its ``--help``, and
the option reference of ``docs/configuration.md`` (``python
tools/option_table.py`` writes it; ``--check`` fails when it is stale). The
constructor's signature is checked against it (``tests/test_option_table.py``):
a keyword added to one and not the other, or a default changed in one place,
fails there. The checks of the values are in `options.Options.parse`.

A light module: the command line reads it for ``--help`` without loading
the saver.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from .environment import (
    DEFAULT_KEY_PREFIX,
    ENV_ARCHIVE_KEY_FINGERPRINT,
    ENV_ARCHIVE_URL,
    ENV_LEASE_LINGER,
    ENV_MIGRATIONS,
    ENV_OLD_SIGNING_KEYS,
    ENV_POSTGRES_PREPARED_STATEMENTS,
    ENV_POSTGRES_SCHEMA,
    ENV_POSTGRES_URL,
    ENV_REDIS_KEY_PREFIX,
    ENV_REDIS_TTL,
    ENV_REDIS_URL,
    ENV_SERDE,
    ENV_SIGNING_KEY,
    ENV_SQLITE,
    ENV_WRITE,
)
from .option_groups import checked_name, spelled
from .tiers.postgres.kind import POSTGRES
from .tiers.redis.kind import REDIS
from .tiers.sqlite.kind import SQLITE
from .tiers.tier_kind import DEFAULT_SQLITE_PATH, kinds

# How a variable's text becomes the keyword's value (`options.env_options`).
EnvReading = Literal["text", "seconds", "bool", "serde", "migrations", "keys"]


@dataclass(frozen=True)
class Option:
    """One keyword of `DurableSaver`."""

    name: str
    group: str  # the section of the reference it is listed in
    default: Any  # the constructor's default
    doc: str  # one line, in the reference and the command line's help
    env: str | None = None  # the variable `from_env` reads it from
    reading: EnvReading = "text"
    flag: str | None = None  # the command line's flag (the commands that open a store)
    metavar: str = "VALUE"
    shown_default: str | None = None  # the default as the reference words it, where repr() would not do
    see: str = ""  # a page of the docs that explains it, relative to docs/
    flag_help: str = ""  # the flag's help, where it says more than `doc`
    env_doc: str = ""  # the variable's line, where it differs from the keyword's `doc`

    @property
    def keyword(self) -> str:
        """The constructor's keyword it is given with (its group's, for a
        field of a group)."""
        return self.name.partition(".")[0]

    @property
    def field(self) -> str | None:
        """Its field in its group (None for a keyword of its own)."""
        return self.name.partition(".")[2] or None

    @property
    def flat(self) -> str:
        """Its name among the checks (`options.Options.parse`), where every
        option has a flat one."""
        return self.keyword if self.field is None else checked_name(self.keyword, self.field)

    @property
    def spelled(self) -> str:
        """How it is written: ``write=``, ``Leases(linger=)``."""
        if self.keyword == "retention" and self.field:
            return f"RetentionPolicy({self.field}=)"
        return spelled(self.keyword, self.field)

    @property
    def default_text(self) -> str:
        if self.shown_default is not None:
            return self.shown_default
        return "none" if self.default is None else f"`{self.default!r}`"


GROUPS = {
    "tiers": "Tiers and connections",
    "integrity": "Integrity and keys",
    "resume": "Resuming",
    "leases": "One writer per thread",
    "write": "Writes and outages",
    "memory": "Memory and the local file",
    "retention": "Retention and the archive",
    "other": "Observing and looking",
}

MIB = 1024 * 1024

OPTIONS: tuple[Option, ...] = (
    # -- tiers and connections
    Option("sqlite", "tiers", DEFAULT_SQLITE_PATH, "the local SQLite file or `:memory:` (None: no local tier)",
           env_doc="the local SQLite file or `:memory:` (empty: no local tier)",
           env=ENV_SQLITE, flag="--sqlite", metavar="PATH", see="concepts/tiers.md", flag_help=SQLITE.what),
    Option("redis", "tiers", None, "`redis://`, `rediss://`, `unix://` or `redis+sentinel://` URL of the Redis tier, or a redis-py client",
           env_doc="`redis://`, `rediss://`, `unix://` or `redis+sentinel://` URL of the Redis tier",
           env=ENV_REDIS_URL, flag="--redis", metavar="URL", see="guides/your-own-connections.md", flag_help=REDIS.what),
    Option("postgres", "tiers", None, "`postgresql://` URL of the Postgres tier, or a psycopg pool",
           env_doc="`postgresql://` URL of the Postgres tier",
           env=ENV_POSTGRES_URL, flag="--postgres", metavar="URL", see="guides/your-own-connections.md",
           flag_help=POSTGRES.what),
    Option("tiers.redis_key_prefix", "tiers", DEFAULT_KEY_PREFIX,
           "prefix of the saver's Redis keys, for deployments sharing one Redis database",
           env=ENV_REDIS_KEY_PREFIX, flag="--redis-key-prefix", metavar="PREFIX"),
    Option("tiers.redis_cluster", "tiers", None, "whether Redis is a cluster (None: asked of the server)",
           see="guides/scale.md"),
    Option("tiers.redis_ttl", "tiers", None, "seconds after which an idle thread leaves Redis, served from Postgres",
           env=ENV_REDIS_TTL, reading="seconds", see="guides/scale.md#idle-threads-leave-redis"),
    Option("tiers.postgres_pool_size", "tiers", 10, "connections per face in the saver's own Postgres pool"),
    Option("tiers.postgres_prepared_statements", "tiers", True, "False behind PgBouncer in transaction mode",
           env_doc="`false` behind PgBouncer in transaction mode (default `true`)",
           env=ENV_POSTGRES_PREPARED_STATEMENTS, reading="bool", see="guides/scale.md"),
    Option("tiers.postgres_schema", "tiers", None, "the Postgres schema of the saver's tables",
           env=ENV_POSTGRES_SCHEMA, shown_default="the connections' `search_path`",
           see="guides/your-own-connections.md#one-database-several-applications"),
    Option("tiers.sqlite_busy_timeout", "tiers", 30.0, "seconds a local write waits for another process's lock"),
    Option("tiers.connect_timeout", "tiers", 5.0, "seconds to connect to a shared tier"),
    # -- integrity and keys
    Option("serde", "integrity", None, "the serializer (an EncryptedSerializer, say)",
           env_doc="`module:attr` of the serializer, or of a function returning it",
           env=ENV_SERDE, reading="serde", flag="--serde", metavar="MODULE:ATTR",
           shown_default="LangGraph's `JsonPlusSerializer`", see="configuration.md#your-applications-types",
           flag_help="the application's serializer, for a store it wrote with its own (an EncryptedSerializer, "
           "say): a serializer object, or a function returning one, importable as MODULE:ATTR; without it, "
           "records another serializer wrote are reported, never moved"),
    Option("signing_key", "integrity", None, "your own key for the records' HMACs",
           env=ENV_SIGNING_KEY, reading="keys", shown_default="the store's own key, with a shared tier",
           see="security.md"),
    Option("integrity.signing_keys", "integrity", None,
           "every accepted key while rotating, the one that seals first (None among them: records without a key)",
           env_doc="older keys still accepted while rotating, comma-separated (`unsigned`: records without a key)",
           env=ENV_OLD_SIGNING_KEYS, reading="keys", see="security.md"),
    Option("integrity.permissive_decoding", "integrity", False,
           "decode shared-tier records that verify without a key with `serde` as given (not the strict allowlist)",
           see="security.md"),
    Option("integrity.on_corruption", "integrity", "fallback",
           "a record bad in every tier: `fallback` serves the newest intact ancestor, `raise` raises, or a callable",
           see="concepts/integrity.md"),
    Option("integrity.max_record_bytes", "integrity", 64 * MIB, "the largest record `put` / `put_writes` accept (`RecordTooLarge` past it; None: no bound)",
           shown_default="64 MiB", see="concepts/integrity.md"),
    # -- resuming
    Option("validators", "resume", (), "resume validators, run before a thread resumes",
           shown_default="none", see="concepts/resume.md"),
    Option("on_validation", "resume", None, "called with every validation's outcome", see="concepts/resume.md"),
    Option("app_version", "resume", None, "stamped into every checkpoint's metadata", see="concepts/resume.md"),
    Option("migrations", "resume", None,
           "the state version this code runs and the steps that bring older threads up to it",
           env_doc="`module:attr` of the app's `Migrations`, or of a function returning it",
           env=ENV_MIGRATIONS, reading="migrations", flag="--migrations", metavar="MODULE:ATTR",
           see="concepts/migrations.md",
           flag_help="the application's Migrations (its state version and steps), or a function returning "
           "them, importable as MODULE:ATTR: what `migrate` runs; `threads` and `verify` then count "
           "unstamped threads as its unversioned version and name the versions no step reaches"),
    # -- one writer per thread
    Option("leases.ttl", "leases", 30.0, "seconds a thread's writer lease lasts without renewal",
           see="concepts/leases.md"),
    Option("leases.on_busy", "leases", "raise", "a run on a thread another holds: `raise` ThreadBusy, or `wait`",
           see="concepts/leases.md"),
    Option("leases.wait", "leases", 60.0, "seconds `on_busy=\"wait\"` waits", see="concepts/leases.md"),
    Option("leases.linger", "leases", 30.0,
           "seconds a run's lease is kept after it ends, so this replica reads the thread locally (0: given back)",
           env=ENV_LEASE_LINGER, reading="seconds",
           see="concepts/leases.md#reads-after-a-run-lease_linger-30-s-by-default"),
    # -- writes and outages
    Option("write", "write", "shared", "which tiers hold a write before it returns: `shared`, `all` or `local`",
           env=ENV_WRITE, see="concepts/write-modes.md"),
    Option("tiers.local_fsync", "write", None, "fsync each local commit (None: with `write=\"local\"` only)",
           see="concepts/write-modes.md"),
    Option("tiers.call_timeout", "write", 10.0, "seconds one tier call may take (None: no bound)",
           see="concepts/write-modes.md"),
    Option("tiers.drain_timeout", "write", 10.0, "seconds `close()` ships what the shared tiers are owed",
           see="concepts/write-modes.md"),
    # -- memory and the local file
    Option("memory.list_snapshot_every", "memory", 16,
           "a growing list is stored whole every this many versions, else as what it appended (0 or 1: always whole)",
           see="concepts/tiers.md"),
    Option("memory.budget", "memory", 64 * MIB, "bytes the saver's caches and memos may hold, in all",
           shown_default="64 MiB", see="concepts/tiers.md"),
    Option("memory.read_cache_bytes", "memory", None, "the read cache's share of the budget (0: no read cache)",
           shown_default="its share of `Memory(budget=)`", see="concepts/tiers.md"),
    Option("memory.local_max_bytes", "memory", None, "bound the local SQLite cache of the shared tiers to this many bytes",
           see="guides/scale.md"),
    # -- retention and the archive
    Option("retention", "retention", None, "a RetentionPolicy for `apply_retention` and the background sweep",
           see="guides/retention-and-archiving.md"),
    Option("retention.every", "retention", None, "seconds between background retention sweeps (None: none)",
           see="guides/retention-and-archiving.md"),
    Option("retention.rate", "retention", 20.0, "threads a background sweep visits per second, at most",
           see="guides/retention-and-archiving.md"),
    Option("archive", "retention", None, "`s3://BUCKET/PREFIX` of the archive (endpoint and credentials: `AWS_*`)",
           env=ENV_ARCHIVE_URL, flag="--archive", metavar="URL",
           see="guides/retention-and-archiving.md#the-archive-on-object-storage",
           flag_help="s3://BUCKET/PREFIX of the archive (endpoint and credentials from the AWS_* variables)"),
    Option("archive.lag", "retention", 60.0, "seconds within which a record written reaches the archive while the object store answers",
           see="guides/retention-and-archiving.md"),
    Option("archive.key_fingerprint", "retention", None,
           "the store key's full fingerprint (`doctor` prints it), to rebuild a store from its archive",
           env=ENV_ARCHIVE_KEY_FINGERPRINT, flag="--archive-key-fingerprint", metavar="FINGERPRINT",
           shown_default="none: a key kept in the bucket is never taken",
           see="guides/retention-and-archiving.md#disaster-recovery",
           flag_help="the full fingerprint of the store's key (hmac-sha256:<64 hex digits>, as `doctor` printed "
           "it), to rebuild a store that lost every hot tier from its archive: the key the archive keeps is taken "
           "on this word alone"),
    # -- observing and looking
    Option("metrics", "other", None, "hooks called with every tier call and every bad copy a read met", see="guides/metrics.md"),
    Option("read_only", "other", False,
           "only look: nothing repaired, quarantined, shipped or recorded, and no SQLite file created",
           see="operations/cli.md"),
)  # fmt: skip

BY_NAME = {option.name: option for option in OPTIONS}
FLAGS = tuple(option for option in OPTIONS if option.flag)
VARIABLES = tuple(option for option in OPTIONS if option.env)


def registered_tiers() -> tuple[Option, ...]:
    """A row for each tier kind registered from outside the package: its
    keyword, variable and flag, from its `TierKind`."""
    return tuple(
        Option(kind.keyword, "tiers", None, kind.what, env=kind.env, flag=kind.flag, metavar="URL")
        for kind in kinds()
        if not kind.builtin
    )


def flags() -> tuple[Option, ...]:
    """The command line's store flags: the table's, and the registered tier kinds'."""
    return FLAGS + registered_tiers()


def variables() -> tuple[Option, ...]:
    """The variables `from_env` reads: the table's, and the registered tier kinds'."""
    return VARIABLES + registered_tiers()


def plain(text: str) -> str:
    """A doc line as a terminal shows it (no Markdown backticks)."""
    return text.replace("`", "")


def environment_help(width: int = 100) -> str:
    """The environment part of the command line's ``--help``."""
    import textwrap

    lines = ["environment (the tier flags override it; a flag given as '' switches its tier off):"]
    column = max(len(o.env or "") for o in variables())
    for o in variables():
        shown = o.default in (None, False, ()) or "(default" in o.env_doc
        default = "" if shown else f" (default {plain(o.default_text)})"
        text = plain(o.env_doc or o.doc) + default
        assert o.env is not None
        wrapped = textwrap.wrap(text, width - column - 3) or [""]
        lines.append(f"  {o.env:<{column}} {wrapped[0]}")
        lines += [f"  {'':<{column}} {more}" for more in wrapped[1:]]
    return "\n".join(lines)


def variables_table() -> str:
    """The environment variables' table of ``docs/configuration.md``."""
    out = ["| variable | keyword | meaning | default |", "|---|---|---|---|"]
    for o in VARIABLES:
        meaning = (o.env_doc or o.doc) + (f" (see [more]({o.see}))" if o.see else "")
        default = "`true`" if o.default is True else o.default_text
        out.append(f"| `{o.env}` | `{o.spelled}` | {meaning} | {default} |")
    return "\n".join(out) + "\n"


def reference() -> str:
    """The option reference of ``docs/configuration.md``: a table per group."""
    out = []
    for group, title in GROUPS.items():
        out += [f"### {title}", "", "| keyword | default | variable | meaning |", "|---|---|---|---|"]
        for o in (o for o in OPTIONS if o.group == group):
            variable = f"`{o.env}`" if o.env else ""
            meaning = o.doc + (f" ([more]({o.see}))" if o.see else "")
            out.append(f"| `{o.spelled}` | {o.default_text} | {variable} | {meaning} |")
        out.append("")
    return "\n".join(out).rstrip() + "\n"
