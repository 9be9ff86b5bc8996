"""Small runs of the benchmarks: they work end to end and their checks pass.

Timings are never asserted (the machine's noise is larger than any
threshold worth having); what is asserted is that every measurement ran on
real servers, read back what it wrote, and cleaned up after itself.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import POSTGRES_URL, REDIS_URL

ROOT = Path(__file__).resolve().parent.parent


def run_benchmark(script: str, *args: str) -> str:
    """Run `benchmarks/<script>` on the test servers; its output (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        cwd=ROOT,
        env={
            **os.environ,
            "LANGGRAPH_DURABLE_TEST_POSTGRES_URL": POSTGRES_URL,
            "LANGGRAPH_DURABLE_TEST_REDIS_URL": REDIS_URL,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_a_small_growth_benchmark_runs_and_every_check_passes() -> None:
    tiny = [
        "--quick", "--long-steps", "20", "--threads", "1", "--reads", "5", "--history", "60",
        "--list-reads", "3", "--concurrent", "3", "--rounds", "1", "--resume-repeats", "1",
        "--only", "sqlite_stock,pg_stock,d_s,d_srp",
    ]  # fmt: skip
    out = run_benchmark("bench_growth.py", *tiny)
    problems = out[out.rindex("## Problems") :]
    assert "None." in problems, problems
    for section in ("Time per super-step", "get_state", "limit=10", "concurrent", "restart", "Bytes stored"):
        assert section in out, section
    assert "Durable sqlite+redis+postgres" in out


def test_the_checksum_benchmark_runs_and_its_patch_counts_add_up() -> None:
    out = run_benchmark("bench_checksums.py", "--quick")
    assert "No problems." in out[out.rindex("### Checks") :]
    assert "sqlite+redis+postgres" in out


def test_the_hand_off_benchmark_runs_and_each_replica_reads_the_others_state() -> None:
    out = run_benchmark("bench_handoff.py", "--threads", "3", "--takeovers", "1")
    assert "None." in out[out.rindex("## Problems") :]
    # Every thread A kept (the default) was handed off to B: 3 timed and 3 untimed.
    assert "| Durable sqlite+redis+postgres, A keeping the lease (the default) |" in out
    assert "| Durable sqlite+redis+postgres, A with Leases(linger=0) | " in out
    assert out.count("| 6 |") == 2, out
    # A killed keeper was taken over, and B's run continued A's (checked, else a problem).
    assert "| 1 | " in out[out.index("### A replica killed while it keeps a lease") :]


def test_the_paired_benchmark_runs_every_saver_in_every_round_and_checks_each_read() -> None:
    out = run_benchmark(
        "bench_paired.py", "--rounds", "1", "--reads", "2", "--pages", "2", "--concurrent", "3", "--conc-rounds", "1"
    )
    assert "None." in out[out.rindex("## Problems") :]
    for face, name in (("Sync face", "PostgresSaver"), ("Async face", "AsyncPostgresSaver")):
        for size in (300, 4096):  # both sizes by default, a table each
            heading = out.index(f"## {face} (")
            table = out[out.index(f"{size}-byte messages", heading) :]
            table = table[: table.index("\n## ")]
            # Both Postgres references, each dividing by itself, and every DurableSaver row.
            conn = next(line for line in table.splitlines() if line.startswith(f"| {name} (from_conn_string) | "))
            pool = next(line for line in table.splitlines() if line.startswith(f"| {name} (pool of 10) | "))
            assert conn.split(" | ")[2] == "1.00x" and pool.split(" | ")[3] == "1.00x"
            assert "| Durable sqlite+redis+postgres Leases(linger=0) |" in table
            assert "| Durable sqlite+redis+postgres write=local Tiers(local_fsync=False) |" in table
    for size in (300, 4096):
        concurrent = out[out.index(f"3 concurrent `ainvoke` runs of 10 super-steps, {size}-byte messages") :]
        assert "(reference: AsyncPostgresSaver on a pool of 10)" in concurrent.splitlines()[0]
        for row in ("AsyncPostgresSaver (pool of 10)", "AsyncPostgresSaver (from_conn_string)"):
            assert f"| {row} | " in concurrent
        assert "| Durable sqlite+redis+postgres write=local |" in concurrent
    targets = out[out.index("## Targets") : out.index("## Problems")]
    lines = [line for line in targets.splitlines() if line.startswith("- (")]
    # Targets 2 (all three tiers, and SQLite alone), 3 and 5 per face and size; 4 per size.
    assert [line[:5] for line in lines] == ["- (2)"] * 8 + ["- (3)"] * 4 + ["- (4)"] * 2 + ["- (5)"] * 4
    assert all(line.endswith((": met", ": missed")) for line in lines), lines
    assert "Durable sqlite+redis+postgres write=local " in lines[-1] and "(vs the pool of 10: " in lines[-1]
    assert "wrote " not in out  # the results file is written only with --write


def test_the_paired_benchmark_runs_one_message_size_when_asked() -> None:
    out = run_benchmark(
        "bench_paired.py",
        "--sizes", "4096", "--rounds", "1", "--reads", "1", "--pages", "1", "--concurrent", "2", "--conc-rounds", "1",
    )  # fmt: skip
    assert "None." in out[out.rindex("## Problems") :]
    assert "4096-byte messages" in out and "300-byte messages" not in out
    assert len(re.findall(r"^- \(\d\) .*: (?:met|missed)$", out, re.M)) == 9


def test_the_delta_channel_benchmark_times_cold_and_warm_reads_and_judges_both() -> None:
    out = run_benchmark(
        "bench_delta_channel.py", "--shapes", "100:20,10:12,100:510", "--reads", "3", "--cold", "2", "--cold-long", "1"
    )
    assert "None." in out[out.rindex("## Problems") :]
    assert "cold: the first `get_state` right after each thread's run, over 2 threads;" in out  # the short shapes
    assert "cold: the first `get_state` right after each thread's run, over 1 threads;" in out  # the 510-step one
    assert "| PostgresSaver (from_conn_string) | " in out and "| Durable sqlite+redis+postgres | " in out
    targets = out[out.index("## Targets") : out.index("## Problems")]
    lines = [line for line in targets.splitlines() if line.startswith("- (")]
    # The target is at LangGraph's default frequency (100): the frequency-10 shape is in the tables only.
    assert [line.split(":")[0] for line in lines] == [
        "- (1) DeltaChannel `get_state`, snapshot_frequency=100, 20 steps",
        "- (1) DeltaChannel `get_state`, snapshot_frequency=100, 510 steps",
    ]
    assert all(" cold " in line and " warm " in line and line.endswith(("met", "missed")) for line in lines)


def test_the_step_calls_benchmark_times_each_savers_calls_and_checks_every_run() -> None:
    out = run_benchmark("bench_step_calls.py", "--runs", "2", "--statements", "5")
    for title in ("### InMemorySaver", "### PostgresSaver.from_conn_string", "### DurableSaver sqlite+redis+postgres"):
        assert title in out and "ms of the process's CPU" in out[out.index(title) :].splitlines()[0], title
    assert "| the checkpoint and two values |" in out and "| two pending writes |" in out
    for call in ("| put |", "| put_writes |", "postgres: write_writes", "sqlite: write_checkpoint", "shipped to Redis"):
        assert call in out, call
    assert "### The local SQLite tier's statements (DurableSaver), by kind" in out
    for statement in ("`BEGIN IMMEDIATE`", "`COMMIT`", "`INSERT OR IGNORE INTO lgd_writes (many rows)`", "lgd_journal"):
        assert statement in out, statement
    assert "## Problems\n\nNone." in out


def test_the_step_calls_benchmark_measures_sqlite_alone_on_thread_cpu_clocks() -> None:
    out = run_benchmark("bench_step_calls.py", "--runs", "2", "--tiers", "sqlite", "--clock", "thread")
    assert "tables: each call's thread CPU time" in out.splitlines()[0]
    for title in ("### InMemorySaver", "### SqliteSaver", "### DurableSaver sqlite:"):
        assert title in out, title
    assert "PostgresSaver" not in out and "postgres:" not in out and "The Postgres writes" not in out
    assert "`SELECT … FROM lgd_leases`" in out  # the fence, checked in the write's transaction
    assert "lgd_journal" not in out  # nothing is owed to a shared tier
    assert "## Problems\n\nNone." in out


def test_the_multi_process_benchmark_runs_every_saver_and_reads_every_thread_back() -> None:
    out = run_benchmark("bench_processes.py", "--quick")
    assert "None." in out[out.rindex("## Problems") :]
    table = out[out.index("40 concurrent runs across 2 processes") :]
    for row in ("AsyncPostgresSaver", "Durable sqlite+redis+postgres", "Durable sqlite+redis+postgres write=local"):
        for phase in ("first runs, new threads", "second runs, on another process"):
            assert f"| {row} | {phase} | " in table or f"| {row} Leases(on_busy=wait) | {phase} | " in table


def test_the_command_line_benchmark_runs_every_command_and_each_answers_as_expected() -> None:
    out = run_benchmark("bench_cli.py", "--quick")
    assert "None." in out[out.rindex("## Problems") :]
    for row in (
        "| --help | 0 |",
        "| threads --postgres (nothing listening) | 3 |",
        "| doctor --redis (nothing listening) | 1 |",
    ):
        assert row in out, row


def test_the_one_command_collects_every_part_and_writes_only_when_asked(tmp_path: Path) -> None:
    out = run_benchmark("bench_all.py", "--quick", "--only", "bench_delta_channel.py")
    assert "| Durable sqlite+redis+postgres | " in out and "wrote " not in out
    summary = out[out.rindex("## Targets") :]
    assert re.search(r"\*\*[01] of 1 targets met\*\*", summary), summary
    assert "- (1) DeltaChannel `get_state`, snapshot_frequency=100, 30 steps: " in summary
    results = tmp_path / "RESULTS.md"
    run_benchmark("bench_all.py", "--quick", "--only", "bench_delta_channel.py", "--write", "--output", str(results))
    text = results.read_text()
    assert text.startswith("# Benchmarks: the headline figures") and "- Machine: " in text
    assert "## The latest state of a DeltaChannel thread" in text and "### Problems" in text
    # The summary comes first, before the parts' tables (each with its own Targets section).
    assert text.index("## Targets") < text.index("## The latest state") < text.index("### Targets")


def test_the_memory_benchmark_runs_every_saver_in_its_own_process_and_checks_its_reads() -> None:
    out = run_benchmark("bench_memory.py", "--threads", "100", "--every", "50")  # --quick runs 300
    assert "None." in out[out.rindex("## Problems") :]
    for saver in ("PostgresSaver", "SqliteSaver", "DurableSaver sqlite+redis+postgres (default options)"):
        assert f"## {saver}" in out and f"| {saver} | 100 |" in out
    durable = out[out.index("## DurableSaver") :]
    assert "| 100 |" in durable  # the last sample, with the memos' estimate
    assert "| C heap in use (MiB) | C heap free (MiB) |" in durable
    last = next(line for line in durable.splitlines() if line.startswith("| 100 |"))
    assert all(float(cell) > 0 for cell in last.strip("|").split("|")[-2:-1])  # glibc (CI) reports its heap
    # The bounds of DurableSaver's memory are stated, read from the saver (its defaults).
    assert "its memos may hold 64.0 MiB in all (`Memory.budget`)" in out
    targets = out[out.index("## Targets") : out.index("## Problems")]
    assert re.search(
        r"^- \(6\) RSS growth .*: DurableSaver sqlite\+redis\+postgres \(default options\) [+-]\d+\.\d\d MB per "
        r"1,000 threads over the second half \(50 to 100 threads; .*, target under 0\.5 MB: (met|missed)$",
        targets,
        re.M,
    ), targets
    assert "wrote " not in out  # the results file is written only with --write


@pytest.mark.s3
def test_the_archive_benchmark_measures_every_part_and_reads_every_thread_back() -> None:
    out = run_benchmark("bench_archive.py", "--quick")  # it starts and stops its own moto S3 server
    assert "None." in out[out.rindex("## Problems") :]
    assert "moto's S3 server" in out  # its latencies are not a real S3's, and the output says so
    cost = out[out.index("## 1. What the archive stores per thread") :]
    assert "| 4 | " in cost  # a row after each of the 4 runs
    assert "| a pass after every run | after `archive_idle` | 0 | 0 | " in cost  # nothing of it left in Postgres
    bring = out[out.index("## 2. The first read of an archived thread") :]
    for face in ("sync (`get_state`)", "async (`aget_state`)"):
        for checkpoints in (10, 100):
            assert f"| {face} | {checkpoints} | " in bring
    steps = out[out.index("## 3. The replica's cost on the step path") :]
    assert steps.count("| no archive | ") == 2 and steps.count("| 1.00x | - |") == 2
    restore = out[out.index("## 4. `restore()`") :]
    assert "| `restore()` into empty tiers (sync) | 3 | " in restore
    assert "| `arestore()` into empty tiers (async) | 3 | " in restore
    assert "wrote " not in out  # the results file is written only with --write
