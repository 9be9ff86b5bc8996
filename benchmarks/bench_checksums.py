#!/usr/bin/env python
"""What the record checksums cost, measured side by side in one run.

Every record ``DurableSaver`` stores is serialized once (``serde.dumps_typed``)
and sealed into an envelope by ``langgraph_durable.model.records.seal`` (SHA-256 truncated to 128 bits
over the record's logical key, type tag and payload; HMAC-SHA256 when a
signing key is set). Every read verifies it with ``records.open_envelope``.

Two parts, one process, one run:

* micro: for states of ~1 KB, ~100 KB and ~1 MB (a dict holding a list of
  message strings), the median time of ``dumps_typed`` alone against
  ``dumps_typed`` + ``seal``, and of ``loads_typed`` alone against
  ``open_envelope`` + ``loads_typed``, without and with a 32-byte signing key.
* end to end: median ``put`` and ``get_tuple`` (latest) latency of a sync
  ``DurableSaver`` over sqlite and over sqlite+redis+postgres, for the same
  states, with checksums on (the default), on with a 32-byte ``signing_key``,
  and "off".

"Off" is NOT a product option. This script makes it by monkeypatching
``langgraph_durable.model.codec.seal`` and ``langgraph_durable.model.codec.open_envelope``
inside its own process with stand-ins that keep the envelope's byte layout and
copies but write a zero digest and skip the digest compare. The patch is set
only around the "off" saver's calls and removed again.

Samples of the variants are interleaved (round-robin, rotating order) so that
drift of the machine hits all of them alike. All timings use
``time.perf_counter``; nothing is asserted.

Servers: Postgres from LANGGRAPH_DURABLE_TEST_POSTGRES_URL and Redis from
LANGGRAPH_DURABLE_TEST_REDIS_URL (loopback only). A run creates one fresh
``lgd_cbench_<run id>`` database and the Redis key prefix
``lgd_cbench_<run id>_``, and removes both at the end, even on error, Ctrl-C
or SIGTERM.

    .venv/bin/python benchmarks/bench_checksums.py --quick
    .venv/bin/python benchmarks/bench_checksums.py --write    # RESULTS_CHECKSUMS.md
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import gc
import math
import os
import platform
import random
import shlex
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _env import (  # benchmarks/ is on sys.path when run as a script
    REDIS_URL,
    Resources,
    cpu_model,
    exit_on_sigterm,
    git_state,
    package_versions,
    python_version,
)
from langgraph.checkpoint.base import empty_checkpoint

import langgraph_durable.model.codec as codec_mod
from langgraph_durable import DurableSaver, Memory, Tiers
from langgraph_durable.model.records import (
    DIGEST_SIZE,
    FORMAT_VERSION,
    MAGIC,
    BadRecord,
    blob_context,
    open_envelope,
    open_envelope_any,
    seal,
)

HERE = Path(__file__).resolve().parent
NAME = "lgd_cbench"  # prefix of the database, Redis keys and temp dir a run creates
PACKAGES = [
    "langgraph-durable",
    "langgraph",
    "langgraph-checkpoint",
    "ormsgpack",
    "psycopg",
    "psycopg-binary",
    "redis",
]

SIGNING_KEY = bytes(range(1, 33))  # 32 bytes; the cost does not depend on the key's value
SIZES: list[tuple[str, int]] = [("1 KB", 1024), ("100 KB", 100 * 1024), ("1 MB", 1024 * 1024)]
MSG_CHARS = 200  # one chat message
VARIANTS = ["on", "key", "off"]
VARIANT_LABEL = {"on": "on (default)", "key": "on + signing key", "off": "off (patch)"}


# -- statistics ------------------------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else math.nan


def pct(with_: float, without: float) -> str:
    if not (without > 0) or math.isnan(with_):
        return "n/a"
    return f"{(with_ - without) / without * 100:+.1f}%"


def paired_delta(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Median of the per-round differences a[i] - b[i], with a ~95% distribution-free CI
    (order statistics of the differences; normal approximation to the binomial)."""
    d = sorted(x - y for x, y in zip(a, b))
    n = len(d)
    if n == 0:
        return math.nan, math.nan, math.nan
    half = 1.96 * math.sqrt(n) / 2
    lo, hi = max(0, math.floor(n / 2 - half)), min(n - 1, math.ceil(n / 2 + half) - 1)
    return statistics.median(d), d[lo], d[hi]


def us(x: float) -> str:
    if math.isnan(x):
        return "n/a"
    v = x * 1e6
    return f"{v:,.2f}" if abs(v) < 10 else f"{v:,.1f}" if abs(v) < 1000 else f"{v:,.0f}"


def ms(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{x * 1e3:.3f}"


def kib(n: int) -> str:
    return f"{n / 1024:,.1f} KiB"


# -- the workload ----------------------------------------------------------------------------

_TEXT = (
    "the of and to in is that for it as with was on be by this are from at or an have not which but "
    "graph node state checkpoint message tool call result agent user assistant reply step thread "
    "value please could would should data table query answer question context summary plan next"
)


def make_messages(target_bytes: int, seed: int = 7) -> list[str]:
    """Message strings whose serialized list is about `target_bytes` (msgpack adds ~3 bytes each)."""
    rng = random.Random(seed)
    vocabulary = _TEXT.split()
    out: list[str] = []
    total = 0
    while total < target_bytes or not out:
        words: list[str] = []
        n = 0
        while n < MSG_CHARS:
            w = rng.choice(vocabulary)
            words.append(w)
            n += len(w) + 1
        msg = f"[{len(out):05d}] " + " ".join(words)
        msg = msg[:MSG_CHARS]
        out.append(msg)
        total += len(msg.encode()) + 3
    return out


def make_state(messages: list[str], step: int) -> dict[str, Any]:
    """A LangGraph state: its keys are the graph's channels."""
    return {"messages": messages, "step": step}


# -- "off": a benchmark-only stand-in for the checksum ---------------------------------------

_ZERO_DIGEST = bytes(DIGEST_SIZE)
_HEADER = len(MAGIC) + 2


class NoHashPatch:
    """Pass-through `seal` / `open_envelope`: same envelope layout and copies, no hashing.

    NOT a product option: applied only inside this benchmark process, only
    around the "off" saver's calls, by replacing the names that
    `langgraph_durable.model.codec` imported from `.records`.
    """

    def __init__(self) -> None:
        self.seals = 0
        self.opens = 0
        self._saved: tuple[Any, Any] | None = None

    def seal(self, context: str, type_tag: str, payload: bytes, *, key: bytes = b"") -> bytes:
        self.seals += 1
        tag = type_tag.encode()
        if len(tag) > 255:
            raise ValueError(f"serializer type tag too long: {type_tag!r}")
        return b"".join((MAGIC, bytes((FORMAT_VERSION, len(tag))), tag, _ZERO_DIGEST, payload))

    def open_envelope_any(self, context: str, data: bytes, keys: Any) -> tuple[str, bytes, int]:
        tag, payload = self.open_envelope(context, data)
        return tag, payload, 0

    def open_envelope(self, context: str, data: bytes, *, key: bytes = b"") -> tuple[str, bytes]:
        self.opens += 1
        if len(data) < _HEADER or data[: len(MAGIC)] != MAGIC:
            raise BadRecord("not an envelope (bad magic)")
        fmt, tag_len = data[len(MAGIC)], data[len(MAGIC) + 1]
        if fmt != FORMAT_VERSION:
            raise BadRecord(f"unknown envelope format {fmt}")
        tag_end = _HEADER + tag_len
        payload_start = tag_end + DIGEST_SIZE
        if len(data) < payload_start:
            raise BadRecord("truncated envelope")
        tag = bytes(data[_HEADER:tag_end])
        payload = bytes(data[payload_start:])  # the real one copies too
        return tag.decode(), payload

    def apply(self) -> None:
        assert self._saved is None
        self._saved = (codec_mod.seal, codec_mod.open_envelope_any)
        codec_mod.seal = self.seal  # type: ignore[assignment]
        codec_mod.open_envelope_any = self.open_envelope_any  # type: ignore[assignment]

    def remove(self) -> None:
        assert self._saved is not None
        codec_mod.seal, codec_mod.open_envelope_any = self._saved
        self._saved = None

    @contextlib.contextmanager
    def applied(self, on: bool = True) -> Iterator[None]:
        if not on:
            yield
            return
        self.apply()
        try:
            yield
        finally:
            self.remove()


NOHASH = NoHashPatch()


# -- micro -----------------------------------------------------------------------------------


@dataclass
class MicroRow:
    size_label: str
    record_bytes: int
    t: dict[str, float] = field(default_factory=dict)  # variant -> median seconds per call


def _inner_count(fn: Callable[[], Any], target_s: float) -> int:
    fn()
    t0 = time.perf_counter()
    fn()
    one = time.perf_counter() - t0
    return max(1, min(10_000, math.ceil(target_s / max(one, 1e-8))))


def run_micro(serde: Any, sizes: list[tuple[str, int]], repeats: int, sample_s: float) -> list[MicroRow]:
    rows = []
    for label, target in sizes:
        state = make_state(make_messages(target), 1)
        ctx = blob_context("bench-thread", "", "messages", f"{1:032}.{0.5:016}")
        tag, payload = serde.dumps_typed(state)
        env = {k: seal(ctx, tag, payload, key=k) for k in (b"", SIGNING_KEY)}
        env_off = NOHASH.seal(ctx, tag, payload)

        def dumps() -> None:
            serde.dumps_typed(state)

        def dumps_seal(key: bytes) -> Callable[[], None]:
            def f() -> None:
                t, p = serde.dumps_typed(state)
                seal(ctx, t, p, key=key)

            return f

        def seal_only(key: bytes) -> Callable[[], None]:
            return lambda: seal(ctx, tag, payload, key=key)

        def loads() -> None:
            serde.loads_typed((tag, payload))

        def open_loads(key: bytes) -> Callable[[], None]:
            def f() -> None:
                t, p = open_envelope(ctx, env[key], key=key)
                serde.loads_typed((t, p))

            return f

        def open_only(key: bytes) -> Callable[[], None]:
            return lambda: open_envelope(ctx, env[key], key=key)

        fns: dict[str, Callable[[], Any]] = {
            "dumps": dumps,
            "dumps+seal": dumps_seal(b""),
            "dumps+seal/key": dumps_seal(SIGNING_KEY),
            "seal": seal_only(b""),
            "seal/key": seal_only(SIGNING_KEY),
            "seal/off": lambda: NOHASH.seal(ctx, tag, payload),
            "loads": loads,
            "open+loads": open_loads(b""),
            "open+loads/key": open_loads(SIGNING_KEY),
            "open": open_only(b""),
            "open/key": open_only(SIGNING_KEY),
            "open/off": lambda: NOHASH.open_envelope(ctx, env_off),
        }
        # sanity: the envelopes verify and round-trip
        for k in (b"", SIGNING_KEY):
            assert serde.loads_typed(open_envelope(ctx, env[k], key=k)) == state
        inner = {name: _inner_count(fn, sample_s) for name, fn in fns.items()}
        samples: dict[str, list[float]] = {name: [] for name in fns}
        names = list(fns)
        gc.collect()
        gc_was = gc.isenabled()
        gc.disable()  # as timeit does
        try:
            for r in range(repeats):
                k = r % len(names)
                for name in names[k:] + names[:k]:
                    fn, n = fns[name], inner[name]
                    t0 = time.perf_counter()
                    for _ in range(n):
                        fn()
                    samples[name].append((time.perf_counter() - t0) / n)
        finally:
            if gc_was:
                gc.enable()
        row = MicroRow(label, len(payload), {name: median(s) for name, s in samples.items()})
        rows.append(row)
        print(
            f"  micro {label:>6}: dumps {us(row.t['dumps'])} µs, +seal {us(row.t['dumps+seal'])} µs; "
            f"loads {us(row.t['loads'])} µs, open+loads {us(row.t['open+loads'])} µs",
            flush=True,
        )
    return rows


def render_micro(rows: list[MicroRow]) -> str:
    out = [
        "### Micro: serialize + seal (write path), median per call",
        "",
        "| state | serialized | signing key | dumps_typed (µs) | dumps_typed + seal (µs) | overhead "
        "| seal alone (µs) | seal, hash skipped (µs) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for key_label, sfx in (("none", ""), ("32 bytes", "/key")):
            out.append(
                f"| {r.size_label} | {kib(r.record_bytes)} | {key_label} | {us(r.t['dumps'])} "
                f"| {us(r.t['dumps+seal' + sfx])} | {pct(r.t['dumps+seal' + sfx], r.t['dumps'])} "
                f"| {us(r.t['seal' + sfx])} | {us(r.t['seal/off'])} |"
            )
    out += [
        "",
        "### Micro: open + deserialize (read path), median per call",
        "",
        "| state | serialized | signing key | loads_typed (µs) | open_envelope + loads_typed (µs) | overhead "
        "| open_envelope alone (µs) | open, hash skipped (µs) |",
        "|---|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        for key_label, sfx in (("none", ""), ("32 bytes", "/key")):
            out.append(
                f"| {r.size_label} | {kib(r.record_bytes)} | {key_label} | {us(r.t['loads'])} "
                f"| {us(r.t['open+loads' + sfx])} | {pct(r.t['open+loads' + sfx], r.t['loads'])} "
                f"| {us(r.t['open' + sfx])} | {us(r.t['open/off'])} |"
            )
    big = max(rows, key=lambda r: r.record_bytes)
    hash_s = big.t["seal"] - big.t["seal/off"]
    if hash_s > 0:
        out += [
            "",
            f"SHA-256 throughput implied by the {big.size_label} row (seal minus the no-hash seal): "
            f"~{big.record_bytes / hash_s / 1e9:.2f} GB/s.",
        ]
    return "\n".join(out) + "\n"


# -- end to end ------------------------------------------------------------------------------


@dataclass
class E2E:
    tiers: str
    size_label: str
    record_bytes: int  # serialized `messages` channel
    puts: int
    gets: int
    put_s: dict[str, list[float]] = field(default_factory=dict)
    get_s: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class Params:
    micro_repeats: int
    sample_s: float
    counts: dict[str, tuple[int, int]]  # size label -> (puts, gets) per variant
    warmup: int


def open_savers(tiers: str, res: Resources) -> dict[str, DurableSaver]:
    # One store per variant: a saver with a signing key refuses a store that
    # unsigned savers wrote to (a configuration error, found at setup).
    # No read cache (SQLite alone keeps a read while the file is unchanged):
    # every get_tuple opens its records, which is what is measured.
    savers: dict[str, DurableSaver] = {}
    for v in VARIANTS:
        kw: dict[str, Any] = {
            "sqlite": str(res.tmp_path / f"{tiers.replace('+', '_')}_{v}.sqlite"),
            "memory": Memory(read_cache_bytes=0),
        }
        if "redis" in tiers:
            kw["redis"] = REDIS_URL
            kw["tiers"] = Tiers(redis_key_prefix=res.new_prefix(v))
        if "postgres" in tiers:
            kw["postgres"] = res.new_database(v)
        if v == "key":
            kw["signing_key"] = SIGNING_KEY
        saver = DurableSaver(**kw)
        saver.setup()
        savers[v] = saver
    return savers


def run_e2e(tiers: str, res: Resources, params: Params, problems: list[str]) -> list[E2E]:
    out: list[E2E] = []
    savers = open_savers(tiers, res)
    try:
        serde = savers["on"].serde
        for label, target in SIZES:
            messages = make_messages(target)
            n_puts, n_gets = params.counts[label]
            row = E2E(tiers, label, len(serde.dumps_typed(messages)[1]), n_puts, n_gets)
            t_block = time.perf_counter()
            parent: dict[str, dict[str, Any]] = {}
            versions: dict[str, str | None] = dict.fromkeys(VARIANTS)
            tid = {v: f"{v}-{label.replace(' ', '')}-{res.run_id}" for v in VARIANTS}

            def one_put(v: str, step: int) -> float:
                saver = savers[v]
                version = saver.get_next_version(versions[v], None)
                versions[v] = version
                cp = empty_checkpoint()
                cp["channel_values"] = make_state(messages, step)
                cp["channel_versions"] = {"messages": version, "step": version}
                config = parent.get(v) or {"configurable": {"thread_id": tid[v], "checkpoint_ns": ""}}
                metadata: Any = {"source": "loop", "step": step, "parents": {}}
                new_versions = {"messages": version, "step": version}
                with NOHASH.applied(v == "off"):
                    t0 = time.perf_counter()
                    parent[v] = saver.put(config, cp, metadata, new_versions)
                    return time.perf_counter() - t0

            def one_get(v: str) -> tuple[float, Any]:
                config = {"configurable": {"thread_id": tid[v], "checkpoint_ns": ""}}
                with NOHASH.applied(v == "off"):
                    t0 = time.perf_counter()
                    tup = savers[v].get_tuple(config)
                    return time.perf_counter() - t0, tup

            for v in VARIANTS:
                row.put_s[v] = []
                row.get_s[v] = []
            gc.collect()
            step = 0
            for i in range(params.warmup + n_puts):
                k = i % len(VARIANTS)
                for v in VARIANTS[k:] + VARIANTS[:k]:
                    t = one_put(v, step)
                    if i >= params.warmup:
                        row.put_s[v].append(t)
                step += 1
            last: dict[str, Any] = {}
            for i in range(params.warmup + n_gets):
                k = i % len(VARIANTS)
                for v in VARIANTS[k:] + VARIANTS[:k]:
                    t, last[v] = one_get(v)
                    if i >= params.warmup:
                        row.get_s[v].append(t)
            for v in VARIANTS:
                tup = last.get(v)
                values = tup.checkpoint["channel_values"] if tup is not None else {}
                if values.get("messages") != messages or values.get("step") != step - 1:
                    problems.append(
                        f"{tiers} {label} {v}: get_tuple returned the wrong state "
                        f"(step {values.get('step')!r}, {len(values.get('messages') or [])} messages; "
                        f"expected step {step - 1}, {len(messages)} messages)"
                    )
            out.append(row)
            meds = "  ".join(f"{v}: put {ms(median(row.put_s[v]))} get {ms(median(row.get_s[v]))}" for v in VARIANTS)
            print(f"  {tiers:22s} {label:>6}  {meds}  (ms, {time.perf_counter() - t_block:.1f} s)", flush=True)
    finally:
        for saver in savers.values():
            try:
                saver.close()
            except Exception as exc:
                problems.append(f"closing a {tiers} saver failed: {type(exc).__name__}: {exc}")
    return out


def render_e2e(rows: list[E2E], micro: dict[str, MicroRow]) -> str:
    out = [
        "### End to end: sync `DurableSaver.put` / `get_tuple` (latest), median latency",
        "",
        "\\* off = benchmark-only monkeypatch of `langgraph_durable.model.codec.seal` / `open_envelope` "
        "(same envelope bytes, zero digest, no compare); it is **not a product option**.",
        "",
        "| tiers | state | `messages` record | op | n | on (ms) | on + key (ms) | off\\* (ms) "
        "| on vs off | on + key vs off | on - off, paired (µs) [95% CI] | hashing that record, from micro (µs) |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        m = micro.get(r.size_label)
        for op, data, n in (("put", r.put_s, r.puts), ("get_tuple", r.get_s, r.gets)):
            on, key, off = (median(data[v]) for v in VARIANTS)
            hint = "n/a"
            if m is not None:
                a, b = (m.t["seal"], m.t["seal/off"]) if op == "put" else (m.t["open"], m.t["open/off"])
                hint = us(a - b)
            d, lo, hi = paired_delta(data["on"], data["off"])
            out.append(
                f"| {r.tiers} | {r.size_label} | {kib(r.record_bytes)} | {op} | {n} | {ms(on)} | {ms(key)} "
                f"| {ms(off)} | {pct(on, off)} | {pct(key, off)} | {us(d)} [{us(lo)}, {us(hi)}] | {hint} |"
            )
    out += [
        "",
        "- *on vs off* compares medians. *on - off, paired* is the median of the per-round differences "
        "(the variants run interleaved, one call each per round), with a distribution-free ~95% confidence "
        "interval: an interval that spans 0 means the difference is within this run's noise.",
        "- *hashing that record, from micro*: seal (put) or open_envelope (get_tuple) minus the no-hash "
        "stand-in, measured in the micro part for a state of that size. Each put also seals, and each "
        "get_tuple also opens, two small records (the `step` channel and the checkpoint itself), a few µs each.",
    ]
    return "\n".join(out) + "\n"


def headline(rows: list[E2E], micro_rows: list[MicroRow]) -> str:
    lines = ["### Headline", ""]
    for m in micro_rows:
        lines.append(
            f"- micro {m.size_label}: seal adds {pct(m.t['dumps+seal'], m.t['dumps'])} to dumps_typed "
            f"({pct(m.t['dumps+seal/key'], m.t['dumps'])} keyed); open_envelope adds "
            f"{pct(m.t['open+loads'], m.t['loads'])} to loads_typed ({pct(m.t['open+loads/key'], m.t['loads'])} keyed)"
        )
    for r in rows:
        on_p, key_p, off_p = (median(r.put_s[v]) for v in VARIANTS)
        on_g, key_g, off_g = (median(r.get_s[v]) for v in VARIANTS)
        lines.append(
            f"- {r.tiers} {r.size_label}: put {pct(on_p, off_p)} ({pct(key_p, off_p)} keyed), "
            f"get_tuple {pct(on_g, off_g)} ({pct(key_g, off_g)} keyed) vs off"
        )
    return "\n".join(lines) + "\n"


# -- report ----------------------------------------------------------------------------------


def header(
    args: argparse.Namespace, params: Params, res: Resources, started: dt.datetime, wall: float, code: str
) -> str:
    cmd = "python benchmarks/bench_checksums.py" + "".join(" " + shlex.quote(a) for a in sys.argv[1:])
    servers = ", ".join(f"{k} {v}" for k, v in res.server_versions.items()) or "none reachable"
    counts = ", ".join(f"{k}: {p} puts + {g} get_tuple" for k, (p, g) in params.counts.items())
    return "\n".join(
        [
            "# Checksum cost benchmark results",
            "",
            f"- Date: {started.strftime('%Y-%m-%d %H:%M:%S %Z')} (run took {wall:.0f} s)",
            f"- Command: `{cmd}`" + (" (quick mode)" if args.quick else ""),
            f"- Machine: nproc {len(os.sched_getaffinity(0))} ({os.cpu_count()} CPUs), {cpu_model()}, "
            f"{platform.system()} {platform.release()}",
            f"- Python: {python_version()}",
            f"- Code measured: langgraph_durable at git {code} (at start of run)",
            f"- Packages: {package_versions(PACKAGES)}",
            f"- Servers (loopback): {servers}",
            f"- State: `{{'messages': [str, ...], 'step': int}}`, ~{MSG_CHARS}-character message strings, "
            "serialized with the saver's default serde (JsonPlusSerializer, msgpack).",
            f"- Micro: median of {params.micro_repeats} samples per variant, each sample a loop timed long "
            f"enough (~{params.sample_s * 1e6:.0f} µs) to dwarf the clock; variants round-robin; GC off while timing.",
            f"- End to end: per variant and state, {counts}, after {params.warmup} untimed rounds; each put "
            "is a new checkpoint (child of the previous one) whose two channels are both new versions, so a "
            "put seals 3 records and a get_tuple opens 3; the three variants run interleaved, each on its "
            "own saver and storage (own SQLite file, own Redis key prefix, own thread ids in one fresh "
            "Postgres database).",
            '- "off" is a monkeypatch inside this benchmark process only, not a product option: '
            "DurableSaver has no way to turn checksums off.",
            "- Figures are medians; they are measurements, not pass/fail thresholds.",
        ]
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a fast run (~10 s) to check that everything works")
    p.add_argument("--micro-repeats", type=int, help="samples per micro variant (default 150; quick 15)")
    p.add_argument(
        "--scale", type=float, default=1.0, help="multiply the end-to-end put/get_tuple counts (default 1.0)"
    )
    p.add_argument("--no-servers", action="store_true", help="skip the sqlite+redis+postgres configuration")
    p.add_argument(
        "--output",
        default=str(HERE / "RESULTS_CHECKSUMS.md"),
        help="markdown file to overwrite (default benchmarks/RESULTS_CHECKSUMS.md)",
    )
    p.add_argument("--write", action="store_true", help="also overwrite the results file")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    q = args.quick
    base = (
        {"1 KB": (15, 15), "100 KB": (8, 8), "1 MB": (4, 4)}
        if q
        else {"1 KB": (400, 400), "100 KB": (200, 200), "1 MB": (80, 80)}
    )
    params = Params(
        micro_repeats=args.micro_repeats or (15 if q else 150),
        sample_s=0.0005 if q else 0.001,
        counts={k: (max(1, round(p * args.scale)), max(1, round(g * args.scale))) for k, (p, g) in base.items()},
        warmup=1 if q else 3,
    )

    exit_on_sigterm()  # so the finally below still drops the database and keys

    started = dt.datetime.now(dt.UTC)
    code = git_state(HERE.parent)
    t_run = time.perf_counter()
    run_id = uuid.uuid4().hex[:10]
    res = Resources(NAME, run_id)
    problems: list[str] = []
    micro_rows: list[MicroRow] = []
    e2e_rows: list[E2E] = []
    notes: list[str] = []
    try:
        print(f"run {run_id}: micro", flush=True)
        with DurableSaver(sqlite=str(res.tmp_path / "serde_only.sqlite")) as serde_saver:
            micro_rows = run_micro(serde_saver.serde, SIZES, params.micro_repeats, params.sample_s)
        NOHASH.seals = NOHASH.opens = 0  # from here on, count only the end-to-end calls
        print("end to end", flush=True)
        e2e_rows += run_e2e("sqlite", res, params, problems)
        if args.no_servers:
            problems.append("sqlite+redis+postgres skipped (--no-servers)")
        elif res.probe():
            e2e_rows += run_e2e("sqlite+redis+postgres", res, params, problems)
        else:
            problems.extend(f"sqlite+redis+postgres skipped: {why}" for why in res.down)
    finally:
        notes = res.cleanup()
        if codec_mod.seal is not seal or codec_mod.open_envelope_any is not open_envelope_any:
            problems.append("the no-hash patch was still applied at the end (bug in this script)")
    wall = time.perf_counter() - t_run
    # each off put seals 3 records; each off get_tuple opens the checkpoint
    # as every tier sent it (with its head) and the 2 channel values
    want_seals = sum(3 * (params.warmup + r.puts) for r in e2e_rows)
    want_opens = sum((len(r.tiers.split("+")) + 2) * (params.warmup + r.gets) for r in e2e_rows)
    if (NOHASH.seals, NOHASH.opens) != (want_seals, want_opens):
        problems.append(
            f"the no-hash patch handled {NOHASH.seals} seals / {NOHASH.opens} opens, expected "
            f"{want_seals} / {want_opens}: the 'off' figures may not be what they claim"
        )
    problems += [f"cleanup: {n}" for n in notes]

    micro_by = {m.size_label: m for m in micro_rows}
    body = "\n".join([headline(e2e_rows, micro_rows), render_micro(micro_rows), render_e2e(e2e_rows, micro_by)])
    checks = (
        f'End to end, the "off" patch handled {NOHASH.seals:,} seals and {NOHASH.opens:,} opens '
        f"(expected {want_seals:,} / {want_opens:,}: 3 records per put; per get_tuple, the checkpoint as "
        "each tier sent it and 2 channel values); it was applied "
        "only around the off saver's calls and removed after each. Every variant's last get_tuple "
        "returned the state last put unless listed below."
    )
    body += "\n### Checks\n\n" + checks + "\n\n" + ("\n".join(f"- {p}" for p in problems) or "No problems.") + "\n"
    print()
    print(body)
    if args.write:
        doc = header(args, params, res, started, wall, code) + "\n\n" + body
        Path(args.output).write_text(doc)
        print(f"wrote {args.output}")
    print(f"total {wall:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
