"""Benchmark: cold snapshot load of a table with a large checkpoint.

Work: load the latest snapshot of a table whose classic checkpoint holds
``--files`` add actions, with ``--commits`` JSON commits after it, and
materialise its live files. Each engine runs in its own fresh process:

- ours: ``storage.snapshot.load_snapshot(uri).num_files``;
- peer (delta-rs): ``DeltaTable(uri).get_add_actions(flatten=True)`` turned
  into a ``pyarrow.Table``;
- limit: ``pyarrow.parquet.read_table(checkpoint)``, the floor for anything
  that reads the whole checkpoint with pyarrow.

Import time is measured separately (``setup``) and not part of the ratio.
Goal: ours <= 1.0x delta-rs wall time. Both engines must report the same
number of live files, else the run fails.

Run: ``python -m benchmarks.snapshot_load [--files N] [--commits M] [--repeat R]``.
Writes ``benchmarks/results/snapshot_load.json``.

Only the standard library and :mod:`benchmarks.common` are imported at top
level: the children import this module to find their targets.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import Target, measure_interleaved, print_ratio, print_table, write_result

NAME = "snapshot_load"
GOAL_RATIO = 1.0
RSS_GOAL_RATIO = 0.75
CACHE_DIR = Path(tempfile.gettempdir()) / "raydelta-bench-tables"
BUILDER_REVISION = 1
"""Bump when ``table_builder`` output changes, to invalidate cached tables."""


def ours_setup() -> None:
    import raydelta.storage.snapshot  # noqa: F401


def ours_load(uri: str) -> dict[str, Any]:
    from raydelta.storage.snapshot import load_snapshot

    snapshot = load_snapshot(uri)
    return {"num_files": snapshot.num_files, "version": snapshot.version}


def deltalake_setup() -> None:
    import deltalake  # noqa: F401
    import pyarrow  # noqa: F401


def deltalake_load(uri: str) -> dict[str, Any]:
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(uri)
    actions = pa.table(table.get_add_actions(flatten=True))
    return {"num_files": actions.num_rows, "version": table.version()}


def pyarrow_setup() -> None:
    import pyarrow.parquet  # noqa: F401


def pyarrow_read(path: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    return {"num_rows": pq.read_table(path).num_rows}


def cached_table(params: dict[str, Any], *, rebuild: bool = False) -> tuple[Path, dict[str, Any]]:
    """Build the table for ``params`` once; later runs reuse it (keyed by params)."""
    from benchmarks.table_builder import build_large_table

    key = json.dumps({"builder": BUILDER_REVISION, **params}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = CACHE_DIR / digest
    marker = root / "built.json"
    if rebuild or not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        print(f"building table {params} at {root} ...", flush=True)
        built = build_large_table(root / "table", **params)
        description = {
            "path": built.path,
            "version": built.version,
            "checkpoint": str(Path(built.path) / "_delta_log" / built.checkpoint_files[0]),
            "num_live_files": built.num_live_files,
            "num_checkpoint_files": built.num_checkpoint_files,
        }
        marker.write_text(json.dumps(description), encoding="utf-8")
    return root / "table", json.loads(marker.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--partitioned", action="store_true")
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached table")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)

    params = {"num_files": ns.files, "num_commits": ns.commits, "partitioned": ns.partitioned}
    table_path, built = cached_table(params, rebuild=ns.rebuild)
    uri = table_path.resolve().as_uri()
    print(f"table: {uri} (v{built['version']}, {built['num_live_files']:,} live files)")

    summaries = measure_interleaved(
        [
            Target(
                "raydelta",
                "benchmarks.snapshot_load:ours_load",
                (uri,),
                "benchmarks.snapshot_load:ours_setup",
            ),
            Target(
                "delta-rs",
                "benchmarks.snapshot_load:deltalake_load",
                (uri,),
                "benchmarks.snapshot_load:deltalake_setup",
            ),
            Target(
                "pyarrow",
                "benchmarks.snapshot_load:pyarrow_read",
                (built["checkpoint"],),
                "benchmarks.snapshot_load:pyarrow_setup",
            ),
        ],
        repeat=ns.repeat,
    )
    ours, peer, limit = summaries["raydelta"], summaries["delta-rs"], summaries["pyarrow"]
    print()
    print_table([ours, peer, limit])
    print(
        f"live files: raydelta {ours.result['num_files']:,}, delta-rs {peer.result['num_files']:,}"
        f" (expected {built['num_live_files']:,})"
    )
    if not ours.result["num_files"] == peer.result["num_files"] == built["num_live_files"]:
        print("MISMATCH: engines disagree on the number of live files", file=sys.stderr)
        return 1
    if ours.result["version"] != peer.result["version"]:
        print("MISMATCH: engines disagree on the version", file=sys.stderr)
        return 1
    ratio = print_ratio(NAME, ours=ours.median_s, peer=peer.median_s, unit="s", goal=GOAL_RATIO)
    print(
        f"peak RSS: raydelta {ours.peak_rss_mb:,.0f} MB, delta-rs {peer.peak_rss_mb:,.0f} MB"
        f" ({ours.peak_rss_mb / peer.peak_rss_mb:.2f}x; goal <= {RSS_GOAL_RATIO}x)"
    )
    if ns.no_write:
        return 0
    path = write_result(
        NAME,
        {
            "unit": "s",
            "ours": ours.median_s,
            "peer": peer.median_s,
            "ratio": ratio,
            "statistic": "median wall time of load, fresh process, imports excluded",
            "goal": f"ours <= {GOAL_RATIO}x delta-rs",
            "goal_ratio": GOAL_RATIO,
            "goal_met": ratio <= GOAL_RATIO,
            "peer_name": "deltalake (delta-rs) DeltaTable + get_add_actions(flatten=True)",
            "limit_pyarrow_read_checkpoint_s": limit.median_s,
            "ours_over_limit": ours.median_s / limit.median_s if limit.median_s else None,
            "peak_rss_mb": {
                "ours": ours.peak_rss_mb,
                "peer": peer.peak_rss_mb,
                "pyarrow": limit.peak_rss_mb,
            },
            "peak_rss_ratio": ours.peak_rss_mb / peer.peak_rss_mb if peer.peak_rss_mb else None,
            "rss_goal": f"ours peak RSS <= {RSS_GOAL_RATIO}x delta-rs (issue 15)",
            "rss_goal_met": bool(
                peer.peak_rss_mb and ours.peak_rss_mb <= RSS_GOAL_RATIO * peer.peak_rss_mb
            ),
            "import_s": {
                "ours": ours.median_setup_s,
                "peer": peer.median_setup_s,
                "pyarrow": limit.median_setup_s,
            },
            "table": {**params, **built},
            "repeat": ns.repeat,
            "engines": {s.label: s.as_dict() for s in (ours, peer, limit)},
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
