"""Per-thread writer leases: the decisions, with no I/O but what /proc says
of processes (`this_process`, `process_started`: the PID namespace and start
times a lease's holder is named and judged by).

One writer per thread. A graph run takes the thread's lease before it reads
the thread's latest checkpoint, and every write it makes is *fenced*: the
most authoritative configured tier (Postgres, else Redis, else SQLite) stores
the write only if the lease still carries the run's token, in the same
transaction. A second process that tries to run the thread meanwhile gets
`ThreadBusy` (or waits, ``on_busy="wait"``); a run whose lease expired and
was taken over gets `LeaseLost` at its next write, and that write is not
stored. Two writers therefore never fork a thread's history.

A run keeps its lease after it ends (``lease_linger``, 30 s by default,
where a local cache sits in front of a shared tier), until another replica
asks for it (`handoff.py`), or gives it back at once, so another replica may
run the thread right after it (with write-behind, once the replicator has
shipped the run: `leases.book.LeaseBook.hand_off_later`). LangGraph tells a checkpointer nothing
at the end of a run; the sign used is the run's ``stream_writer`` (a
function Pregel makes per run and keeps in the run's Runtime) being freed:
`leases.book.LeaseBook` (in the engine) watches it with a weak reference. The TTL is the fallback for a holder that crashed, or
a run whose end is only seen by the garbage collector later (or never, should
a LangGraph version keep the stream writer alive).

The lease record (holder, token, expires_at) lives in the authoritative tier,
with that tier's clock (Postgres ``clock_timestamp()``, Redis ``TIME``,
SQLite the local clock), so replicas' clock skew does not matter. Tokens only
grow, per thread: releasing keeps the token and the holder and sets the
expiry to 0 (so a write shipped late by that holder is told from a takeover).

Everything here takes the time as an argument (like psycopg_pool's
``AttemptWithBackoff``), so it is tested without servers and without
sleeping. `leases/keeper_async.py` does the I/O.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import socket
import sys
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import LeaseLost, ThreadBusy

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
# ``on_busy="raise"`` still looks again (and asks again) for this long
# before raising: an async run's end is handled by a task scheduled when the
# run ends, and the hand-off listener gives back the lease of an ended run
# when asked; a replica handed the thread at that moment may see the lease
# a moment before it is given back, longer when the holder is busy with
# many runs ending at once.
LEASE_HANDOFF_GRACE_S = 1.0
# ``lease_linger``: how long a saver keeps a thread's lease after its run
# ended, by default (where a local cache sits in front of a shared tier).
# While it does, it reads the thread from its local cache alone.
DEFAULT_LEASE_LINGER_S = 30.0
# A kept lease expires in its tier this long after it was last renewed; the
# hand-off listener renews every kept lease each `KEPT_RENEW_S`. So a
# replica that died keeping leases holds them at most this long.
KEPT_WINDOW_S = 1.5
KEPT_RENEW_S = 0.5
# How much of a kept lease's window (the tier's expiry) this saver trusts
# its local cache for, counted from before it asked the tier to keep or
# renew the lease. The rest covers a tier clock that runs fast against this
# machine's.
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
    # one reachable when it was taken (see `leases/keeper_async.py`).
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
    # owes has shipped (a run's lease, `AsyncLeaseKeeper.release_at_run_end`):
    # with ``write="shared"`` the tiers past the lease's tier may get it from
    # the replicator (`AsyncTierChain.ships_behind`). A lease taken for one
    # write and given back at once writes through.
    behind: bool = field(default=False, compare=False)


# A fenced write renews its lease when the lease was last renewed this long
# ago (`renew_every`): at most this much of the TTL goes unrenewed, and a
# step's writes do not each rewrite the lease.
RENEW_EVERY_MAX_S = 1.0


def renew_every(ttl: float) -> float:
    """Seconds after a lease's last renewal that a fenced write renews it
    again: a twentieth of the TTL, at most `RENEW_EVERY_MAX_S`."""
    return min(RENEW_EVERY_MAX_S, ttl / 20)


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


def wait_out(remaining: float, waited: float) -> bool:
    """With ``on_busy="raise"``: whether to wait for a busy lease that
    expires in `remaining` seconds, having waited `waited`. One that expires
    within a kept lease's window is waited out (a replica that died keeping
    it, or a run's holder that stalled: either is taken over once it
    expires), for `KEPT_WINDOW_S` and the usual grace at most."""
    return 0.0 <= remaining <= KEPT_WINDOW_S and waited < KEPT_WINDOW_S + LEASE_HANDOFF_GRACE_S


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


@dataclass(frozen=True, slots=True)
class ProcessId:
    """Who a lease holder is, as far as another process can check it.

    A pid means something only inside its PID namespace on one boot of one
    machine, and containers that share a host name (host-network pods,
    ``docker --network host``) each have their own namespace: `place` names
    it (a hash of the boot id and the namespace), so a pid is only probed
    where it means the same process. `start` (the process's start time)
    tells a dead holder from a new process that was given its pid. Empty
    strings mean "not known here": such a holder is never taken for dead.
    """

    host: str
    place: str
    pid: int
    start: str


def _proc_is_ours() -> bool:
    """Is /proc mounted for this process's PID namespace? (In a namespace
    made without its own /proc, /proc/PID names the host's processes.)"""
    try:
        return os.readlink("/proc/self") == str(os.getpid())
    except OSError:
        return False


def _place() -> str:
    if sys.platform != "linux":
        return "single-namespace"  # no PID namespaces: a host's pids are its own
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        namespace = os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""
    return hashlib.sha256(f"{boot}/{namespace}".encode()).hexdigest()[:12]


def this_process() -> ProcessId:
    pid = os.getpid()
    return ProcessId(socket.gethostname(), _place(), pid, (process_started(pid) or "") if _proc_is_ours() else "")


def new_holder() -> str:
    """A saver's identity in lease records: ``host:place:pid:start:random``
    (see `ProcessId`; ``-`` for what is not known)."""
    me = this_process()
    return f"{me.host}:{me.place or '-'}:{me.pid}:{me.start or '-'}:{secrets.token_hex(4)}"


def parse_holder(holder: str) -> ProcessId | None:
    """The `ProcessId` of a holder written by `new_holder`, or None. A holder
    written before the place was recorded (``host:pid:random``) parses with
    an unknown place: it is waited for, never probed."""
    parts = holder.rsplit(":", 4)
    try:
        if len(parts) == 5:
            host, place, pid, start, _ = parts
            return ProcessId(host, "" if place == "-" else place, int(pid), "" if start == "-" else start)
        host, pid, _ = holder.rsplit(":", 2)
        return ProcessId(host, "", int(pid), "")
    except ValueError:
        return None


def holder_gone(holder: str, *, me: ProcessId, started: Any) -> bool:
    """Is `holder` known dead? Only a process of this host, boot and PID
    namespace can be checked (a crashed worker restarted on the same machine
    resumes at once instead of waiting out the TTL): it is gone when no
    process has its pid, or the one that has it started at another time.
    Anything unsure counts as alive; taking over from a live holder would
    still be safe (fencing), but would fail its run. `started(pid)` is
    `process_started`."""
    other = parse_holder(holder)
    if other is None or not other.place or (other.host, other.place) != (me.host, me.place):
        return False
    if other.pid == me.pid:  # this process, or one before it that had its pid
        return bool(other.start and me.start) and other.start != me.start
    now = started(other.pid)
    if now is None:
        return True
    return bool(other.start and now) and other.start != now


def process_started(pid: int) -> str | None:
    """The one OS probe here: None when no live process has `pid` (none, or a
    zombie); else its start time (clock ticks since boot), or "" when this
    process cannot read it."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except (PermissionError, OSError):
        return ""
    if not _proc_is_ours():
        return ""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return ""
    if fields[0] == "Z":
        return None
    return fields[19] if len(fields) > 19 else ""


# -- errors -----------------------------------------------------------------------------


def thread_busy(thread_id: str, current: Lease, now: float, *, waited: float | None) -> ThreadBusy:
    left = current.remaining(now)
    how = (
        f"waited {waited:.1f} s (Leases(wait=)) and it is still held"
        if waited is not None
        else "pass leases=Leases(on_busy='wait') to wait for it (up to Leases(wait=) seconds)"
    )
    return ThreadBusy(
        f"thread {thread_id!r} is being run by another writer ({current.holder}, lease token {current.token}); "
        "it gives the lease back when its run ends, or keeps it after the run (Leases(linger=)) until asked for it, "
        "which this saver did, "
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
        f"(Leases(ttl={fence.ttl:g}) s without a write) or it was released. This write was not stored in the "
        f"{tier} tier. Run the thread again (graph.invoke(None, config)) to continue from its latest "
        "checkpoint, or raise Leases(ttl=) if your steps take longer.",
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
