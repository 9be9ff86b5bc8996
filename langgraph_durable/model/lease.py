"""Per-thread writer leases: the decisions, with no I/O.

One writer per thread. A graph run takes the thread's lease before it reads
the thread's latest checkpoint, and every write it makes is *fenced*: the
most authoritative configured tier (Postgres, else Redis, else SQLite) stores
the write only if the lease still carries the run's token, in the same
transaction. A second process that tries to run the thread meanwhile gets
`ThreadBusy` (or waits, ``on_busy="wait"``); a run whose lease expired and
was taken over gets `LeaseLost` at its next write, and that write is not
stored. Two writers therefore never fork a thread's history.

A run gives the lease back when it ends (or, with ``lease_linger``, keeps
it until another replica asks for it: `handoff.py`), so another replica may
run the thread right after it (with write-behind, once the replicator has
shipped the run: `LeaseBook.hand_off_later`). LangGraph tells a checkpointer nothing
at the end of a run; the sign used is the run's ``stream_writer`` (a
function Pregel makes per run and keeps in the run's Runtime) being freed:
`LeaseBook` watches it with a weak reference. The TTL is the fallback for a holder that crashed, or
a run whose end is only seen by the garbage collector later (or never, should
a LangGraph version keep the stream writer alive).

The lease record (holder, token, expires_at) lives in the authoritative tier,
with that tier's clock (Postgres ``clock_timestamp()``, Redis ``TIME``,
SQLite the local clock), so replicas' clock skew does not matter. Tokens only
grow, per thread: releasing keeps the token and the holder and sets the
expiry to 0 (so a write shipped late by that holder is told from a takeover).

Everything here takes the time as an argument (like psycopg_pool's
``AttemptWithBackoff``), so it is tested without servers and without
sleeping. `lease_keeper_async.py` does the I/O.
"""

from __future__ import annotations

import gc
import hashlib
import inspect
import json
import os
import secrets
import socket
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import ConfigError, LeaseLost, ThreadBusy
from ..validation import RUNTIME_KEY

# A run's writes renew the lease; a run that writes nothing for this long
# may be taken over. LangGraph writes at least once per super-step, so the
# TTL must outlast one step (an LLM or tool call: usually seconds, rarely a
# minute) and should not block other replicas much longer than that after a
# holder crashed (a run that ends gives the lease back at once). Takeover is
# always safe: fencing turns the stale holder's next write into `LeaseLost`,
# never a fork.
DEFAULT_LEASE_TTL_S = 30.0
# How long ``on_busy="wait"`` waits for a busy thread: two TTLs outlast any
# holder that stopped writing.
DEFAULT_LEASE_WAIT_S = 60.0
# Polling a busy lease: from the first to the last interval, doubling.
LEASE_POLL_FIRST_S = 0.02
LEASE_POLL_MAX_S = 0.5
# ``on_busy="raise"`` still looks again for this long before raising: an
# async run's release is sent by a task scheduled when the run ends, so a
# replica handed the thread at that moment may see the lease an instant
# before it is given back.
LEASE_HANDOFF_GRACE_S = 0.3
# ``lease_linger``: how much of the time a lease is kept after its run (the
# tier's expiry) this saver trusts its local cache for, counted from before
# it asked the tier to keep the lease. The rest covers a tier clock that runs
# fast against this machine's.
LINGER_TRUSTED = 0.9
# ``lease_linger`` hand-offs (`handoff.py`): how soon a replica that asked
# for a busy lease looks at it again (then doubling, as any busy lease).
HAND_OFF_POLL_FIRST_S = 0.001
# Postgres refuses a NOTIFY payload of 8000 bytes or more: a longer request
# (a thread id of kilobytes) is not sent, and the taker waits as before.
HAND_OFF_MAX_MESSAGE = 7900
# Threads whose lease one saver remembers. Beyond this the least recently
# used is forgotten, and its lease released.
MAX_TRACKED_THREADS = 10_000
# What the leases a saver keeps after their runs (``lease_linger``) and those
# waiting for their thread to ship (write-behind hand-offs) may hold, in
# bytes (estimated: `_KEPT_OVERHEAD` and the lengths of the thread id and
# holder); each of the two gets half. A saver gives them their share of
# ``memory_budget`` (`memory_budget.SHARES`) instead.
DEFAULT_KEPT_LEASE_BYTES = 3 * 1024 * 1024
_KEPT_OVERHEAD = 400  # the Lease, the tuple, the dict slot, str headers
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

OnBusy = Literal["raise", "wait"]
ON_BUSY_CHOICES: tuple[str, ...] = ("raise", "wait")
# A second writer is refused at once, with who holds the thread and until when.
DEFAULT_ON_BUSY: OnBusy = "raise"


@dataclass(frozen=True, slots=True)
class Lease:
    """A thread's lease record as the lease tier stores it. ``holder == ""``
    or ``expires_at == 0`` means released (free; the token is kept so tokens
    only grow)."""

    thread_id: str
    holder: str
    token: int
    expires_at: float  # seconds since the epoch, in the lease tier's clock
    # The tier that holds it (set by the lease keeper): the most authoritative
    # one reachable when it was taken (see `lease_keeper_async`).
    tier: str = field(default="", compare=False)

    @property
    def released(self) -> bool:
        """Given back: the holder is kept (a write shipped late by it is told
        from a takeover's) and the expiry is 0."""
        return not self.holder or self.expires_at == 0

    def free(self, now: float) -> bool:
        return self.released or self.expires_at <= now

    def remaining(self, now: float) -> float:
        return max(0.0, self.expires_at - now)


@dataclass(frozen=True, slots=True)
class Fence:
    """What a fenced write checks in the lease tier (in the same transaction
    as the write): the thread's lease is still `holder`'s with `token`. The
    write renews it for `ttl` seconds."""

    thread_id: str
    holder: str
    token: int
    ttl: float
    tier: str = ""  # the lease's tier, which takes the fenced write first
    # A write shipped late (write-behind): the run may have ended and given
    # the lease back since, or a later run of the same saver holds it now; only
    # another holder having taken the lease since (a takeover) refuses it.
    late: bool = False
    # A write under a lease that is given back only after what its thread
    # owes has shipped (a run's lease, `AsyncLeaseKeeper._release_at_run_end`):
    # with ``write="shared"`` the tiers past the lease's tier may get it from
    # the replicator (`AsyncTierChain.ships_behind`). A lease taken for one
    # write and given back at once writes through.
    behind: bool = field(default=False, compare=False)


@dataclass(frozen=True, slots=True)
class Verdict:
    """Whether a holder may take a thread's lease now, and with which token."""

    take: bool
    token: int
    why: Literal["new", "released", "expired", "ours", "holder gone", "busy"]


def decide(current: Lease | None, holder: str, now: float, *, holder_gone: bool = False) -> Verdict:
    """May `holder` take the lease now? Taking always means a new token, also
    for the holder that has it already: a new run of the same saver fences
    out that saver's previous run of the thread."""
    if current is None:
        return Verdict(True, 1, "new")
    token = current.token + 1
    if current.released:
        return Verdict(True, token, "released")
    if current.holder == holder:
        return Verdict(True, token, "ours")
    if current.expires_at <= now:
        return Verdict(True, token, "expired")
    if holder_gone:
        return Verdict(True, token, "holder gone")
    return Verdict(False, current.token, "busy")


@dataclass(slots=True)
class BusyWait:
    """How long ``on_busy="wait"`` sleeps between looks at a busy lease:
    doubling from `first` to `most`, never past the lease's expiry (by much)
    nor past the caller's deadline. None means give up."""

    limit: float
    started: float
    first: float = LEASE_POLL_FIRST_S
    most: float = LEASE_POLL_MAX_S
    attempts: int = 0

    def next_delay(self, now: float, remaining: float) -> float | None:
        left = self.limit - (now - self.started)
        if left <= 0:
            return None
        backoff = min(self.first * (2**self.attempts), self.most)
        self.attempts += 1
        # A lease that expires sooner than the backoff is looked at again
        # right after it expires (plus the first interval, for clock jitter).
        return max(0.0, min(backoff, remaining + self.first, left))


# -- hand-offs of kept leases (handoff.py) ---------------------------------------------


def hand_off_channel(holder: str) -> str:
    """The channel `holder` hears hand-off requests on (a Postgres NOTIFY
    channel, a Redis PUBLISH channel after the key prefix): one per saver, so
    that a request, and each saver's probe of its own channel, reaches one
    listener and not every replica's."""
    return "lgd_hand_off_" + hashlib.sha256(holder.encode()).hexdigest()[:32]


def hand_off_message(holder: str, thread_id: str) -> str:
    """A request to `holder` to give back the kept lease of `thread_id`."""
    return json.dumps([holder, thread_id], separators=(",", ":"))


def read_hand_off(message: str | bytes) -> tuple[str, str] | None:
    """(holder, thread id) of a `hand_off_message`; None if it is not one."""
    try:
        holder, thread_id = json.loads(message)
    except (ValueError, TypeError):
        return None
    if not isinstance(holder, str) or not isinstance(thread_id, str):
        return None
    return holder, thread_id


# -- who holds a lease --------------------------------------------------------------


def new_holder() -> str:
    """A saver's identity in lease records: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"


def parse_holder(holder: str) -> tuple[str, int] | None:
    """(host, pid) of a holder written by `new_holder`, or None."""
    parts = holder.rsplit(":", 2)
    if len(parts) != 3:
        return None
    try:
        return parts[0], int(parts[1])
    except ValueError:
        return None


def holder_gone(holder: str, *, host: str, pid: int, alive: Any) -> bool:
    """Is `holder` known dead? Only a process on this same host that no longer
    exists counts (a crashed worker restarted on the same machine resumes at
    once instead of waiting out the TTL). Anything unsure counts as alive;
    taking over from a live holder would still be safe (fencing), but would
    fail its run. `alive(pid)` probes the process."""
    parsed = parse_holder(holder)
    if parsed is None or parsed[0] != host or parsed[1] == pid:
        return False
    return not alive(parsed[1])


def pid_alive(pid: int) -> bool:
    """The one OS probe here: does process `pid` exist (and is it no zombie)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


# -- errors -----------------------------------------------------------------------------


def thread_busy(thread_id: str, current: Lease, now: float, *, waited: float | None) -> ThreadBusy:
    left = current.remaining(now)
    how = (
        f"waited {waited:.1f} s (lease_wait) and it is still held"
        if waited is not None
        else "pass on_busy='wait' to wait for it (up to lease_wait seconds)"
    )
    return ThreadBusy(
        f"thread {thread_id!r} is being run by another writer ({current.holder}, lease token {current.token}); "
        "it gives the lease back when its run ends (or keeps it for lease_linger seconds after, if set there), "
        f"and the lease expires in {left:.1f} s unless it writes "
        "again. Only one writer may run a thread at a time: "
        f"{how}, retry later, or have that writer call release_thread({thread_id!r}). Nothing was written.",
        thread_id=thread_id,
        holder=current.holder,
        token=current.token,
        expires_in=left,
    )


def lease_lost(fence: Fence, current: Lease | None, tier: str) -> LeaseLost:
    if current is None or (current.released and current.holder in ("", fence.holder)):
        now = "it was released"
    else:
        now = f"it now belongs to {current.holder} (token {current.token})"
    return LeaseLost(
        f"this run of thread {fence.thread_id!r} no longer holds the thread's writer lease (its token was "
        f"{fence.token}; {now}): another writer took the thread over after the lease expired "
        f"(lease_ttl={fence.ttl:g} s without a write) or it was released. This write was not stored in the "
        f"{tier} tier. Run the thread again (graph.invoke(None, config)) to continue from its latest "
        "checkpoint, or raise lease_ttl if your steps take longer.",
        thread_id=fence.thread_id,
        token=fence.token,
        holder=current.holder if current is not None else None,
    )


def run_superseded(thread_id: str, why: str) -> LeaseLost:
    return LeaseLost(
        f"this run of thread {thread_id!r} no longer holds the thread's writer lease: {why}. "
        "Nothing from this write was stored. Run the thread again (graph.invoke(None, config)).",
        thread_id=thread_id,
    )


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
        if not isinstance(ttl, (int, float)) or ttl <= 0:
            raise ConfigError(f"lease_ttl must be a positive number of seconds, got {ttl!r}.")
        if on_busy not in ON_BUSY_CHOICES:
            raise ConfigError(f"on_busy must be 'raise' or 'wait', got {on_busy!r}.")
        if not isinstance(wait, (int, float)) or wait < 0:
            raise ConfigError(f"lease_wait must be a number of seconds (0 or more), got {wait!r}.")
        if isinstance(linger, bool) or not isinstance(linger, (int, float)) or not 0 <= linger < float("inf"):
            raise ConfigError(
                f"lease_linger must be a number of seconds (0 or more; 0 gives a run's lease back when it "
                f"ends), got {linger!r}."
            )
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
        # thread's latest state.
        self._lingering: dict[str, tuple[Lease, float]] = {}
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

    def drop_all(self) -> list[Lease]:
        """Forget every lease: those of runs, and those kept after their runs."""
        with self._lock:
            leases = [h.lease for h in self._held.values()] + [lease for lease, _ in self._lingering.values()]
            self._held.clear()
            self._lingering.clear()
            self._kept_bytes = 0
            return leases

    def may_keep(self) -> bool:
        """Whether an ended run's lease may be kept now (`keep`)."""
        self._after_fork()
        with self._lock:
            return self.linger > 0 and (self._hearing or not self.needs_ears)

    def keep(self, lease: Lease, until: float) -> bool:
        """An ended run's lease that its tier keeps for ``linger`` seconds more
        (``lease_linger``): until `until` (monotonic) this saver is the only
        one that can have written the thread, so what it wrote last is read
        from its local cache. A new run of the thread here (`begin`), a
        write outside a run (`unkeep`), a request to hand it off (`unkeep`,
        `handoff.py`) or `drop` ends it. False if it may not be kept (the
        hand-off listener does not hear its channel, `may_keep`): the caller
        gives it back."""
        with self._lock:
            if self.needs_ears and not self._hearing:
                return False
            if lease.thread_id in self._held:
                return True
            self._unlinger(lease.thread_id)
            self._lingering[lease.thread_id] = (lease, until)
            self._kept_bytes += _kept_size(lease)
            # Beyond max_threads (or its bytes) the oldest are forgotten:
            # trusted no more, they expire in their tier by themselves.
            while self._lingering and (
                len(self._lingering) > self.max_threads or self._kept_bytes > self.max_kept_bytes // 2
            ):
                self._unlinger(next(iter(self._lingering)))
            return True

    def _unlinger(self, thread_id: str) -> tuple[Lease, float] | None:
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
            kept = [lease for lease, _ in self._lingering.values()]
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
        while it is (`now`: monotonic seconds)."""
        self._after_fork()
        with self._lock:
            kept = self._lingering.get(thread_id)
            if kept is None:
                return None
            if kept[1] <= now:
                self._unlinger(thread_id)
                return None
            return kept

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
        self._early: OrderedDict[tuple[str, str, int, str], tuple[set[tuple[str, int]], int]] = OrderedDict()
        self._early_bytes = 0

    def put(self, thread_id: str, ns: str, token: int, checkpoint_id: str, now: float) -> None:
        """A fenced checkpoint the local tier took: the new head, with the
        writes of it recorded before (`writes`)."""
        with self._lock:
            before = self._own.pop((thread_id, ns), None)
            if before is not None:
                self._bytes -= before.size
            if before is not None and before.token == token:
                mine, mine_size = before.mine, before.mine_size
            else:
                mine, mine_size = {}, 0
            early = self._pop_early((thread_id, ns, token, checkpoint_id))
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
            own = _Own(token, checkpoint_id, set(keys), now, mine, mine_size)
            self._own[(thread_id, ns)] = own
            self._count(own, thread_id, ns)
            self._evict()

    def writes(
        self, thread_id: str, ns: str, token: int, checkpoint_id: str, keys: set[tuple[str, int]], now: float
    ) -> None:
        """Fenced pending writes the local tier took (of the head, or of an older checkpoint)."""
        with self._lock:
            own = self._own.get((thread_id, ns))
            if own is not None and own.token == token:
                own.at = now
                self._own.move_to_end((thread_id, ns))
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
            early = self._pop_early(key) | keys
            size = _OWN_CHECKPOINT_OVERHEAD + len(thread_id) + len(ns) + len(checkpoint_id) + _keys_cost(early)
            self._early[key] = (early, size)
            self._early_bytes += size
            while self._early and self._early_bytes > self.max_bytes // 8:
                self._pop_early(next(iter(self._early)))

    def _pop_early(self, key: tuple[str, str, int, str]) -> set[tuple[str, int]]:
        """(Under the lock.) Take the write keys kept aside under `key`."""
        found = self._early.pop(key, None)
        if found is None:
            return set()
        self._early_bytes -= found[1]
        return found[0]

    def _count(self, own: _Own, thread_id: str, ns: str) -> None:
        """(Under the lock.) Count `own`'s estimated bytes again."""
        size = _OWN_OVERHEAD + len(thread_id) + len(ns) + len(own.checkpoint_id) + own.mine_size
        size += _keys_cost(own.writes)
        self._bytes += size - own.size
        own.size = size

    def _evict(self) -> None:
        """(Under the lock.) Least recently written out, to fit `max_bytes`
        (the newest entry stays even alone over it: it is the run going on)."""
        while self._bytes > self.max_bytes and len(self._own) > 1:
            self._bytes -= self._own.popitem(last=False)[1].size

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
        that it holds exactly these), so a walk over them (`delta.py`) needs
        no other tier."""
        with self._lock:
            own = self._trusted(thread_id, ns, token, now, until)
            return {cid: frozenset(keys) for cid, keys in own.mine.items()} if own is not None else None

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
