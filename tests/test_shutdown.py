"""drain_on_sigterm: wherever the signal finds the main thread, the backlog
is drained and the process ends, with SIGTERM's status unless an earlier
handler owns the signal."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from langgraph_durable import ConfigError, DurableSaver
from langgraph_durable.shutdown import drain_on_sigterm

ROOT = Path(__file__).resolve().parent.parent

PRELUDE = """
import logging, signal, sys, time
from langgraph_durable import DurableSaver
from langgraph_durable.shutdown import drain_on_sigterm
from langgraph.checkpoint.base import empty_checkpoint
logging.basicConfig(level=logging.INFO, format="%(message)s")
saver = DurableSaver(sqlite=sys.argv[1])
saver.setup()
checkpoint = empty_checkpoint()
saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint, {"source": "input", "step": -1}, {})
"""


def run_worker(tmp_path: Path, body: str, *, wait: float = 30.0) -> tuple[int, str, float]:
    """Start the script, SIGTERM it once it printed 'ready'; its exit status,
    output and the seconds it took to exit."""
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", PRELUDE + body, str(tmp_path / "w.sqlite")],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        try:
            deadline = time.monotonic() + 60
            while "ready" not in log.read_text():
                assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            time.sleep(0.2)
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            status = proc.wait(timeout=wait)
            return status, log.read_text(), time.monotonic() - started
        finally:
            proc.kill()  # a no-op once it exited; a failed test leaves no worker behind
            proc.wait()


def test_a_signal_in_the_middle_of_a_saver_call_drains_and_exits(tmp_path: Path) -> None:
    """The signal comes while the main thread holds the lock a drain takes
    (as during a delete_thread, which keeps the replicator out): the drain
    must not run inside the handler, which would wait for itself forever."""
    status, out, _ = run_worker(
        tmp_path,
        """
drain_on_sigterm(saver, timeout=5)
with saver:
    with saver._runtime.replicator.exclusive():
        print("ready", flush=True)
        time.sleep(120)
""",
    )
    assert status == 128 + signal.SIGTERM, out
    assert "signal 15: the shared tiers are caught up" in out


def test_an_exit_swallowed_by_the_app_still_ends_the_process(tmp_path: Path) -> None:
    """SystemExit raised at an arbitrary instruction can be swallowed (here
    by the app's own loop; in the wild by a __del__ or a callback), or leave
    a thread the interpreter waits for forever: the process still ends with
    SIGTERM's status, `exit_grace` seconds after the drain."""
    # run_worker's wait for the exit (30 s) is a liveness bound: without
    # exit_grace the process would never end.
    status, out, _ = run_worker(
        tmp_path,
        """
drain_on_sigterm(saver, timeout=5, exit_grace=1)
print("ready", flush=True)
while True:
    try:
        time.sleep(0.05)
    except BaseException:
        pass
""",
    )
    assert status == 128 + signal.SIGTERM, out
    assert "caught up" in out and "did not exit within 1 s of the end of the drain" in out, out


def test_an_earlier_handler_keeps_the_exit(tmp_path: Path) -> None:
    """A server that owns SIGTERM (its handler was installed first) decides
    when the process ends; the drain runs meanwhile and the exit waits for it."""
    status, out, _ = run_worker(
        tmp_path,
        """
stopping = []
signal.signal(signal.SIGTERM, lambda signum, frame: stopping.append(signum))
drain_on_sigterm(saver, timeout=5, exit_grace=0)
print("ready", flush=True)
while not stopping:
    time.sleep(0.05)
time.sleep(2)  # past exit_grace: only the app ends the process
print("app stopped on its own", flush=True)
sys.exit(3)
""",
    )
    assert status == 3, out
    assert "caught up" in out and "app stopped on its own" in out and "did not exit" not in out, out


def test_drain_on_sigterm_refuses_bad_arguments_and_other_threads(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGTERM)
    with DurableSaver(sqlite=str(tmp_path / "c.sqlite")) as saver:
        with pytest.raises(ConfigError, match="seconds, 0 or more"):
            drain_on_sigterm(saver, timeout=-1)
        errors: list[BaseException] = []

        def elsewhere() -> None:
            try:
                drain_on_sigterm(saver)
            except ConfigError as exc:
                errors.append(exc)

        thread = threading.Thread(target=elsewhere)
        thread.start()
        thread.join()
        assert len(errors) == 1 and "main thread" in str(errors[0])
    assert signal.getsignal(signal.SIGTERM) is before
