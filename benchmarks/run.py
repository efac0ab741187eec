"""Every benchmark in one run: ``python -m benchmarks.run``.

>>> python -m benchmarks.run                 # the issue sizes, in sequence  # doctest: +SKIP
>>> python -m benchmarks.run --quick         # a smoke run, records nothing  # doctest: +SKIP
>>> python -m benchmarks.run --only commit_latency snapshot_load            # doctest: +SKIP

Each benchmark runs in its own process (``python -m benchmarks.<name>``), one
after another, never two at once; each interleaves ours and the peer run by
run itself (``benchmarks.common.measure_interleaved`` or its own ABAB loop)
and writes ``results/<name>.json`` through ``benchmarks.common.write_result``.
Around each benchmark this runner records the wall time, the CPU time the
whole machine spent and the load average before and after, in
``results/run.json``; then it regenerates the results table of
``benchmarks/README.md`` (:mod:`benchmarks.report`).

Invariants:
- :data:`BENCHMARKS` names every benchmark module of this folder; every
  other module is in :data:`HELPERS` (``tests/benchmarks/test_run_and_report.py``
  checks that none is forgotten).
- The default sizes are each benchmark's issue sizes, with at least 5
  interleaved repetitions where one run takes under a minute.
- ``--quick`` passes ``--no-write``: a smoke run never replaces a result.
- A result taken at a load average above ``benchmarks.common.LOAD_LIMIT`` is
  not recorded unless ``--force`` (``benchmarks.common.write_result``); the
  runner first waits (up to :data:`SETTLE_S`) for the load the previous
  benchmark left to decay below it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from benchmarks.common import (
    FORCE_ENV,
    LOAD_LIMIT,
    REPO_ROOT,
    RESULTS_DIR,
    load_average,
    machine_cpu_seconds,
    machine_info,
)


@dataclass(frozen=True)
class Benchmark:
    """One benchmark module and its arguments at issue size and smoke size."""

    name: str
    full: tuple[str, ...] = ()
    quick: tuple[str, ...] = ()


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark(
        "commit_latency",
        ("--repeat", "5"),
        ("--commits", "50", "--repeat", "1"),
    ),
    Benchmark(
        "commit_throughput",
        (),
        ("--levels", "1", "2", "--seconds", "2"),
    ),
    Benchmark(
        "commit_validation",
        (),
        ("--files", "1000", "--repeat", "2"),
    ),
    Benchmark(
        "commit_profile",
        (),
        ("--commits", "200", "--writers", "2", "--seconds", "1"),
    ),
    Benchmark(
        "s3_commits",
        (),
        ("--levels", "1", "2", "--seconds", "2"),
    ),
    Benchmark(
        "catalog_commits",
        (),
        ("--commits", "20", "--writers", "1", "2"),
    ),
    Benchmark(
        "managed_maintenance",
        (),
        ("--commits", "20", "--writers", "2", "--interval", "5", "--compact-files", "10"),
    ),
    Benchmark(
        "uc_commits",
        (),
        ("--commits", "20", "--writers", "1"),
    ),
    Benchmark(
        "snapshot_load",
        ("--repeat", "5"),
        ("--files", "20000", "--commits", "10", "--repeat", "1"),
    ),
    Benchmark(
        "incremental_snapshot",
        (),
        ("--files", "20000", "--repeat", "2"),
    ),
    Benchmark(
        "large_table_commit",
        (),
        ("--sizes", "10000", "--repeat", "3"),
    ),
    Benchmark(
        "checkpoint",
        ("--repeat", "5"),
        ("--files", "20000", "--commits", "10", "--repeat", "1"),
    ),
    Benchmark(
        "incremental_checkpoint",
        ("--repeat", "5"),
        ("--files", "20000", "--commits", "10", "--repeat", "1"),
    ),
    Benchmark(
        "checkpoint_scale",
        (),
        ("--files", "20000", "--commits", "10"),
    ),
    Benchmark(
        "checkpoint_cluster",
        (),
        ("--files", "20000", "--commits", "10", "--nodes", "1"),
    ),
    Benchmark(
        "vacuum",
        (),
        ("--files", "10000", "--repeat", "1"),
    ),
    Benchmark(
        "dml",
        ("--repeat", "5"),
        ("--rows", "20000", "--files", "10", "--scale-files", "20", "--workers", "1"),
    ),
    Benchmark(
        "spark_io",
        (),
        ("--rows", "20000", "--batches", "3", "--appends", "2", "--repeat", "1"),
    ),
    Benchmark(
        "ray_data_io",
        ("--repeat", "5"),
        ("--rows", "20000", "--blocks", "2", "--repeat", "1", "--jobs", "2", "--job-rows", "1000"),
    ),
    Benchmark(
        "warehouse",
        (),
        (
            "--sizes",
            "20",
            "40",
            "--activations",
            "5",
            "--writers",
            "2",
            "--seconds",
            "1",
            "--dedicated-tables",
            "2",
            "--repeat",
            "1",
        ),
    ),
    Benchmark(
        "huge_table",
        (),
        ("--sizes", "100k", "--workers", "1", "--repeat", "1", "--commits", "3"),
    ),
)
"""Every benchmark, cheapest first (``huge_table`` last: hours at issue size)."""

HELPERS = frozenset(
    {
        "common",
        "run",
        "report",
        "table_builder",
        "huge_table_build",
        "huge_table_report",
        "huge_table_series",
    }
)
"""Modules of this folder that are not benchmarks (harness, builders, reports)."""


SETTLE_S = 300.0
"""How long the runner waits for the load a previous benchmark left to decay."""


def _settle(limit: float, *, wait_s: float = SETTLE_S) -> list[float] | None:
    """Wait until the 1-minute load average is at most ``limit`` (or
    ``wait_s`` passed): a benchmark must not start in its predecessor's load."""
    deadline = time.monotonic() + wait_s
    while (load := load_average()) is not None and load[0] > limit:
        if time.monotonic() > deadline:
            print(f"load {load[0]:.2f} still above {limit} after {wait_s:.0f} s", flush=True)
            break
        time.sleep(5)
    return load


def _run_one(bench: Benchmark, *, quick: bool, force: bool) -> dict[str, Any]:
    args = [*bench.quick, "--no-write"] if quick else list(bench.full)
    command = [sys.executable, "-m", f"benchmarks.{bench.name}", *args]
    env = dict(os.environ)
    if force:
        env[FORCE_ENV] = "1"
    if not quick:
        _settle(LOAD_LIMIT)
    print(f"\n=== {bench.name}: {' '.join(command[1:])}", flush=True)
    load_before, cpu_before, started = load_average(), machine_cpu_seconds(), time.perf_counter()
    code = subprocess.run(command, cwd=REPO_ROOT, env=env, check=False).returncode
    return {
        "name": bench.name,
        "args": args,
        "exit_code": code,
        "wall_s": round(time.perf_counter() - started, 3),
        "machine_cpu_s": round(machine_cpu_seconds() - cpu_before, 3),
        "load_before": load_before,
        "load_after": load_average(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smoke sizes; records nothing")
    parser.add_argument(
        "--force", action="store_true", help="record results even at a load average above 2"
    )
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these benchmarks only")
    parser.add_argument("--skip", nargs="+", metavar="NAME", default=[], help="leave these out")
    parser.add_argument("--list", action="store_true", help="print the benchmarks and exit")
    ns = parser.parse_args(argv)
    known = {b.name for b in BENCHMARKS}
    unknown = sorted((set(ns.only or ()) | set(ns.skip)) - known)
    if unknown:
        parser.error(f"unknown benchmarks {unknown}; known: {sorted(known)}")
    chosen = [
        b for b in BENCHMARKS if (ns.only is None or b.name in ns.only) and b.name not in ns.skip
    ]
    if ns.list:
        for bench in chosen:
            print(f"{bench.name:<24} full: {' '.join(bench.full) or '(defaults)'}")
        return 0
    runs = [_run_one(bench, quick=ns.quick, force=ns.force) for bench in chosen]
    failed = [r["name"] for r in runs if r["exit_code"] != 0]
    print("\n=== summary")
    for r in runs:
        status = "ok" if r["exit_code"] == 0 else f"exit {r['exit_code']}"
        print(
            f"{r['name']:<24} {status:<8} {r['wall_s']:>9.1f} s wall {r['machine_cpu_s']:>9.1f} s"
            f" CPU  load {r['load_before']} -> {r['load_after']}"
        )
    if not ns.quick:
        record = {
            "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "forced": ns.force,
            "machine": machine_info(),
            "runs": runs,
        }
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (RESULTS_DIR / "run.json").write_text(json.dumps(record, indent=2) + "\n", "utf-8")
        from benchmarks.report import update_readme

        update_readme()
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
