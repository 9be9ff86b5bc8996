"""Many replicas, one Redis, one Postgres: a load driver.

`run_load` starts `workers` processes (multiprocessing "spawn"), each with
its own `DurableSaver` and its own SQLite file in `workdir`, all sharing one
Redis key prefix and one Postgres database. Each process runs `concurrency`
graph runs at a time (threads of the process on the sync face, tasks of one
event loop on the async face). The parent plays the load balancer: it hands
each run of each LangGraph thread to a worker process, so that consecutive
runs of one thread go to *different* processes (round robin with a per-thread
offset and shift, from `seed`), and it sends run k+1 of a thread only once run
k reported back, so the runs of one thread are sequential while different
threads run at once across the processes.

The graph is a real compiled `StateGraph`: a loop whose node appends one
message per super-step (naming the thread, the run, the step and the worker
process that ran it) until ``n`` reaches the run's ``goal``, invoked with
``durability="sync"``. Each worker's saver records when each ``put`` returned
and the checkpoint id it acknowledged; a step's latency is the time between
two consecutive acknowledged checkpoints of one run.

With ``write="local"`` (write-behind) a checkpoint reaches the shared tiers
only when the replicator ships it, and another replica sees it only then
(docs/concepts/write-modes.md, "Reads during an outage and during catch-up"); a record shipped after
another replica took the thread over is refused, never grafted. So a worker
hands a thread back only after ``drain()`` (one pass of the replicator, which
ships everything owed when it started): ``handoff_drain=True``, the default.
``handoff_drain=False`` shows what happens without it.

Then `check_load` (called by `run_load`) reads everything back through fresh
savers: the shared tiers together, each shared tier alone, and each worker's
SQLite file as a replica (with the shared tiers), plus the raw rows of each
worker's file. It counts threads whose latest state is not the expected one
(every run's messages, in order, by the worker that ran it), acknowledged
checkpoints missing from a view (lost), forks (a checkpoint with two
children) and unlinked checkpoints (a second root: its parent is not
stored): the history of a thread must be one chain. It also counts the
`CorruptionEvent`s the checking savers met (a record missing or damaged in
every tier).

Used by ``tests/test_load.py`` (small, correctness only) and
``benchmarks/bench_load.py`` (larger, timings too).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import operator
import os
import queue
import random
import sqlite3
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata, CheckpointTuple
from langgraph.graph import END, START, StateGraph

from langgraph_durable import DurableSaver, Integrity
from tests.flat_options import durable_options

SPAWN = multiprocessing.get_context("spawn")
MESSAGE_BYTES = 100  # padding of each message
READY_TIMEOUT_S = 120.0  # a worker process must have set its saver up by then
MAX_PROBLEMS = 20  # run errors kept in a LoadResult
MAX_PER_KIND = 5  # problem lines kept per kind of problem


# -- the graph ---------------------------------------------------------------------------------


class LoadState(TypedDict, total=False):
    messages: Annotated[list[str], operator.add]
    n: int
    goal: int


def message(thread_id: str, run: int, step: int, worker: int, pad: int = MESSAGE_BYTES) -> str:
    """The message step `step` of run `run` of a thread appends, on worker `worker`."""
    return f"{thread_id} run {run} step {step} by w{worker} " + "x" * pad


def load_graph(worker: int, steps_per_run: int, pad: int = MESSAGE_BYTES) -> StateGraph:
    """A loop appending one message per super-step until ``n`` reaches ``goal``
    (the run's input): run k of a thread is invoked with goal (k+1)*steps."""

    def step(state: LoadState, config: RunnableConfig) -> dict[str, Any]:
        n = state.get("n", 0)
        thread_id = str(config["configurable"]["thread_id"])
        return {"messages": [message(thread_id, n // steps_per_run, n % steps_per_run, worker, pad)], "n": n + 1}

    g = StateGraph(LoadState)
    g.add_node("step", step)
    g.add_edge(START, "step")
    g.add_conditional_edges("step", lambda s: "step" if s.get("n", 0) < s.get("goal", 0) else END)
    return g


def thread_id_of(prefix: str, index: int) -> str:
    return f"{prefix}-{index}"


def assign(seed: int | str, workers: int, thread_index: int, run: int) -> int:
    """The worker that runs `run` of thread `thread_index`: round robin from a
    seeded offset with a seeded shift in 1..workers-1, so two consecutive runs
    of a thread never land on the same worker (when there are two or more)."""
    if workers < 2:
        return 0
    rng = random.Random(f"{seed}:{thread_index}")
    offset = rng.randrange(workers)
    shift = rng.randrange(1, workers)
    return (offset + run * shift) % workers


def expected_messages(
    thread_id: str, thread_index: int, runs: int, steps_per_run: int, workers: int, seed: int | str, pad: int
) -> list[str]:
    return [
        message(thread_id, k, i, assign(seed, workers, thread_index, k), pad)
        for k in range(runs)
        for i in range(steps_per_run)
    ]


# -- the worker process ------------------------------------------------------------------------


class TimedSaver(DurableSaver):
    """A DurableSaver noting when each ``put`` / ``aput`` returned and the
    checkpoint id it acknowledged, per thread (one run of a thread at a time
    per process, so per thread is per run), and every exception a
    checkpointer call raised to LangGraph (which may report another one)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**durable_options(kwargs))
        self.marks: dict[str, list[tuple[float, str]]] = {}
        self.failures: dict[str, list[str]] = {}

    def _mark(self, config: RunnableConfig) -> None:
        conf = config["configurable"]
        self.marks.setdefault(str(conf["thread_id"]), []).append((time.perf_counter(), str(conf["checkpoint_id"])))

    def _failed(self, what: str, config: RunnableConfig, exc: BaseException) -> None:
        thread_id = str((config.get("configurable") or {}).get("thread_id"))
        frames = traceback.extract_tb(exc.__traceback__)
        where = " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(frames[-4:]))
        self.failures.setdefault(thread_id, []).append(f"{what}: {type(exc).__name__}: {exc} [{where}]")

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            return super().get_tuple(config)
        except BaseException as exc:
            self._failed("get_tuple", config, exc)
            raise

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        try:
            out = super().put(config, checkpoint, metadata, new_versions)
        except BaseException as exc:
            self._failed("put", config, exc)
            raise
        self._mark(out)
        return out

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        try:
            super().put_writes(config, writes, task_id, task_path)
        except BaseException as exc:
            self._failed("put_writes", config, exc)
            raise

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        try:
            return await super().aget_tuple(config)
        except BaseException as exc:
            self._failed("aget_tuple", config, exc)
            raise

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        try:
            out = await super().aput(config, checkpoint, metadata, new_versions)
        except BaseException as exc:
            self._failed("aput", config, exc)
            raise
        self._mark(out)
        return out

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        try:
            await super().aput_writes(config, writes, task_id, task_path)
        except BaseException as exc:
            self._failed("aput_writes", config, exc)
            raise


@dataclass
class RunReport:
    """What a worker sends back after one run of one thread."""

    thread: int
    run: int
    worker: int
    error: str | None
    saver_errors: list[str]  # every exception a checkpointer call raised in the run, first first
    acked: list[str]  # checkpoint ids its puts returned, in order
    step_ms: list[float]  # between consecutive acknowledged checkpoints
    first_ms: float  # from the run's start to its first acknowledged checkpoint
    run_ms: float  # the whole invoke / ainvoke
    drain_ms: float  # the hand-off drain (write="local"), 0 otherwise
    owed_after: int  # records still owed after that drain (other threads' of the process, written meanwhile)


class _LogCounter(logging.Handler):
    """Counts the saver's warnings and errors in a worker, keeps the first few."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0
        self.first: list[str] = []
        self._guard = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        with self._guard:
            self.count += 1
            if len(self.first) < 10:
                self.first.append(f"{record.levelname} {time.strftime('%H:%M:%S')}: {record.getMessage()[:400]}")


def worker_main(index: int, spec: dict[str, Any], tasks: Any, results: Any) -> None:
    """A worker process: set the saver up, report ("ready", index), run the
    (thread, run) tasks its queue hands it, `concurrency` at a time, until it
    gets one None per runner; then drain, close and report ("closed", index,
    stats). Anything fatal is reported as ("fatal", index, traceback)."""
    logs = _LogCounter()
    logging.getLogger("langgraph_durable").addHandler(logs)
    try:
        if spec["face"] == "async":
            stats = asyncio.run(_aworker(index, spec, tasks, results))
        else:
            stats = _worker(index, spec, tasks, results)
        stats["warnings"] = logs.count
        stats["first_warnings"] = logs.first
        results.put(("closed", index, stats))
    except BaseException:
        results.put(("fatal", index, traceback.format_exc()))


def _report(
    saver: TimedSaver,
    index: int,
    task: tuple[int, int],
    thread_id: str,
    started: float,
    ended: float,
    error: str | None,
) -> RunReport:
    thread, run = task
    marks = saver.marks.pop(thread_id, [])
    saver_errors = saver.failures.pop(thread_id, [])
    times = [t for t, _ in marks]
    return RunReport(
        thread=thread,
        run=run,
        worker=index,
        error=error,
        saver_errors=saver_errors[:5],
        acked=[cid for _, cid in marks],
        step_ms=[(b - a) * 1000 for a, b in itertools.pairwise(times)],
        first_ms=(times[0] - started) * 1000 if times else 0.0,
        run_ms=(ended - started) * 1000,
        drain_ms=0.0,
        owed_after=0,
    )


def _make_saver(spec: dict[str, Any]) -> TimedSaver:
    return TimedSaver(**spec["saver"])


def _closing_stats(saver: TimedSaver, runs: int, errors: int, checkpoints: int) -> dict[str, Any]:
    lag = saver.drain(60)
    journal = getattr(saver._sync_chain(), "journal", None)
    return {
        "runs": runs,
        "errors": errors,
        "checkpoints": checkpoints,
        "owed_at_close": lag.records,
        "refused": getattr(journal, "refused", 0),
    }


def _run_of(spec: dict[str, Any], task: tuple[int, int]) -> tuple[str, RunnableConfig, int]:
    """A run's thread id, config and goal (the value of ``n`` it ends at)."""
    thread, run = task
    thread_id = thread_id_of(spec["thread_prefix"], thread)
    return thread_id, {"configurable": {"thread_id": thread_id}}, (run + 1) * spec["steps_per_run"]


def _run_error(out: dict[str, Any], goal: int) -> str | None:
    return None if out.get("n") == goal else f"run ended at n={out.get('n')}, not {goal}"


def _count(counts: dict[str, int], report: RunReport) -> None:
    counts["runs"] += 1
    counts["errors"] += report.error is not None
    counts["checkpoints"] += len(report.acked)


def _worker(index: int, spec: dict[str, Any], tasks: Any, results: Any) -> dict[str, Any]:
    steps, write_behind = spec["steps_per_run"], spec["saver"].get("write") == "local"
    counts = {"runs": 0, "errors": 0, "checkpoints": 0}
    guard = threading.Lock()
    saver = _make_saver(spec)
    with saver:
        saver.setup()
        graph = load_graph(index, steps, spec["message_bytes"]).compile(checkpointer=saver)
        results.put(("ready", index))

        def runner() -> None:
            while (task := tasks.get()) is not None:
                thread_id, config, goal = _run_of(spec, task)
                started = time.perf_counter()
                try:
                    error = _run_error(graph.invoke({"goal": goal}, config, durability="sync"), goal)
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                report = _report(saver, index, task, thread_id, started, time.perf_counter(), error)
                if write_behind and spec["handoff_drain"] and error is None:
                    t0 = time.perf_counter()
                    report.owed_after = saver.drain(None).records
                    report.drain_ms = (time.perf_counter() - t0) * 1000
                with guard:
                    _count(counts, report)
                results.put(("run", index, asdict(report)))

        runners = [threading.Thread(target=runner, name=f"load-runner-{i}") for i in range(spec["concurrency"])]
        for r in runners:
            r.start()
        for r in runners:
            r.join()
        return _closing_stats(saver, **counts)


async def _aworker(index: int, spec: dict[str, Any], tasks: Any, results: Any) -> dict[str, Any]:
    steps, write_behind = spec["steps_per_run"], spec["saver"].get("write") == "local"
    counts = {"runs": 0, "errors": 0, "checkpoints": 0}
    loop = asyncio.get_running_loop()
    # Blocking queue reads get threads of their own, so they never starve the
    # default executor the saver's async face uses.
    getters = ThreadPoolExecutor(max_workers=spec["concurrency"], thread_name_prefix="load-queue")
    saver = _make_saver(spec)
    try:
        await saver.asetup()
        graph = load_graph(index, steps, spec["message_bytes"]).compile(checkpointer=saver)
        results.put(("ready", index))

        async def runner() -> None:
            while (task := await loop.run_in_executor(getters, tasks.get)) is not None:
                thread_id, config, goal = _run_of(spec, task)
                started = time.perf_counter()
                try:
                    error = _run_error(await graph.ainvoke({"goal": goal}, config, durability="sync"), goal)
                except Exception as exc:
                    error = f"{type(exc).__name__}: {exc}"
                report = _report(saver, index, task, thread_id, started, time.perf_counter(), error)
                if write_behind and spec["handoff_drain"] and error is None:
                    t0 = time.perf_counter()
                    report.owed_after = (await saver.adrain(None)).records
                    report.drain_ms = (time.perf_counter() - t0) * 1000
                _count(counts, report)
                results.put(("run", index, asdict(report)))

        await asyncio.gather(*(runner() for _ in range(spec["concurrency"])))
        return await asyncio.to_thread(_closing_stats, saver, **counts)
    finally:
        await saver.aclose()
        getters.shutdown(wait=False)


# -- the parent: dispatch, collect, check ------------------------------------------------------


@dataclass
class WorkerStats:
    worker: int
    runs: int = 0
    errors: int = 0
    checkpoints: int = 0
    steps: int = 0
    owed_at_close: int = 0
    refused: int = 0  # write-behind records refused at shipping (another writer took the thread over)
    warnings: int = 0  # WARNING+ log records of the saver in that process
    first_warnings: list[str] = field(default_factory=list)
    drain_ms: float = 0.0  # hand-off drains, in all
    sqlite_bytes: int = 0


@dataclass
class LoadResult:
    workers: int
    threads: int
    runs_per_thread: int
    steps_per_run: int
    write: str
    face: str
    concurrency: int
    handoff_drain: bool
    first_run: int
    tiers: str
    runs: int = 0  # runs that reported back
    steps: int = 0  # node super-steps of the runs that succeeded
    checkpoints: int = 0  # acknowledged checkpoints
    wall_s: float = 0.0  # first dispatch to last report
    steps_per_s: float = 0.0
    checkpoints_per_s: float = 0.0
    step_p50_ms: float = 0.0
    step_p99_ms: float = 0.0
    first_p50_ms: float = 0.0  # run start -> first checkpoint (lease, read of the latest), runs 1.. (handed over)
    first_p99_ms: float = 0.0
    first_new_p50_ms: float = 0.0  # the same for run 0 of a thread (nothing to read yet)
    first_new_p99_ms: float = 0.0
    run_p50_ms: float = 0.0
    run_p99_ms: float = 0.0
    drain_p50_ms: float = 0.0  # hand-off drain (write="local")
    drain_p99_ms: float = 0.0
    errors: int = 0  # runs that raised or ended short
    error_samples: list[str] = field(default_factory=list)
    wrong_states: dict[str, int] = field(default_factory=dict)  # view -> threads whose latest state is wrong
    lost: dict[str, int] = field(default_factory=dict)  # view -> acknowledged checkpoints it lacks
    forks: dict[str, int] = field(default_factory=dict)  # view -> second children of a checkpoint
    unlinked: dict[str, int] = field(default_factory=dict)  # view -> checkpoints whose parent is not stored
    corrupt: dict[str, int] = field(default_factory=dict)  # view -> CorruptionEvents its reads met
    check_s: float = 0.0
    per_worker: list[WorkerStats] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    problem_counts: dict[str, int] = field(default_factory=dict, repr=False)  # per kind, kept or not

    @property
    def refused(self) -> int:
        return sum(w.refused for w in self.per_worker)

    @property
    def ok(self) -> bool:
        """Every run succeeded and every check passed."""
        bad = sum(sum(d.values()) for d in (self.wrong_states, self.lost, self.forks, self.unlinked, self.corrupt))
        return self.errors == 0 and bad == 0 and self.runs == self.threads * self.runs_per_thread

    def summary(self) -> str:
        def counts(d: dict[str, int]) -> str:
            return ", ".join(f"{k} {v}" for k, v in d.items()) or "not checked"

        lines = [
            f"{self.workers} workers x {self.concurrency} concurrent runs ({self.face}), write={self.write!r}"
            f"{'' if self.handoff_drain or self.write != 'local' else ' (no hand-off drain)'}, tiers {self.tiers}; "
            f"{self.threads} threads x {self.runs_per_thread} runs x {self.steps_per_run} steps",
            f"runs {self.runs}, errors {self.errors}, checkpoints {self.checkpoints}, wall {self.wall_s:.2f} s, "
            f"{self.steps_per_s:.0f} steps/s, {self.checkpoints_per_s:.0f} checkpoints/s",
            f"step p50 {self.step_p50_ms:.2f} ms, p99 {self.step_p99_ms:.2f} ms; first checkpoint of a handed-over "
            f"run p50 {self.first_p50_ms:.2f} ms, p99 {self.first_p99_ms:.2f} ms (of a new thread "
            f"{self.first_new_p50_ms:.2f} / {self.first_new_p99_ms:.2f}); run p50 {self.run_p50_ms:.1f} ms, "
            f"p99 {self.run_p99_ms:.1f} ms"
            + (
                f"; hand-off drain p50 {self.drain_p50_ms:.1f} ms, p99 {self.drain_p99_ms:.1f} ms"
                if self.write == "local" and self.handoff_drain
                else ""
            ),
            f"wrong states: {counts(self.wrong_states)}",
            f"lost: {counts(self.lost)}",
            f"forks: {counts(self.forks)}",
            f"unlinked: {counts(self.unlinked)}",
            f"corruption events: {counts(self.corrupt)}",
            f"refused at shipping: {self.refused}; per worker runs "
            + ", ".join(f"w{w.worker} {w.runs}" for w in self.per_worker),
        ]
        if self.error_samples:
            lines.append("errors: " + " | ".join(self.error_samples[:3]))
        if self.problems:
            lines.append("problems: " + " | ".join(self.problems[:5]))
        return "\n".join(lines)


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); 0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return ordered[rank - 1]


def saver_kwargs(
    *,
    sqlite: str | None,
    redis_url: str | None,
    redis_prefix: str | None,
    postgres_url: str | None,
    write: str | None = None,
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"sqlite": sqlite, "redis": redis_url, "postgres": postgres_url}
    if redis_url is not None:
        kwargs["redis_key_prefix"] = redis_prefix
    if write is not None:
        kwargs["write"] = write
    return kwargs


def worker_file(workdir: Path, prefix: str, worker: int) -> Path:
    return workdir / f"{prefix}-w{worker}.sqlite"


def run_load(
    workers: int,
    threads: int,
    runs_per_thread: int,
    steps_per_run: int,
    redis_url: str | None,
    redis_prefix: str | None,
    postgres_url: str | None,
    workdir: str | os.PathLike[str],
    write: str = "shared",
    seed: int | str = 0,
    *,
    face: str = "sync",
    concurrency: int = 4,
    handoff_drain: bool = True,
    first_run: int = 0,
    thread_prefix: str = "load",
    message_bytes: int = MESSAGE_BYTES,
    check: bool = True,
    check_each_tier: bool = True,
    check_replicas: bool = True,
    check_files: bool = True,
    saver_options: dict[str, Any] | None = None,
    timeout: float = 600.0,
) -> LoadResult:
    """Run the load (see the module docstring) and check it; see `LoadResult`.

    `first_run` > 0 continues threads an earlier call ran (same `workdir`,
    `thread_prefix`, `seed` and `workers`): runs ``first_run .. first_run +
    runs_per_thread - 1``. `saver_options`: more `DurableSaver` keyword
    arguments for the workers' savers (not the checks'). `check_files=False`
    leaves out the check that each worker's file holds what its saver
    acknowledged (a bounded local cache, ``local_max_bytes``, evicts). `timeout` bounds the whole run; a worker process
    that dies or reports a fatal error raises `RuntimeError` (after every
    worker process was stopped)."""
    if face not in ("sync", "async"):
        raise ValueError(f"face must be 'sync' or 'async', not {face!r}")
    if redis_url is None and postgres_url is None:
        raise ValueError("the load needs a shared tier: redis_url and/or postgres_url")
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    tiers = "+".join(["sqlite"] + (["redis"] if redis_url else []) + (["postgres"] if postgres_url else []))
    result = LoadResult(
        workers=workers,
        threads=threads,
        runs_per_thread=runs_per_thread,
        steps_per_run=steps_per_run,
        write=write,
        face=face,
        concurrency=concurrency,
        handoff_drain=handoff_drain,
        first_run=first_run,
        tiers=tiers,
    )
    specs = [
        {
            "saver": saver_kwargs(
                sqlite=str(worker_file(workdir, thread_prefix, w)),
                redis_url=redis_url,
                redis_prefix=redis_prefix,
                postgres_url=postgres_url,
                write=write,
            )
            | (saver_options or {}),
            "face": face,
            "concurrency": concurrency,
            "steps_per_run": steps_per_run,
            "message_bytes": message_bytes,
            "thread_prefix": thread_prefix,
            "handoff_drain": handoff_drain,
        }
        for w in range(workers)
    ]
    task_queues = [SPAWN.Queue() for _ in range(workers)]
    results = SPAWN.Queue()
    procs = [
        SPAWN.Process(target=worker_main, args=(w, specs[w], task_queues[w], results), name=f"load-w{w}", daemon=True)
        for w in range(workers)
    ]
    stats = [WorkerStats(worker=w) for w in range(workers)]
    acked: dict[int, dict[int, list[str]]] = {t: {} for t in range(threads)}  # thread -> worker -> ids
    step_ms: list[float] = []
    first_ms: list[float] = []  # runs after the first: the thread came from another process
    first_new_ms: list[float] = []
    run_ms: list[float] = []
    drain_ms: list[float] = []
    deadline = time.monotonic() + timeout

    closed: set[int] = set()  # workers that reported ("closed", ...): they may exit

    def receive(what: str) -> tuple[Any, ...]:
        grace = False
        while True:
            try:
                return tuple(results.get(timeout=1.0))
            except queue.Empty:
                dead = [
                    f"w{w} (exit {p.exitcode})"
                    for w, p in enumerate(procs)
                    if p.exitcode is not None and w not in closed
                ]
                if dead and grace:
                    raise RuntimeError(f"worker process(es) {dead} exited while waiting for {what}") from None
                grace = bool(dead)  # a message it sent just before exiting may still be on its way
                if time.monotonic() > deadline:
                    raise RuntimeError(f"load timed out after {timeout} s waiting for {what}") from None

    last_run = first_run + runs_per_thread
    try:
        for p in procs:
            p.start()
        ready = 0
        while ready < workers:
            msg = receive("the workers to set up")
            if msg[0] == "fatal":
                raise RuntimeError(f"worker w{msg[1]} failed:\n{msg[2]}")
            ready += msg[0] == "ready"
        started = time.perf_counter()
        outstanding = 0
        for t in range(threads):
            if first_run < last_run:
                task_queues[assign(seed, workers, t, first_run)].put((t, first_run))
                outstanding += 1
        while outstanding:
            msg = receive("runs to report back")
            if msg[0] == "fatal":
                raise RuntimeError(f"worker w{msg[1]} failed:\n{msg[2]}")
            if msg[0] != "run":
                continue
            outstanding -= 1
            report = RunReport(**msg[2])
            result.runs += 1
            acked[report.thread].setdefault(report.worker, []).extend(report.acked)
            ws = stats[report.worker]
            ws.drain_ms += report.drain_ms
            if report.error is not None:
                result.errors += 1
                if len(result.error_samples) < MAX_PROBLEMS:
                    result.error_samples.append(
                        f"{thread_id_of(thread_prefix, report.thread)} run {report.run} on w{report.worker}: "
                        f"{report.error}" + "".join(f"\n    saver call raised {e}" for e in report.saver_errors)
                    )
                continue  # the thread stops here: its later runs would only pile errors up
            result.steps += steps_per_run
            ws.steps += steps_per_run
            step_ms.extend(report.step_ms)
            (first_ms if report.run > 0 else first_new_ms).append(report.first_ms)
            run_ms.append(report.run_ms)
            if report.drain_ms:
                drain_ms.append(report.drain_ms)
            if report.run + 1 < last_run:
                task_queues[assign(seed, workers, report.thread, report.run + 1)].put((report.thread, report.run + 1))
                outstanding += 1
        result.wall_s = time.perf_counter() - started
        for q in task_queues:
            for _ in range(concurrency):
                q.put(None)
        while len(closed) < workers:
            msg = receive("the workers to close")
            if msg[0] == "fatal":
                raise RuntimeError(f"worker w{msg[1]} failed:\n{msg[2]}")
            if msg[0] == "closed":
                closed.add(msg[1])
                ws = stats[msg[1]]
                for key in ("runs", "errors", "checkpoints", "owed_at_close", "refused", "warnings", "first_warnings"):
                    setattr(ws, key, msg[2][key])
        for p in procs:
            p.join(timeout=60)  # a liveness bound: each worker reported it closed, so it exits
        hung = [f"w{w}" for w, p in enumerate(procs) if p.is_alive()]
        if hung:
            raise RuntimeError(f"worker process(es) {hung} did not exit within 60 s of closing")
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
        for q in [*task_queues, results]:
            q.close()
            q.join_thread()

    for ws in stats:
        ws.sqlite_bytes = _file_bytes(worker_file(workdir, thread_prefix, ws.worker))
        if ws.owed_at_close:
            _problem(result, "owed", f"w{ws.worker} closed still owing {ws.owed_at_close} record(s)")
    result.per_worker = stats
    result.checkpoints = sum(len(ids) for per in acked.values() for ids in per.values())
    if result.wall_s > 0:
        result.steps_per_s = result.steps / result.wall_s
        result.checkpoints_per_s = result.checkpoints / result.wall_s
    result.step_p50_ms, result.step_p99_ms = percentile(step_ms, 50), percentile(step_ms, 99)
    result.first_p50_ms, result.first_p99_ms = percentile(first_ms, 50), percentile(first_ms, 99)
    result.first_new_p50_ms, result.first_new_p99_ms = percentile(first_new_ms, 50), percentile(first_new_ms, 99)
    result.run_p50_ms, result.run_p99_ms = percentile(run_ms, 50), percentile(run_ms, 99)
    result.drain_p50_ms, result.drain_p99_ms = percentile(drain_ms, 50), percentile(drain_ms, 99)
    if check:
        t0 = time.perf_counter()
        check_load(
            result,
            acked,
            redis_url=redis_url,
            redis_prefix=redis_prefix,
            postgres_url=postgres_url,
            workdir=workdir,
            seed=seed,
            thread_prefix=thread_prefix,
            message_bytes=message_bytes,
            each_tier=check_each_tier,
            replicas=check_replicas,
            files=check_files,
        )
        result.check_s = time.perf_counter() - t0
    return result


# -- the checks --------------------------------------------------------------------------------


def check_load(
    result: LoadResult,
    acked: dict[int, dict[int, list[str]]],
    *,
    redis_url: str | None,
    redis_prefix: str | None,
    postgres_url: str | None,
    workdir: Path,
    seed: int | str,
    thread_prefix: str,
    message_bytes: int = MESSAGE_BYTES,
    each_tier: bool = True,
    replicas: bool = True,
    files: bool = True,
) -> None:
    """Fill `result`'s wrong_states, lost, forks, unlinked and corrupt (per view). `acked` maps
    thread index -> worker -> the checkpoint ids that worker's puts returned."""
    runs = result.first_run + result.runs_per_thread
    expected = {
        t: expected_messages(
            thread_id_of(thread_prefix, t), t, runs, result.steps_per_run, result.workers, seed, message_bytes
        )
        for t in range(result.threads)
    }
    all_acked = {t: {cid for ids in per.values() for cid in ids} for t, per in acked.items()}

    shared = {"redis": redis_url, "postgres": postgres_url}
    views: list[tuple[str, dict[str, Any], bool]] = [
        (
            "shared",
            saver_kwargs(sqlite=None, redis_url=redis_url, redis_prefix=redis_prefix, postgres_url=postgres_url),
            True,
        )
    ]
    if each_tier and redis_url and postgres_url:
        for name in ("redis", "postgres"):
            only = {k: (v if k == name else None) for k, v in shared.items()}
            kwargs = saver_kwargs(
                sqlite=None, redis_url=only["redis"], redis_prefix=redis_prefix, postgres_url=only["postgres"]
            )
            if name == "redis":
                # Redis alone cannot reach the store's own key, which Postgres keeps.
                with DurableSaver(sqlite=None, postgres=postgres_url) as far:
                    far.setup()
                    kwargs["signing_key"] = far._codec.key
            views.append((name, kwargs, True))
    if replicas:
        for w in range(result.workers):
            kwargs = saver_kwargs(
                sqlite=str(worker_file(workdir, thread_prefix, w)),
                redis_url=redis_url,
                redis_prefix=redis_prefix,
                postgres_url=postgres_url,
            )
            views.append((f"w{w} replica", kwargs, False))

    for view, kwargs, whole_history in views:
        wrong = lost = forks = unlinked = 0
        events: list[Any] = []  # CorruptionEvents: what this view could not read intact anywhere
        with DurableSaver(**durable_options({**kwargs, "integrity": Integrity(on_corruption=events.append)})) as saver:
            for t in range(result.threads):
                thread_id = thread_id_of(thread_prefix, t)
                config: RunnableConfig = {"configurable": {"thread_id": thread_id}}
                tup = saver.get_tuple(config)
                values = tup.checkpoint["channel_values"] if tup is not None else {}
                if values.get("messages") != expected[t] or values.get("n") != len(expected[t]):
                    wrong += 1
                    _problem(result, "wrong", f"{view}: {thread_id} {_state_diff(values, expected[t])}")
                if not whole_history:
                    continue
                chain = [
                    (c.config["configurable"]["checkpoint_id"], _parent(c.parent_config)) for c in saver.list(config)
                ]
                ids = {cid for cid, _ in chain}
                missing = all_acked[t] - ids
                if missing:
                    lost += len(missing)
                    _problem(result, "lost", f"{view}: {thread_id} lacks {len(missing)} acknowledged checkpoint(s)")
                n_forks, n_unlinked = count_forks(chain)
                if n_forks or n_unlinked:
                    forks += n_forks
                    unlinked += n_unlinked
                    _problem(
                        result,
                        "chain",
                        f"{view}: {thread_id} history has {n_forks} fork(s) and {n_unlinked} checkpoint(s) whose "
                        "parent is not stored",
                    )
        result.wrong_states[view] = wrong
        result.corrupt[view] = len(events)
        for event in events[:2]:
            _problem(result, "corrupt", f"{view}: {event.thread_id}: {event.kind} {event.key}: {event.reason}")
        if whole_history:
            result.lost[view] = lost
            result.forks[view] = forks
            result.unlinked[view] = unlinked

    if files:
        for w in range(result.workers):
            path = worker_file(workdir, thread_prefix, w)
            with sqlite3.connect(path) as conn:
                local = {r[0] for r in conn.execute("SELECT checkpoint_id FROM lgd_checkpoints")}
            conn.close()
            missing_local = sum(len(set(per.get(w, ())) - local) for per in acked.values())
            result.lost[f"w{w} file"] = missing_local
            if missing_local:
                _problem(result, "file", f"w{w} file lacks {missing_local} checkpoint(s) its own saver acknowledged")


def count_forks(chain: Iterable[tuple[str, str | None]]) -> tuple[int, int]:
    """(forks, unlinked) in a thread's history, given (checkpoint id, parent
    id) pairs: forks are children beyond the first of one checkpoint; unlinked
    are roots beyond the first, a root being a checkpoint whose parent is not
    among them (none, or one a retention sweep deleted). One chain: (0, 0)."""
    nodes = dict(chain)
    children: dict[str, int] = {}
    roots = 0
    for _cid, parent in nodes.items():
        if parent is None or parent not in nodes:
            roots += 1
        else:
            children[parent] = children.get(parent, 0) + 1
    return sum(n - 1 for n in children.values() if n > 1), max(0, roots - 1)


def _parent(config: RunnableConfig | None) -> str | None:
    if not config:
        return None
    return config.get("configurable", {}).get("checkpoint_id")


def _state_diff(values: dict[str, Any], expected: list[str]) -> str:
    got = values.get("messages") or []
    if not values:
        return "has no checkpoint"
    for i, (a, b) in enumerate(zip(got, expected)):
        if a != b:
            return f"message {i} is {a[:60]!r}, expected {b[:60]!r} ({len(got)} messages, expected {len(expected)})"
    return f"has {len(got)} messages and n={values.get('n')}, expected {len(expected)}"


def _problem(result: LoadResult, kind: str, line: str) -> None:
    """Keep the first few problem lines of each kind (so that one kind cannot crowd out the others)."""
    if result.problem_counts.get(kind, 0) < MAX_PER_KIND:
        result.problems.append(line)
    result.problem_counts[kind] = result.problem_counts.get(kind, 0) + 1


def _file_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")) if p.exists())
