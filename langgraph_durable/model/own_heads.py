"""What a saver wrote last under each thread's lease: `OwnHeads`.

While a saver holds a thread's lease nobody else writes the thread, so what
it wrote last is the thread's latest state and a read of it can come from
the local tier alone. A bounded memo, with time as an argument; no I/O.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from .delta_trail import DeltaTrail, History, TrailPut, TrailWrite

# What `OwnHeads` may hold, in bytes (estimated, see `OwnHeads`). A saver
# gives it its share of ``memory_budget`` instead.
DEFAULT_OWN_HEADS_BYTES = 6 * 1024 * 1024
# Estimated costs in `OwnHeads` beyond the lengths of the ids: an entry (the
# `_Own`, its key, the OrderedDict slot, its dict and set), a checkpoint it
# remembers (dict slot, set, str header), a pending write's key (tuple, int,
# set slot, str header).
_OWN_OVERHEAD = 500
_OWN_CHECKPOINT_OVERHEAD = 300
_OWN_KEY_OVERHEAD = 150


# Pending writes kept aside for a `DeltaTrail`, a `put_writes` call each:
# the writes, and whether they replace those stored under the same keys.
_Batches = list[tuple[tuple[TrailWrite, ...], bool]]

# Checkpoint ids one `OwnHeads` entry remembers having written under its
# lease (`OwnHeads.mine`): a DeltaChannel's seed usually lies within
# LangGraph's snapshot_frequency (100 by default) of the head.
MAX_OWN_CHECKPOINTS = 256


@dataclass(slots=True)
class _Own:
    token: int
    checkpoint_id: str
    writes: set[tuple[str, int]]  # (task id, idx) of its pending writes
    at: float  # when a fenced write last succeeded (the lease was renewed)
    # Every checkpoint written under this token (oldest first, the newest
    # MAX_OWN_CHECKPOINTS), with the keys of the pending writes this saver
    # wrote for it: created under the lease, so all its writes were this
    # saver's too, and the local tier must hold exactly these.
    mine: dict[str, set[tuple[str, int]]] = field(default_factory=dict)
    # Estimated bytes of `mine` (`_mine_cost`, `_keys_cost`), kept up to
    # date as it changes, and of the whole entry as last counted.
    mine_size: int = 0
    size: int = 0
    # The DeltaChannel histories of the head, followed from the thread's
    # first checkpoint (`delta_trail.py`), while every put and write of the
    # thread was this saver's under this token.
    trail: DeltaTrail | None = None


def _keys_cost(keys: set[tuple[str, int]] | frozenset[tuple[str, int]]) -> int:
    return sum(_OWN_KEY_OVERHEAD + len(task_id) for task_id, _ in keys)


def _mine_cost(checkpoint_id: str, keys: set[tuple[str, int]]) -> int:
    return _OWN_CHECKPOINT_OVERHEAD + len(checkpoint_id) + _keys_cost(keys)


class OwnHeads:
    """What a saver itself wrote last to each (thread, namespace) while it
    held the thread's lease: the newest checkpoint and the keys of its
    pending writes, as its local tier holds them.

    Nobody else can write a thread while its lease is held, so that is the
    thread's latest state, and a read of it needs no round trip to the shared
    tiers (`TierReader.local_latest`). Only the saver's own fenced writes
    that the local tier took make an entry; a read never does (it could have
    been served by a shared tier while the local copy lags). An entry is
    trusted for half the lease TTL after the last write that renewed the
    lease, and only under that lease's token. Time is an argument, as in the
    rest of this module.

    Bounded by `max_bytes`, estimated from the lengths of the ids an entry
    holds plus fixed overheads (`_OWN_OVERHEAD` and the others), least
    recently written out first; the writes kept aside for a put still to
    come (`writes`) get an eighth of it. A forgotten entry only costs speed:
    the thread's next read asks the shared tiers, as for a thread this saver
    did not write."""

    def __init__(self, *, max_age: float, max_bytes: int = DEFAULT_OWN_HEADS_BYTES) -> None:
        self.max_age = max_age
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._own: OrderedDict[tuple[str, str], _Own] = OrderedDict()
        self._bytes = 0
        # Write keys of checkpoints whose `put` is not recorded yet (LangGraph
        # overlaps a step's writes with its checkpoint's put), by (thread,
        # ns, token, checkpoint id), with their estimated size: they join
        # `_Own.mine` if that put comes.
        # With them, the writes themselves for the thread's `DeltaTrail` (None
        # once one came without).
        self._early: OrderedDict[tuple[str, str, int, str], tuple[set[tuple[str, int]], int, _Batches | None]] = (
            OrderedDict()
        )
        self._early_bytes = 0

    def put(
        self, thread_id: str, ns: str, token: int, checkpoint_id: str, now: float, trail: TrailPut | None = None
    ) -> None:
        """A fenced checkpoint the local tier took: the new head, with the
        writes of it recorded before (`writes`). `trail`: what it stored, for
        the thread's `DeltaTrail` (without it, the trail is dropped)."""
        with self._lock:
            before = self._own.pop((thread_id, ns), None)
            if before is not None:
                self._bytes -= before.size
            followed: DeltaTrail | None = None
            if before is not None and before.token == token:
                mine, mine_size = before.mine, before.mine_size
                followed = before.trail
            else:
                mine, mine_size = {}, 0
            if trail is None:
                followed = None
            elif followed is None or not followed.advance(trail):
                followed = DeltaTrail.start(trail)
            if followed is not None and followed.size > self.max_bytes // 4:
                followed = None
            early, batches = self._pop_early((thread_id, ns, token, checkpoint_id))
            for batch, upsert in batches or ():
                if followed is not None and not followed.add_writes(checkpoint_id, batch, upsert=upsert):
                    followed = None
            if followed is not None and not early <= followed.head.writes.keys():
                followed = None  # writes of it the trail did not see
            keys = mine.get(checkpoint_id)
            if keys is None:
                keys = mine[checkpoint_id] = set()
                mine_size += _mine_cost(checkpoint_id, keys)
            added = early - keys
            keys |= added
            mine_size += _keys_cost(added)
            while len(mine) > MAX_OWN_CHECKPOINTS:
                oldest = next(iter(mine))
                mine_size -= _mine_cost(oldest, mine.pop(oldest))
            own = _Own(token, checkpoint_id, set(keys), now, mine, mine_size, trail=followed)
            self._own[(thread_id, ns)] = own
            self._count(own, thread_id, ns)
            self._evict()

    def writes(
        self,
        thread_id: str,
        ns: str,
        token: int,
        checkpoint_id: str,
        keys: set[tuple[str, int]],
        now: float,
        trail: Sequence[TrailWrite] | None = None,
        *,
        upsert: bool = False,
    ) -> None:
        """Fenced pending writes the local tier took (of the head, or of an
        older checkpoint). `trail`: the writes with their encoded values, for
        the thread's `DeltaTrail` (without them, the trail is dropped);
        `upsert`: they replace those stored under the same keys."""
        with self._lock:
            own = self._own.get((thread_id, ns))
            if own is not None and own.token == token:
                own.at = now
                self._own.move_to_end((thread_id, ns))
                if own.trail is not None and (
                    trail is None
                    or not own.trail.add_writes(checkpoint_id, trail, upsert=upsert)
                    or own.trail.size > self.max_bytes // 4
                ):
                    own.trail = None
                if own.checkpoint_id == checkpoint_id:
                    own.writes |= keys
                mine = own.mine.get(checkpoint_id)
                if mine is not None:
                    added = keys - mine
                    mine |= added
                    own.mine_size += _keys_cost(added)
                self._count(own, thread_id, ns)
                self._evict()
                if mine is not None:
                    return
            # Not (yet) a checkpoint this saver put under the lease: kept
            # aside until its put is recorded. A write of a checkpoint this
            # saver did not put (the one a resumed run starts from) says
            # nothing of the writes others made of it, and never joins.
            key = (thread_id, ns, token, checkpoint_id)
            early, batches = self._pop_early(key)
            early |= keys
            batches = [*batches, (tuple(trail), upsert)] if batches is not None and trail is not None else None
            size = _OWN_CHECKPOINT_OVERHEAD + len(thread_id) + len(ns) + len(checkpoint_id) + _keys_cost(early)
            size += sum(w.cost() for batch, _ in batches or () for w in batch)
            self._early[key] = (early, size, batches)
            self._early_bytes += size
            while self._early and self._early_bytes > self.max_bytes // 8:
                self._pop_early(next(iter(self._early)))

    def _pop_early(self, key: tuple[str, str, int, str]) -> tuple[set[tuple[str, int]], _Batches | None]:
        """(Under the lock.) Take the write keys kept aside under `key`, and
        the writes (None if one came without them)."""
        found = self._early.pop(key, None)
        if found is None:
            return set(), []
        self._early_bytes -= found[1]
        return found[0], found[2]

    def _count(self, own: _Own, thread_id: str, ns: str) -> None:
        """(Under the lock.) Count `own`'s estimated bytes again."""
        size = _OWN_OVERHEAD + len(thread_id) + len(ns) + len(own.checkpoint_id) + own.mine_size
        size += own.trail.size if own.trail is not None else 0
        size += _keys_cost(own.writes)
        self._bytes += size - own.size
        own.size = size

    def _evict(self) -> None:
        """(Under the lock.) Least recently written out, to fit `max_bytes`
        (the newest entry stays even alone over it: it is the run going on)."""
        while self._bytes > self.max_bytes and len(self._own) > 1:
            self._bytes -= self._own.popitem(last=False)[1].size

    def carry(self, thread_id: str, token: int, new_token: int) -> None:
        """This saver took the thread's lease again from itself: the lease
        record still named it with `token`, so nobody else wrote the thread
        since, and what it wrote under `token` carries on under `new_token`."""
        with self._lock:
            for key, own in self._own.items():
                if key[0] == thread_id and own.token == token:
                    own.token = new_token

    def threads(self) -> set[str]:
        """The threads this saver wrote last under their lease (running, or just ran)."""
        with self._lock:
            return {thread_id for thread_id, _ in self._own}

    def forget(self, thread_id: str | None) -> None:
        """The local tier missed a write of the thread, or the thread was
        written without its lease or deleted (None: every thread)."""
        with self._lock:
            for key in [k for k in self._own if thread_id is None or k[0] == thread_id]:
                self._bytes -= self._own.pop(key).size
            for early in [k for k in self._early if thread_id is None or k[0] == thread_id]:
                self._pop_early(early)

    def current(
        self, thread_id: str, ns: str, token: int | None, now: float, until: float | None = None
    ) -> tuple[str, frozenset[tuple[str, int]]] | None:
        """The head and write keys to expect in the local tier, if they can be
        trusted now: under a run's lease, for `max_age` after its last write;
        under a lease kept after its run (``lease_linger``), `until` then."""
        with self._lock:
            own = self._trusted(thread_id, ns, token, now, until)
            return (own.checkpoint_id, frozenset(own.writes)) if own is not None else None

    def mine(
        self, thread_id: str, ns: str, token: int | None, now: float, until: float | None = None
    ) -> dict[str, frozenset[tuple[str, int]]] | None:
        """The checkpoints written under the lease and the keys of their
        pending writes, if they can be trusted now (see `current`): the local
        tier holds each with these writes (`TierReader.local_list` checks
        that it holds exactly these), so a walk over them (`delta_history.py`) needs
        no other tier."""
        with self._lock:
            own = self._trusted(thread_id, ns, token, now, until)
            return {cid: frozenset(keys) for cid, keys in own.mine.items()} if own is not None else None

    def trail(
        self,
        thread_id: str,
        ns: str,
        token: int | None,
        now: float,
        until: float | None,
        checkpoint_id: str | None,
        channels: Collection[str],
    ) -> tuple[dict[str, History], int | None] | None:
        """The DeltaChannel histories of `checkpoint_id` (None: the head) as
        the thread's `DeltaTrail` has them, and the local file's data version
        they hold for (the caller checks it), if the entry is trusted now
        (see `current`) and answers for all of `channels`; else None."""
        with self._lock:
            own = self._trusted(thread_id, ns, token, now, until)
            if own is None or own.trail is None:
                return None
            found = own.trail.answer(checkpoint_id or own.checkpoint_id, channels)
            return (found, own.trail.file_version) if found is not None else None

    def drop_trail(self, thread_id: str, ns: str) -> None:
        """Stop following the thread's DeltaChannels (its file changed under it)."""
        with self._lock:
            own = self._own.get((thread_id, ns))
            if own is not None and own.trail is not None:
                own.trail = None
                self._count(own, thread_id, ns)

    def usage(self) -> dict[str, int]:
        """Entries and estimated bytes held: heads, and writes kept aside."""
        with self._lock:
            return {
                "heads": len(self._own),
                "heads_bytes": self._bytes,
                "early": len(self._early),
                "early_bytes": self._early_bytes,
            }

    def _trusted(self, thread_id: str, ns: str, token: int | None, now: float, until: float | None) -> _Own | None:
        if token is None:
            return None
        own = self._own.get((thread_id, ns))
        if own is None or own.token != token:
            return None
        if (now - own.at >= self.max_age) if until is None else (now >= until):
            return None
        return own
