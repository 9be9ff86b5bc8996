"""The write and read decisions (decisions.py), as plain functions, against
invariants that do not restate them: every tier is accounted for, a read
never moves forward in time, a write never fails for nothing, and so on.
No I/O: hypothesis explores them directly."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from langgraph_durable.errors import ConfigError, LeaseLost, TierUnavailable
from langgraph_durable.model.decisions import (
    Bad,
    Intact,
    Undecodable,
    choose_copy,
    fall_back,
    latest_attempts,
    resume_step,
    worth_probing,
    write_fails,
    write_order,
)
from langgraph_durable.model.roles import Role, Roles
from langgraph_durable.validation import reject, rewind


@dataclass(frozen=True)
class T:
    name: str
    role: Role


TIERS = [T("sqlite", Role.LOCAL), T("redis", Role.HOT), T("postgres", Role.RECORD)]
subsets = st.sets(st.sampled_from(TIERS), min_size=1).map(lambda s: Roles.of(s))
verdicts = st.one_of(
    st.none(),
    st.integers(0, 3).map(Intact),
    st.just(Bad(ValueError("checksum"))),
    st.just(Undecodable(ImportError("gone"))),
)


@given(st.lists(verdicts, min_size=1, max_size=3))
def test_choose_copy_accounts_for_every_tier_and_serves_the_farthest_intact(found: list[object]) -> None:
    copies = list(zip(TIERS, found))
    choice = choose_copy(copies)  # type: ignore[arg-type]
    intact = [t for t, v in copies if isinstance(v, Intact)]
    if intact:
        assert choice.served is not None
        tier, value = choice.served
        assert tier is intact[-1]  # the farthest: the system of record wins a tie
        assert Intact(value) == dict(copies)[tier]
    else:
        assert choice.served is None
    assert set(choice.lacking) == {t for t, v in copies if v is None}
    assert {t for t, _ in choice.bad} == {t for t, v in copies if isinstance(v, Bad)}
    assert (choice.undecodable is None) == (not any(isinstance(v, Undecodable) for _, v in copies))
    # Farthest first, so repairs and reports go the same way every time.
    order = [TIERS.index(t) for t in choice.lacking]
    assert order == sorted(order, reverse=True)


@given(subsets, st.sampled_from([None, "", "sqlite", "redis", "postgres", "gone"]))
def test_write_order_reaches_every_tier_once(roles: Roles[T], lease: str | None) -> None:
    order = write_order(roles, lease)
    reached = ([order.first] if order.first is not None else []) + list(order.rest)
    if order.journal:
        reached.append(roles.local)  # type: ignore[arg-type]
    assert sorted(t.name for t in reached) == sorted(t.name for t in roles.tiers)
    assert len(reached) == len(set(reached))
    assert order.owed() == tuple(t.name for t in order.rest)
    assert (order.first is None) == (lease is None)
    if order.first is not None and order.first.role is not Role.LOCAL:
        assert order.first.name == lease or lease not in {t.name for t in roles.tiers}


errors = st.lists(
    st.sampled_from([TierUnavailable("down", tier="redis"), LeaseLost("taken", thread_id="t"), ValueError("bad")])
)


@given(st.sampled_from(["local", "shared", "all"]), st.booleans(), errors)
def test_write_fails_only_for_a_reason(write: str, took_shared: bool, errs: list[BaseException]) -> None:
    fails = write_fails(write, took_shared=took_shared, errors=errs)  # type: ignore[arg-type]
    if not errs:
        assert not fails  # nothing refused it
    elif write == "all" or not took_shared:
        assert fails
    elif any(not isinstance(e, TierUnavailable) for e in errs):
        assert fails  # refused, not down: owing it would ship it later regardless
    else:
        assert not fails  # down tiers are owed it; a shared tier holds it
    probe = worth_probing(write, failed=bool(errs), took_shared=took_shared)  # type: ignore[arg-type]
    assert not (probe and write == "all")
    assert not (probe and took_shared)


ids = st.lists(st.one_of(st.none(), st.sampled_from(["0001", "0002", "0003"])), min_size=1, max_size=3)


@given(ids, st.booleans())
def test_latest_tries_the_newest_first_and_never_goes_forward(named: list[str | None], behind: bool) -> None:
    heads = [(TIERS[i], f"head {i}") for i in range(len(named))]
    cache = TIERS[0] if len(named) > 1 else None
    attempts = latest_attempts(heads, named, cache, heads if behind else None)
    tried = [a.checkpoint_id for a in attempts]
    assert tried == sorted(set(tried), reverse=True)
    present = {i for i in named if i}
    assert set(tried) <= present
    if present:
        assert tried[0] == max(present)
    unanimous = len(set(named)) == 1
    for a in attempts[1:]:
        assert a.heads is None
    if attempts and attempts[0].heads is not None:
        assert unanimous or (behind and cache is not None)
        assert len(attempts) == 1
    elif present:
        assert set(tried) == present  # every tier's newest is asked: none is believed over the others


@given(
    st.lists(st.booleans(), min_size=1, max_size=12),
    st.sets(st.integers(0, 11)),
    st.booleans(),
)
def test_falling_back_serves_the_requested_checkpoint_or_its_newest_usable_ancestor(
    usable: list[bool], broken_parents: set[int], raise_on_loss: bool
) -> None:
    """A chain of checkpoints 0..n-1, each the parent of the next; some are
    unusable, some have lost their parent pointer (then the tiers are asked
    for the newest older one). Following the decisions from the newest ends
    at the newest usable one, or raises: never a newer one, never a loop."""
    cids = [f"{i:04d}" for i in range(len(usable))]
    current: str | None = cids[-1]
    visited = []
    while current is not None:
        i = cids.index(current)
        visited.append(current)
        if usable[i]:
            break
        parent = None if i in broken_parents or i == 0 else cids[i - 1]
        plan = fall_back(current, parent, raise_on_loss=raise_on_loss, missing=False, keep=False)
        if raise_on_loss:
            assert plan.raise_corrupt
            current = None
            break
        assert plan.withdraw and not plan.raise_corrupt
        assert plan.next is None or plan.next < current
        older = cids[i - 1] if i else None  # what the tiers list before it
        current = older if plan.ask_older else plan.next
    assert visited == sorted(visited, reverse=True)
    assert len(visited) == len(set(visited))
    newest_usable = next((c for c, u in zip(reversed(cids), reversed(usable)) if u), None)
    if current is not None:
        assert current == newest_usable
    else:
        assert raise_on_loss or newest_usable is None


@pytest.mark.parametrize("missing, keep", [(True, False), (False, True), (True, True)])
def test_a_missing_or_kept_checkpoint_is_never_withdrawn(missing: bool, keep: bool) -> None:
    plan = fall_back("0002", "0001", raise_on_loss=False, missing=missing, keep=keep)
    assert not plan.withdraw and plan.next == "0001"
    # A parent pointer that does not point back in time is not followed.
    assert fall_back("0002", "0003", raise_on_loss=False, missing=missing, keep=keep).ask_older
    # Missing everywhere (named by a parent pointer) is passed even when raising.
    assert fall_back("0002", "0001", raise_on_loss=True, missing=missing, keep=keep).raise_corrupt is (not missing)


@given(
    st.sampled_from(["0001", "0002", "0003"]),
    st.one_of(st.none(), st.sampled_from(["0001", "0002", "0003"])),
    st.one_of(
        st.none(),
        st.builds(reject, st.just("gone")),
        st.builds(rewind, st.just("stale"), to=st.one_of(st.none(), st.sampled_from(["0001", "0002", "0003"]))),
    ),
)
def test_a_resume_goes_back_in_time_or_nowhere(candidate: str, parent: str | None, decision: object) -> None:
    step = resume_step(candidate, parent, decision, "v")
    if decision is None:
        assert step.kind == "resume"
    elif step.kind == "rewind":
        assert step.target is not None and step.target < candidate
    else:
        assert step.kind == "reject" and step.reason


def test_a_validator_returning_something_else_is_a_configuration_error() -> None:
    with pytest.raises(ConfigError, match="return None, rewind"):
        resume_step("0002", "0001", True, "my_validator")
