"""Group commit for the async Postgres tier: many runs' fenced writes in one statement.

PostgresSaver pays one transaction per ``put``. With many runs on one event
loop, the fenced writes that arrive while statements are in flight
(`IN_FLIGHT`) wait for one to be answered and then go to Postgres together,
in one statement and one transaction (`sql.GROUPED`): one round trip and
one commit for all of them. Each keeps its own fence: its rows are written
only if its thread's lease still matches, and it gets its own answer
(`LeaseLost` for it alone). A write that finds room goes at once, alone, in
its usual statement: a single run waits for nobody.

If the grouped statement fails for a reason of its own (a deadlock with
another replica's statement, a row written twice in it), its writes are
sent again one by one, each in its usual statement, so that one write's
failure is never another's. A connection failure (`TierUnavailable`) is
every one's.

Async only: on the sync face every caller writes on its own thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ...model.lease import Fence
from . import sql

Row = tuple[Any, ...]
# Statements in flight at once. A write goes alone, at once, when nothing is
# in flight, or when what is in flight is one write of its own thread (one
# run's two writes of a step: LangGraph sends its pending writes and its
# checkpoint at once, and they go side by side as without grouping); else it
# waits to go with the others.
IN_FLIGHT = 2


class GroupFailed(Exception):
    """The grouped statement failed for a reason of its own, not the
    connection's: its writes are sent again, one by one."""


@dataclass
class Rows:
    """A fenced write's rows, as `sql.GROUPED` takes them (each a tuple
    starting with the thread id)."""

    blobs: list[Row] = field(default_factory=list)
    checkpoints: list[Row] = field(default_factory=list)
    writes: list[Row] = field(default_factory=list)
    upserts: list[Row] = field(default_factory=list)

    def count(self) -> int:
        return len(self.blobs) + len(self.checkpoints) + len(self.writes) + len(self.upserts)


@dataclass
class Member:
    """One fenced write waiting for its statement."""

    fence: Fence
    renew: bool
    rows: Callable[[], Rows]
    alone: Callable[[], Awaitable[bool]]  # the write in its own statement: whether its fence matched
    future: asyncio.Future[bool] | None = None
    built: Rows | None = None

    def fence_key(self) -> tuple[str, int, bool]:
        return (self.fence.holder, self.fence.token, self.fence.late)


class GroupCommit:
    """The fenced writes of one event loop to one Postgres tier (see the module)."""

    def __init__(self, run: Callable[[str, list[Any]], Awaitable[set[str]]]) -> None:
        # run(statement, params) -> the threads whose fence matched; raises as a tier call does
        self._run = run
        self._loop: asyncio.AbstractEventLoop | None = None
        self._in_flight = 0  # statements sent and not answered yet (at most `IN_FLIGHT`)
        self._alone: dict[str, int] = {}  # threads of the writes in flight alone
        self._queue: list[Member] = []
        self._task: asyncio.Task[None] | None = None
        self.statements = 0  # grouped statements sent
        self.grouped = 0  # writes they carried

    async def write(self, member: Member) -> bool:
        """Whether `member`'s fence matched (its rows were written then);
        raises what its statement raised."""
        loop = asyncio.get_running_loop()
        if self._loop is not loop:  # a tier used from another loop: a new group there
            self._loop, self._in_flight, self._queue, self._task, self._alone = loop, 0, [], None, {}
        thread_id = member.fence.thread_id
        if not self._queue and (
            self._in_flight == 0 or (self._in_flight < IN_FLIGHT and len(self._alone) == 1 and thread_id in self._alone)
        ):
            self._in_flight += 1
            self._alone[thread_id] = self._alone.get(thread_id, 0) + 1
            try:
                return await member.alone()
            finally:
                self._in_flight -= 1
                if self._alone[thread_id] == 1:
                    del self._alone[thread_id]
                else:
                    self._alone[thread_id] -= 1
                self._start()
        member.future = loop.create_future()
        self._queue.append(member)
        self._start()
        return await member.future

    async def drain(self) -> None:
        """Wait until every write handed to this group has its answer."""
        task = self._task
        if task is not None and self._loop is asyncio.get_running_loop():
            await asyncio.shield(task)

    def _start(self) -> None:
        """Send what waits, one statement after the other, if a statement
        may go now and nobody sends them already."""
        if self._queue and self._task is None and self._in_flight < IN_FLIGHT:
            assert self._loop is not None
            self._in_flight += 1
            self._task = self._loop.create_task(self._flush())

    async def _flush(self) -> None:
        batch: list[Member] = []
        try:
            while self._queue:
                batch = self._take()
                if batch:
                    await self._send(batch)
                batch = []
        finally:
            for m in batch:  # cancelled meanwhile (the loop shuts down): their writes' fate is unknown
                if m.future is not None and not m.future.done():
                    m.future.cancel()
            self._in_flight -= 1
            self._task = None
            self._start()

    def _take(self) -> list[Member]:
        """The next statement's writes, in arrival order: at most
        `sql.GROUP_MAX_WRITES` and `sql.GROUP_MAX_ROWS`; one lease per
        thread (a write of the thread under another token waits for the
        next statement). Writes whose caller gave up are dropped."""
        batch: list[Member] = []
        left: list[Member] = []
        fences: dict[str, tuple[str, int, bool]] = {}
        params = 0  # rows
        for m in self._queue:
            if m.future is None or m.future.done():
                continue
            key = fences.get(m.fence.thread_id)
            if len(batch) >= sql.GROUP_MAX_WRITES or (key is not None and key != m.fence_key()):
                left.append(m)
                continue
            if m.built is None:
                m.built = m.rows()
            size = m.built.count() + 1
            if batch and params + size > sql.GROUP_MAX_ROWS:
                left.append(m)
                continue
            batch.append(m)
            fences[m.fence.thread_id] = m.fence_key()
            params += size
        self._queue = left
        return batch

    async def _send(self, batch: list[Member]) -> None:
        if len(batch) == 1:
            await self._answer(batch[0], batch[0].alone())
            return
        statement, params = _statement(batch)
        try:
            matched = await self._run(statement, params)
        except GroupFailed:
            # The statement's own failure (a deadlock with another replica's, a
            # row twice in it): each write again, alone.
            for m in batch:
                await self._answer(m, m.alone())
            return
        except Exception as exc:
            for m in batch:
                if m.future is not None and not m.future.done():
                    m.future.set_exception(exc)
            return
        self.statements += 1
        self.grouped += len(batch)
        for m in batch:
            if m.future is not None and not m.future.done():
                m.future.set_result(m.fence.thread_id in matched)

    @staticmethod
    async def _answer(member: Member, call: Awaitable[bool]) -> None:
        try:
            result = await call
        except Exception as exc:
            if member.future is not None and not member.future.done():
                member.future.set_exception(exc)
            return
        if member.future is not None and not member.future.done():
            member.future.set_result(result)


def _statement(batch: list[Member]) -> tuple[str, list[Any]]:
    """`sql.GROUPED` and its parameters (one array per column) for `batch`:
    one fence row per thread, renewing if any of its writes renews; a
    checkpoint or an upserted write twice in the batch goes in once, the
    last one."""
    fences: dict[str, list[Any]] = {}
    blobs: list[Row] = []
    checkpoints: dict[tuple[Any, ...], Row] = {}
    writes: list[Row] = []
    upserts: dict[tuple[Any, ...], Row] = {}
    for m in batch:
        f = m.fence
        row = fences.get(f.thread_id)
        if row is None:
            fences[f.thread_id] = [f.thread_id, f.holder, f.late, f.token, f.ttl, m.renew]
        elif m.renew:
            row[5] = True
        rows = m.built if m.built is not None else m.rows()
        blobs += rows.blobs
        for c in rows.checkpoints:
            checkpoints[c[:3]] = c
        writes += rows.writes
        for w in rows.upserts:
            upserts[w[:5]] = w
    params: list[Any] = []
    for part, width in (
        (fences.values(), 6),
        (blobs, 5),
        (checkpoints.values(), 7),
        (writes, 8),
        (upserts.values(), 8),
    ):
        rows_ = list(part)
        params += [[r[i] for r in rows_] for i in range(width)]
    return sql.GROUPED, params
