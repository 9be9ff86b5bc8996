"""The names of the environment variables `DurableSaver.from_env` and the
command line read, and the defaults the command line's help shows. Plain
constants, importable without loading the saver (the CLI's ``--help``)."""

from __future__ import annotations

from .tiers.postgres.kind import POSTGRES
from .tiers.redis.kind import REDIS
from .tiers.sqlite.kind import SQLITE

__all__ = [
    "DEFAULT_KEY_PREFIX",
    "ENV_ARCHIVE_KEY_FINGERPRINT",
    "ENV_ARCHIVE_URL",
    "ENV_LEASE_LINGER",
    "ENV_MIGRATIONS",
    "ENV_OLD_SIGNING_KEYS",
    "ENV_POSTGRES_PREPARED_STATEMENTS",
    "ENV_POSTGRES_SCHEMA",
    "ENV_POSTGRES_URL",
    "ENV_REDIS_KEY_PREFIX",
    "ENV_REDIS_TTL",
    "ENV_REDIS_URL",
    "ENV_SERDE",
    "ENV_SIGNING_KEY",
    "ENV_SQLITE",
    "ENV_WRITE",
]

# The tiers' own variables come from their kinds (tiers/registry.py).
ENV_SQLITE: str = SQLITE.env
ENV_REDIS_URL: str = REDIS.env
ENV_POSTGRES_URL: str = POSTGRES.env
ENV_SIGNING_KEY = "LANGGRAPH_DURABLE_SIGNING_KEY"
ENV_SERDE = "LANGGRAPH_DURABLE_SERDE"  # module:attr of the serializer (from_env only)
# module:attr of the app's Migrations (from_env, and the command line's `migrate`).
ENV_MIGRATIONS = "LANGGRAPH_DURABLE_MIGRATIONS"
ENV_WRITE = "LANGGRAPH_DURABLE_WRITE"
ENV_ARCHIVE_URL = "LANGGRAPH_DURABLE_ARCHIVE_URL"  # s3://BUCKET/PREFIX of the archive
# The full fingerprint of the store's key the archive keeps, which the
# operator vouches for to rebuild the store from it (archive_key_fingerprint).
ENV_ARCHIVE_KEY_FINGERPRINT = "LANGGRAPH_DURABLE_ARCHIVE_KEY_FINGERPRINT"
# Several deployments (or a server and its tests) sharing one Redis database.
ENV_REDIS_KEY_PREFIX = "LANGGRAPH_DURABLE_REDIS_KEY_PREFIX"
# Seconds after which an idle thread leaves Redis (redis_ttl).
ENV_REDIS_TTL = "LANGGRAPH_DURABLE_REDIS_TTL"
# Seconds a run's lease is kept after it ends (lease_linger).
ENV_LEASE_LINGER = "LANGGRAPH_DURABLE_LEASE_LINGER"
# Comma-separated keys still accepted for verification (rotation); the word
# "unsigned" accepts records without a key.
ENV_OLD_SIGNING_KEYS = "LANGGRAPH_DURABLE_OLD_SIGNING_KEYS"
# "false" behind a pooler in transaction mode (PgBouncer): see postgres_prepared_statements.
ENV_POSTGRES_PREPARED_STATEMENTS = "LANGGRAPH_DURABLE_POSTGRES_PREPARED_STATEMENTS"
# The Postgres schema the saver's tables live in (postgres_schema).
ENV_POSTGRES_SCHEMA = "LANGGRAPH_DURABLE_POSTGRES_SCHEMA"


# The first part of every Redis key the saver writes (redis_key_prefix).
DEFAULT_KEY_PREFIX = "langgraph_durable"
