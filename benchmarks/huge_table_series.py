"""The parent side of :mod:`benchmarks.huge_table`: run the size series, check, summarise.

Invariants:
- This process never loads a table: every build, load, commit, checkpoint
  and vacuum runs in a fresh child (``benchmarks.common.measure_once``), so
  each child's peak RSS is its own (``VmHWM``; ``ru_maxrss`` would carry this
  process's peak over ``execve``).
- The cached tables are never written to: steps that write (commit,
  checkpoint) work on a copy (checkpoint parquet hard-linked, the rest copied).
- Every step's result is checked against what the builder says a full replay
  gives (version, live files, records, DVs, txns, domains); a failed check is
  recorded in ``checks`` and makes the run exit non-zero.
- Growth and the 64-core extrapolation are computed from the measured rows
  only; the model is written next to the numbers.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from itertools import pairwise
from pathlib import Path
from typing import Any

from benchmarks.common import measure_once
from benchmarks.huge_table import (
    GOAL_RSS_RATIO,
    PEER_MAX_FILES,
    SIDECARS_ENV,
    TABLE_ENV,
    measure,
    parse_size,
    size_label,
)
from benchmarks.huge_table_report import goals, keep_extrapolation

CLUSTER_CORES = 64
VACUUM_PEER_SIZES = (100_000, 1_000_000)


def _load() -> float:
    return os.getloadavg()[0]


def _say(text: str) -> None:
    print(f"[load {_load():5.1f}] {text}", flush=True)


AUTO_LAYOUT = {"label": "auto", "rows_per_group": None, "checkpoint_parts": 1}
LAYOUT_STEPS = ("snapshot", "checkpoint")
"""Steps measured for a source checkpoint layout other than ``auto`` (the
ones that read the checkpoint: loads and the V2 checkpoint's map tasks)."""


LAYOUT_ROWS = {"64k": 65_536, "1m": 1_000_000}
"""Row-group sizes by their usual names (64k is a power of two, as writers use)."""


def parse_layout(text: str) -> dict[str, Any]:
    """``"auto"`` -> the builder's own; ``"1m"`` -> 1M-row groups, one file;
    ``"64kx4"`` -> 64k-row groups in a 4-part checkpoint (``label`` keeps the text).

    >>> parse_layout("64kx4")
    {'label': '64kx4', 'rows_per_group': 65536, 'checkpoint_parts': 4}
    """
    text = text.strip().lower()
    if text == "auto":
        return {"label": "auto", "rows_per_group": None, "checkpoint_parts": 1}
    rows, _, parts = text.partition("x")
    layout = {
        "label": text,
        "rows_per_group": LAYOUT_ROWS.get(rows) or parse_size(rows),
        "checkpoint_parts": int(parts) if parts else 1,
    }
    if layout["rows_per_group"] < 1 or layout["checkpoint_parts"] < 1:
        raise ValueError(f"a layout needs rows >= 1 and parts >= 1, got {text!r}")
    return layout


class Series:
    """Rows and checks of one run; ``layout``: the source checkpoint layout being
    measured (rows and checks of a layout other than ``auto`` say so)."""

    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.checks: list[dict[str, Any]] = []
        self.layout = "auto"

    def check(self, what: str, ok: bool, **detail: Any) -> None:
        if self.layout != "auto":
            what = f"{what} @{self.layout}"
        self.checks.append({"what": what, "ok": bool(ok), **detail})
        if not ok:
            _say(f"CHECK FAILED {what}: {detail}")

    def row(
        self, num_files: int, step: str, engine: str, runs: list[dict[str, Any]], **extra: Any
    ) -> dict[str, Any]:
        seconds = [r["seconds"] for r in runs]
        rss = [r["peak_rss_mb"] for r in runs]
        if self.layout != "auto":
            step = f"{step}@{self.layout}"
            extra = {"checkpoint_layout": self.layout, **extra}
        row = {
            "size": size_label(num_files),
            "num_files": num_files,
            "step": step,
            "engine": engine,
            "seconds": statistics.median(seconds),
            "min_seconds": min(seconds),
            "peak_rss_mb": max(rss),
            "repeat": len(runs),
            "load_average": _load(),
            **extra,
            "runs": runs,
        }
        self.rows.append(row)
        _say(
            f"{row['size']:>5} {step:<22} {engine:<9} {row['seconds']:9.3f} s"
            f"  peak RSS {row['peak_rss_mb']:8,.0f} MB"
        )
        return row


def _copy(described: dict[str, Any], target: Path, *, v2: bool) -> Path:
    from benchmarks.checkpoint import enable_v2_checkpoints
    from benchmarks.huge_table_build import table_copy

    root = table_copy(described, target)
    if v2:
        enable_v2_checkpoints(root)
    return root


def _state_checks(series: Series, label: str, got: dict[str, Any], built: dict[str, Any]) -> None:
    series.check(f"{label}: version", got["version"] == built["version"], got=got["version"])
    if "num_files" in got:
        series.check(
            f"{label}: live files",
            got["num_files"] == built["num_live_files"],
            got=got["num_files"],
            expected=built["num_live_files"],
        )
    if "txns" in got:
        series.check(f"{label}: txns", got["txns"] == built["txns"], got=got["txns"])
    if "domains" in got:
        series.check(
            f"{label}: domains", got["domains"] == sorted(built["domains"]), got=got["domains"]
        )


def measure_snapshot_and_scan(
    series: Series, n: int, built: dict[str, Any], repeat: int, *, peer: bool = True
) -> None:
    uri = built["uri"]
    engines = [
        ("ours", "snapshot_state", "snapshot_setup"),
        ("ours-head", "head_state", "snapshot_setup"),
        ("ours-state", "state_counts", "snapshot_setup"),
    ]
    if peer and n <= PEER_MAX_FILES:
        engines.append(("delta-rs", "deltalake_snapshot", "deltalake_setup"))
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in engines}
    for _ in range(repeat):
        for label, work, setup in engines:
            got = measure(work, (uri,), setup=setup)
            _state_checks(series, f"{size_label(n)} snapshot {label}", got, built)
            runs[label].append(got)
    for label, _, _ in engines:
        step = {"ours-head": "snapshot_head", "ours-state": "state"}.get(label, "snapshot")
        series.row(n, step, "delta-rs" if label == "delta-rs" else "ours", runs[label])
    scans = []
    for _ in range(repeat):
        got = measure("scan_files", (uri,), setup="snapshot_setup")
        for key, want in (
            ("num_files", "num_live_files"),
            ("num_records", "num_live_records"),
            ("num_dv_files", "num_live_dv_files"),
        ):
            series.check(
                f"{size_label(n)} scan {key}",
                got[key] == built[want],
                got=got[key],
                expected=built[want],
            )
        scans.append(got)
    series.row(n, "scan", "ours", scans, streamed=scans[-1]["streamed"])
    series.rows[-1]["largest_batch_rows"] = scans[-1]["largest_batch_rows"]


def measure_commit(
    series: Series, n: int, built: dict[str, Any], workdir: Path, commits: int
) -> None:
    root = _copy(built, workdir / "commit", v2=False)
    got = measure(
        "commit_run",
        (root.as_uri(), commits, built["version"], built["num_live_files"]),
        setup="commit_setup",
    )
    series.check(
        f"{size_label(n)} commit: version",
        got["version"] == built["version"] + 1 + commits,
        got=got["version"],
    )
    processes = {"driver": got["peak_rss_mb"], "actor": got["actor"]["peak_rss_mb"]}
    run = {**got, "seconds": got["median_commit_s"], "peak_rss_mb": max(processes.values())}
    series.row(n, "commit", "ours", [run], processes=processes)


def _checkpoint_memory(result: dict[str, Any]) -> dict[str, Any]:
    memory = result["memory"]
    return {
        "driver": result.get("driver_peak_rss_mb"),
        "actor": memory.get("actor"),
        "task_worker_max": memory.get("task_worker_max"),
        "by_task_kind": memory.get("by_task_kind"),
    }


def measure_checkpoint(
    series: Series, n: int, built: dict[str, Any], workdir: Path, workers: list[int]
) -> dict[str, Any]:
    expected: dict[str, Any] = {"num_files": built["num_live_files"]}
    if n <= PEER_MAX_FILES:
        replay = measure("replay_digest", (built["uri"],))
        expected.update(num_files=replay["num_files"], sha256=replay["sha256"])
    root = _copy(built, workdir / "checkpoint-local", v2=True)
    env = {TABLE_ENV: root.as_uri()}
    m = measure_once(
        "benchmarks.checkpoint:ours_checkpoint",
        ("v2",),
        setup="benchmarks.checkpoint:ours_setup",
        env=env,
        timeout_s=7200,
    )
    local = m.result
    memory = _checkpoint_memory(local)
    local["memory"]["driver"] = local.get("driver_peak_rss_mb")
    peak = max(v for v in (memory["driver"], memory["actor"], memory["task_worker_max"]) if v)
    ours = series.row(
        n,
        "checkpoint",
        "ours",
        [{"seconds": local["driver_seconds"], "peak_rss_mb": peak}],
        processes=memory,
        phases=local.get("phases"),
        task_seconds=local.get("task_seconds"),
        num_shards=local.get("num_shards"),
    )
    sidecars = sorted(str(p) for p in (root / "_delta_log" / "_sidecars").glob("*.parquet"))
    limit = measure(
        "limit_write",
        (str(workdir / "limit.parquet"),),
        setup="limit_setup",
        env={SIDECARS_ENV: json.dumps(sidecars)},
    )
    (workdir / "limit.parquet").unlink(missing_ok=True)
    series.check(
        f"{size_label(n)} limit rows", limit["rows"] == built["num_live_files"], got=limit["rows"]
    )
    series.row(n, "checkpoint_limit", "pyarrow", [limit])
    ratio = ours["seconds"] / limit["seconds"]
    ours["over_limit"] = ratio
    verified = measure("verify_checkpoint", (str(root), local["version"], expected))
    series.check(
        f"{size_label(n)} checkpoint content ({verified['check']})",
        verified["ok"],
        **{k: v for k, v in verified.items() if k not in ("sidecars", "ok")},
    )
    by_workers: dict[str, Any] = {}
    for count in workers:
        # one cluster that fails to start (GCS start-up times out at load ~70) is a
        # failed check; the other worker counts still run
        seconds = _guarded(
            series,
            f"{size_label(n)} checkpoint on {count} workers",
            partial(_cluster_checkpoint, series, n, built, workdir, count, expected),
        )
        if seconds is not None:
            by_workers[str(count)] = seconds
    return {"local": local, "by_workers": by_workers}


def _cluster_checkpoint(
    series: Series,
    n: int,
    built: dict[str, Any],
    workdir: Path,
    count: int,
    expected: dict[str, Any],
) -> float:
    """The V2 checkpoint on a local cluster of ``count`` one-CPU worker nodes; its time."""
    root = _copy(built, workdir / f"checkpoint-{count}", v2=True)
    ray_tmp = tempfile.mkdtemp(prefix="rdh3", dir="/tmp")
    m = measure_once(
        "benchmarks.checkpoint_cluster:run_on_cluster",
        (count,),
        env={TABLE_ENV: root.as_uri(), "RAY_TMPDIR": ray_tmp},
        timeout_s=7200,
    )
    result = m.result
    memory = _checkpoint_memory(result)
    peak = max(v for v in (memory["driver"], memory["actor"], memory["task_worker_max"]) if v)
    verified = measure("verify_checkpoint", (str(root), result["version"], expected))
    series.check(
        f"{size_label(n)} checkpoint on {count} workers ({verified['check']})",
        verified["ok"],
        **{k: v for k, v in verified.items() if k not in ("sidecars", "ok")},
    )
    series.row(
        n,
        f"checkpoint_{count}_workers",
        "ours",
        [{"seconds": result["driver_seconds"], "peak_rss_mb": peak}],
        processes=memory,
        phases=result.get("phases"),
        task_seconds=result.get("task_seconds"),
        workers=count,
    )
    seconds: float = result["driver_seconds"]
    return seconds


def measure_vacuum(
    series: Series, n: int, built: dict[str, Any], repeat: int, *, peer: bool = True
) -> None:
    # no data files are on disk: full mode finds nothing to delete; a lite dry
    # run lists the expired tombstones' files from the log without looking
    lite_files = measure("lite_dry_run_files", (built["uri"],))["num_files"]
    for mode in ("lite", "full"):
        runs = [
            measure("vacuum_run", (built["uri"], "ours", mode), setup="vacuum_setup")
            for _ in range(repeat)
        ]
        expected = lite_files if mode == "lite" else 0
        series.check(
            f"{size_label(n)} vacuum {mode} (no data files on disk)",
            all(r["num_files"] == expected for r in runs),
            got=runs[-1]["num_files"],
            expected=expected,
        )
        series.row(n, f"vacuum_{mode}_log", "ours", runs)
    if not peer or n not in VACUUM_PEER_SIZES:
        return
    table = measure("vacuum_table_child", (n,))
    for mode in ("lite", "full"):
        pair_runs: dict[str, list[dict[str, Any]]] = {"ours": [], "delta-rs": []}
        for _ in range(repeat):
            for engine in pair_runs:
                pair_runs[engine].append(
                    measure("vacuum_run", (table["uri"], engine, mode), setup="vacuum_setup")
                )
        ours, theirs = pair_runs["ours"][-1], pair_runs["delta-rs"][-1]
        series.check(
            f"{size_label(n)} vacuum {mode}: same files as delta-rs",
            ours["digest"] == theirs["digest"] and ours["num_files"] == table["num_removed"],
            ours=ours["num_files"],
            peer=theirs["num_files"],
            removed=table["num_removed"],
        )
        for engine, got in pair_runs.items():
            series.row(n, f"vacuum_{mode}", engine, got, files_on_disk=table["num_files"])


def _growth(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Exponent ``k`` of ``cost ~ files**k`` between consecutive sizes, per step."""
    out: dict[str, Any] = {}
    steps = sorted({(r["step"], r["engine"]) for r in rows if r["engine"] != "delta-rs"})
    for step, engine in steps:
        points = sorted(
            (r["num_files"], r["seconds"], r["peak_rss_mb"])
            for r in rows
            if r["step"] == step and r["engine"] == engine
        )
        pairs = []
        for (n1, t1, m1), (n2, t2, m2) in pairwise(points):
            scale = math.log(n2 / n1)
            pairs.append(
                {
                    "from": size_label(n1),
                    "to": size_label(n2),
                    "time_exponent": math.log(t2 / t1) / scale if t1 > 0 and t2 > 0 else None,
                    "rss_exponent": math.log(m2 / m1) / scale if m1 > 0 and m2 > 0 else None,
                }
            )
        if pairs:
            out[f"{step}/{engine}"] = pairs
    return out


def _extrapolate(checkpoints: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The largest size's checkpoint on a 64-core cluster, two ways (see README)."""
    from benchmarks.checkpoint_scale import extrapolate

    n = max(checkpoints)
    local, by_workers = checkpoints[n]["local"], checkpoints[n]["by_workers"]
    out: dict[str, Any] = {"from_size": size_label(n)}
    try:
        model = extrapolate(local, n)
        out["task_cpu_model"] = {
            "model": model["model"],
            "seconds_at_10m_by_cores": model["wall_seconds_by_cores"],
            "seconds_at_10m_ideal_by_cores": model["wall_seconds_by_cores_ideal"],
            "serial_seconds": model["serial_seconds"],
            "parallel_efficiency_2_cores": model["measured_parallel_efficiency_2_cores"],
        }
    except (KeyError, ZeroDivisionError, TypeError) as exc:
        out["task_cpu_model"] = {"error": repr(exc)}
    if "1" in by_workers and "2" in by_workers:
        t1, t2 = by_workers["1"], by_workers["2"]
        parallel = max(0.0, 2 * (t1 - t2))
        serial = t1 - parallel
        scale = 10_000_000 / n
        out["amdahl_1_2_workers"] = {
            "model": "t(w) = s + p/w fitted to the 1- and 2-worker runs (the 2 cores allow no"
            " more); s and p scaled by 10M/N; per-process memory flat",
            "serial_seconds": serial * scale,
            "parallel_seconds": parallel * scale,
            f"seconds_at_10m_on_{CLUSTER_CORES}_cores": (serial + parallel / CLUSTER_CORES) * scale,
            "measured_by_workers": by_workers,
        }
    return out


def _guarded(series: Series, what: str, step: Callable[[], Any]) -> Any:
    """Run one step; a child that fails (e.g. killed for memory) is a failed check, and
    the series goes on with the next step."""
    try:
        return step()
    except Exception as exc:  # a child's failure, recorded with its stderr's tail
        series.check(f"{what} ran", False, error=str(exc)[-3000:])
        return None


def _git_state() -> dict[str, Any]:
    """Which engine code was measured: HEAD and the engine files changed in the tree."""
    import subprocess

    def git(*args: str) -> str:
        proc = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        return proc.stdout.strip()

    changed = git("status", "--porcelain", "--", "protocol", "storage", "actors", "raydelta")
    return {
        "head": git("rev-parse", "HEAD"),
        "engine_files_changed_in_tree": changed.split("\n") if changed else [],
    }


STEPS = ("snapshot", "commit", "checkpoint", "vacuum")
"""The series' steps; each row and check belongs to one (:func:`step_of`)."""


def step_of(name: str) -> str:
    """The step a row's ``step`` (or a check's first word after the size) belongs to."""
    head = name.split("@", 1)[0].split("_", 1)[0].split(" ", 1)[0].rstrip(":")
    if head in ("snapshot", "state", "scan"):
        return "snapshot"
    if head == "limit":
        return "checkpoint"
    return head


def run_series(
    sizes: list[int],
    *,
    steps: Sequence[str] = STEPS,
    workers: list[int],
    repeat: int,
    commits: int,
    workdir: Path,
    save: Callable[[dict[str, Any]], None] | None = None,
    previous: dict[str, Any] | None = None,
    layouts: Sequence[dict[str, Any]] = (AUTO_LAYOUT,),
) -> dict[str, Any]:
    """Measure every size, once per source checkpoint ``layout``
    (:func:`benchmarks.huge_table.parse_layout`; a layout other than ``auto``
    runs :data:`LAYOUT_STEPS` only); the result body for ``write_result``
    (``save`` gets it after each size too, so a run cut short keeps what it
    measured). With ``previous`` (a result), its rows, checks and tables of
    the sizes not measured now are kept."""
    from benchmarks.huge_table_build import table_params

    workdir.mkdir(parents=True, exist_ok=True)
    series = Series()
    tables: dict[str, Any] = {}
    checkpoints: dict[int, dict[str, Any]] = {}
    if previous is not None:
        fresh = {size_label(n) for n in sizes}

        def kept(size: str, step: str) -> bool:
            return size not in fresh or step_of(step) not in steps

        series.rows = [r for r in previous["rows"] if kept(r["size"], r["step"])]
        series.checks = [c for c in previous["checks"] if kept(*c["what"].partition(" ")[::2])]
        tables = dict(previous["tables"])
        checkpoints = {
            int(n): run
            for n, run in previous.get("checkpoint_runs", {}).items()
            if kept(size_label(int(n)), "checkpoint")
        }
    started_load = os.getloadavg()
    git = _git_state()
    result: dict[str, Any] = {}
    for n, layout in ((n, layout) for n in sizes for layout in layouts):
        runs = repeat if n <= PEER_MAX_FILES else 1
        series.layout = layout["label"]
        auto = series.layout == "auto"
        label = size_label(n)
        key = label if auto else f"{label}@{series.layout}"
        _say(f"{key}: building / finding the table")
        params = table_params(
            n,
            rows_per_group=layout["rows_per_group"],
            checkpoint_parts=layout["checkpoint_parts"],
        )
        built = measure("build_child", (json.dumps(params),))
        tables[key] = {k: v for k, v in built.items() if k != "txns"}
        wanted = steps if auto else [s for s in steps if s in LAYOUT_STEPS]
        _say(
            f"{key}: {built['num_live_files']:,} live files, log"
            f" {built['log_bytes'] / 1e6:,.0f} MB, built in {built.get('build_seconds', 0):.0f} s"
            f" (this call {built['seconds']:.0f} s)"
        )
        if "snapshot" in wanted:
            _guarded(
                series,
                f"{label} snapshot",
                partial(measure_snapshot_and_scan, series, n, built, runs),
            )
        if "commit" in wanted:
            _guarded(
                series,
                f"{label} commit",
                partial(measure_commit, series, n, built, workdir, commits),
            )
        if "checkpoint" in wanted:
            done = _guarded(
                series,
                f"{label} checkpoint",
                partial(measure_checkpoint, series, n, built, workdir, workers),
            )
            if done is not None and auto:  # the extrapolation models the builder's layout
                checkpoints[n] = done
        if "vacuum" in wanted:
            _guarded(series, f"{label} vacuum", partial(measure_vacuum, series, n, built, runs))
        result = summarise(series, tables, checkpoints, started_load)
        result["git"] = git
        if previous is not None:
            keep_extrapolation(result, previous)
        if save is not None:
            save(result)
    return result


def summarise(
    series: Series,
    tables: dict[str, Any],
    checkpoints: dict[int, dict[str, Any]],
    started_load: tuple[float, float, float],
) -> dict[str, Any]:
    def pick(size: int, step: str, engine: str = "ours") -> dict[str, Any] | None:
        return next(
            (
                r
                for r in series.rows
                if r["num_files"] == size and r["step"] == step and r["engine"] == engine
            ),
            None,
        )

    ours = pick(1_000_000, "snapshot")
    peer = pick(1_000_000, "snapshot", "delta-rs")
    ratio = ours["peak_rss_mb"] / peer["peak_rss_mb"] if ours and peer else None
    table = {}
    for size in sorted({r["num_files"] for r in series.rows}):
        table[size_label(size)] = {
            f"{r['step']}/{r['engine']}": {"s": r["seconds"], "peak_rss_mb": r["peak_rss_mb"]}
            for r in series.rows
            if r["num_files"] == size
        }
    return {
        "unit": "MB",
        "ours": None if ours is None else ours["peak_rss_mb"],
        "peer": None if peer is None else peer["peak_rss_mb"],
        "ratio": ratio,
        "statistic": "peak RSS (VmHWM) of a fresh process loading the 1M-file table's cold"
        " snapshot with its file list: raydelta load_snapshot vs delta-rs DeltaTable +"
        " get_add_actions(flatten=True); max over the runs",
        "goal": f"ratio <= {GOAL_RSS_RATIO}",
        "goal_ratio": GOAL_RSS_RATIO,
        "goal_met": None if ratio is None else ratio <= GOAL_RSS_RATIO,
        "seconds_at_1m": {
            "ours": None if ours is None else ours["seconds"],
            "peer": None if peer is None else peer["seconds"],
        },
        "table": table,
        "growth": _growth(series.rows),
        "goals": goals(series.rows),
        "extrapolation_64_cores": _extrapolate(checkpoints) if checkpoints else None,
        "checkpoint_runs": {str(n): run for n, run in checkpoints.items()},
        "checks": series.checks,
        "all_checks_ok": all(c["ok"] for c in series.checks),
        "load_average_at_start": list(started_load),
        "load_average_at_end": list(os.getloadavg()),
        "tables": tables,
        "rows": series.rows,
    }
