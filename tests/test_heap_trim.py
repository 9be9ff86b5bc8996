"""A saver's writes give the memory the process freed back to the system
now and then (`engine.heap`): at most one trim per `TRIM_EVERY_S`, on the
deferred worker thread, where the C library has ``malloc_trim``."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from langgraph_durable import DurableSaver
from langgraph_durable.engine import heap
from langgraph_durable.engine.concurrency import ensure_deferred_worker, wait_deferred
from tests import lease_worker
from tests.conftest import unavailable


@pytest.fixture
def trims(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The threads the real ``malloc_trim`` ran on (counted around it), with
    the rate limit starting afresh."""
    ran: list[str] = []
    real = heap._trim
    if real is None:
        unavailable("this C library has no malloc_trim (not glibc)")

    def trim(pad: int) -> object:
        ran.append(threading.current_thread().name)
        return real(pad)

    monkeypatch.setattr(heap, "_trim", trim)
    monkeypatch.setattr(heap, "_next", 0.0)
    return ran


def test_linux_has_a_trim() -> None:
    """Where CI runs (Linux, glibc) the trim is there."""
    if not sys.platform.startswith("linux"):
        unavailable("glibc's malloc_trim is Linux's")
    assert heap.available()


def test_a_trim_runs_at_most_once_per_period_off_the_callers_thread(trims: list[str]) -> None:
    ensure_deferred_worker()
    assert heap.now_and_then(1000.0)
    assert not heap.now_and_then(1000.0 + heap.TRIM_EVERY_S / 2)
    assert wait_deferred(10)
    assert trims == ["langgraph-durable-deferred"]
    assert heap.now_and_then(1000.0 + heap.TRIM_EVERY_S)
    assert wait_deferred(10)
    assert len(trims) == 2


def test_a_savers_writes_ask_for_trims(tmp_path: Path, trims: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(heap, "TRIM_EVERY_S", 0.0)  # every write may ask
    config: dict[str, Any] = {"configurable": {"thread_id": "trimmed"}}
    with DurableSaver(sqlite=str(tmp_path / "a.sqlite")) as saver:
        graph = lease_worker.counter().compile(checkpointer=saver)
        for _ in range(3):
            graph.invoke({"hits": ["x"]}, config)
            time.sleep(0.001)
        assert wait_deferred(10)
        assert graph.get_state(config).values["count"] == 3
    assert len(trims) >= 3 and set(trims) == {"langgraph-durable-deferred"}
