"""Kept leases given back when asked: the hand-off of ``lease_linger``.

A saver that keeps a thread's lease after a run (``lease_linger``) reads the
thread from its local cache alone, and every other replica has to wait for
the lease. So a replica that finds a lease busy asks its holder to give it
back (`AsyncLeaseKeeper._ask_hand_off`: a Postgres NOTIFY or a Redis PUBLISH
on the lease's tier, on a channel of the holder's own, `hand_off_channel`).
`HandOffListener` is the holder's side: a daemon thread listening on that
channel, on a connection of its own, working for the saver's runtime
(`HandsOff`, ``faces/runtime.py``). It also renews the leases the saver
keeps: a kept lease expires in its tier `KEPT_WINDOW_S` after its last
renewal, so a replica that dies keeping leases (killed, or cut off) holds
them that long at most, and another replica takes them over then.
A request for a lease this saver only keeps (its run has ended) first ends
the trust in the local cache (`LeaseBook.unkeep`), then gives the lease back
in its tier, and the asking replica, which looks again within milliseconds,
takes it. A request for a thread this saver is running is not for a kept
lease and changes nothing: the thread is busy.

Safety does not rest on this channel: nobody takes a lease before it is
given back or has expired, and the holder trusts its cache only for part of
the expiry. A request that is not heard only costs the asking replica time:
it waits, or gets `ThreadBusy`, as without the hand-off. To keep that rare,
the listener proves the channel end to end: when it starts and every
`PROBE_S` it asks itself, as another replica would, and must hear the
request within `HEAR_S`. While it cannot (the connection dropped, the server
is down, a pooler that does not pass notifications on, such as PgBouncer in
transaction mode), the saver keeps no lease after a run (`LeaseBook.deaf`)
and gives back those it kept.

A server that stalls (it keeps the connection open and answers nothing)
holds no call of the listener for ever: connecting is bounded by the
tier's connect timeout, each statement on its Postgres connection by the
watchdog (`pools.watched`), TCP keepalives see a peer that vanished, a wait
for messages ends every `_SLICE_S`, and the probe notices that nothing
comes back. `stop` shuts the listening connection's socket down, so a call
still waiting on it returns at once and the thread ends.
"""

from __future__ import annotations

import gc
import logging
import os
import secrets
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

from ...model.lease import KEPT_RENEW_S, KEPT_WINDOW_S, LINGER_TRUSTED, Lease, read_hand_off
from ..tasks import BackgroundTask
from .book import LeaseBook

logger = logging.getLogger("langgraph_durable")

# How often the listener proves that it hears its channel, and how long a
# request may take to come back to it.
PROBE_S = 2.0
HEAR_S = 1.0
# Between attempts to listen again after the channel failed.
RETRY_S = 1.0
# The longest the listener waits for a message before looking whether it
# is to stop.
_SLICE_S = 0.1
# What a probe names as its thread: no thread's (a thread id holds no NUL).
_PROBE = "\x00probe:"


class Ears(Protocol):
    """One tier's hand-off channel, heard on a connection of its own."""

    def hear(self, until: float) -> Iterator[str]:
        """The messages heard until `until` (monotonic), as they come."""

    def close(self) -> None: ...


class HandsOff(Protocol):
    """What the listener works for (a saver's runtime): each call on the
    listener's thread (or its give-back threads), on the sync face."""

    def hand_off_ears(self) -> Ears:
        """A connection of its own on the hand-off channel of the tier where
        leases are kept."""

    def ask_hand_off(self, thread_id: str, holder: str) -> None:
        """A request on that channel, sent as another replica sends it."""

    def give_back_asked(self, lease: Lease) -> None:
        """Give back a lease asked for (kept, or of a run whose end is not
        handled yet)."""

    def renew_kept(self, leases: Sequence[Lease]) -> set[str]:
        """Renew kept leases in their tier; the threads renewed."""


class _Deaf(Exception):
    """The listener's own request did not come back in time."""


# Leases asked for are given back by this many threads at once: a replica
# whose many runs end together (and are asked for together) answers them all
# within the asking replicas' grace, though each give-back waits on its tiers.
GIVE_BACK_THREADS = 8

# A request for a thread a run of this saver still holds runs the garbage
# collector (the run may have ended unseen), at most this often.
COLLECT_EVERY_S = 1.0


class HandOffListener(BackgroundTask):
    """The daemon thread that gives back kept leases when asked."""

    thread_name = "langgraph-durable-hand-off"

    def __init__(
        self,
        book: LeaseBook,
        host: HandsOff,
        *,
        where: str,
        claim_ending: bool = True,
        probe_s: float = PROBE_S,
        hear_s: float = HEAR_S,
        retry_s: float = RETRY_S,
        renew_s: float = KEPT_RENEW_S,
        window: float = KEPT_WINDOW_S,
    ) -> None:
        super().__init__()
        self.book = book
        self._host = host
        self.where = where
        # Whether a request may take the lease of a run whose end is not
        # handled yet (not with write-behind: its thread must ship first).
        self.claim_ending = claim_ending
        self.probe_s = probe_s
        self.hear_s = hear_s
        self.retry_s = retry_s
        self.renew_s = renew_s
        self.window = window
        self._ears_now: Ears | None = None  # the listening connection, for `stop` to interrupt
        self._first_try = threading.Event()
        self._failing = False  # logged once per outage
        self.hand_offs = 0  # leases given back on request
        self._givers: ThreadPoolExecutor | None = None  # give the leases back (`GIVE_BACK_THREADS`)
        self._givers_pid = 0
        self._collected = -COLLECT_EVERY_S  # when a request last ran the garbage collector

    def start(self, wait: float = 0.0) -> None:
        """Start listening (in a forked child too: a thread does not survive
        the fork); wait up to `wait` seconds for the first attempt to hear
        the channel, whether it did or not."""
        super().start()
        with self._lock:
            heard = self._first_try
        if wait > 0:
            heard.wait(wait)

    def _starting(self) -> None:
        self._first_try = threading.Event()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop listening and close the connection. From now on no lease is
        kept after a run; those kept stay in the book for the saver's
        `close` to give back. A call of the listener's still waiting on its
        connection (a server that stalls) is cut short; one still
        connecting ends within the connect timeout, and this waits for the
        thread `timeout` seconds at most."""
        self.book.stop_hearing()
        super().stop(timeout)
        with self._lock:
            givers, self._givers = self._givers, None
        if givers is not None and self._givers_pid == os.getpid():
            givers.shutdown(wait=True)  # the leases asked for are given back before the saver closes

    def _interrupt(self) -> None:
        with self._lock:
            ears = self._ears_now if self._pid == os.getpid() else None
        interrupt = getattr(ears, "interrupt", None)
        if interrupt is not None:
            interrupt()

    def _hear(self, ears: Ears, until: float) -> Iterator[str]:
        """`ears.hear` in short slices, so that `stop` is seen soon."""
        while not self._stopping.is_set() and (now := time.monotonic()) < until:
            yield from ears.hear(min(until, now + _SLICE_S))

    def _run(self) -> None:
        while not self._stopping.is_set():
            ears: Ears | None = None
            try:
                ears = self._host.hand_off_ears()
                with self._lock:
                    self._ears_now = ears
                    stopped = self._stopping.is_set()
                if stopped:  # `stop` came while this connected: it could not interrupt it
                    break
                self._prove(ears)
                if self._failing:
                    logger.info("lease hand-offs: listening again on %s", self.where)
                    self._failing = False
                self.book.hearing()
                self._first_try.set()
                next_probe = time.monotonic() + self.probe_s
                while not self._stopping.is_set():
                    for message in self._hear(ears, min(next_probe, time.monotonic() + self.renew_s)):
                        self._handle(message)
                    if self._stopping.is_set():
                        break
                    self._renew_kept()
                    if time.monotonic() >= next_probe:
                        self._prove(ears)
                        next_probe = time.monotonic() + self.probe_s
            except Exception as exc:
                if not self._stopping.is_set() and not self._failing:
                    # A server that cannot be reached is an outage, whose one
                    # WARNING the tier's guard logs; a server that answers but
                    # does not pass notifications on (a transaction pooler)
                    # is the deployment's to fix: a WARNING of its own.
                    logger.log(
                        logging.WARNING if isinstance(exc, _Deaf) else logging.INFO,
                        "lease hand-offs: not listening on %s (%s: %s); leases are given back when runs end "
                        "until it works again",
                        self.where,
                        type(exc).__name__,
                        exc,
                    )
                    self._failing = True
            finally:
                self._first_try.set()
                if self._stopping.is_set():
                    self.book.stop_hearing()  # the saver closes: `close` gives kept leases back
                else:
                    for lease in self.book.deaf():
                        self._host.give_back_asked(lease)
                if ears is not None:
                    with self._lock:
                        self._ears_now = None
                    try:
                        ears.close()
                    except Exception as exc:
                        logger.debug("lease hand-offs: closing the listening connection: %s", exc)
            self._stopping.wait(self.retry_s)

    def _prove(self, ears: Ears) -> None:
        """Ask ourselves as another replica would (on another connection:
        a pooler may pass a session's own notifications on, and no one
        else's), and hear it within `hear_s`; handle what else comes."""
        probe = _PROBE + secrets.token_hex(8)
        self._host.ask_hand_off(probe, self.book.holder)
        for message in self._hear(ears, time.monotonic() + self.hear_s):
            request = read_hand_off(message)
            if request is not None and request[1] == probe:
                return
            self._handle(message)
        if self._stopping.is_set():
            return
        raise _Deaf(f"its own request did not come back within {self.hear_s} s")

    def _renew_kept(self) -> None:
        """Renew the kept leases for another `window` (one call per tier);
        give back those whose linger ended. A renewal that fails (the tier
        down or slow) is not retried: the leases' trust lapses by itself,
        and they expire in their tier."""
        leases, ended = self.book.renewals(time.monotonic())
        for lease in ended:
            self._host.give_back_asked(lease)
        if not leases:
            return
        asked = time.monotonic()  # each tier's expiry is at least this much later
        try:
            renewed = self._host.renew_kept(leases)
        except Exception as exc:
            logger.debug("lease hand-offs: renewing %d kept lease(s) failed: %s", len(leases), exc)
            return
        self.book.renewed(leases, renewed, asked + self.window * LINGER_TRUSTED)

    def _handle(self, message: str) -> None:
        request = read_hand_off(message)
        if request is None:
            return
        holder, thread_id = request
        if holder != self.book.holder:
            return
        lease = self._kept_or_ending(thread_id)
        if lease is None and self.book.held(thread_id) is not None and self._may_collect():
            # A run whose end is not seen yet: its end is its stream writer
            # being freed, which a reference cycle (a run that stopped at an
            # interrupt or raised keeps one through its exception) puts off
            # until the garbage collector runs. Run it, then look again; a
            # run still going is untouched and the thread stays busy.
            gc.collect()
            lease = self._kept_or_ending(thread_id)
        if lease is not None:
            self.hand_offs += 1
            self._give_back_soon(lease)

    def _kept_or_ending(self, thread_id: str) -> Lease | None:
        lease = self.book.unkeep(thread_id)  # the cache is no longer trusted, before the lease goes
        if lease is None and self.claim_ending:
            # A run that just ended, its end not handled yet (under load the
            # runs' event loop gets to it late): given back now, not kept.
            lease = self.book.claim_ending(thread_id)
        return lease

    def _may_collect(self) -> bool:
        """At most one collection every `COLLECT_EVERY_S` for hand-offs."""
        now = time.monotonic()
        if now - self._collected < COLLECT_EVERY_S:
            return False
        self._collected = now
        return True

    def _give_back_soon(self, lease: Lease) -> None:
        """Give `lease` back on one of the give-back threads, so that the next
        request is heard meanwhile."""
        with self._lock:
            if self._givers is None or self._givers_pid != os.getpid():
                self._givers = ThreadPoolExecutor(GIVE_BACK_THREADS, thread_name_prefix="langgraph-durable-give-back")
                self._givers_pid = os.getpid()
            givers = self._givers
        try:
            givers.submit(self._host.give_back_asked, lease)
        except RuntimeError:  # shut down meanwhile: here, then
            self._host.give_back_asked(lease)
