# WARNING: this file is generated from langgraph_durable/engine/leases/keeper_async.py; edit that file and run tools/async_to_sync.py. DO NOT EDIT.
"""Writer leases at work: a run takes its thread's lease, waits while another
writer has it, fences every write with it, and gives it back.

The decisions (who may take a lease, how long to wait, which run a write
belongs to) are in `lease.py`; this file only does the I/O, on the most
authoritative tier that is up (Postgres, else Redis, else SQLite).

During an outage of that tier (its breaker is open, `breaker.py`) new leases
are taken in the next shared tier, and a run whose lease tier goes down
mid-run moves its lease there (a new token) and carries on, unless
``write="all"``. The price is weaker exclusion while it lasts: a replica cut
off from Postgres alone, while others still reach it, could run a thread
that another replica runs at the same time. Leases come back to Postgres
with the next runs once it answers again.

A run gives its lease back when it ends (`LeaseBook` sees its stream writer
freed): the sync face at once, in the thread that let go of the run (right
before ``invoke`` returns, normally), the async face from a task on the
saver's event loop, or, when that loop is shutting down or gone (the run of
``asyncio.run(graph.ainvoke(...))`` ends as its loop does), through the
saver's sync face on a worker thread. The TTL covers whatever is not
released that way.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import logging
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata

from ...errors import DurableError, LeaseLost, ThreadBusy, TierUnavailable
from ...model.codec import thread_id_of, thread_of
from ...model.lease import (
    HAND_OFF_POLL_FIRST_S,
    KEPT_WINDOW_S,
    LEASE_HANDOFF_GRACE_S,
    LINGER_TRUSTED,
    BusyWait,
    Fence,
    Lease,
    decide,
    holder_gone,
    process_started,
    this_process,
    thread_busy,
    wait_out,
)
from ...validation import RUNTIME_KEY
from ..chain import TierChain
from ..concurrency import Lock, defer, ensure_deferred_worker, sleep
from .book import LeaseBook, in_gc

logger = logging.getLogger("langgraph_durable")

# Locks that serialize a thread's lease moves (`_moving`), chosen by thread id.
MOVE_LOCK_STRIPES = 64

# How long a run waits for this saver's own change to its thread made
# outside a run (archiving it, bringing it back: `hold`) to end.
HOLD_WAIT_S = 10.0


class LeaseKeeper:
    """Takes, checks and gives back the writer leases of one saver's threads."""

    def __init__(self, chain: TierChain, book: LeaseBook) -> None:
        self.chain = chain
        self.book = book
        # One lease move at a time per thread: a run's concurrent writes (a
        # step's put_writes and the previous put) meet the same outage
        # together. Striped, so runs of other threads do not wait behind one
        # thread's move (each may wait out a tier's timeout during an outage).
        self._moving = [Lock() for _ in range(MOVE_LOCK_STRIPES)]
        ensure_deferred_worker()

    # -- runs -----------------------------------------------------------------------

    def begin_run(self, config: RunnableConfig) -> Lease:
        """A graph run is about to read its thread: take the lease *first*, so
        the checkpoint it then reads as latest stays the latest. Raises
        `ThreadBusy` while another writer holds it (after waiting, with
        ``on_busy="wait"``)."""
        thread_id = thread_of(config, what="get_tuple")
        lease = self._acquire(thread_id)
        for forgotten in self.book.begin(config["configurable"][RUNTIME_KEY], lease, self._run_ended):
            self.release_quietly(forgotten)
        return lease

    def abandon_run(self, lease: Lease) -> None:
        """The run failed before it started (e.g. `ResumeRejected`): let go."""
        if self.book.drop(lease.thread_id, lease.token) is not None:
            self.release_quietly(lease)

    def _run_ended(self, lease: Lease) -> None:
        """A run of this saver ended (`LeaseBook` forgot it already): give its
        lease back, only if it still carries the run's token. Called from a
        weakref callback, in any thread, so it never raises; what it cannot
        do is left to the TTL."""
        try:
            if sys.is_finalizing():
                return
            if in_gc():
                # Inside the garbage collector, which may have interrupted
                # this thread anywhere (even holding a tier's lock).
                defer(self.release_at_run_end, lease)
            else:
                # In the thread that let go of the run: done before
                # ``invoke`` returns to its caller.
                _ = self.release_at_run_end(lease)
        except Exception as exc:  # a weakref callback must not raise
            self._not_released(lease, exc)

    def release_at_run_end(self, lease: Lease) -> bool:
        """Give back an ended run's lease (if it still has the run's token);
        False if that failed (logged).

        With write-behind (``write="local"``) a thread whose records are still
        owed to the shared tiers keeps its lease until they have shipped: a
        replica that took the thread over before would not see them, and they
        would then be refused. The run's end does not wait for that: the
        replicator ships the thread first and then gives the lease back
        (`hand_off_shipped`). Should they not ship (a shared tier down), the
        lease expires after its TTL.

        With ``write="shared"`` and a tier shipped behind (`ships_behind`:
        Redis, while Postgres holds the lease), what the thread still owes is
        shipped here first, in one transaction per tier: the lease is given
        back with every reachable shared tier holding the whole run, so a
        replica that takes the thread over sees it there even should the
        lease's tier go down next. A tier that is down is left owed.

        Nothing is done if another replica asked for the lease meanwhile and
        the hand-off listener gave it back already (`give_back_asked`)."""
        if not self.book.is_ending(lease.thread_id, lease.token):
            return True
        try:
            self.chain.ensure_setup()  # the sync face's first call, for `elsewhere`
            if self.chain.write == "local" and self.chain.journal.owes(lease.thread_id):
                if self.book.claim_ending(lease.thread_id, lease.token) is not None:
                    self.book.hand_off_later(lease, time.monotonic())
                    self.chain.kick(now=True)
                return True
            self._ship_behind(lease.thread_id)
            self._give_back(lease, ending=True)
        except Exception as exc:  # a TierUnavailable, or the saver closed meanwhile
            if self.book.claim_ending(lease.thread_id, lease.token) is not None:
                self._not_released(lease, exc)
            return False
        return True

    def _give_back(self, lease: Lease, *, ending: bool = False) -> None:
        """Release an ended run's lease, or with ``lease_linger`` keep it that
        long (only where a local cache sits in front of shared tiers: what
        keeping buys is reading the thread from it, `LeaseBook.keep`).

        `ending`: the run's end, which the hand-off listener may have beaten
        to it (`LeaseBook.claim_ending`) until the lease is kept or given
        back here: then the listener gives it back, and nothing is done here."""
        tier = self.chain.tier_named(lease.tier)
        # Kept only in the most authoritative shared tier, where every replica
        # that reaches it takes its leases: one taken in another tier during
        # an outage is not seen there once it is over.
        # And only while another replica can ask for it (`handoff.py`).
        if (
            self.chain.own is not None
            and self.chain.shared
            and tier is self.chain.roles.authority
            and self.book.may_keep()
        ):
            # Kept for a short window, which the hand-off listener renews
            # until the linger ends (a replica that dies lets go of it soon).
            asked = time.monotonic()  # the tier's expiry is at least this much later
            if not tier.keep_lease(lease.thread_id, lease.holder, lease.token, KEPT_WINDOW_S):
                self.book.claim_ending(lease.thread_id, lease.token)  # forgotten: no longer this run's
                return  # not kept: nothing to give back
            until = asked + KEPT_WINDOW_S * LINGER_TRUSTED
            if self.book.keep(lease, until, keep_until=asked + self.book.linger, ending=ending):
                return
            # The hand-off listener went deaf meanwhile: give it back after all.

        if ending and self.book.claim_ending(lease.thread_id, lease.token) is None:
            return  # the hand-off listener took it, and gives it back
        tier.release_lease(lease.thread_id, lease.holder, lease.token)

    def give_back_asked(self, lease: Lease) -> None:
        """(The hand-off listener, asked for the lease by another replica.)
        Give back a lease kept after its run, or one of a run that has ended
        but whose end is not handled yet (`LeaseBook.claim_ending`), shipping
        first what its thread owes the tiers written behind, as the run's end
        would have. A failure is logged."""
        self._ship_behind(lease.thread_id)
        self.release_quietly(lease)

    def renew_kept(self, leases: Sequence[Lease]) -> set[str]:
        """(The hand-off listener.) Renew kept leases for another
        `KEPT_WINDOW_S`, in one call per tier. The threads renewed; raises
        `TierUnavailable` if a tier cannot be reached."""
        by_tier: dict[str, list[tuple[str, int]]] = {}
        for lease in leases:
            by_tier.setdefault(lease.tier, []).append((lease.thread_id, lease.token))
        renewed: set[str] = set()
        for name, pairs in by_tier.items():
            renewed |= self.chain.tier_named(name).renew_leases(self.book.holder, pairs, KEPT_WINDOW_S)
        return renewed

    def hand_off_shipped(self) -> int:
        """(The replicator, at each pass.) Ship the threads of the leases kept
        at the end of write-behind runs (`LeaseBook.hand_off_later`), and
        give back each lease whose thread owes the shared tiers nothing now.
        Returns how many journal entries were settled."""
        settled = 0
        for lease in self.book.handoffs(time.monotonic()):
            settled += self.chain.catch_up(lease.thread_id)
            if self.chain.journal.owes(lease.thread_id):
                continue  # a shared tier is down: the next pass tries again
            if self.book.handed(lease):
                try:
                    self._give_back(lease)
                except DurableError as exc:
                    self._not_released(lease, exc)
        return settled

    def _ship_behind(self, thread_id: str) -> None:
        """Before a ``write="shared"`` lease is given back: ship what the
        thread owes the tiers written behind (`TierChain.ships_behind`).
        A failure is logged, never raised: the replicator ships it later."""
        if self.chain.write != "shared" or not self.chain.ships_behind:
            return
        try:
            self.chain.catch_up(thread_id)
        except Exception as exc:
            logger.warning("thread %r: shipping what it owes before its lease is given back failed: %s", thread_id, exc)

    def _not_released(self, lease: Lease, exc: BaseException) -> None:
        logger.warning(
            "could not release the writer lease of thread %r at the end of its run (%s); it expires in at most %s s",
            lease.thread_id,
            exc,
            self.book.ttl,
        )

    # -- fenced writes --------------------------------------------------------------

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._fenced(
            config, "put", lambda fence: self.chain.put(config, checkpoint, metadata, new_versions, fence=fence)
        )

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._fenced(
            config, "put_writes", lambda fence: self.chain.put_writes(config, writes, task_id, task_path, fence=fence)
        )

    def _fenced(self, config: RunnableConfig, what: str, write: Callable[[Fence], Any]) -> Any:
        """Write with the fence of the run the config belongs to.

        A call without a runtime (``update_state``, ``saver.put`` by hand,
        the conformance suite) is no run: it uses this saver's lease of the
        thread if it holds one, and otherwise takes a lease just for this one
        write (so it, too, waits for or refuses a thread another writer is
        running) and gives it back at once.
        """
        thread_id = thread_of(config, what=what)
        fence, of_run = self.book.fence_for(thread_id, config.get("configurable") or {})
        if fence is not None:
            try:
                return write(fence)
            except LeaseLost:
                self.book.drop(thread_id, fence.token)
                if of_run:
                    raise
                # A lease this saver held earlier and lost since: ask anew.
            except TierUnavailable as exc:
                if self.chain.write == "all" or exc.tier != fence.tier:
                    raise
                # The lease's tier went down under the run: move the lease to
                # the next tier up (nothing was written) and carry on.
                with self._moving[hash(thread_id) % MOVE_LOCK_STRIPES]:
                    old = self.book.held(thread_id)
                    if old is not None and old.tier != fence.tier and of_run:
                        # Another write of this run moved it meanwhile.
                        moved = old
                    else:
                        moved = self._acquire(thread_id)
                        if old is None or not self.book.moved(old, moved):
                            self.release_quietly(moved)
                            raise
                        logger.warning("writer lease of thread %r moved from %s to %s (token %s): %s", thread_id, fence.tier, moved.tier, moved.token, exc)  # fmt: skip
                return write(self.book.fence(moved, behind=True))
        # A lease kept after a run (``lease_linger``) stops vouching for the
        # local cache before the one-write lease below replaces it.
        self.book.unkeep(thread_id)
        lease = self._acquire(thread_id)
        try:
            return write(self.book.fence(lease))
        finally:
            self.release_quietly(lease)

    def ask_kept_back(self, thread_id: str, what: str) -> None:
        """Before a change to `thread_id` made without its lease
        (``delete_thread``, ``copy_thread`` into it, ``delete_for_runs``,
        ``prune``): ask a saver that keeps
        the thread's lease after a run (``lease_linger``) to give it back
        (`handoff.py`). It then stops serving the thread from its cache
        before the change is made. A thread being run, or a holder that does
        not answer, is waited for only `LEASE_HANDOFF_GRACE_S`; the change
        then goes ahead, as it always did."""
        thread_id = thread_id_of(thread_id, what=what)
        if not self.chain.shared:
            return  # no shared tier: no other saver reads this thread
        self.chain.ensure_setup()
        tier = self.chain.lease_tier()
        wait = BusyWait(LEASE_HANDOFF_GRACE_S, time.monotonic(), first=HAND_OFF_POLL_FIRST_S)
        try:
            while True:
                current, now = tier.read_lease(thread_id)
                if current is None or current.free(now) or current.holder == self.book.holder:
                    return
                self._ask_hand_off(tier, thread_id, current.holder)
                delay = wait.next_delay(time.monotonic(), current.remaining(now))
                if delay is None:
                    return
                sleep(delay)
        except TierUnavailable:
            return  # the change itself meets the outage

    def hold(self, thread_id: str) -> Lease:
        """Take the thread's writer lease for a change made outside a run
        (archiving, a bring-back, a delete): as a run takes it (another
        saver's kept lease is asked for; a run going on raises `ThreadBusy`
        with ``on_busy="raise"``). A run of this saver, or another such
        change of it, holding the thread raises `ThreadBusy` too: taking
        the lease again would fence it out. Give it back with `unhold`."""
        thread_id = thread_id_of(thread_id, what="hold")
        marked = self.book.start_hold(thread_id)
        if not marked and self.book.held(thread_id) is not None:
            # A run of this saver that has ended is forgotten when its stream
            # writer is freed, which a reference cycle may put off until the
            # garbage collector runs: let it run once, then look again.
            gc.collect()
            marked = self.book.start_hold(thread_id)
        if not marked:
            raise ThreadBusy(
                f"thread {thread_id!r} is being run or changed by this saver; try again when that is over.",
                thread_id=thread_id,
                holder=self.book.holder,
                token=0,
                expires_in=0.0,
            )
        try:
            return self._acquire(thread_id, holding=True)
        except BaseException:
            self.book.end_hold(thread_id)
            raise

    def unhold(self, lease: Lease) -> None:
        """Give back a lease `hold` took."""
        try:
            self.release_quietly(lease)
        finally:
            self.book.end_hold(lease.thread_id)

    # -- release --------------------------------------------------------------------

    def release(self, thread_id: str) -> None:
        """Give back this saver's lease of `thread_id` (whichever run has it)."""
        held = self.book.drop(thread_id)
        self.chain.ensure_setup()
        self._ship_behind(thread_id)
        tier = self.chain.tier_named(held.tier) if held is not None else self.chain.lease_tier()
        tier.release_lease(thread_id, self.book.holder, None)

    def release_all(self) -> None:
        """Give back every lease this saver holds (on close), also those of
        ended runs not given back yet. A failure is logged: the leases then
        expire by themselves after their TTL."""
        # Write-behind runs' leases: given back if their threads have shipped
        # (`close` drains first), else left to expire, for the same reason.
        with contextlib.suppress(DurableError):
            self.hand_off_shipped()
        for lease in self.book.drop_all():
            self.release_quietly(lease)

    def release_quietly(self, lease: Lease) -> None:
        """Give `lease` back; a failure is logged (it then expires by itself)."""
        try:
            self.chain.tier_named(lease.tier).release_lease(lease.thread_id, lease.holder, lease.token)
        except DurableError as exc:
            logger.warning(
                "could not release the writer lease of thread %r (%s); it expires in at most %s s",
                lease.thread_id,
                exc,
                self.book.ttl,
            )

    # -- acquire --------------------------------------------------------------------

    def _acquire(self, thread_id: str, *, holding: bool = False) -> Lease:
        """Take the lease in the most authoritative tier that answers (the
        next one when a tier fails, unless ``write="all"``). Unless `holding`
        (`hold`'s own call), a change of this saver's that holds the thread
        outside a run (archiving it, bringing it back) is waited for first,
        up to `HOLD_WAIT_S`: taking the lease again would fence it out."""
        if not holding and self.book.holding(thread_id):
            deadline = time.monotonic() + max(HOLD_WAIT_S, self.book.wait if self.book.on_busy == "wait" else 0.0)
            while self.book.holding(thread_id):
                if time.monotonic() > deadline:
                    raise ThreadBusy(
                        f"thread {thread_id!r} is being archived or brought back by this saver for more than "
                        f"{HOLD_WAIT_S:.0f} s; try again.",
                        thread_id=thread_id,
                        holder=self.book.holder,
                        token=0,
                        expires_in=0.0,
                    )
                sleep(0.01)
        self.chain.ensure_setup()
        probed = False
        down: list[TierUnavailable] = []
        while True:
            tier = self.chain.lease_tier()
            try:
                return dataclasses.replace(self._acquire_in(tier, thread_id), tier=tier.name)
            except TierUnavailable as exc:
                if self.chain.write == "all":
                    raise
                down.append(exc.detached())  # no frames kept: see `TierUnavailable.detached`
                if self.chain.lease_tier() is tier:
                    # Nowhere else to go: try once the shared tiers their
                    # breakers skip (one may be back), then give up, naming
                    # every tier that is down.
                    others = {t.name for t in self.chain.shared} - {tier.name}
                    if probed or not self.chain.probe_skipped(others):
                        raise TierUnavailable.every(self.chain.down_errors(down)) from None
                    probed = True

    def _acquire_in(self, tier: Any, thread_id: str) -> Lease:
        book = self.book
        # With on_busy="raise", a short grace still: see LEASE_HANDOFF_GRACE_S.
        # A busy lease is asked for (below), and looked at again soon.
        limit = book.wait if book.on_busy == "wait" else LEASE_HANDOFF_GRACE_S
        wait = BusyWait(limit, time.monotonic(), first=HAND_OFF_POLL_FIRST_S)
        while True:
            current, now = tier.read_lease(thread_id)
            verdict = decide(current, book.holder, now)
            if not verdict.take and current is not None and self._gone(current.holder):
                verdict = decide(current, book.holder, now, holder_gone=True)
            if verdict.take:
                # Kept by this saver after its last run, in this tier, with
                # its renewals through (so unexpired: no change that takes no
                # lease went ahead meanwhile), and no run of it writing the
                # thread (whose writes in flight could land after the swap).
                kept = book.kept(thread_id, time.monotonic())
                carries = (
                    current is not None
                    and verdict.why == "ours"
                    and kept is not None
                    and (kept[0].tier, kept[0].token) == (tier.name, current.token)
                    and book.held(thread_id) is None
                )
                taken = tier.swap_lease(thread_id, current, book.holder, verdict.token, book.ttl)
                if taken is None:
                    continue  # it changed meanwhile: look again
                if carries and current is not None and self.chain.own is not None:
                    # Nobody else wrote the thread since: what this saver
                    # wrote under the kept lease stays trusted under the new.
                    self.chain.own.carry(thread_id, current.token, taken.token)
                if current is not None and verdict.why in ("expired", "holder gone"):
                    logger.warning(
                        "took over the writer lease of thread %r from %s (%s; token %s -> %s)",
                        thread_id,
                        current.holder,
                        verdict.why,
                        current.token,
                        taken.token,
                    )
                return taken
            assert current is not None
            # Busy. A holder that only keeps the lease after a run
            # (``lease_linger``) gives it back when asked (`handoff.py`).
            # Asked at every look: a run still going now may keep its lease
            # when it ends.
            self._ask_hand_off(tier, thread_id, current.holder)
            remaining = current.remaining(now)
            if book.on_busy == "raise" and wait_out(remaining, time.monotonic() - wait.started):
                wait.limit = max(wait.limit, KEPT_WINDOW_S + LEASE_HANDOFF_GRACE_S)
            delay = wait.next_delay(time.monotonic(), remaining)
            if delay is None:
                waited = time.monotonic() - wait.started if book.on_busy == "wait" else None
                raise thread_busy(thread_id, current, now, waited=waited)
            sleep(delay)

    def _ask_hand_off(self, tier: Any, thread_id: str, holder: str) -> None:
        """Ask `holder` to give back a lease it keeps after a run. Nothing is
        lost if the request is not heard (the holder keeps no lease, or it
        is not listening): the lease is then waited for as before."""
        try:
            tier.ask_hand_off(thread_id, holder)
        except TierUnavailable as exc:
            logger.debug("could not ask for the lease of thread %r: %s", thread_id, exc)

    def _gone(self, holder: str) -> bool:
        return holder_gone(holder, me=this_process(), started=process_started)
