"""Goals and the README table of :mod:`benchmarks.huge_table`, from its rows.

Invariants:
- Everything here is computed from a result's ``rows`` (and, for the
  extrapolation, its ``checkpoint_runs``): :func:`resummarise` recomputes a
  result file's summary without measuring anything again.
- A goal whose rows are missing (a size not run, a step that failed) is
  reported as ``None`` (unknown), never as met.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TEN_M = 10_000_000
ONE_M = 1_000_000
GB = 1000.0  # MB


def _rows(rows: list[dict[str, Any]], size: int, step: str, engine: str = "ours") -> list[Any]:
    return [
        r for r in rows if r["num_files"] == size and r["step"] == step and r["engine"] == engine
    ]


def _one(rows: list[dict[str, Any]], size: int, step: str, engine: str = "ours") -> Any:
    found = _rows(rows, size, step, engine)
    return found[0] if found else None


def _verdict(value: float | None, limit: float) -> dict[str, Any]:
    return {"value": value, "limit": limit, "met": None if value is None else value <= limit}


def goals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 15's goals that this series measures, each with its value and verdict."""
    out: dict[str, Any] = {}
    state = _one(rows, TEN_M, "state")
    out["state_10m_rss_mb<=1GB"] = _verdict(state and state["peak_rss_mb"], GB)
    scan = _one(rows, TEN_M, "scan")
    out["scan_10m_rss_mb<=2GB"] = _verdict(scan and scan["peak_rss_mb"], 2 * GB)
    snapshot, peer = _one(rows, ONE_M, "snapshot"), _one(rows, ONE_M, "snapshot", "delta-rs")
    out["snapshot_1m_rss_ratio<=0.75"] = _verdict(
        snapshot and peer and snapshot["peak_rss_mb"] / peer["peak_rss_mb"], 0.75
    )
    checkpoints = [
        r
        for r in rows
        if r["num_files"] == TEN_M
        and r["step"].startswith("checkpoint")
        and "@" not in r["step"]  # other source layouts: _layout_goals
        and r["engine"] == "ours"
    ]
    out["checkpoint_10m_every_process_rss_mb<=2GB"] = _verdict(
        max((r["peak_rss_mb"] for r in checkpoints), default=None), 2 * GB
    )
    for size in sorted({r["num_files"] for r in rows}):
        ours, limit = (
            _one(rows, size, "checkpoint"),
            _one(rows, size, "checkpoint_limit", "pyarrow"),
        )
        out[f"checkpoint_{size}_over_pyarrow<=2"] = _verdict(
            ours and limit and ours["seconds"] / limit["seconds"], 2.0
        )
    out.update(_layout_goals(rows))
    for size in (100_000, ONE_M):
        for mode in ("lite", "full"):
            ours, theirs = (
                _one(rows, size, f"vacuum_{mode}"),
                _one(rows, size, f"vacuum_{mode}", "delta-rs"),
            )
            out[f"vacuum_{mode}_{size}_vs_delta_rs<=0.5"] = _verdict(
                ours and theirs and ours["seconds"] / theirs["seconds"], 0.5
            )
    return out


def _layout_goals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Issue 32's goals for each source checkpoint layout other than ``auto``
    (steps ``<step>@<layout>``): every process <= 2 GB at 10M files during the
    load and the V2 checkpoint, the checkpoint <= 2x pyarrow at each size."""
    out: dict[str, Any] = {}
    layouts = sorted({r["step"].partition("@")[2] for r in rows} - {""})
    for layout in layouts:
        at_10m = [
            r
            for r in rows
            if r["num_files"] == TEN_M
            and r["engine"] == "ours"
            and r["step"].partition("@")[2] == layout
        ]
        out[f"10m@{layout}_every_process_rss_mb<=2GB"] = _verdict(
            max((r["peak_rss_mb"] for r in at_10m), default=None), 2 * GB
        )
        for size in sorted({r["num_files"] for r in rows}):
            ours = _one(rows, size, f"checkpoint@{layout}")
            limit = _one(rows, size, f"checkpoint_limit@{layout}", "pyarrow")
            out[f"checkpoint_{size}@{layout}_over_pyarrow<=2"] = _verdict(
                ours and limit and ours["seconds"] / limit["seconds"], 2.0
            )
    return out


def _cell(table: dict[str, Any], key: str, *, ms: bool = False) -> str:
    entry = table.get(key)
    if entry is None:
        return "-"
    time_text = f"{entry['s'] * 1e3:.1f} ms" if ms else f"{entry['s']:.2f} s"
    return f"{time_text}, {entry['peak_rss_mb']:,.0f} MB"


def render_markdown(result: dict[str, Any]) -> str:
    """The README table of time and peak RSS against size, from a result."""
    lines = [
        "| files | snapshot (files in memory) | state (streamed count) | scan (batches) |"
        " one commit (max of driver, actor RSS) | V2 checkpoint (max process RSS) |"
        " pyarrow limit | checkpoint on 1 / 2 / 4 workers | vacuum lite / full (log side) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for size, table in result["table"].items():
        workers = " / ".join(
            f"{table[k]['s']:.2f}"
            for k in sorted(table)
            if k.startswith("checkpoint_") and k.endswith("_workers/ours")
        )
        vacuum = " / ".join(_cell(table, f"vacuum_{mode}_log/ours") for mode in ("lite", "full"))
        lines.append(
            f"| {size} | {_cell(table, 'snapshot/ours')} | {_cell(table, 'state/ours')} |"
            f" {_cell(table, 'scan/ours')} | {_cell(table, 'commit/ours', ms=True)} |"
            f" {_cell(table, 'checkpoint/ours')} | {_cell(table, 'checkpoint_limit/pyarrow')} |"
            f" {workers or '-'} s | {vacuum} |"
        )
    layouts = sorted(
        {k.split("/", 1)[0].partition("@")[2] for t in result["table"].values() for k in t} - {""}
    )
    if layouts:
        lines += [
            "",
            "| files | source checkpoint layout | snapshot (files in memory) |"
            " state (streamed count) | scan (batches) | V2 checkpoint (max process RSS) |"
            " pyarrow limit |",
            "|---|---|---|---|---|---|---|",
        ]
    for size, table in result["table"].items():
        for layout in layouts:
            if not any(k.split("/", 1)[0].endswith(f"@{layout}") for k in table):
                continue
            cells = [
                _cell(table, f"{step}@{layout}/{engine}")
                for step, engine in (
                    ("snapshot", "ours"),
                    ("state", "ours"),
                    ("scan", "ours"),
                    ("checkpoint", "ours"),
                    ("checkpoint_limit", "pyarrow"),
                )
            ]
            lines.append(f"| {size} | {layout} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def resummarise(path: Path) -> dict[str, Any]:
    """Recompute a result file's summary from its rows (nothing is measured)."""
    from benchmarks.huge_table_series import Series, summarise

    body = json.loads(path.read_text(encoding="utf-8"))
    series = Series()
    series.rows = body["rows"]
    series.checks = body["checks"]
    checkpoints = {int(n): run for n, run in body.get("checkpoint_runs", {}).items()}
    load = body.get("load_average_at_start") or [0.0, 0.0, 0.0]
    result = summarise(series, body["tables"], checkpoints, (load[0], load[1], load[2]))
    keep_extrapolation(result, body)
    result["git"] = body.get("git")
    result["load_average_at_end"] = body.get("load_average_at_end")
    return result


def keep_extrapolation(result: dict[str, Any], previous: dict[str, Any]) -> None:
    """Keep ``previous``'s extrapolation when it came from a larger table than any
    ``result`` has checkpoint runs of (e.g. a re-run of small sizes only)."""
    from benchmarks.huge_table import parse_size

    old = previous.get("extrapolation_64_cores")
    new = result.get("extrapolation_64_cores")
    if old is None:
        return
    if new is None or parse_size(old["from_size"]) > parse_size(new["from_size"]):
        result["extrapolation_64_cores"] = old
