"""The crash harness: real graphs in child processes, killed with SIGKILL at
random points, resumed in fresh processes, checked against an uncrashed run.

One *run* is one graph thread driven to completion through any number of
worker processes (`tests.crash_worker`). Before each start the harness
decides, with a seeded `random.Random`, whether and how to kill it:

- ``event``: the worker SIGKILLs itself right after its N-th trace event,
  i.e. exactly before/after a tier write (in the middle of a put, between
  the local and shared copies), inside a node, before/after a side effect,
  between super-steps;
- ``timer``: the harness SIGKILLs it a random delay after it began the run.

The worker drives the graph through the face `Settings.api` names
(``graph.invoke`` on the sync face, ``graph.ainvoke`` on the async one) and
writes a ``started`` line when it begins the run. Only a kill after that
line counts: one that lands earlier (an event kill numbered into the
imports, opening the saver or the first read) is retried, and reported as
``early_kills``. `crash_test` fails unless the counted kills reach its
target before its time limit.

A worker that exits 3 reports unconfirmed actions (`ResumeRejected`); the
harness then acts as the operator: an action whose side effect is in the
effects file is resolved ``done=True`` with the result it would have
returned, any other ``done=False``. It checks, per run:

- the final state (as returned by the worker and as stored) equals the
  uncrashed reference;
- every acknowledged checkpoint (a ``put`` that returned) is still readable
  by id from *every* tier, and every acknowledged ``put_writes`` of an
  acknowledged checkpoint is still among its pending writes;
- every action's side effect happened exactly once (never twice, never
  skipped), and the ledger ends with every action confirmed;
- every escalation named actions whose intent had no confirmation, and no
  run finished while an unconfirmed action was left unescalated.

Two things are allowed and counted, not failed: a ledger write a worker had
in flight when it died may be applied by the server after the harness looked
(``late_ledger_writes``), and when ``ainvoke`` rejects one task, its sibling
tasks are cancelled and may leave intents of their own
(``interrupted_actions``); both are then escalated and resolved as usual.

Run many kills from the command line::

    python -m tests.crash_harness --kills 5000 --tiers all --durability all

or ``LANGGRAPH_DURABLE_CRASH_KILLS=5000 pytest tests/test_crash_harness.py``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import select
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from langgraph_durable import DurableSaver
from tests.flat_options import durable_options

from . import crash_worker as worker

REPO = Path(__file__).resolve().parent.parent
CONFIGS = ["sqlite", "redis", "postgres", "sqlite+redis", "sqlite+postgres", "redis+postgres", "sqlite+redis+postgres"]
DURABILITIES = ["sync", "async", "exit"]
KILLED = -signal.SIGKILL
ATTEMPT_TIMEOUT_S = 90.0
START_POLL_S = 0.005  # how often the harness looks for a worker's started line


def clean_env() -> dict[str, str]:
    """The environment of a worker: nothing from LANGGRAPH_DURABLE_* leaks in."""
    return {k: v for k, v in os.environ.items() if not k.startswith("LANGGRAPH_DURABLE_")}


# -- starting and killing workers --------------------------------------------------------


class Handle(Protocol):
    pid: int

    def wait(self, timeout: float | None) -> int | None: ...
    def kill(self) -> None: ...


class Spawner(Protocol):
    mode: str

    def start(self, argv: list[str], stdout: Path, stderr: Path) -> Handle: ...
    def close(self) -> None: ...


class _ExecHandle:
    def __init__(self, proc: subprocess.Popen[bytes], files: list[Any]) -> None:
        self.proc, self.pid, self._files = proc, proc.pid, files

    def wait(self, timeout: float | None) -> int | None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        for f in self._files:
            f.close()
        return code

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)  # a no-op once it was reaped


class ExecSpawner:
    """Each worker is ``python -m tests.crash_worker ...``: the real program,
    paying the full interpreter start and imports."""

    mode = "exec"

    def start(self, argv: list[str], stdout: Path, stderr: Path) -> Handle:
        out, err = open(stdout, "wb"), open(stderr, "wb")  # noqa: SIM115  # closed by the handle
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.crash_worker", *argv],
            cwd=REPO,
            env=clean_env(),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
        )
        return _ExecHandle(proc, [out, err])

    def close(self) -> None:
        pass


class _ForkHandle:
    def __init__(self, server: ForkServer, pid: int) -> None:
        self.server, self.pid = server, pid
        self.code: int | None = None

    def wait(self, timeout: float | None) -> int | None:
        if self.code is None:
            msg = self.server._read(timeout)
            if msg is not None:
                assert msg.get("exit") == self.pid, msg
                self.code = int(msg["code"])
                self.server._busy = False
        return self.code

    def kill(self) -> None:
        if self.code is None:
            self.server._send({"op": "kill"})  # the server kills it before reaping it: no pid race


class ForkServer:
    """Workers forked from ``python -m tests.crash_worker --serve``, which has
    imported everything once. Each worker is still a new process (new pid,
    its own saver, connections and threads); only the imports are shared."""

    mode = "fork"

    def __init__(self, log: Path) -> None:
        self._log = open(log, "ab")  # noqa: SIM115  # closed by close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.crash_worker", "--serve"],
            cwd=REPO,
            env=clean_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
        )
        self._buf = b""
        self._busy = False
        ready = self._read(120)
        if not ready or "ready" not in ready:
            raise RuntimeError(f"the fork server did not start; see {log}")

    def _send(self, record: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps(record) + "\n").encode())
        self.proc.stdin.flush()

    def _read(self, timeout: float | None) -> dict[str, Any] | None:
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                return None
            data = os.read(fd, 65536)
            if not data:
                raise RuntimeError(f"the fork server exited (code {self.proc.poll()})")
            self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def start(self, argv: list[str], stdout: Path, stderr: Path) -> Handle:
        assert not self._busy, "one worker at a time"
        self._send({"op": "run", "argv": argv, "stdout": str(stdout), "stderr": str(stderr)})
        msg = self._read(30)
        if not msg or "started" not in msg:
            raise RuntimeError(f"the fork server did not start a worker: {msg}")
        self._busy = True
        return _ForkHandle(self, int(msg["started"]))

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None and not pipe.closed:
                pipe.close()
        self._log.close()


def make_spawner(mode: str, workdir: Path) -> Spawner:
    if mode == "exec":
        return ExecSpawner()
    if mode == "fork":
        return ForkServer(workdir / "fork-server.log")
    raise ValueError(f"spawn mode must be fork or exec, not {mode!r}")


# -- storage --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tiers:
    """Where one configuration's records live (shared by all its runs)."""

    name: str  # "sqlite+redis"
    sqlite: str | None
    redis: str | None
    redis_prefix: str
    postgres: str | None
    archive: str | None = None  # s3://BUCKET/PREFIX: the workers ship to it
    archive_env: tuple[str, ...] = ()  # its AWS_* variables, NAME=VALUE

    def argv(self) -> list[str]:
        out = ["--sqlite", self.sqlite or ""]
        if self.redis:
            out += ["--redis", self.redis, "--redis-key-prefix", self.redis_prefix]
        if self.postgres:
            out += ["--postgres", self.postgres]
        if self.archive:
            out += ["--archive", self.archive]
            for item in self.archive_env:
                out += ["--archive-env", item]
        return out

    def names(self) -> list[str]:
        return self.name.split("+")

    def saver(self, *only: str) -> DurableSaver:
        """A saver on these tiers, or on `only` some of them. A saver on one
        tier neither replays the local journal nor repairs other tiers, so
        observing with it leaves the workers' recovery work to the workers."""
        use = set(only or self.names())
        options: dict[str, Any] = {
            "sqlite": self.sqlite if "sqlite" in use else None,
            "redis": self.redis if "redis" in use else None,
            "postgres": self.postgres if "postgres" in use else None,
        }
        if options["redis"]:
            options["redis_key_prefix"] = self.redis_prefix
        if self.names()[-1] not in use and "sqlite" not in use:
            # A shared tier alone cannot reach the store's own key, which the
            # system of record keeps: give it that key (the workers run with
            # the default, sealing with it).
            options["signing_key"] = self.store_key()
        return DurableSaver(**durable_options(options))

    def store_key(self) -> bytes:
        """The key the store seals its records with (created by the first
        saver that sets the store up), read from the system of record alone."""
        with self.authority() as far:
            far.setup()
            return far._codec.key

    def authority(self) -> DurableSaver:
        """A saver on the farthest tier only: what every full saver reads the
        latest checkpoint and the ledger from."""
        return self.saver(self.names()[-1])


# -- figures --------------------------------------------------------------------------------


@dataclass
class Figures:
    runs: int = 0
    attempts: int = 0
    kills: int = 0
    resumes: int = 0
    escalations: int = 0
    resolved_done: int = 0
    resolved_not_done: int = 0
    acked_checkpoints: int = 0
    acked_writes: int = 0
    lost_checkpoints: int = 0
    lost_writes: int = 0
    repeated: int = 0
    missing_effects: int = 0
    wrong_states: int = 0
    unescalated: int = 0
    bad_escalations: int = 0
    worker_errors: int = 0
    empty_rejections: int = 0  # ResumeRejected from inside a node with .actions == []
    late_ledger_writes: int = 0  # an intent a dead worker had in flight, applied by the server afterwards
    interrupted_actions: int = 0  # intents left by sibling tasks cancelled when a task was rejected
    corruptions: int = 0  # bad copies met by the harness's reads (informative)
    early_kills: int = 0  # kills that landed before the worker began the run: retried, not counted in `kills`
    kills_at: Counter[str] = field(default_factory=Counter)
    kills_by: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def add(self, other: Figures) -> None:
        for name, value in vars(other).items():
            mine = getattr(self, name)
            if isinstance(value, Counter):
                mine.update(value)
            else:
                setattr(self, name, mine + value)

    def failures(self) -> dict[str, int]:
        names = (
            "lost_checkpoints",
            "lost_writes",
            "repeated",
            "missing_effects",
            "wrong_states",
            "unescalated",
            "bad_escalations",
            "worker_errors",
        )
        return {n: getattr(self, n) for n in names if getattr(self, n)}

    def summary(self) -> str:
        where = ", ".join(f"{k} {v}" for k, v in sorted(self.kills_at.items(), key=lambda kv: -kv[1]))
        how = "/".join(f"{self.kills_by[k]} {k}" for k in ("event", "timer"))
        line = (
            f"kills={self.kills} ({how}) resumes={self.resumes} escalations={self.escalations} "
            f"(resolved done {self.resolved_done}, not done {self.resolved_not_done}) "
            f"acked={self.acked_checkpoints} checkpoints/{self.acked_writes} writes "
            f"lost={self.lost_checkpoints} lost_writes={self.lost_writes} repeated={self.repeated} "
            f"missing={self.missing_effects} wrong_states={self.wrong_states}"
        )
        for name in ("unescalated", "bad_escalations", "worker_errors"):
            if getattr(self, name):
                line += f" {name}={getattr(self, name)}"
        notes = [
            f"{name}={getattr(self, name)}"
            for name in ("early_kills", "empty_rejections", "late_ledger_writes", "interrupted_actions", "corruptions")
            if getattr(self, name)
        ]
        line += f" | runs={self.runs} {self.seconds:.1f}s"
        if notes:
            line += " | " + " ".join(notes)
        return line + f" | kills at: {where or '-'}"


# -- where a kill landed ------------------------------------------------------------------


def _trace_lines(trace: Path) -> Iterator[tuple[str, str, str]]:
    """(thread, kind, name) of each event in a worker's trace."""
    if not trace.exists():
        return
    for line in trace.read_text().splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5:  # else a line torn by the kill
            yield parts[2], parts[3], parts[4]


def _events(trace: Path) -> list[str]:
    return [name for _, _, name in _trace_lines(trace)]


def _open_spans(trace: Path) -> tuple[list[str], bool, bool, str]:
    """Spans still open in a worker's trace (all threads), whether the graph
    run had started and ended, and the last event."""
    open_spans: dict[str, list[str]] = {}
    started = ended = False
    last = ""
    for tid, kind, name in _trace_lines(trace):
        last = name
        stack = open_spans.setdefault(tid, [])
        if kind == "B":
            stack.append(name)
            started = started or name == "invoke"
        elif kind == "E":
            if name in stack:
                stack.remove(name)
            ended = ended or name == "invoke"
    return [n for stack in open_spans.values() for n in stack], started, ended, last


def inflight_ledger_writes(trace: Path, tiers: Sequence[str]) -> set[str]:
    """Actions whose ledger write was in flight when the worker died: the
    server may apply it after the death (a Postgres commit or a Redis command
    already sent), i.e. after the harness looked at the ledger; or it reached
    some tiers and not others (the worker died between them). Reads take the
    union of the tiers' ledgers (an entry never moves backwards), so such an
    intent is seen, and rightly escalated, although the harness's observer
    (the authoritative tier alone) may not hold it."""
    names, _, _, _ = _open_spans(trace)
    out = {n.split(":", 3)[3] for n in names if n.startswith("tier:") and n.split(":", 3)[2:3] == ["write_ledger"]}
    done: dict[str, dict[str, int]] = {}  # action -> tier -> ledger writes completed there
    for _, kind, name in _trace_lines(trace):
        parts = name.split(":", 3)
        if kind == "E" and parts[0] == "tier" and parts[2:3] == ["write_ledger"]:
            per_tier = done.setdefault(parts[3], {})
            per_tier[parts[1]] = per_tier.get(parts[1], 0) + 1
    for key, per_tier in done.items():
        if any(per_tier.get(t, 0) < max(per_tier.values()) for t in tiers):
            out.add(key)
    return out


def ledger_writes(trace: Path) -> set[str]:
    """Actions whose ledger entry the worker wrote (began to write)."""
    out = set()
    for name in _events(trace):
        parts = name.split(":", 3)
        if parts[0] == "tier" and parts[2:3] == ["write_ledger"]:
            out.add(parts[3])
    return out


def kill_location(trace: Path) -> str:
    """Classify the moment of a kill from the spans open in the worker's trace."""
    names, started, ended, last = _open_spans(trace)

    def has(prefix: str, part: str = "") -> str | None:
        return next((n for n in names if n.startswith(prefix) and part in n), None)

    if not started:
        return "startup"
    if ended:
        return "shutdown"
    if (t := has("tier:", ":write_checkpoint")) or ((t := has("tier:", ":journal_acked")) and has("put")):
        return f"put ({t.split(':')[1]} {t.split(':')[2]})"
    if has("put") and not has("put_writes"):
        return "put (outside tier writes)"
    if t := has("tier:", ":write_writes"):
        return f"put_writes ({t.split(':')[1]})"
    if has("put_writes"):
        return "put_writes (outside tier writes)"
    if t := has("tier:", ":write_ledger"):
        return f"ledger write ({t.split(':')[1]})"
    if has("effect:"):
        return "side effect"
    if has("node:"):
        if last.startswith("effect:") or (last.startswith("tier:") and ":write_ledger" in last):
            return "node (between intent, effect and confirmation)"
        return "node"
    return "between super-steps"


# -- one run ------------------------------------------------------------------------------


@dataclass
class Reference:
    final: dict[str, Any]
    action_keys: list[str]
    events: int
    seconds: float
    acks: int


@dataclass
class Settings:
    steps: int = 3
    width: int = 3
    max_kills_per_run: int = 6
    event_kill_share: float = 0.6
    sleep_scale: float = 1.0
    api: str = "sync"
    write: str = "shared"  # the saver's write mode (WriteMode)
    lease_linger: float = 0.0  # seconds a run's lease is kept after it ends


class Problem(AssertionError):
    pass


def _read_json_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _last_json(path: Path) -> dict[str, Any]:
    lines = _read_json_lines(path)
    return lines[-1] if lines else {}


def _effects(path: Path) -> Counter[str]:
    return Counter(path.read_text().split()) if path.exists() else Counter()


def _run_started(path: Path) -> dict[str, Any] | None:
    """The worker's ``{"started": ...}`` line (see `tests.crash_worker`): it
    had begun the run. Read after the worker died, so nothing is racing it."""
    return next((r for r in _read_json_lines(path) if "started" in r), None)


def _await_start(handle: Handle, out: Path, timeout: float) -> int | None:
    """Wait until the worker has written its ``started`` line (None) or has
    exited first (its exit code; None too if it did neither in `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _run_started(out) is not None:
            return None
        code = handle.wait(START_POLL_S)
        if code is not None:
            return code
    return None


def _tail(path: Path, n: int = 3000) -> str:
    return path.read_text(errors="replace")[-n:] if path.exists() else ""


class Harness:
    """Runs crash runs for one tier configuration and durability mode."""

    def __init__(
        self,
        spawner: Spawner,
        tiers: Tiers,
        durability: str,
        workdir: Path,
        *,
        seed: str,
        settings: Settings | None = None,
        log: Any = None,
    ) -> None:
        self.spawner = spawner
        self.tiers = tiers
        self.durability = durability
        self.workdir = workdir
        self.seed = seed
        self.settings = settings or Settings()
        self.log = log
        self.reference: Reference | None = None
        self.expected_final: dict[str, Any] | None = None
        self.notes: list[str] = []

    def _say(self, msg: str) -> None:
        if self.log is not None:
            print(msg, file=self.log, flush=True)

    def worker_argv(self, thread: str, files: dict[str, Path], kill_at_event: int, seed: str) -> list[str]:
        s = self.settings
        return [
            "--thread",
            thread,
            *self.tiers.argv(),
            "--durability",
            self.durability,
            "--effects",
            str(files["effects"]),
            "--acks",
            str(files["acks"]),
            "--steps",
            str(s.steps),
            "--width",
            str(s.width),
            "--trace",
            str(files["trace"]),
            "--kill-at-event",
            str(kill_at_event),
            "--seed",
            seed,
            "--sleep-scale",
            str(s.sleep_scale),
            "--api",
            s.api,
            "--write",
            s.write,
            "--lease-linger",
            str(s.lease_linger),
        ]

    # -- the uncrashed reference ------------------------------------------------------

    def in_process_reference(self) -> dict[str, Any]:
        """The final state of an uncrashed run in this process, on a fresh
        local-only DurableSaver, without sleeps."""
        s = self.settings
        folder = self.workdir / f"in-process-reference-{uuid.uuid4().hex[:8]}"
        folder.mkdir(parents=True)
        effects = folder / "effects"
        with DurableSaver(sqlite=str(folder / "ref.sqlite")) as saver:
            graph = worker.build_graph(effects=str(effects), steps=s.steps, width=s.width, sleep_scale=0).compile(
                checkpointer=saver
            )
            config: Any = {
                "configurable": {"thread_id": "reference"},
                "recursion_limit": worker.recursion_limit(s.steps),
            }
            durability: Any = self.durability
            final = graph.invoke(worker.initial_state(), config, durability=durability)
        assert sorted(_effects(effects)) == sorted(worker.expected_action_keys(s.steps, s.width))
        return json.loads(json.dumps(final))

    def calibrate(self) -> Reference:
        """An uncrashed run by a worker on the real tiers: the reference final
        state, and how many events / seconds a run takes (to aim kills)."""
        self.expected_final = self.in_process_reference()
        thread = f"ref-{uuid.uuid4().hex[:10]}"
        folder = self.workdir / thread
        folder.mkdir(parents=True)
        files = {n: folder / n for n in ("effects", "acks", "trace", "out", "err")}
        handle = self.spawner.start(self.worker_argv(thread, files, 0, f"{self.seed}:ref"), files["out"], files["err"])
        code = _await_start(handle, files["out"], ATTEMPT_TIMEOUT_S)
        t0 = time.monotonic()  # timer kills are aimed from the start of the run, as measured here
        if code is None:
            code = handle.wait(ATTEMPT_TIMEOUT_S)
        seconds = time.monotonic() - t0
        if code is None:
            handle.kill()
            handle.wait(None)
        if code != worker.EXIT_DONE:
            raise Problem(f"the uncrashed reference run failed (exit {code}):\n{_tail(files['err'])}")
        started = _run_started(files["out"]) or {}
        if started.get("api") != self.settings.api:
            raise Problem(f"the uncrashed run drove the {started.get('api')} face, not {self.settings.api}")
        final = _last_json(files["out"])["final"]
        if final != self.expected_final:
            raise Problem(f"uncrashed run on {self.tiers.name} differs from the in-process one: {final}")
        with self.tiers.authority() as saver:
            keys = sorted(saver.actions(thread))
        expected_keys = sorted(worker.expected_action_keys(self.settings.steps, self.settings.width))
        if keys != expected_keys or sorted(_effects(files["effects"]).elements()) != expected_keys:
            raise Problem(f"uncrashed run: ledger {keys}, effects {_effects(files['effects'])}")
        events = len(files["trace"].read_text().splitlines())
        acks = sum(1 for a in _read_json_lines(files["acks"]) if a["kind"] == "checkpoint")
        self.reference = Reference(final, keys, events, seconds, acks)
        return self.reference

    # -- crash runs ----------------------------------------------------------------------

    def _plan_kill(self, rng: random.Random, progress: float) -> tuple[str, float]:
        ref = self.reference
        assert ref is not None
        remaining = max(0.15, 1.0 - progress)
        if rng.random() < self.settings.event_kill_share:
            return "event", float(rng.randint(1, max(2, math.ceil(ref.events * remaining))))
        return "timer", rng.uniform(0.0, ref.seconds * remaining)

    def run(self, index: int, *, kill_budget: int, deadline: float) -> Figures:
        """Drive one new thread to completion through killed workers."""
        if self.reference is None:
            self.calibrate()
        ref = self.reference
        assert ref is not None and self.expected_final is not None
        fig = Figures(runs=1)
        t0 = time.monotonic()
        run_seed = f"{self.seed}/{self.tiers.name}/{self.durability}/{index}"
        rng = random.Random(run_seed)
        thread = f"crash-{index}-{uuid.uuid4().hex[:8]}"
        folder = self.workdir / thread
        folder.mkdir(parents=True)
        effects, acks = folder / "effects", folder / "acks"
        schedule: list[str] = []
        problems: list[str] = []
        observer = self.tiers.authority()
        inflight: set[str] = set()  # ledger writes in flight at a kill, so far
        max_kills = min(self.settings.max_kills_per_run, kill_budget)
        attempt = -1
        try:
            while True:
                attempt += 1
                # Every counted kill, escalation and action may cost a resume;
                # kills before the run began cost one each, and stop at the deadline.
                if attempt >= 4 * max_kills + 4 * len(ref.action_keys) + 4 + fig.early_kills:
                    fig.worker_errors += 1
                    problems.append("the run never finished (too many attempts)")
                    break
                fig.attempts += 1
                if attempt:
                    fig.resumes += 1
                intents_before = {k for k, e in observer.actions(thread).items() if e.escalated()}
                plan: tuple[str, float] | None = None
                if fig.kills < max_kills and time.monotonic() < deadline:
                    acked = sum(1 for a in _read_json_lines(acks) if a["kind"] == "checkpoint")
                    plan = self._plan_kill(rng, acked / max(1, ref.acks) if self.durability != "exit" else 0.0)
                files = {
                    "effects": effects,
                    "acks": acks,
                    "trace": folder / f"trace.{attempt}",
                    "out": folder / f"out.{attempt}",
                    "err": folder / f"err.{attempt}",
                }
                kill_at = int(plan[1]) if plan and plan[0] == "event" else 0
                argv = self.worker_argv(thread, files, kill_at, f"{run_seed}/{attempt}")
                handle = self.spawner.start(argv, files["out"], files["err"])
                if plan and plan[0] == "timer":
                    # The delay counts from the worker's started line, not
                    # its spawn: the startup (longer on the async face) would
                    # take many of the kills, and those do not count.
                    code = _await_start(handle, files["out"], ATTEMPT_TIMEOUT_S)
                    if code is None:
                        code = handle.wait(plan[1])
                    if code is None:
                        handle.kill()
                code = handle.wait(ATTEMPT_TIMEOUT_S)
                if code is None:
                    handle.kill()
                    handle.wait(None)
                    problems.append(f"attempt {attempt}: the worker hung for {ATTEMPT_TIMEOUT_S}s; argv={argv}")
                    fig.worker_errors += 1
                    break
                label = f"{plan[0]}@{plan[1]:.3g}" if plan else "no kill"
                started = _run_started(files["out"])
                if started is not None and started.get("api") != self.settings.api:
                    fig.worker_errors += 1
                    problems.append(
                        f"attempt {attempt}: the worker drove the {started.get('api')} face, not {self.settings.api}"
                    )
                    break
                if code == KILLED and started is None:
                    assert plan is not None
                    # It died in its imports, opening the saver or reading the
                    # thread: no run was under way, so it is no kill of a run.
                    # Whatever it had begun to write may still land (a journal
                    # replayed at open), so its in-flight ledger writes count.
                    fig.early_kills += 1
                    inflight |= inflight_ledger_writes(files["trace"], self.tiers.names())
                    schedule.append(f"{label} -> killed before the run started (not counted)")
                    continue
                if code == KILLED:
                    assert plan is not None
                    fig.kills += 1
                    fig.kills_by[plan[0]] += 1
                    where = kill_location(files["trace"])
                    fig.kills_at[where] += 1
                    inflight |= inflight_ledger_writes(files["trace"], self.tiers.names())
                    schedule.append(f"{label} -> killed ({where})")
                    continue
                if code == worker.EXIT_ESCALATED:
                    schedule.append(f"{label} -> escalated")
                    self._operator(thread, files, intents_before, inflight, observer, effects, fig, problems, attempt)
                    continue
                if code == worker.EXIT_DONE:
                    schedule.append(f"{label} -> done")
                    ledger = observer.actions(thread) if intents_before else {}
                    # A confirmation in flight when its worker died may land
                    # after the harness looked, and before this worker did.
                    late = {
                        k for k in intents_before & inflight if ledger[k].state == "done" and not ledger[k].resolved_by
                    }
                    fig.late_ledger_writes += len(late)
                    if intents_before - late:
                        fig.unescalated += len(intents_before - late)
                        problems.append(
                            f"attempt {attempt}: finished although {sorted(intents_before - late)} had an intent "
                            "and no confirmation: the unconfirmed action(s) were not escalated"
                        )
                    final = _last_json(files["out"]).get("final")
                    if final != self.expected_final:
                        fig.wrong_states += 1
                        problems.append(
                            f"final state differs from the uncrashed run:\n  got      {final}\n  expected {self.expected_final}"
                        )
                    break
                schedule.append(f"{label} -> exit {code}")
                fig.worker_errors += 1
                problems.append(f"attempt {attempt}: worker exited {code}:\n{_tail(files['err'])}")
                break
            self._check_storage(thread, effects, acks, observer, fig, problems)
        finally:
            fig.corruptions += observer.corruptions_detected
            observer.close()
        fig.seconds = time.monotonic() - t0
        self._say(f"  run {index} {thread}: " + "; ".join(schedule))
        if problems:
            raise Problem(
                f"crash run {index} of {self.tiers.name}/{self.durability} (seed {run_seed!r}, thread {thread}, "
                f"files {folder}):\n  schedule: {schedule}\n  "
                + "\n  ".join(problems)
                + f"\n  figures: {fig.summary()}"
            )
        return fig

    def _operator(
        self,
        thread: str,
        files: dict[str, Path],
        intents_before: set[str],
        inflight: set[str],
        observer: DurableSaver,
        effects: Path,
        fig: Figures,
        problems: list[str],
        attempt: int,
    ) -> None:
        """Answer an escalation as an operator would: look for the side effect."""
        report = _last_json(files["out"])
        ledger = observer.actions(thread)  # the worker has exited: every action it began ended
        unconfirmed = sorted(k for k, e in ledger.items() if e.escalated())
        allowed = intents_before | inflight
        keys = list(report.get("escalated") or [])
        if not keys:
            # ResumeRejected raised by action() inside a node (there was no
            # checkpoint to validate yet) carries no .actions; its message
            # names the action.
            fig.empty_rejections += 1
            keys = [k for k in sorted(allowed) if repr(k) in report.get("message", "")]
            # Its sibling tasks may have been cancelled (ainvoke) between
            # their own intent and confirmation: unconfirmed too, legitimately.
            started_here = ledger_writes(files["trace"])
            for key in unconfirmed:
                if key not in allowed and key in started_here:
                    fig.interrupted_actions += 1
                elif key not in allowed:
                    fig.bad_escalations += 1
                    problems.append(f"attempt {attempt}: {key!r} is unconfirmed, but nothing began it: {ledger[key]}")
        if not keys:
            fig.bad_escalations += 1
            problems.append(
                f"attempt {attempt}: rejected without naming an action that was unconfirmed before "
                f"({sorted(allowed)}): {report}"
            )
            return
        for key in keys:
            entry = ledger.get(key)
            if entry is not None and entry.escalated() and key not in intents_before and key in inflight:
                fig.late_ledger_writes += 1  # the intent landed after the harness looked
            elif key not in intents_before or entry is None or not entry.escalated():
                fig.bad_escalations += 1
                problems.append(
                    f"attempt {attempt}: escalated {key!r}, whose ledger entry is {entry} "
                    f"(unconfirmed before the attempt: {sorted(intents_before)}; "
                    f"ledger writes in flight at earlier kills: {sorted(inflight)})"
                )
        fig.escalations += len(keys)
        # The operator answers for every unconfirmed action the ledger lists.
        happened = _effects(effects)
        with self.tiers.saver() as operator:
            for key in sorted(set(keys) | set(unconfirmed)):
                done = happened[key] > 0
                operator.resolve_action(thread, key, done=done, result=worker.action_result(key) if done else None)
                if done:
                    fig.resolved_done += 1
                else:
                    fig.resolved_not_done += 1

    def _check_storage(
        self, thread: str, effects: Path, acks: Path, observer: DurableSaver, fig: Figures, problems: list[str]
    ) -> None:
        ref = self.reference
        assert ref is not None
        # Side effects: each exactly once.
        happened = _effects(effects)
        for key, n in sorted(happened.items()):
            if n > 1:
                fig.repeated += 1
                problems.append(f"action {key!r} ran {n} times")
        for key in ref.action_keys:
            if happened[key] == 0:
                fig.missing_effects += 1
                problems.append(f"action {key!r} never ran")
        # The ledger: every action confirmed, with its result.
        ledger = observer.actions(thread)
        for key in ref.action_keys:
            entry = ledger.get(key)
            if entry is None or entry.state != "done" or entry.result != worker.action_result(key):
                problems.append(f"ledger entry of {key!r} at the end: {entry}")
                fig.wrong_states += 1
        # The stored final state.
        graph = worker.build_graph(effects=os.devnull, steps=self.settings.steps, width=self.settings.width)
        stored = graph.compile(checkpointer=observer).get_state({"configurable": {"thread_id": thread}})
        if json.loads(json.dumps(stored.values)) != self.expected_final or stored.next:
            fig.wrong_states += 1
            problems.append(f"stored final state differs: {stored.values} (next {stored.next})")
        # Acknowledged checkpoints and writes: readable, by id, from every tier.
        records = _read_json_lines(acks)
        checkpoints = {(a["ns"], a["id"]) for a in records if a["kind"] == "checkpoint"}
        writes = [a for a in records if a["kind"] == "writes" and (a["ns"], a["checkpoint_id"]) in checkpoints]
        fig.acked_checkpoints += len(checkpoints)
        fig.acked_writes += len(writes)
        for tier in self.tiers.names():
            with self.tiers.saver(tier) as one:
                tuples: dict[tuple[str, str], Any] = {}
                for ns, cid in sorted(checkpoints):
                    cfg: Any = {"configurable": {"thread_id": thread, "checkpoint_ns": ns, "checkpoint_id": cid}}
                    tup = one.get_tuple(cfg)
                    tuples[(ns, cid)] = tup
                    if tup is None or tup.checkpoint["id"] != cid:
                        fig.lost_checkpoints += 1
                        got = None if tup is None else tup.checkpoint["id"]
                        problems.append(f"acknowledged checkpoint {cid} is gone from {tier} (read gave {got})")
                for w in writes:
                    tup = tuples.get((w["ns"], w["checkpoint_id"]))
                    if tup is None or tup.checkpoint["id"] != w["checkpoint_id"]:
                        continue  # already counted as a lost checkpoint
                    present = Counter(ch for task, ch, _ in tup.pending_writes if task == w["task_id"])
                    if any(present[ch] < n for ch, n in Counter(w["channels"]).items()):
                        fig.lost_writes += 1
                        problems.append(
                            f"acknowledged writes {w['channels']} of task {w['task_id']} on checkpoint "
                            f"{w['checkpoint_id']} are gone from {tier} (present: {dict(present)})"
                        )
                fig.corruptions += one.corruptions_detected
        if self.tiers.archive:
            self._check_archive(thread, checkpoints, writes, fig, problems)

    def _check_archive(
        self,
        thread: str,
        checkpoints: set[tuple[str, str]],
        writes: list[dict[str, Any]],
        fig: Figures,
        problems: list[str],
    ) -> None:
        """Every acknowledged checkpoint and write reached the archive: the
        last worker's close ships what its run and the killed ones left."""
        assert self.tiers.archive is not None
        for item in self.tiers.archive_env:
            name, _, value = item.partition("=")
            os.environ[name] = value
        with self.tiers.saver(*self.tiers.names()) as saver:
            saver._runtime.archive_url = self.tiers.archive
            image = saver._archiver().image(thread)
        for ns, cid in sorted(checkpoints - set(image.checkpoints)):
            fig.lost_checkpoints += 1
            problems.append(f"acknowledged checkpoint {cid} (namespace {ns!r}) never reached the archive")
        for w in writes:
            present = Counter(
                row.channel
                for (ns, cid, task, _), row in image.writes.items()
                if (ns, cid, task) == (w["ns"], w["checkpoint_id"], w["task_id"])
            )
            if any(present[ch] < n for ch, n in Counter(w["channels"]).items()):
                fig.lost_writes += 1
                problems.append(f"acknowledged writes {w['channels']} of task {w['task_id']} never reached the archive")


def crash_test(
    spawner: Spawner,
    tiers: Tiers,
    durability: str,
    workdir: Path,
    *,
    kills: int,
    seed: str,
    time_limit: float | None = None,
    settings: Settings | None = None,
    log: Any = None,
) -> Figures:
    """Crash runs on one configuration until `kills` kills landed inside
    started runs; raises `Problem` at the first run that fails a check, and
    when the time limit passes before the target is reached: a test must not
    pass on fewer kills than it aims at."""
    t0 = time.monotonic()
    deadline = t0 + time_limit if time_limit else math.inf
    harness = Harness(spawner, tiers, durability, workdir, seed=seed, settings=settings, log=log)
    harness.calibrate()
    total = Figures()
    index = 0
    while total.kills < kills and time.monotonic() < deadline:
        total.add(harness.run(index, kill_budget=kills - total.kills, deadline=deadline))
        index += 1
    total.seconds = time.monotonic() - t0
    if total.kills < kills:
        raise Problem(
            f"{tiers.name}/{durability} ({harness.settings.api} face): only {total.kills} of the {kills} kills "
            f"landed inside a started run within the {time_limit:g} s time limit ({total.early_kills} more landed "
            f"before the worker began the run and were not counted); give it more time "
            f"(LANGGRAPH_DURABLE_CRASH_TIME, --time-limit) or look at why kills miss\n  figures: {total.summary()}"
        )
    return total


# -- the command line -----------------------------------------------------------------


@contextlib.contextmanager
def real_tiers(name: str, workdir: Path) -> Iterator[Tiers]:
    """Fresh storage for configuration `name`: a new SQLite file, Redis
    prefix and Postgres database (dropped afterwards)."""
    import psycopg
    import redis as redis_lib

    from .conftest import POSTGRES_URL, REDIS_URL, database_url

    parts = name.split("+")
    tag = f"lgd_crash_{uuid.uuid4().hex[:12]}"
    db = None
    if "postgres" in parts:
        with psycopg.connect(POSTGRES_URL, autocommit=True, connect_timeout=5) as admin:
            admin.execute(f'CREATE DATABASE "{tag}"')
        db = database_url(POSTGRES_URL, tag)
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        yield Tiers(
            name=name,
            sqlite=str(workdir / "local.sqlite") if "sqlite" in parts else None,
            redis=REDIS_URL if "redis" in parts else None,
            redis_prefix=tag,
            postgres=db,
        )
    finally:
        if db is not None:
            with psycopg.connect(POSTGRES_URL, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{tag}" WITH (FORCE)')
        if "redis" in parts:
            client = redis_lib.Redis.from_url(REDIS_URL)
            keys = list(client.scan_iter(match=f"{tag}:*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()


def _choices(value: str, allowed: list[str]) -> list[str]:
    if value == "all":
        return list(allowed)
    out = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in out if v not in allowed]
    if bad:
        raise SystemExit(f"unknown {bad}; choose from {allowed} or 'all'")
    return out


def main(argv: list[str] | None = None) -> int:
    import tempfile

    p = argparse.ArgumentParser(prog="python -m tests.crash_harness", description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=50, help="kills per configuration and durability mode")
    p.add_argument("--tiers", default="all", help=f"comma-separated, from {CONFIGS}, or 'all'")
    p.add_argument("--durability", default="all", help="comma-separated, from sync,async,exit, or 'all'")
    p.add_argument("--seed", default=None, help="master seed (default: random, printed)")
    p.add_argument("--spawn", choices=["fork", "exec"], default="fork")
    p.add_argument("--api", choices=["sync", "async"], default="sync")
    p.add_argument(
        "--write",
        choices=["shared", "all", "local"],
        default="shared",
        help="the savers' write mode; 'local' runs only the configurations with sqlite and a shared tier",
    )
    p.add_argument("--lease-linger", type=float, default=0.0, help="seconds the savers keep a run's lease after it")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--width", type=int, default=3)
    p.add_argument("--max-kills-per-run", type=int, default=6)
    p.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds per configuration and mode; one that has not made --kills kills by then fails",
    )
    p.add_argument("--keep-going", action="store_true", help="do not stop at the first failing configuration")
    p.add_argument("--workdir", default=None, help="where runs leave their files (default: a temp dir)")
    p.add_argument("-v", "--verbose", action="store_true", help="print every run's kill schedule")
    args = p.parse_args(argv)
    seed = args.seed or uuid.uuid4().hex[:8]
    settings = Settings(
        steps=args.steps,
        width=args.width,
        max_kills_per_run=args.max_kills_per_run,
        api=args.api,
        write=args.write,
        lease_linger=args.lease_linger,
    )
    root = Path(args.workdir or tempfile.mkdtemp(prefix="lgd-crash-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"crash harness: seed {seed!r}, spawn {args.spawn}, api {args.api}, files in {root}", flush=True)
    spawner = make_spawner(args.spawn, root)
    grand = Figures()
    failed = 0
    try:
        for tiers_name in _choices(args.tiers, CONFIGS):
            if args.write == "local" and ("sqlite" not in tiers_name or tiers_name == "sqlite"):
                continue  # write-behind needs a local tier and a shared one
            for durability in _choices(args.durability, DURABILITIES):
                workdir = root / f"{tiers_name}-{durability}"
                with real_tiers(tiers_name, workdir) as tiers:
                    try:
                        fig = crash_test(
                            spawner,
                            tiers,
                            durability,
                            workdir,
                            kills=args.kills,
                            seed=seed,
                            time_limit=args.time_limit,
                            settings=settings,
                            log=sys.stdout if args.verbose else None,
                        )
                    except Problem as exc:
                        failed += 1
                        print(f"FAIL {tiers_name:<22} {durability:<5} {exc}", flush=True)
                        if not args.keep_going:
                            return 1
                        continue
                grand.add(fig)
                print(f"ok   {tiers_name:<22} {durability:<5} {fig.summary()}", flush=True)
    finally:
        spawner.close()
    print(f"total: {grand.summary()}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
