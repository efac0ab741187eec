"""Benchmark harness: time work in fresh processes, compare with a peer, record results.

Invariants:
- Every measured run happens in a fresh Python process started with
  ``python -m benchmarks.common`` (see :func:`measure_once`), so one engine's
  imports, caches and allocations never pollute another's time or peak RSS.
- Inside the child, ``setup`` (imports) and ``work`` are timed separately;
  ``seconds`` is ``work`` only. Peak RSS is ``ru_maxrss`` of the child at the
  end (imports included), reported in MB (10**6 bytes).
- The OS page cache is left alone: "cold" means a cold process, not a cold
  disk. The first repetition therefore warms the cache for later ones.
- This module imports only the standard library at top level, because it is
  the child's entry point.
- Result files are JSON at ``benchmarks/results/<name>.json`` and always carry
  ``unit``, ``ours``, ``peer`` and ``ratio`` (= ours / peer), plus ``machine``
  and ``load_guard``.
- A result taken while the machine was loaded (1-minute load average above
  :data:`LOAD_LIMIT` when the script started, before its own work) never replaces
  the recorded one unless forced (``RAYDELTA_BENCH_FORCE=1``, which
  ``python -m benchmarks.run --force`` sets); it goes to ``results/refused/``
  instead, and a forced one says so in its ``load_guard``.
- Every measurement carries the CPU time the whole machine spent while it ran
  (``cpu_seconds``, from ``/proc/stat``: Ray workers, raylets and JVMs
  included, which the child's own ``rusage`` would miss) and the child's own.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).resolve().parent / "results"
REFUSED_DIR = RESULTS_DIR / "refused"
REPO_ROOT = Path(__file__).resolve().parent.parent

LOAD_LIMIT = 2.0
"""The highest 1-minute load average at which a result may be recorded unforced."""
FORCE_ENV = "RAYDELTA_BENCH_FORCE"


def load_average() -> list[float] | None:
    """The 1/5/15-minute load averages, or None where the OS has none."""
    return list(os.getloadavg()) if hasattr(os, "getloadavg") else None


LOAD_AT_START = load_average()
"""The load when this process imported the harness (the benchmark's start)."""


def machine_cpu_seconds() -> float:
    """CPU seconds (user + nice + system + irq + softirq) the whole machine has
    spent since boot, from ``/proc/stat``; NaN where it is not readable."""
    try:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = stat.readline().split()
    except OSError:
        return float("nan")
    user, nice, system, _idle, _iowait, irq, softirq = (int(v) for v in fields[1:8])
    return (user + nice + system + irq + softirq) / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Measurement:
    """One run of one target in one fresh process."""

    seconds: float
    """Wall time of ``work`` alone."""
    setup_seconds: float
    """Wall time of ``setup`` (imports) before it."""
    peak_rss_mb: float
    rss_after_setup_mb: float
    result: Any
    """What ``work`` returned (JSON-serialisable)."""
    cpu_seconds: float = float("nan")
    """CPU time the whole machine spent while the child ran (its Ray workers,
    raylets, JVMs... and anything else running: see the load beside it)."""
    child_cpu_seconds: float = float("nan")
    """CPU time of the child process itself (user + system)."""


@dataclass(frozen=True)
class Summary:
    """Repeated measurements of one target."""

    label: str
    runs: list[Measurement] = field(repr=False)

    @property
    def median_s(self) -> float:
        return statistics.median(r.seconds for r in self.runs)

    @property
    def min_s(self) -> float:
        return min(r.seconds for r in self.runs)

    @property
    def median_cpu_s(self) -> float:
        return statistics.median(r.cpu_seconds for r in self.runs)

    @property
    def median_setup_s(self) -> float:
        return statistics.median(r.setup_seconds for r in self.runs)

    @property
    def peak_rss_mb(self) -> float:
        return max(r.peak_rss_mb for r in self.runs)

    @property
    def result(self) -> Any:
        return self.runs[-1].result

    def as_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "median_s": self.median_s,
            "min_s": self.min_s,
            "median_setup_s": self.median_setup_s,
            "median_cpu_s": self.median_cpu_s,
            "peak_rss_mb": self.peak_rss_mb,
            "result": self.result,
            "runs": [asdict(r) for r in self.runs],
        }


def _current_rss_mb() -> float:
    try:
        with open("/proc/self/statm", encoding="ascii") as statm:
            pages = int(statm.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return float("nan")


def _peak_rss_mb() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    # KiB on Linux, bytes on macOS.
    return peak / 1e6 if sys.platform == "darwin" else peak * 1024 / 1e6


def _resolve(spec: str) -> Callable[..., Any]:
    module_name, _, attr = spec.partition(":")
    target = getattr(importlib.import_module(module_name), attr)
    if not callable(target):
        raise TypeError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return]


def _child_main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.common")
    parser.add_argument("--setup", default=None)
    parser.add_argument("--work", required=True)
    parser.add_argument("--args", default="[]", help="JSON list of positional args for work")
    parser.add_argument("--out", required=True, help="file to write the measurement to")
    ns = parser.parse_args(argv)
    args = json.loads(ns.args)
    start = time.perf_counter()
    if ns.setup:
        _resolve(ns.setup)()
    work = _resolve(ns.work)
    after_setup = time.perf_counter()
    rss_after_setup = _current_rss_mb()
    result = work(*args)
    done = time.perf_counter()
    measurement = Measurement(
        seconds=done - after_setup,
        setup_seconds=after_setup - start,
        peak_rss_mb=_peak_rss_mb(),
        rss_after_setup_mb=rss_after_setup,
        result=result,
    )
    Path(ns.out).write_text(json.dumps(asdict(measurement)), encoding="utf-8")


def measure_once(
    work: str,
    args: Sequence[Any] = (),
    *,
    setup: str | None = None,
    env: dict[str, str] | None = None,
    timeout_s: float = 600.0,
) -> Measurement:
    """Run ``work(*args)`` in a fresh interpreter and measure it.

    ``work`` and ``setup`` are ``"module:function"`` names importable from the
    repository root; ``setup()`` runs first (untimed for ``seconds``: put the
    imports there). ``args`` and the return value must be JSON-serialisable.
    """
    with tempfile.TemporaryDirectory(prefix="raydelta-bench-") as tmp:
        out = Path(tmp) / "measurement.json"
        command = [sys.executable, "-m", "benchmarks.common", "--work", work]
        command += ["--args", json.dumps(list(args)), "--out", str(out)]
        if setup is not None:
            command += ["--setup", setup]
        child_env = dict(os.environ)
        child_env["PYTHONPATH"] = os.pathsep.join(
            [str(REPO_ROOT), *filter(None, [child_env.get("PYTHONPATH")])]
        )
        child_env.update(env or {})
        cpu_before = machine_cpu_seconds()
        children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        proc = subprocess.run(
            command,
            cwd=REPO_ROOT,
            env=child_env,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"benchmark child {work} failed (exit {proc.returncode}):\n{proc.stderr}"
            )
        children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        body = json.loads(out.read_text(encoding="utf-8"))
    body["cpu_seconds"] = machine_cpu_seconds() - cpu_before
    body["child_cpu_seconds"] = (children_after.ru_utime - children_before.ru_utime) + (
        children_after.ru_stime - children_before.ru_stime
    )
    return Measurement(**body)


@dataclass(frozen=True)
class Target:
    """One thing to measure: a label, ``module:function`` names and arguments."""

    label: str
    work: str
    args: tuple[Any, ...] = ()
    setup: str | None = None


def measure_interleaved(
    targets: Sequence[Target], *, repeat: int = 5, progress: bool = True
) -> dict[str, Summary]:
    """Measure every target ``repeat`` times, alternating targets each round.

    Interleaving spreads slow drifts of the machine (page cache, frequency
    scaling, a neighbour) over all targets instead of penalising one.
    """
    runs: dict[str, list[Measurement]] = {t.label: [] for t in targets}
    for round_index in range(repeat):
        for target in targets:
            m = measure_once(target.work, target.args, setup=target.setup)
            runs[target.label].append(m)
            if progress:
                print(
                    f"  [{round_index + 1}/{repeat}] {target.label:<12} {m.seconds:8.3f} s"
                    f"  (setup {m.setup_seconds:.3f} s, peak RSS {m.peak_rss_mb:,.0f} MB)",
                    flush=True,
                )
    return {label: Summary(label, r) for label, r in runs.items()}


def _version_of(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _memory_total_mb() -> float | None:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024 / 1e6
    except OSError:
        pass
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine_info() -> dict[str, Any]:
    """Where the numbers came from (``load_average``: 1/5/15-minute, when written)."""
    return {
        "cores": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "cpu": _cpu_model(),
        "memory_mb": _memory_total_mb(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "pyarrow": _version_of("pyarrow"),
        "deltalake": _version_of("deltalake"),
        "raydelta": _version_of("raydelta"),
        "load_average": load_average(),
    }


def load_guard() -> dict[str, Any]:
    """The load at this benchmark's start (what decides) and now (for the
    record: by then the benchmark's own processes are part of it), the limit,
    and whether the result may be recorded (``accepted``) and was forced."""
    now = load_average()
    start = LOAD_AT_START[0] if LOAD_AT_START is not None else None
    forced = os.environ.get(FORCE_ENV) == "1"
    quiet = start is not None and start <= LOAD_LIMIT
    return {
        "limit": LOAD_LIMIT,
        "load_at_start": LOAD_AT_START,
        "load_at_end": now,
        "start_1min": start,
        "quiet": quiet,
        "forced": forced and not quiet,
        "accepted": quiet or forced,
    }


def write_result(name: str, result: dict[str, Any]) -> Path:
    """Write ``result`` (plus machine info, the load guard and a timestamp) to
    ``results/<name>.json``; to ``results/refused/<name>.json`` instead when the
    machine was loaded and the run was not forced (see the module docstring)."""
    missing = {"unit", "ours", "peer", "ratio"} - result.keys()
    if missing:
        raise ValueError(f"result for {name} lacks {sorted(missing)}")
    guard = load_guard()
    body = {
        "name": name,
        **result,
        "machine": machine_info(),
        "load_guard": guard,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    directory = RESULTS_DIR if guard["accepted"] else REFUSED_DIR
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(body, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    if not guard["accepted"]:
        print(
            f"load average {guard['start_1min']} > {LOAD_LIMIT} at the start: not recording {name}"
            " "
            f"(kept in {path}; {FORCE_ENV}=1 or `python -m benchmarks.run --force` records it)",
            file=sys.stderr,
            flush=True,
        )
    return path


def print_ratio(
    name: str,
    *,
    ours: float,
    peer: float,
    unit: str,
    goal: float | None = None,
    higher_is_better: bool = False,
) -> float:
    """Print ``ours / peer`` and return it.

    Lower is better for times and bytes (goal: ratio <= ``goal``); pass
    ``higher_is_better=True`` for rates such as commits/s (goal: ratio >= ``goal``).
    """
    ratio = ours / peer if peer else float("inf")
    verdict = ""
    if goal is not None:
        met = ratio >= goal if higher_is_better else ratio <= goal
        sign = ">=" if higher_is_better else "<="
        verdict = f"  goal {sign} {goal:.2f}x: {'MET' if met else 'NOT MET'}"
    print(f"{name}: ours {ours:.3f} {unit} / peer {peer:.3f} {unit} = {ratio:.2f}x{verdict}")
    return ratio


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of ``values``, linear between ranks."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def latency_stats(seconds: Sequence[float]) -> dict[str, float]:
    """Count and p50/p90/p99/max/mean of latencies given in seconds, reported in ms."""
    if not seconds:
        nan = float("nan")
        return {
            "count": 0,
            "p50_ms": nan,
            "p90_ms": nan,
            "p99_ms": nan,
            "max_ms": nan,
            "mean_ms": nan,
        }
    return {
        "count": len(seconds),
        "p50_ms": percentile(seconds, 50) * 1e3,
        "p90_ms": percentile(seconds, 90) * 1e3,
        "p99_ms": percentile(seconds, 99) * 1e3,
        "max_ms": max(seconds) * 1e3,
        "mean_ms": statistics.fmean(seconds) * 1e3,
    }


def print_table(rows: Sequence[Summary]) -> None:
    """A small fixed-width table of summaries."""
    header = (
        f"{'engine':<12} {'median s':>9} {'min s':>8} {'setup s':>8} {'CPU s':>8}"
        f" {'peak RSS MB':>12}"
    )
    print(header)
    print("-" * len(header))
    for s in rows:
        print(
            f"{s.label:<12} {s.median_s:>9.3f} {s.min_s:>8.3f} {s.median_setup_s:>8.3f}"
            f" {s.median_cpu_s:>8.2f} {s.peak_rss_mb:>12,.0f}"
        )


if __name__ == "__main__":
    _child_main(sys.argv[1:])
