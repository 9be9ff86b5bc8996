"""One bound on what a saver remembers in memory about the threads it served.

A saver keeps a few memos per thread so that the next call is faster: what
it stored last for each list channel (`deltas.DeltaMemo`), the channel
versions of the checkpoints it stored or served last (`carried.SeenVersions`),
what it wrote last under each thread's lease (`own_heads.OwnHeads`), reads of the
local file it can serve again (`read_cache.ReadCache`), the records of journal
entries still to ship (`backlog.Outbox`) and the leases it keeps after runs
(`leases.book.LeaseBook`). A process serving a million threads must not keep one
entry per thread forever, so each memo is bounded by its *share* of one
budget (``DurableSaver(memory_budget=)``, `DEFAULT_MEMORY_BUDGET` by default),
counted in bytes estimated from the lengths of the ids and payloads an entry
holds plus a fixed overhead per entry (never a walk of the objects), and
forgets its least recently used entries first.

Forgetting costs speed, never correctness: a memo that misses falls back to
what it stands in for (reading the tiers, storing a list whole, shipping a
record read back from the local file), as after a restart.

Not part of the budget, because forgetting them would lose data or fail a
run: the records owed to a tier that is down when there is no local journal
(`backlog.MemoryBacklog`, emptied as they ship), and the leases of runs
going on right now (`LeaseBook`, at most `lease.MAX_TRACKED_THREADS`, each
forgotten when its run ends). No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import ConfigError

# What all the memos of one saver may hold together.
DEFAULT_MEMORY_BUDGET = 64 * 1024 * 1024
# How the budget is shared out (fractions of it; they add up to 1). The
# memos that save the most per byte get the most: a remembered list saves
# storing it whole, a kept read saves a read, a kept record saves reading it
# back to ship it.
SHARES: dict[str, float] = {
    "read_cache": 0.25,  # `ReadCache`: serialized reads of the local file
    "deltas": 0.25,  # `DeltaMemo`: the element bytes of the lists stored last
    "outbox": 0.25,  # `Outbox`: records of journal entries not yet shipped
    "own_heads": 0.10,  # `OwnHeads`: checkpoint ids and write keys written under a lease
    "seen": 0.10,  # `SeenVersions`: channel versions of checkpoints stored or read
    "kept_leases": 0.05,  # `LeaseBook`: leases kept after runs, and hand-offs waiting to ship
}
# Below this a budget is a mistake (every memo would hold next to nothing).
MIN_MEMORY_BUDGET = 1024 * 1024


@dataclass(frozen=True, slots=True)
class MemoryBudget:
    """The bytes each memo may hold (see `SHARES`)."""

    total: int
    read_cache: int
    deltas: int
    outbox: int
    own_heads: int
    seen: int
    kept_leases: int

    @classmethod
    def of(cls, total: int = DEFAULT_MEMORY_BUDGET, *, read_cache: int | None = None) -> MemoryBudget:
        """`total` shared out by `SHARES`. `read_cache`: the read cache's
        bytes instead of its share (``read_cache_bytes=``; 0 turns it off).
        Raises `ConfigError` for a budget that is not a whole number of bytes
        of at least `MIN_MEMORY_BUDGET`."""
        if not isinstance(total, int) or isinstance(total, bool) or total < MIN_MEMORY_BUDGET:
            raise ConfigError(
                f"Memory(budget=) must be a whole number of bytes, at least {MIN_MEMORY_BUDGET} (1 MiB), got {total!r}; "
                f"the default is {DEFAULT_MEMORY_BUDGET} (64 MiB)."
            )
        part = {name: int(total * share) for name, share in SHARES.items()}
        if read_cache is not None:
            part["read_cache"] = read_cache
        return cls(total=total, **part)
