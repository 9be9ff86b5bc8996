"""`get_delta_channel_history` in a few batched reads instead of one
`get_tuple` per ancestor.

LangGraph's `DeltaChannel` stores a sentinel at most checkpoints and rebuilds
its value from the nearest ancestor that stored it (the *seed*) plus the
writes of every checkpoint in between. `BaseCheckpointSaver`'s default walks
the parent chain with one `get_tuple` per ancestor; through the tiers each of
those asks every tier. Here the ancestors come a page at a time from `list`
(one query per tier per page, every record verified as always), and the
walk over them is `walk` below, the same walk as LangGraph's default.

Whenever the chain is not complete in what `list` returned (a parent that is
missing, withdrawn or in another namespace), the caller falls back to
LangGraph's default walk, so the result never depends on this shortcut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import CheckpointTuple, DeltaChannelHistory, PendingWrite

# Ancestors read per page of `list`: few first (the seed is usually near:
# LangGraph snapshots a DeltaChannel every few versions), doubling after.
FIRST_PAGE = 8
MAX_PAGE = 128
# LangGraph's checkpoint metadata: per DeltaChannel, (updates, super-steps)
# since its last snapshot, so how far back its seed is.
DELTA_COUNTERS = "counters_since_delta_snapshot"


def first_page(target: CheckpointTuple, channels: Sequence[str]) -> int:
    """How many ancestors to read first: as far back as `target`'s metadata
    says the channels' seeds are (one page instead of a doubling series),
    else `FIRST_PAGE`. A count that is off only costs another page."""
    counters = (target.metadata or {}).get(DELTA_COUNTERS)
    if not isinstance(counters, Mapping):
        return FIRST_PAGE
    steps = [c[1] for ch in channels if isinstance(c := counters.get(ch), (list, tuple)) and len(c) == 2]
    back = max((s for s in steps if isinstance(s, int) and not isinstance(s, bool)), default=0)
    return min(MAX_PAGE, max(FIRST_PAGE, back + 2))


def checkpoint_id(tup: CheckpointTuple) -> str:
    return str(tup.config["configurable"]["checkpoint_id"])


def walk(
    target: CheckpointTuple, ancestors: Mapping[str, CheckpointTuple], channels: Sequence[str]
) -> dict[str, DeltaChannelHistory] | str:
    """LangGraph's default walk (`BaseCheckpointSaver.get_delta_channel_history`)
    over `ancestors` (by checkpoint id), or the id of the first ancestor it
    needs that is not among them."""
    collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
    seeds: dict[str, Any] = {}
    remaining = set(channels)
    cursor = target.parent_config
    while cursor is not None and remaining:
        cid = str(cursor["configurable"]["checkpoint_id"])
        tup = ancestors.get(cid)
        if tup is None:
            return cid
        for write in reversed(tup.pending_writes or []):
            if write[1] in remaining:
                collected[write[1]].append(write)
        for ch in list(remaining):
            if ch in tup.checkpoint["channel_values"]:
                seeds[ch] = tup.checkpoint["channel_values"][ch]
                remaining.discard(ch)
        cursor = tup.parent_config
    result: dict[str, DeltaChannelHistory] = {}
    for ch in channels:
        entry: DeltaChannelHistory = {"writes": list(reversed(collected[ch]))}
        if ch in seeds:
            entry["seed"] = seeds[ch]
        result[ch] = entry
    return result


def same_thread(target: CheckpointTuple) -> RunnableConfig:
    """The `list` config of `target`'s thread and namespace."""
    conf = target.config["configurable"]
    return {"configurable": {"thread_id": conf["thread_id"], "checkpoint_ns": conf.get("checkpoint_ns", "")}}


def before(cid: str) -> RunnableConfig:
    return {"configurable": {"checkpoint_id": cid}}


def add_page(ancestors: dict[str, CheckpointTuple], page: Sequence[CheckpointTuple]) -> None:
    for tup in page:
        ancestors[checkpoint_id(tup)] = tup


def empty(channels: Sequence[str]) -> Mapping[str, DeltaChannelHistory]:
    """No checkpoint: nothing to replay, no seed (start empty)."""
    return {ch: {"writes": []} for ch in channels}
