"""Resume validation: the decision a run's first read leads to.

Before a graph resumes a thread, unconfirmed non-resumable actions reject
the run, and the validators decide: resume, rewind to an earlier checkpoint
(resumed from a fresh fork of it), or reject with a reason. Decisions are
plain values (`validation.py`), and what each means is decided in
`decisions.resume_step`; this room reads, forks and reports.

This file is the async source: ``resume.py`` is generated from it by
``tools/async_to_sync.py``; edit this one and regenerate.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, cast

from langgraph.checkpoint.base import CheckpointMetadata, CheckpointTuple, copy_checkpoint
from langgraph.checkpoint.base.id import uuid6

from ..errors import ResumeRejected
from ..ledger import unconfirmed_message
from ..model.decisions import resume_step
from ..model.pins import pins_of, without_pins
from ..validation import Reject, ValidationHook, ValidationOutcome, make_context, validator_name
from .concurrency import amaybe_await, refuse_awaitable

logger = logging.getLogger("langgraph_durable")


class AsyncResumeGate:
    """Validates one resume, given how to read the ledger, read a checkpoint
    and write the fork a rewind resumes from."""

    def __init__(self, ledger: Callable[..., Any], get: Callable[..., Any], put: Callable[..., Any]) -> None:
        """`ledger(thread_id)`, `get(config)` and `put(config, checkpoint,
        metadata, new_versions)`: the chain's own (awaited in the async face)."""
        self.ledger = ledger
        self.get = get
        self.put = put

    async def validate(
        self, tup: CheckpointTuple, validators: Sequence[Any], hook: ValidationHook | None
    ) -> CheckpointTuple:
        """The checkpoint a run may resume from, given `tup`, the one it asked
        for: `tup` itself, an earlier one (rewind), or `ResumeRejected`."""
        configurable = tup.config["configurable"]
        thread_id, ns = str(configurable["thread_id"]), configurable.get("checkpoint_ns", "") or ""
        requested = tup.checkpoint["id"]
        decisions: list[tuple[str, Any]] = []

        async def outcome(resumed_from: str | None) -> None:
            if hook is None:
                return
            try:
                done = hook(ValidationOutcome(thread_id, requested, resumed_from, tuple(decisions)))
                if True:  # ASYNC
                    await amaybe_await(done)  # an async hook is awaited
                else:
                    refuse_awaitable(done)  # the sync face cannot: it says why (logged)
            except Exception:  # a hook never breaks a run
                logger.exception("on_validation hook failed")

        entries = await self.ledger(thread_id)
        unconfirmed = sorted(k for k, e in without_pins(entries).items() if e.escalated())
        pins = pins_of(thread_id, entries)
        if unconfirmed:
            decisions.append(("unconfirmed_actions", Reject(unconfirmed_message(thread_id, unconfirmed))))
            await outcome(None)
            raise ResumeRejected(
                unconfirmed_message(thread_id, unconfirmed),
                reason="unconfirmed non-resumable action",
                checkpoint_id=requested,
                checkpoint=tup,
                validator="unconfirmed_actions",
                actions=unconfirmed,
            )
        candidate = tup
        while True:
            context = make_context(candidate, pins=pins)
            decision: Any = None
            name = ""
            for v in validators:
                name = validator_name(v)
                decision = v(context)
                if True:  # ASYNC
                    decision = await amaybe_await(decision)  # an async validator is awaited
                else:
                    refuse_awaitable(decision)  # the sync face cannot: it says so
                decisions.append((name, decision))
                if decision is not None:
                    break
            step = resume_step(candidate.checkpoint["id"], _parent_id(candidate), decision, name)
            if step.kind == "resume":
                if candidate is not tup:
                    candidate = await self._fork(candidate, requested)
                await outcome(candidate.checkpoint["id"])
                return candidate
            reason = step.reason
            if step.kind == "rewind":
                previous = await self.get(
                    {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": step.target}}
                )
                if previous is not None:
                    logger.info("validator %s rewinds thread %r: %s", name, thread_id, step.reason)
                    candidate = previous
                    continue
                reason = f"{step.reason}; and no earlier checkpoint to rewind to"
            await outcome(None)
            raise ResumeRejected(
                f"resuming thread {thread_id!r} from checkpoint {candidate.checkpoint['id']} was rejected by "
                f"{name}: {reason}",
                reason=reason,
                checkpoint_id=candidate.checkpoint["id"],
                checkpoint=candidate,
                validator=name,
            )

    async def _fork(self, target: CheckpointTuple, rewound_from: str) -> CheckpointTuple:
        """A rewind resumes from a fresh fork of `target`: the same state, no
        pending writes, so the tasks that ran on it run again in the world as
        it is now. The abandoned branch stays in the history."""
        configurable = target.config["configurable"]
        checkpoint = copy_checkpoint(target.checkpoint)
        checkpoint["id"] = str(uuid6())
        checkpoint["ts"] = datetime.now(UTC).isoformat()
        metadata = cast(CheckpointMetadata, {**target.metadata, "source": "fork", "rewound_from": rewound_from})
        stored = await self.put(dict(target.config), checkpoint, metadata, {})
        logger.warning(
            "thread %r rewound from %s to %s (resuming from fork %s)",
            configurable["thread_id"],
            rewound_from,
            target.checkpoint["id"],
            checkpoint["id"],
        )
        return CheckpointTuple(stored, checkpoint, metadata, target.config, [])


def _parent_id(tup: CheckpointTuple) -> str | None:
    return tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config is not None else None
