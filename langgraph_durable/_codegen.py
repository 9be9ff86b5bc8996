"""Generate the sync twins of the async sources (psycopg_pool's approach).

The chain and the network tiers are written once, async. Their sync faces
are produced by rewriting tokens, so no method body is ever copied by hand::

    python -m langgraph_durable._codegen          # regenerate
    python -m langgraph_durable._codegen --check  # exit 1 if out of date (CI)

The rewrite is purely lexical, which keeps it predictable: the async source
must avoid constructs with no sync spelling (``asyncio.*`` calls go through
`concurrency.arun_all`, which maps to `run_all`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable
from pathlib import Path

PACKAGE = Path(__file__).parent

# source -> generated, relative to the package
FILES = {
    "chain_async.py": "chain.py",
    "reads_async.py": "reads.py",
    "scan_async.py": "scan.py",
    "maintenance_async.py": "maintenance.py",
    "journal_async.py": "journal.py",
    "resume_async.py": "resume.py",
    "lease_keeper_async.py": "lease_keeper.py",
    "tiers/redis_async.py": "tiers/redis.py",
    "tiers/postgres_async.py": "tiers/postgres.py",
    "tiers/protocol_async.py": "tiers/protocol.py",
    "guard_async.py": "guard.py",
    "importer_async.py": "importer.py",
}

NAMES = {
    "AsyncTierChain": "TierChain",
    "AsyncTier": "Tier",
    "AsyncRecords": "Records",
    "AsyncQuarantine": "Quarantine",
    "AsyncLedgerStore": "LedgerStore",
    "AsyncLeases": "Leases",
    "AsyncTierReader": "TierReader",
    "AsyncScanner": "Scanner",
    "AsyncMaintenance": "Maintenance",
    "AsyncJournal": "Journal",
    "AsyncResumeGate": "ResumeGate",
    "AsyncSqliteTier": "SqliteTier",
    "AsyncRedisTier": "RedisTier",
    "AsyncPostgresTier": "PostgresTier",
    "AsyncLeaseKeeper": "LeaseKeeper",
    "AsyncConnectionPool": "ConnectionPool",
    "asynccontextmanager": "contextmanager",
    "AsyncIterator": "Iterator",
    "arun_all": "run_all",
    "ALock": "Lock",
    "amaybe_await": "maybe_await",
    "asleep": "sleep",
    "awith_timeout": "with_timeout",
    "AsyncGuardedTier": "GuardedTier",
    "AsyncImporter": "Importer",
    "aimport_from": "import_from",
    "alist": "list",
    "aput": "put",
    "aput_writes": "put_writes",
    "guard_async": "guard",
    "importer_async": "importer",
    "aclose": "close",
    "aclose_redis": "close_redis",
    "redis.asyncio": "redis",
    "chain_async": "chain",
    "reads_async": "reads",
    "scan_async": "scan",
    "maintenance_async": "maintenance",
    "journal_async": "journal",
    "resume_async": "resume",
    "lease_keeper_async": "lease_keeper",
    "redis_async": "redis",
    "postgres_async": "postgres",
    "protocol_async": "protocol",
}

RULES: list[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]]] = [
    (re.compile(r"\basync def\b"), "def"),
    (re.compile(r"\basync with\b"), "with"),
    (re.compile(r"\basync for\b"), "for"),
    (re.compile(r"\bawait\s+"), ""),
    (re.compile(r"\b(" + "|".join(re.escape(k) for k in NAMES) + r")\b"), lambda m: NAMES[m.group(1)]),
]


def header(source: str) -> str:
    return (
        f"# WARNING: generated from {source} by langgraph_durable/_codegen.py. DO NOT EDIT.\n"
        "# Edit the async source and run `python -m langgraph_durable._codegen`.\n"
    )


def generate(source: str) -> str:
    text = (PACKAGE / source).read_text()
    for pattern, repl in RULES:
        text = pattern.sub(repl, text)
    return header(source) + text


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source, target in FILES.items():
        wanted = generate(source)
        path = PACKAGE / target
        if path.exists() and path.read_text() == wanted:
            continue
        stale.append(target)
        if not check:
            path.write_text(wanted)
    if check and stale:
        print(f"out of date: {', '.join(stale)}; run python -m langgraph_durable._codegen", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
