"""Per-tier metrics: what each tier call cost and how it went, and how reads
got around bad copies.

``DurableSaver(metrics=hook)`` passes every event to `hook` (a `MetricsHook`):

- a `TierCall` for every call to a tier (timed in `guard_async.AsyncGuardedTier`,
  both faces): tier, operation, seconds, and ``ok`` / ``miss`` / ``error`` /
  ``unavailable`` (`is_miss` says what a miss is);
- a `CorruptCopy` for every bad copy a read met (from the
  `integrity.IntegrityPolicy` that also logs it and calls ``on_corruption``):
  where it was, what was served instead, and whether the read repaired it;
- a `PlainData` once per type whose values a read handed back as stored
  data, as LangGraph does (a class that was never importable by its name).

Two hooks ship ready-made: `TierStats`, an in-process aggregator to read
(counts, hit rates, latency percentiles per tier and operation), and
`OpenTelemetryMetrics`, which records the same as OpenTelemetry instruments
(``pip install 'langgraph-durable[otel]'``; ``opentelemetry-api`` is imported
only when one is created). Both also report the journal backlog
(`DurableSaver.lag`), which the saver hands them through `watch` until it is
closed.

A hook runs on the caller's thread (for the sync face, possibly a worker
thread of the saver), so it must be quick and thread-safe. One that raises
is logged, once per hook and kind of event, and never breaks the call it
reports on. Without ``metrics=`` the saver pays one ``if`` per tier call.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from .errors import ConfigError, DurableError
from .integrity import CorruptionEvent, RecordKind, Served, served_from
from .model.backlog import Lag

logger = logging.getLogger("langgraph_durable")

Outcome = Literal["ok", "miss", "error", "unavailable"]

# Tier operations that read records of a thread: the ones that can miss.
READS = frozenset(
    {"head", "read_checkpoint", "read_blobs", "read_writes", "list_checkpoints", "list_page", "read_ledger"}
)
# Latency samples `TierStats` keeps per (tier, operation) for its percentiles.
DEFAULT_LATENCY_SAMPLES = 2048
# Bad copies `TierStats` keeps, newest last, for `TierStats.corrupt_copies`.
DEFAULT_KEPT_CORRUPTIONS = 100
# Histogram boundaries (seconds) for `langgraph_durable.tier.duration`: from
# a local SQLite read (tens of microseconds) to a tier timing out.
DURATION_BUCKETS_S = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class TierCall:
    """One call to one tier.

    Attributes:
        tier: ``"sqlite"``, ``"redis"`` or ``"postgres"``; ``"archive"`` for
            the archive's operations (``"ship"``, ``"bring_back"``,
            ``"archive_thread"``), each a whole operation, not one object call.
        op: the tier operation (`tiers.protocol_async.AsyncTier`'s method:
            ``"head"``, ``"read_blobs"``, ``"write_checkpoint"``...; ``"probe"``
            for `DurableSaver.health`'s).
        seconds: how long it took (0.0 when the breaker refused it at once).
        outcome: ``"ok"``; ``"miss"``, a read that found nothing (`is_miss`);
            ``"error"``, the tier answered with an error (a refused lease, a
            constraint); ``"unavailable"``, it could not be reached, did not
            answer in time, or its breaker skipped it (it is known to be down).
    """

    tier: str
    op: str
    seconds: float
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class CorruptCopy:
    """One bad copy a read met, and what the read did about it.

    Attributes:
        tier: where the bad copy was (``"every tier"`` for a record missing
            from all of them).
        kind: ``"checkpoint"``, ``"blob"``, ``"write"`` or ``"ledger"``.
        served: ``"other_tier"`` (an intact copy from `source`),
            ``"ancestor"`` (the previous intact checkpoint), ``"rerun"`` (a
            pending write dropped: its task runs again) or ``"nothing"``.
        source: the tier that served the intact copy (``served == "other_tier"``).
        event: the `CorruptionEvent` also logged and passed to ``on_corruption``.
    """

    tier: str
    kind: RecordKind
    served: Served
    source: str | None
    event: CorruptionEvent

    @property
    def fallback(self) -> bool:
        """The read served something else in its place: another tier's copy or an ancestor."""
        return self.served in ("other_tier", "ancestor")

    @property
    def repaired(self) -> bool:
        """The read wrote the intact copy over the bad one (read-repair; the
        bad bytes are kept in the tier's quarantine). A failed repair write
        is logged by the reader and the copy is repaired by the next read."""
        return self.served == "other_tier"

    @classmethod
    def of(cls, event: CorruptionEvent) -> CorruptCopy:
        served, source = served_from(event.served_instead)
        return cls(tier=event.tier, kind=event.kind, served=served, source=source, event=event)


@dataclass(frozen=True, slots=True)
class PlainData:
    """A value handed back as its stored data, once per type and saver: an
    object of a class that could not be imported under the module and name
    it was stored with, neither where it was written nor here (a class
    defined inside a function, a nested class, a model made with
    ``create_model``). LangGraph and the stock savers hand such values back
    the same way; a graph whose state schema names the class rebuilds it.

    Attributes:
        type_name: ``module.Name`` as stored.
        record: the record it was first met in (``channel value 'thread//channel/version'``...).
    """

    type_name: str
    record: str


MetricsEvent = TierCall | CorruptCopy | PlainData


class MetricsHook(Protocol):
    """Called with each `TierCall`, `CorruptCopy` and `PlainData` (``DurableSaver(metrics=)``).

    Runs on the thread that made the call: keep it quick and thread-safe.
    Exceptions it raises are logged (once per kind of event) and swallowed:
    a hook never breaks a tier call or a read."""

    def __call__(self, event: MetricsEvent, /) -> None: ...


Backlog = Callable[[], Lag | None]


@runtime_checkable
class WatchesBacklog(Protocol):
    """A hook that also reports the journal backlog. The saver calls `watch`
    once, when it is created, with a function returning what its shared
    tiers are owed now (`DurableSaver.lag`), or None once the saver is
    closed or gone: then the hook may forget it."""

    def watch(self, backlog: Backlog, /) -> None: ...


def is_miss(op: str, result: Any, args: Sequence[Any] = ()) -> bool:
    """Whether a tier call was a read that found nothing, so that another
    tier (or nobody) has to answer.

    Only `READS` miss. ``head`` misses when the tier knows no checkpoint of
    the thread; ``read_blobs`` when it returned fewer channel values than
    were asked (`args` are the call's positional arguments, the keys third):
    the reader asks the next tier for the rest; ``list_page`` when it
    listed no checkpoint; any other read when its answer is empty (None, an
    empty list or dict). An empty answer is a miss even where there was
    nothing to find (a checkpoint without pending writes, a thread never
    written): a tier cannot tell the two apart."""
    if op not in READS:
        return False
    if op == "head":
        return getattr(result, "checkpoint_id", None) is None
    if op == "read_blobs" and len(args) >= 3:
        return len(result) < len(set(args[2]))
    if op == "list_page":
        return not result[0]
    return not result


class MetricsSink:
    """The saver's ``metrics=`` hooks behind one callable: each event goes to
    every hook, in order; one that raises is logged once per (hook, kind of
    event) and does not stop the others or the call that reported.

    It also answers the hooks' backlog questions (`backlog`) for the saver
    whose `lag` it was given, holding it weakly: a hook kept by a global
    meter provider does not keep the saver alive."""

    def __init__(self, hooks: Sequence[MetricsHook], lag: Callable[[], Lag] | None = None) -> None:
        self.hooks = list(hooks)
        self._lag = _weak(lag) if lag is not None else None
        self.closed = False
        self._failed: set[tuple[int, str]] = set()
        self._lock = threading.Lock()

    @classmethod
    def of(cls, metrics: MetricsHook | Sequence[MetricsHook] | None, *, lag: Callable[[], Lag]) -> MetricsSink | None:
        """The sink for a ``metrics=`` option (None: no metrics, nothing to
        call). Hooks that watch the backlog (`WatchesBacklog`) are handed
        `lag`. Raises `ConfigError` for anything but a callable, a list of
        them, or None."""
        if metrics is None:
            return None
        hooks: list[Any] = list(metrics) if isinstance(metrics, (list, tuple)) else [metrics]
        for hook in hooks:
            if not callable(hook):
                raise ConfigError(
                    f"metrics= must be a callable taking a TierCall or CorruptCopy (for example "
                    f"langgraph_durable.metrics.TierStats()), a list of them, or None; got {hook!r}."
                )
        sink = cls(hooks, lag)
        for hook in hooks:
            if isinstance(hook, WatchesBacklog):
                hook.watch(sink.backlog)
        return sink

    def __call__(self, event: MetricsEvent) -> None:
        for hook in self.hooks:
            try:
                hook(event)
            except Exception:  # a hook never breaks a tier call or a read
                kind = type(event).__name__
                with self._lock:
                    first = (id(hook), kind) not in self._failed
                    self._failed.add((id(hook), kind))
                if first:
                    logger.exception("metrics hook %r failed on a %s (logged once; later failures are not)", hook, kind)

    def corruption(self, event: CorruptionEvent) -> None:
        """Report a `CorruptionEvent` as a `CorruptCopy`."""
        self(CorruptCopy.of(event))

    def backlog(self) -> Lag | None:
        """What the saver's shared tiers are owed now; None once it is closed
        (asking would open its local file again) or gone. Raises
        `TierUnavailable` while its local tier cannot be read."""
        lag = self._lag() if self._lag is not None and not self.closed else None
        return lag() if lag is not None else None

    def close(self) -> None:
        """The saver is closed: stop asking it for its backlog."""
        self.closed = True


def _weak(lag: Callable[[], Lag]) -> Callable[[], Callable[[], Lag] | None]:
    """A reference to `lag` that does not keep its saver alive (a bound method)."""
    if hasattr(lag, "__self__") and hasattr(lag, "__func__"):
        return weakref.WeakMethod(lag)
    return lambda: lag


class _Watched:
    """The backlogs a hook watches (one per saver), summed; those that answer
    None (their saver closed or gone) are forgotten. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._backlogs: list[Backlog] = []

    def add(self, backlog: Backlog) -> None:
        with self._lock:
            self._backlogs.append(backlog)

    def total(self) -> Lag | None:
        """The sum of what they answer now (a saver whose local tier cannot
        be read right now is left out of this one); None if none answers."""
        with self._lock:
            backlogs = list(self._backlogs)
        answers: list[Lag] = []
        gone: list[Backlog] = []
        for backlog in backlogs:
            try:
                lag = backlog()
            except DurableError as exc:
                logger.debug("journal backlog unknown for now: %s", exc)
                continue
            if lag is None:
                gone.append(backlog)
            else:
                answers.append(lag)
        if gone:
            with self._lock:
                self._backlogs = [b for b in self._backlogs if b not in gone]
        return _sum(answers)


def _sum(lags: Iterable[Lag]) -> Lag | None:
    """Several savers' backlogs as one (None: none)."""
    total: Lag | None = None
    for now in lags:
        if total is None:
            total = now
        else:
            names = set(total.by_tier) | set(now.by_tier)
            total = Lag(
                records=total.records + now.records,
                seconds=max(total.seconds, now.seconds),
                by_tier={n: total.by_tier.get(n, 0) + now.by_tier.get(n, 0) for n in sorted(names)},
            )
    return total


# -- TierStats: in-process aggregation ------------------------------------------------------


def percentile(ordered: Sequence[float], q: float) -> float | None:
    """The `q` quantile (0-1) of sorted samples, nearest rank; None if empty."""
    if not ordered:
        return None
    rank = min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass(frozen=True, slots=True)
class OpStats:
    """What `TierStats` counted for one tier and operation (or a total over
    several: `op` then names them, e.g. ``"reads"`` or ``"*"``).

    `ok` counts successful calls; for a read that is a hit. The percentiles
    and `max_seconds` are over the most recent samples kept (None: no call)."""

    tier: str
    op: str
    calls: int
    ok: int
    misses: int
    errors: int
    unavailable: int
    seconds: float  # total time spent in these calls
    p50: float | None
    p95: float | None
    p99: float | None
    max_seconds: float | None

    @property
    def hits(self) -> int:
        return self.ok

    @property
    def hit_rate(self) -> float | None:
        """Hits over answered reads (None if none answered)."""
        answered = self.ok + self.misses
        return self.ok / answered if answered else None

    @property
    def mean(self) -> float | None:
        return self.seconds / self.calls if self.calls else None


@dataclass(frozen=True, slots=True)
class Recoveries:
    """How reads got around the bad copies they met (`TierStats.recoveries`)."""

    corruptions: int  # bad copies met
    from_other_tier: int  # served from another tier's intact copy
    from_ancestor: int  # served the previous intact checkpoint
    writes_dropped: int  # a pending write lost everywhere: its task runs again
    unserved: int  # nothing served instead (raised, or left out of a list)
    repaired: dict[str, int] = field(default_factory=dict)  # bad copies replaced, per tier

    @property
    def fallbacks(self) -> int:
        return self.from_other_tier + self.from_ancestor


@dataclass(slots=True)
class _Tally:
    calls: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0
    samples: deque[float] = field(default_factory=deque)


class TierStats:
    """A `MetricsHook` that counts in process, for you to read: per tier and
    operation, calls by outcome, time spent, latency percentiles; per tier,
    hit rates of reads; and how reads got around bad copies.

    ``stats = TierStats(); DurableSaver(metrics=stats)``, then
    ``stats.ops()``, ``stats.tier("sqlite", READS).hit_rate``,
    ``stats.recoveries()``, ``stats.backlog()``, or ``print(stats)``.
    Thread-safe; one instance may watch several savers (their counts add up).
    Percentiles are over the last `samples` calls of each tier and operation.
    """

    def __init__(self, *, samples: int = DEFAULT_LATENCY_SAMPLES) -> None:
        if samples < 1:
            raise ConfigError(f"samples must be at least 1, got {samples!r}.")
        self.samples = samples
        self._lock = threading.Lock()
        self._tallies: dict[tuple[str, str], _Tally] = {}
        self._served: Counter[str] = Counter()
        self._repaired: Counter[str] = Counter()
        self._copies: deque[CorruptCopy] = deque(maxlen=DEFAULT_KEPT_CORRUPTIONS)
        self._plain: dict[str, PlainData] = {}
        self._watched = _Watched()

    # -- the hook ------------------------------------------------------------------

    def __call__(self, event: MetricsEvent, /) -> None:
        with self._lock:
            if isinstance(event, TierCall):
                tally = self._tallies.get((event.tier, event.op))
                if tally is None:
                    tally = self._tallies[(event.tier, event.op)] = _Tally(samples=deque(maxlen=self.samples))
                tally.calls += 1
                tally.outcomes[event.outcome] += 1
                tally.seconds += event.seconds
                tally.samples.append(event.seconds)
            elif isinstance(event, CorruptCopy):
                self._served[event.served] += 1
                if event.repaired:
                    self._repaired[event.tier] += 1
                self._copies.append(event)
            elif isinstance(event, PlainData):
                self._plain.setdefault(event.type_name, event)

    def watch(self, backlog: Backlog, /) -> None:
        """Called by the saver (`WatchesBacklog`): `backlog()` asks it."""
        self._watched.add(backlog)

    def reset(self) -> None:
        """Forget every count and sample (the watched savers stay)."""
        with self._lock:
            self._tallies.clear()
            self._served.clear()
            self._repaired.clear()
            self._copies.clear()
            self._plain.clear()

    # -- reading ---------------------------------------------------------------------

    @property
    def tiers(self) -> list[str]:
        """The tiers seen so far, nearest first."""
        with self._lock:
            seen = {tier for tier, _ in self._tallies}
        from .tiers.registry import kinds

        order = [kind.keyword for kind in kinds()]
        return [t for t in order if t in seen] + sorted(seen - set(order))

    def ops(self, tier: str | None = None) -> list[OpStats]:
        """One `OpStats` per (tier, operation) seen (of one tier, if given), by tier then operation."""
        with self._lock:
            keys = [k for k in self._tallies if tier is None or k[0] == tier]
        rank = {t: i for i, t in enumerate(self.tiers)}
        return [self._stats(t, [o], o) for t, o in sorted(keys, key=lambda k: (rank.get(k[0], 99), k[1]))]

    def tier(self, tier: str, ops: Collection[str] | None = None) -> OpStats:
        """Totals of one tier over `ops` (None: every operation), percentiles
        over their samples together; its `op` is ``"*"``, ``"reads"`` for
        `READS`, else the operations joined by ``+``."""
        if ops is None:
            with self._lock:
                chosen = [o for t, o in self._tallies if t == tier]
            label = "*"
        else:
            chosen = sorted(ops)
            label = "reads" if frozenset(ops) == READS else "+".join(chosen)
        return self._stats(tier, chosen, label)

    def hit_rate(self, tier: str, ops: Collection[str] = READS) -> float | None:
        """Share of this tier's answered reads that found what was asked
        (None before any). For the local tier: how often a read was served
        without asking Redis or Postgres for that record."""
        return self.tier(tier, ops).hit_rate

    def latencies(self, tier: str, op: str | None = None) -> list[float]:
        """The latency samples kept (seconds, oldest first) of one operation,
        or of every operation of the tier."""
        with self._lock:
            if op is not None:
                tally = self._tallies.get((tier, op))
                return list(tally.samples) if tally is not None else []
            return [s for (t, _), tally in self._tallies.items() if t == tier for s in tally.samples]

    def recoveries(self) -> Recoveries:
        """How reads got around the bad copies they met."""
        with self._lock:
            return Recoveries(
                corruptions=sum(self._served.values()),
                from_other_tier=self._served["other_tier"],
                from_ancestor=self._served["ancestor"],
                writes_dropped=self._served["rerun"],
                unserved=self._served["nothing"],
                repaired=dict(self._repaired),
            )

    def plain_data(self) -> list[PlainData]:
        """The types whose values reads handed back as stored data (`PlainData`), first met first."""
        with self._lock:
            return list(self._plain.values())

    def corrupt_copies(self) -> list[CorruptCopy]:
        """The last bad copies met (up to 100), oldest first."""
        with self._lock:
            return list(self._copies)

    def backlog(self) -> Lag | None:
        """What the shared tiers are owed now (`DurableSaver.lag`, summed over
        the savers this hook watches); None if it watches none."""
        return self._watched.total()

    def _stats(self, tier: str, ops: Sequence[str], label: str) -> OpStats:
        with self._lock:
            tallies = [self._tallies[(tier, o)] for o in ops if (tier, o) in self._tallies]
            outcomes: Counter[str] = Counter()
            for tally in tallies:
                outcomes.update(tally.outcomes)
            samples = sorted(s for tally in tallies for s in tally.samples)
            calls = sum(t.calls for t in tallies)
            seconds = sum(t.seconds for t in tallies)
        return OpStats(
            tier=tier,
            op=label,
            calls=calls,
            ok=outcomes["ok"],
            misses=outcomes["miss"],
            errors=outcomes["error"],
            unavailable=outcomes["unavailable"],
            seconds=seconds,
            p50=percentile(samples, 0.50),
            p95=percentile(samples, 0.95),
            p99=percentile(samples, 0.99),
            max_seconds=samples[-1] if samples else None,
        )

    def __str__(self) -> str:
        """A table: one line per tier and operation, latencies in milliseconds."""
        lines = [
            f"{'tier':<9}{'op':<20}{'calls':>7}{'ok':>7}{'miss':>6}{'err':>5}{'down':>6}{'p50 ms':>9}{'p95 ms':>9}"
        ]
        for s in self.ops():
            p50 = f"{s.p50 * 1000:9.3f}" if s.p50 is not None else f"{'-':>9}"
            p95 = f"{s.p95 * 1000:9.3f}" if s.p95 is not None else f"{'-':>9}"
            lines.append(
                f"{s.tier:<9}{s.op:<20}{s.calls:>7}{s.ok:>7}{s.misses:>6}{s.errors:>5}{s.unavailable:>6}{p50}{p95}"
            )
        r = self.recoveries()
        if r.corruptions:
            lines.append(
                f"bad copies: {r.corruptions} (from another tier {r.from_other_tier}, from an ancestor "
                f"{r.from_ancestor}, writes dropped {r.writes_dropped}, unserved {r.unserved}); repaired: "
                + (", ".join(f"{t} {n}" for t, n in sorted(r.repaired.items())) or "none")
            )
        return "\n".join(lines)


# -- OpenTelemetry ----------------------------------------------------------------------------


class OpenTelemetryMetrics:
    """A `MetricsHook` recording to OpenTelemetry instruments:

    - ``langgraph_durable.tier.duration`` (histogram, seconds; attributes
      ``tier``, ``op``, ``outcome``): every tier call; its count per outcome
      gives calls, hits, misses, errors and outages;
    - ``langgraph_durable.corruptions`` (counter; ``tier``, ``kind``,
      ``served``): bad copies met by reads;
    - ``langgraph_durable.fallbacks`` (counter; ``tier``, ``kind``,
      ``served``: ``other_tier`` or ``ancestor``): reads served something else
      in place of a bad copy;
    - ``langgraph_durable.repairs`` (counter; ``tier``, ``kind``): bad copies
      replaced by read-repair;
    - ``langgraph_durable.journal.backlog`` (observable gauge, records;
      ``tier``) and ``langgraph_durable.journal.backlog_age`` (seconds): what
      the shared tiers are owed (`DurableSaver.lag`), read at each collection.

    `meter`: the meter to create them on (default: the global meter
    provider's ``langgraph_durable`` meter). Raises `ConfigError` when
    ``opentelemetry-api`` is not installed (``pip install 'langgraph-durable[otel]'``).
    """

    def __init__(self, meter: Any = None) -> None:
        try:
            from opentelemetry import metrics as otel
        except ImportError as exc:
            raise ConfigError(
                "OpenTelemetryMetrics needs opentelemetry-api: pip install 'langgraph-durable[otel]' "
                "(or use langgraph_durable.metrics.TierStats, which needs nothing)."
            ) from exc
        self._observation = otel.Observation
        if meter is None:
            from ._version import __version__

            meter = otel.get_meter("langgraph_durable", __version__)
        self.meter = meter
        self._watched = _Watched()
        description = "Time taken by one call to one tier, by outcome (ok, miss, error, unavailable)"
        try:
            self.duration = meter.create_histogram(
                "langgraph_durable.tier.duration",
                unit="s",
                description=description,
                explicit_bucket_boundaries_advisory=list(DURATION_BUCKETS_S),
            )
        except TypeError:  # opentelemetry-api before 1.23 takes no bucket advice
            self.duration = meter.create_histogram("langgraph_durable.tier.duration", unit="s", description=description)
        self.corruptions = meter.create_counter(
            "langgraph_durable.corruptions", unit="{copy}", description="Bad copies of records met by reads"
        )
        self.fallbacks = meter.create_counter(
            "langgraph_durable.fallbacks",
            unit="{read}",
            description="Reads that served another tier's copy or an ancestor checkpoint in place of a bad copy",
        )
        self.repairs = meter.create_counter(
            "langgraph_durable.repairs", unit="{copy}", description="Bad copies replaced by read-repair"
        )
        self.plain_data = meter.create_counter(
            "langgraph_durable.plain_data",
            unit="{type}",
            description="Types whose values reads handed back as stored data (never importable by their name)",
        )
        meter.create_observable_gauge(
            "langgraph_durable.journal.backlog",
            callbacks=[self._observe_records],
            unit="{record}",
            description="Records the shared tiers are owed (write-behind, or a tier that was down)",
        )
        meter.create_observable_gauge(
            "langgraph_durable.journal.backlog_age",
            callbacks=[self._observe_age],
            unit="s",
            description="Age of the oldest record the shared tiers are owed",
        )

    def __call__(self, event: MetricsEvent, /) -> None:
        if isinstance(event, TierCall):
            self.duration.record(event.seconds, {"tier": event.tier, "op": event.op, "outcome": event.outcome})
        elif isinstance(event, CorruptCopy):
            attributes = {"tier": event.tier, "kind": event.kind, "served": event.served}
            self.corruptions.add(1, attributes)
            if event.fallback:
                self.fallbacks.add(1, attributes)
            if event.repaired:
                self.repairs.add(1, {"tier": event.tier, "kind": event.kind})
        elif isinstance(event, PlainData):
            self.plain_data.add(1, {"type": event.type_name})

    def watch(self, backlog: Backlog, /) -> None:
        """Called by the saver (`WatchesBacklog`): the backlog gauges ask it."""
        self._watched.add(backlog)

    def _lag(self) -> Lag | None:
        return self._watched.total()

    def _observe_records(self, options: Any = None) -> Iterable[Any]:
        lag = self._lag()
        if lag is None:
            return []
        return [self._observation(n, {"tier": tier}) for tier, n in lag.by_tier.items()]

    def _observe_age(self, options: Any = None) -> Iterable[Any]:
        lag = self._lag()
        return [] if lag is None else [self._observation(lag.seconds)]
