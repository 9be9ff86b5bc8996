"""Which run of this saver holds which thread's lease: `LeaseBook`.

A run is told apart by the Runtime object LangGraph makes for it, and its
end by its stream writer being freed (a weak reference), since LangGraph
tells a checkpointer nothing at the end of a run; the garbage collector may
announce that end anywhere, hence `in_gc`. The lease decisions themselves
are pure and live in `model/lease.py`; the I/O is `leases/keeper_async.py`.
"""

from __future__ import annotations

import gc
import inspect
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ...model.lease import (
    _KEPT_OVERHEAD,
    DEFAULT_KEPT_LEASE_BYTES,
    DEFAULT_LEASE_TTL_S,
    DEFAULT_LEASE_WAIT_S,
    DEFAULT_ON_BUSY,
    MAX_TRACKED_THREADS,
    Fence,
    Lease,
    OnBusy,
    new_holder,
    run_superseded,
)
from ...validation import RUNTIME_KEY

# -- which run of this saver holds which thread -----------------------------------------


# The thread running the garbage collector right now, if any (see `in_gc`).
_gc_thread: int | None = None


def _track_gc(phase: str, info: Mapping[str, Any]) -> None:
    global _gc_thread
    _gc_thread = threading.get_ident() if phase == "start" else None


gc.callbacks.append(_track_gc)


def in_gc() -> bool:
    """Is this thread inside the garbage collector? A run's end seen there
    (its stream writer was in a reference cycle) may interrupt any code of
    this thread, also code holding a tier's lock: no I/O there."""
    return _gc_thread == threading.get_ident()


@dataclass(slots=True)
class _Held:
    """The run of this saver holding a thread's lease.

    Nothing here keeps the run alive: the Runtime is known by its id(), which
    stays unique while `writer` (its stream writer, which it references) is
    alive, and `writer`'s callback ends the run. `control` (the run's
    RunControl, which references nothing) is kept to tell the run's
    subgraphs. Only a stream writer that cannot be watched makes the book
    keep the Runtime itself (`runtime`), and the lease then lasts until the
    TTL.
    """

    lease: Lease
    run: int
    control: Any
    writer: weakref.ref[Any] | None
    runtime: Any = None

    def is_run(self, runtime: Any) -> bool:
        if self.runtime is not None:
            return runtime is self.runtime
        writer = self.writer() if self.writer is not None else None
        return id(runtime) == self.run and writer is not None and getattr(runtime, "stream_writer", None) is writer

    def is_subgraph_of_run(self, runtime: Any) -> bool:
        """A subgraph's Runtime is derived from its root run's and shares the
        root's ``control`` (a RunControl made per run). Without one (older
        LangGraph) a subgraph write counts as the current run's."""
        control = getattr(runtime, "control", None)
        return control is None or self.control is None or control is self.control


def _watch(runtime: Any, ended: Callable[[Any], None]) -> weakref.ref[Any] | None:
    """A weak reference to the run's stream writer calling `ended` when the
    run lets go of it, or None if it cannot be watched."""
    writer = getattr(runtime, "stream_writer", None)
    if writer is None or inspect.ismethod(writer):  # a bound method is made anew at each access
        return None
    try:
        return weakref.ref(writer, ended)
    except TypeError:
        return None


class LeaseBook:
    """The leases one saver holds: thread -> the run holding it.

    A run is told apart by the Runtime object Pregel puts under
    ``__pregel_runtime`` in every config of one run, and it ends when the
    stream writer that Runtime carries is freed (see `_Held`). A subgraph's
    Runtime is a different object sharing its root run's ``control``; that
    links the two. A subgraph's end ends nothing: only a root run takes a
    lease and is watched (a subgraph has a stream writer of its own, freed
    when it ends, or shares its root's when streaming with subgraphs=True).

    Memory: a run's entry goes when the run ends. At most `max_threads`
    runs are remembered; beyond that the least recently used one's lease is
    given back and that run gets `LeaseLost` at its next write (so this is a
    count of runs going on at once, not of threads served). Leases kept after
    their runs (`keep`) and hand-offs (`hand_off_later`) are bounded by
    `max_kept_bytes` (half each, estimated from the ids' lengths) and
    `max_threads`, least recently kept out first: forgetting one only means
    reading the thread from the shared tiers, or another replica waiting for
    the lease's expiry instead of its hand-off.
    """

    def __init__(
        self,
        *,
        ttl: float = DEFAULT_LEASE_TTL_S,
        on_busy: OnBusy = DEFAULT_ON_BUSY,
        wait: float = DEFAULT_LEASE_WAIT_S,
        max_threads: int = MAX_TRACKED_THREADS,
        linger: float = 0.0,
        max_kept_bytes: int = DEFAULT_KEPT_LEASE_BYTES,
    ) -> None:
        # The options were checked with the saver's others (`options.lease_options`).
        self.ttl = ttl
        self.linger = float(linger)
        self.on_busy = on_busy
        self.wait = wait
        self.max_threads = max_threads
        self.max_kept_bytes = max_kept_bytes
        # Reentrant: a run's end may be seen (a weakref callback) while this
        # thread is inside the book.
        self._lock = threading.RLock()
        self._held: OrderedDict[str, _Held] = OrderedDict()
        # Ended write-behind runs' leases, kept until their threads' records
        # have shipped (`hand_off_later`), with when they expire at the latest.
        self._handoffs: dict[str, tuple[Lease, float]] = {}
        # Ended runs' leases kept for ``linger`` seconds (`keep`), with the
        # monotonic time until which this saver trusts its own writes as the
        # thread's latest state (renewed, `renewed`), and when it stops
        # keeping the lease.
        self._lingering: dict[str, tuple[Lease, float, float]] = {}
        # Ended runs' leases whose end is not handled yet (its
        # `release_at_run_end` is on its way, on the runs' event loop): the
        # hand-off listener may give one back first, when another replica
        # asks for it (`claim_ending`).
        self._ending: OrderedDict[str, Lease] = OrderedDict()
        # Threads this saver holds outside a run (`start_hold`: archiving, a
        # bring-back, a delete), so that two such changes, or one and a run
        # of this very saver, never take the lease from each other.
        self._holding: set[str] = set()
        # Estimated bytes of `_lingering` and of `_handoffs` (`_kept_size`).
        self._kept_bytes = 0
        self._handoff_bytes = 0
        # Whether kept leases can be asked for (`handoff.py`): with
        # `needs_ears`, a lease is kept only while the listener hears its
        # channel, so that another replica never waits for one in vain.
        self.needs_ears = False
        self._hearing = False
        # Set here, not on first use: two threads' first runs would both see
        # an unset pid, and the second would clear the lease the first had
        # just recorded.
        self._holder = new_holder()
        self._pid = os.getpid()

    @property
    def holder(self) -> str:
        self._after_fork()
        return self._holder

    def _after_fork(self) -> None:
        """A forked child is another writer than its parent, and holds none of
        its parent's leases."""
        if self._pid != os.getpid():
            with self._lock:
                if self._pid != os.getpid():  # checked again: another thread may have just done it
                    self._held.clear()
                    self._handoffs.clear()
                    self._lingering.clear()
                    self._ending.clear()
                    self._kept_bytes = self._handoff_bytes = 0
                    self._hearing = False  # the listener's thread stayed in the parent
                    self._holder, self._pid = new_holder(), os.getpid()

    def fence(self, lease: Lease, *, behind: bool = False) -> Fence:
        return Fence(lease.thread_id, lease.holder, lease.token, self.ttl, lease.tier, behind=behind)

    def begin(self, runtime: Any, lease: Lease, on_end: Callable[[Lease], None] | None = None) -> list[Lease]:
        """Record the run now holding `lease`; returns the leases forgotten
        to stay within `max_threads` (the caller releases them).

        When the run ends (its stream writer is freed) the book forgets it
        and calls `on_end(lease)` to give the lease back, in whichever thread
        let go of the writer last, possibly inside the garbage collector
        (`in_gc`); `on_end` must not raise. Nothing happens if the book
        forgot the run before (a newer run, `drop`, eviction)."""

        def ended(_: Any) -> None:
            if self.drop(lease.thread_id, lease.token) is not None and on_end is not None:
                self._end(lease)
                on_end(lease)

        writer = _watch(runtime, ended)
        held = _Held(
            lease,
            run=id(runtime),
            control=getattr(runtime, "control", None),
            writer=writer,
            runtime=runtime if writer is None else None,
        )
        with self._lock:
            self._unhand(lease.thread_id)  # the lease moved on (a new token)
            self._unlinger(lease.thread_id)
            self._ending.pop(lease.thread_id, None)
            self._held[lease.thread_id] = held
            self._held.move_to_end(lease.thread_id)
            evicted = []
            while len(self._held) > self.max_threads:
                evicted.append(self._held.popitem(last=False)[1].lease)
            return evicted

    def fence_for(self, thread_id: str, configurable: Mapping[str, Any]) -> tuple[Fence | None, bool]:
        """The fence for a write to `thread_id`, and whether it is a run's
        write. A run's write whose run no longer holds the lease in this
        saver raises `LeaseLost` here, before anything is written. A plain
        call (no runtime: ``update_state``, a direct ``saver.put``) gets the
        fence of this saver's lease if it holds one, else None."""
        runtime = configurable.get(RUNTIME_KEY)
        nested = bool(configurable.get("checkpoint_ns"))
        self._after_fork()
        with self._lock:
            held = self._held.get(thread_id)
            if held is not None:
                self._held.move_to_end(thread_id)
        if runtime is None:
            return (self.fence(held.lease, behind=True) if held is not None else None), False
        if held is None:
            if nested:
                # A subgraph whose root run another checkpointer started.
                return None, False
            raise run_superseded(
                thread_id,
                "it was released while the run was going (release_thread(), close(), or this saver "
                f"holding more than {self.max_threads} threads)",
            )
        if held.is_run(runtime) or (nested and held.is_subgraph_of_run(runtime)):
            return self.fence(held.lease, behind=True), True
        raise run_superseded(thread_id, "a newer run of the same thread started on this saver")

    def moved(self, old: Lease, new: Lease) -> bool:
        """The run holding `old` now holds `new` instead (its lease moved to
        another tier during an outage). False if the run no longer holds `old`."""
        with self._lock:
            held = self._held.get(old.thread_id)
            if held is None or held.lease.token != old.token or held.lease.tier != old.tier:
                return False
            held.lease = new
            return True

    def drop(self, thread_id: str, token: int | None = None) -> Lease | None:
        """Forget this saver's lease of `thread_id` (only if it has `token`);
        without a token, a lease kept after its run (`keep`) too."""
        with self._lock:
            kept = self._unlinger(thread_id) if token is None else None
            held = self._held.get(thread_id)
            if held is None or (token is not None and held.lease.token != token):
                return kept[0] if kept is not None else None
            del self._held[thread_id]
            return held.lease

    def _end(self, lease: Lease) -> None:
        """An ended run's lease, until its end is handled (`claim_ending`:
        every way a run's end goes takes it, so the entries are the runs
        whose end is under way)."""
        with self._lock:
            self._ending[lease.thread_id] = lease

    def is_ending(self, thread_id: str, token: int) -> bool:
        """Whether the ended run's lease of `thread_id` with `token` is still
        to be taken (`claim_ending`)."""
        with self._lock:
            lease = self._ending.get(thread_id)
            return lease is not None and lease.token == token

    def claim_ending(self, thread_id: str, token: int | None = None) -> Lease | None:
        """Take the ended run's lease of `thread_id` whose end is not handled
        yet (with `token`: only if it has it). Whoever takes it (the run's end,
        `release_at_run_end`, or the hand-off listener, asked for it by
        another replica) gives it back or keeps it; the other does nothing."""
        with self._lock:
            lease = self._ending.get(thread_id)
            if lease is None or (token is not None and lease.token != token):
                return None
            del self._ending[thread_id]
            return lease

    def drop_all(self) -> list[Lease]:
        """Forget every lease: those of runs, and those kept after their runs."""
        with self._lock:
            leases = [h.lease for h in self._held.values()] + [kept[0] for kept in self._lingering.values()]
            self._held.clear()
            self._ending.clear()
            self._lingering.clear()
            self._kept_bytes = 0
            return leases

    def may_keep(self) -> bool:
        """Whether an ended run's lease may be kept now (`keep`)."""
        self._after_fork()
        with self._lock:
            return self.linger > 0 and (self._hearing or not self.needs_ears)

    def keep(self, lease: Lease, until: float, *, keep_until: float | None = None, ending: bool = False) -> bool:
        """An ended run's lease that its tier keeps (``lease_linger``): until
        `until` (monotonic) this saver is the only one that can have written
        the thread, so what it wrote last is read from its local cache. The
        hand-off listener renews it (`renewals`, `renewed`) until
        `keep_until` (default `until`), then gives it back. A new run of the
        thread here (`begin`), a write outside a run (`unkeep`), a request
        to hand it off (`unkeep`, `handoff.py`) or `drop` ends it. False if
        it may not be kept (the hand-off listener does not hear its channel,
        `may_keep`): the caller gives it back. With `ending` (the run's end,
        `claim_ending`), kept only if the listener did not take it first:
        True then too, as there is nothing for the caller to give back."""
        with self._lock:
            if self.needs_ears and not self._hearing:
                return False
            if ending and self.claim_ending(lease.thread_id, lease.token) is None:
                return True
            if lease.thread_id in self._held:
                return True
            self._unlinger(lease.thread_id)
            self._lingering[lease.thread_id] = (lease, until, until if keep_until is None else keep_until)
            self._kept_bytes += _kept_size(lease)
            # Beyond max_threads (or its bytes) the oldest are forgotten:
            # trusted no more, they expire in their tier by themselves.
            while self._lingering and (
                len(self._lingering) > self.max_threads or self._kept_bytes > self.max_kept_bytes // 2
            ):
                self._unlinger(next(iter(self._lingering)))
            return True

    def renewals(self, now: float) -> tuple[list[Lease], list[Lease]]:
        """(The hand-off listener, every `KEPT_RENEW_S`.) The kept leases to
        renew in their tier, and those whose linger has ended at `now`
        (monotonic), forgotten here for the caller to give back."""
        with self._lock:
            ended = [thread_id for thread_id, (_, _, keep_until) in self._lingering.items() if keep_until <= now]
            gone = [kept[0] for t in ended if (kept := self._unlinger(t)) is not None]
            return [kept[0] for kept in self._lingering.values()], gone

    def renewed(self, leases: list[Lease], renewed: set[str], until: float) -> None:
        """The tier renewed the kept leases of the threads in `renewed` (of
        `leases`, asked before `until` minus the trusted part of the window):
        trusted until `until` now. One it did not renew is no longer this
        saver's (taken over after it expired, or given back): forgotten."""
        with self._lock:
            for lease in leases:
                kept = self._lingering.get(lease.thread_id)
                if kept is None or kept[0] != lease:
                    continue  # ended or kept anew meanwhile
                if lease.thread_id in renewed:
                    self._lingering[lease.thread_id] = (lease, max(kept[1], until), kept[2])
                else:
                    self._unlinger(lease.thread_id)

    def _unlinger(self, thread_id: str) -> tuple[Lease, float, float] | None:
        """(Under the lock.) Forget a kept lease, counting its bytes out."""
        kept = self._lingering.pop(thread_id, None)
        if kept is not None:
            self._kept_bytes -= _kept_size(kept[0])
        return kept

    def hearing(self) -> None:
        """The hand-off listener hears its channel: leases may be kept."""
        with self._lock:
            self._hearing = True

    def stop_hearing(self) -> None:
        """No lease is kept from now on (the listener stops with the saver);
        those kept stay, for `drop_all` to hand to whoever gives them back."""
        with self._lock:
            self._hearing = False

    def deaf(self) -> list[Lease]:
        """The hand-off listener stopped hearing its channel (or stopped): no
        lease is kept from now on, and those kept are trusted no more. Returns
        them, for the caller to give back."""
        with self._lock:
            self._hearing = False
            kept = [kept[0] for kept in self._lingering.values()]
            self._lingering.clear()
            self._kept_bytes = 0
            return kept

    def unkeep(self, thread_id: str) -> Lease | None:
        """Stop trusting a kept lease (before writing the thread outside a
        run, which takes a lease of its own); returns it, if there was one."""
        with self._lock:
            kept = self._unlinger(thread_id)
            return kept[0] if kept is not None else None

    def kept(self, thread_id: str, now: float) -> tuple[Lease, float] | None:
        """The lease `keep` keeps for `thread_id` and until when it is trusted,
        while it is (`now`: monotonic seconds). One whose trust lapsed (its
        renewals did not come through) is forgotten."""
        self._after_fork()
        with self._lock:
            kept = self._lingering.get(thread_id)
            if kept is None:
                return None
            if kept[1] <= now:
                self._unlinger(thread_id)
                return None
            return kept[0], kept[1]

    def hand_off_later(self, lease: Lease, now: float) -> None:
        """An ended write-behind run whose thread still owes the shared tiers
        records: its lease is given back once they have shipped (the
        replicator does it), not at the run's end, so that no other replica
        takes the thread before it can see them. `now`: monotonic seconds."""
        with self._lock:
            self._unhand(lease.thread_id)
            self._handoffs[lease.thread_id] = (lease, now + self.ttl)
            self._handoff_bytes += _kept_size(lease)
            # Beyond the bound the oldest are forgotten: their leases expire
            # in their tier by themselves (as for a shared tier down, below).
            while self._handoffs and (
                len(self._handoffs) > self.max_threads or self._handoff_bytes > self.max_kept_bytes // 2
            ):
                self._unhand(next(iter(self._handoffs)))

    def _unhand(self, thread_id: str) -> tuple[Lease, float] | None:
        """(Under the lock.) Forget a hand-off, counting its bytes out."""
        kept = self._handoffs.pop(thread_id, None)
        if kept is not None:
            self._handoff_bytes -= _kept_size(kept[0])
        return kept

    def handoffs(self, now: float) -> list[Lease]:
        """The leases `hand_off_later` keeps, oldest first. One kept for a
        TTL without its thread shipping (a shared tier down) has expired in
        its tier, unless a late write renewed it, and is forgotten: the
        replicator then ships the thread with the rest, and no replica
        waits for it longer than for a crashed holder."""
        with self._lock:
            for thread_id in [t for t, (_, until) in self._handoffs.items() if until <= now]:
                self._unhand(thread_id)
            return [lease for lease, _ in self._handoffs.values()]

    def handed(self, lease: Lease) -> bool:
        """Forget a kept lease, to give it back now; False if a newer run of
        its thread took the lease since (then there is nothing to give back)."""
        with self._lock:
            kept = self._handoffs.get(lease.thread_id)
            if kept is None or kept[0].token != lease.token:
                return False
            self._unhand(lease.thread_id)
            return True

    def start_hold(self, thread_id: str) -> bool:
        """Mark the thread held outside a run, if no run of this saver and
        no other such change holds it (a lease taken again by the same
        holder would fence that one out; an ended run's, whose end is not
        handled yet, writes nothing more). A kept lease is let go (the
        change takes the thread over). Whether it was marked; `end_hold`
        unmarks it."""
        self._after_fork()
        with self._lock:
            if thread_id in self._holding or thread_id in self._held:
                return False
            self._unlinger(thread_id)
            self._holding.add(thread_id)
            return True

    def end_hold(self, thread_id: str) -> None:
        with self._lock:
            self._holding.discard(thread_id)

    def holding(self, thread_id: str) -> bool:
        with self._lock:
            return thread_id in self._holding

    def held(self, thread_id: str) -> Lease | None:
        self._after_fork()
        with self._lock:
            h = self._held.get(thread_id)
            return h.lease if h is not None else None

    def usage(self) -> dict[str, int]:
        """Entries and estimated bytes remembered: runs going on (`runs`),
        leases kept after runs, hand-offs waiting."""
        with self._lock:
            return {
                "runs": len(self._held),
                "kept": len(self._lingering),
                "kept_bytes": self._kept_bytes,
                "handoffs": len(self._handoffs),
                "handoff_bytes": self._handoff_bytes,
            }


def _kept_size(lease: Lease) -> int:
    return _KEPT_OVERHEAD + len(lease.thread_id) + len(lease.holder)
