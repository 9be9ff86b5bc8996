"""The circuit breaker's decisions (breaker.py), without servers or sleeping."""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from langgraph_durable.model.breaker import Breaker


class NoJitter(random.Random):
    def random(self) -> float:
        return 0.5  # the pause factor 0.8 + 0.4 * 0.5 = 1.0


def test_a_failure_opens_the_breaker_and_calls_are_refused_until_the_backoff_passed() -> None:
    b = Breaker("redis", backoff_first=1.0, backoff_max=8.0, jitter=NoJitter())
    assert b.allow(0.0) and b.state == "closed"
    assert b.failed(0.0, "refused") is True  # it just opened
    assert b.state == "open" and not b.allow(0.5) and not b.available(0.99)
    stats = b.stats(0.5)
    assert stats.retry_in_s == 0.5 and stats.failures == 1 and stats.last_error == "refused"


def test_half_open_lets_one_probe_through_and_its_success_closes() -> None:
    b = Breaker("redis", backoff_first=1.0, jitter=NoJitter())
    b.failed(0.0, "refused")
    assert b.available(1.0)  # asking does not start a probe
    assert b.allow(1.0) and b.state == "half_open"
    assert not b.allow(1.1) and not b.available(1.1)  # one probe at a time
    assert b.succeeded(1.2, 0.003) is True  # it was down: "reachable again"
    assert b.state == "closed" and b.allow(1.3)
    assert b.stats(1.3).failures == 0 and b.stats(1.3).last_latency_s == 0.003
    assert b.succeeded(1.4, 0.002) is False  # already closed


def test_failed_probes_double_the_pause_up_to_the_maximum() -> None:
    b = Breaker("postgres", backoff_first=1.0, backoff_max=4.0, jitter=NoJitter())
    now = 0.0
    pauses = []
    for _ in range(5):
        b.failed(now, "down")
        retry = b.stats(now).retry_in_s
        assert retry is not None
        pauses.append(retry)
        now += retry
        assert b.allow(now)  # the probe
    assert pauses == [1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.failed(now, "down") is False  # it was open already: no new "down" warning


def test_a_lost_probe_lets_another_through_after_the_probe_timeout() -> None:
    b = Breaker("redis", backoff_first=1.0, probe_timeout=10.0, jitter=NoJitter())
    b.failed(0.0, "down")
    assert b.allow(1.0)  # a probe that never reports (its caller was cancelled)
    assert not b.allow(5.0)
    assert b.allow(11.0)


def test_jitter_spreads_the_pause_within_twenty_percent() -> None:
    pauses = set()
    for seed in range(50):
        b = Breaker("redis", backoff_first=1.0, jitter=random.Random(seed))
        b.failed(0.0, "down")
        retry = b.stats(0.0).retry_in_s
        assert retry is not None and 0.8 <= retry <= 1.2
        pauses.add(round(retry, 3))
    assert len(pauses) > 10


def test_a_probe_that_the_tier_answers_with_an_error_still_closes_the_breaker(tmp_path: Any) -> None:
    """A half-open probe refused by the tier itself (here a real SQLite tier
    refusing a write whose lease is not held: `LeaseLost`) proves the tier
    answers: the breaker closes, instead of waiting for the probe timeout."""
    from langgraph.checkpoint.conformance.test_utils import generate_checkpoint, generate_config, generate_metadata
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    from langgraph_durable.engine.guard import GuardedTier
    from langgraph_durable.errors import LeaseLost
    from langgraph_durable.model.codec import RecordCodec
    from langgraph_durable.model.lease import Fence
    from langgraph_durable.tiers.sqlite.tier import SqliteTier

    tier = SqliteTier(str(tmp_path / "local.sqlite"))
    tier.setup()
    breaker = Breaker("sqlite", backoff_first=0.0, jitter=NoJitter())
    guarded = GuardedTier(tier, breaker, timeout=None)
    row, blobs = RecordCodec(JsonPlusSerializer()).encode_checkpoint(
        generate_config("t"), generate_checkpoint(), generate_metadata(), {}
    )
    breaker.failed(time.monotonic(), "it was down")
    with pytest.raises(LeaseLost):
        guarded.write_checkpoint(row, blobs, fence=Fence("t", "nobody", 7, 30.0))
    assert breaker.state == "closed"
    tier.close()


def test_calls_overlap_only_when_it_saves_more_than_the_thread_hand_offs_cost() -> None:
    from langgraph_durable.model.breaker import LEAD_HOP_S, THREAD_HOP_S, overlap_pays

    assert overlap_pays([None, 0.0001])  # not measured yet: overlap
    assert overlap_pays([0.0001])  # nothing to overlap with: as it comes
    loopback = [0.00003, 0.0001, 0.00015]  # SQLite, Redis, Postgres on one machine
    assert not overlap_pays(loopback)
    remote = [0.00003, 0.0008, 0.0012]  # the shared tiers a network hop away
    assert overlap_pays(remote)
    assert sum(remote) - max(remote) > THREAD_HOP_S * 2
    # A lead (the local write committed after the lease's tier answered) pays
    # only once the shorter write takes longer than `LEAD_HOP_S`.
    local_and_postgres = [0.0003, 0.0004]
    assert overlap_pays(local_and_postgres) and not overlap_pays(local_and_postgres, lead=True)
    assert overlap_pays([LEAD_HOP_S * 1.5, 0.005], lead=True)


def test_one_slow_answer_does_not_flip_the_typical_latency() -> None:
    b = Breaker("redis")
    for _ in range(10):
        b.succeeded(0.0, 0.0001)
    b.succeeded(0.0, 0.01)  # one hiccup
    assert b.latency is not None and b.latency < 0.0025
    assert b.stats(0.0).last_latency_s == 0.01  # the stats still say what the last call took
