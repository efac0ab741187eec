"""Benchmark: dry-run VACUUM of a 100k-file table, ours vs delta-rs, lite and full.

The table: ``--files`` data files in ``--partitions`` partition directories,
all real (one-byte) files on disk last modified 30 days ago; half of them
live, the other half removed 8 days ago (expired under the default 7-day
retention). Its log: the create commit, one commit adding every file, one
removing half of them, and a classic checkpoint of the last version holding
the adds and the tombstones.

Pairs compared, each run in a fresh process (imports excluded):

- lite: ours ``storage.vacuum.vacuum(uri, lite=True, dry_run=True)`` vs delta-rs
  ``DeltaTable(uri).vacuum(dry_run=True)`` (its default mode); neither dry
  run looks at the files (as delta-spark's ``VACUUM ... LITE DRY RUN``);
- full: ours ``vacuum(uri, dry_run=True)`` (lists the directory) vs delta-rs
  ``vacuum(dry_run=True, full=True)``.

Both engines open the table inside the timed work (``load_snapshot`` /
``DeltaTable(uri)``); the time of the vacuum call alone is reported too.
Both must report the same set of files, else the run fails. Goal: ours <=
0.5x delta-rs in each mode at 100k and 1M files (median wall time of open +
vacuum). Ours opens the table with VACUUM's own column read of the log
(``storage/cleanup/log_references.py``), delta-rs with ``DeltaTable(uri)``.

Run: ``python -m benchmarks.vacuum [--sizes 100000,1000000] [--files N] [--repeat R]``
(1,000 files per partition unless ``--partitions``; the 1M-file table takes a
few minutes to build once).
Writes ``benchmarks/results/vacuum.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Target, measure_interleaved, print_ratio, print_table, write_result

NAME = "vacuum"
GOAL_RATIO = 0.5
CACHE_DIR = Path(tempfile.gettempdir()) / "raydelta-bench-tables"
BUILDER_REVISION = 1
DAY_MS = 86_400_000


# --- the table ---------------------------------------------------------------------------------


def build_table(root: Path, *, num_files: int, num_partitions: int) -> dict[str, Any]:
    """Write the table described in the module docstring; return its description."""
    from raydelta.storage.checkpoint.writer import write_v1_checkpoint
    from raydelta.storage.log.store import log_store_for
    from raydelta.storage.snapshot import load_snapshot

    now = int(time.time() * 1000)
    removed_at = now - 8 * DAY_MS
    file_time_ns = (now - 30 * DAY_MS) * 1_000_000
    log = root / "_delta_log"
    log.mkdir(parents=True)
    schema = {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "string", "nullable": True, "metadata": {}},
        ],
    }
    create = [
        {"commitInfo": {"timestamp": now - 40 * DAY_MS, "operation": "CREATE TABLE"}},
        {"protocol": {"minReaderVersion": 1, "minWriterVersion": 2}},
        {
            "metaData": {
                "id": "00000000-0000-0000-0000-00000000b00c",
                "format": {"provider": "parquet", "options": {}},
                "schemaString": json.dumps(schema),
                "partitionColumns": ["part"],
                "configuration": {},
                "createdTime": now - 40 * DAY_MS,
            }
        },
    ]
    paths = []
    adds = [{"commitInfo": {"timestamp": now - 30 * DAY_MS, "operation": "WRITE"}}]
    for index in range(num_files):
        part = f"{index % num_partitions:03d}"
        path = f"part={part}/part-{index:07d}-c000.snappy.parquet"
        paths.append(path)
        adds.append(
            {
                "add": {
                    "path": path,
                    "partitionValues": {"part": part},
                    "size": 1,
                    "modificationTime": now - 30 * DAY_MS,
                    "dataChange": True,
                    "stats": json.dumps({"numRecords": 1}),
                }
            }
        )
    removed = paths[1::2]
    removes = [{"commitInfo": {"timestamp": removed_at, "operation": "DELETE"}}]
    removes += [
        {
            "remove": {
                "path": path,
                "deletionTimestamp": removed_at,
                "dataChange": True,
                "extendedFileMetadata": True,
                "partitionValues": {"part": path[5:8]},
                "size": 1,
            }
        }
        for path in removed
    ]
    for version, actions in enumerate((create, adds, removes)):
        body = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
        (log / f"{version:020d}.json").write_text(body)
    for path in paths:
        target = root / path
        if not target.parent.exists():
            target.parent.mkdir()
        target.write_bytes(b"x")
        os.utime(target, ns=(file_time_ns, file_time_ns))
    uri = root.resolve().as_uri()
    state = load_snapshot(uri).state
    # As of just after the removal, so the checkpoint keeps the tombstones.
    write_v1_checkpoint(log_store_for(uri), state, now_ms=removed_at + 1)
    return {
        "path": str(root),
        "num_files": num_files,
        "num_partitions": num_partitions,
        "num_live": num_files - len(removed),
        "num_removed": len(removed),
        "version": 2,
    }


def cached_table(params: dict[str, Any], *, rebuild: bool = False) -> tuple[Path, dict[str, Any]]:
    key = json.dumps({"builder": BUILDER_REVISION, "name": NAME, **params}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    root = CACHE_DIR / digest
    marker = root / "built.json"
    if rebuild or not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        print(f"building table {params} at {root} ...", flush=True)
        started = time.perf_counter()
        description = build_table(root / "table", **params)
        print(f"  built in {time.perf_counter() - started:.1f} s", flush=True)
        marker.write_text(json.dumps(description), encoding="utf-8")
    return root / "table", json.loads(marker.read_text(encoding="utf-8"))


# --- the engines (run in fresh processes) -----------------------------------------------------


def ours_setup() -> None:
    pass


def _ours(uri: str, lite: bool) -> dict[str, Any]:
    from raydelta.storage.cleanup.log_references import load_vacuum_view
    from raydelta.storage.cleanup.vacuum import vacuum
    from raydelta.storage.log.store import log_store_for

    started = time.perf_counter()
    store = log_store_for(uri)
    view = load_vacuum_view(uri, store)
    opened = time.perf_counter()
    report = vacuum(uri, lite=lite, dry_run=True, store=store, snapshot=view)
    done = time.perf_counter()
    return {
        "num_files": report.num_files,
        "digest": _digest(report.files),
        "open_s": opened - started,
        "vacuum_s": done - opened,
    }


def ours_lite(uri: str) -> dict[str, Any]:
    return _ours(uri, True)


def ours_full(uri: str) -> dict[str, Any]:
    return _ours(uri, False)


def deltalake_setup() -> None:
    import deltalake  # noqa: F401


def _deltalake(uri: str, full: bool) -> dict[str, Any]:
    from deltalake import DeltaTable

    started = time.perf_counter()
    table = DeltaTable(uri)
    opened = time.perf_counter()
    files = table.vacuum(dry_run=True, full=full)
    done = time.perf_counter()
    return {
        "num_files": len(files),
        "digest": _digest(files),
        "open_s": opened - started,
        "vacuum_s": done - opened,
    }


def deltalake_lite(uri: str) -> dict[str, Any]:
    return _deltalake(uri, False)


def deltalake_full(uri: str) -> dict[str, Any]:
    return _deltalake(uri, True)


def _digest(paths: list[str]) -> str:
    return hashlib.sha256("\n".join(sorted(paths)).encode()).hexdigest()


# --- main ---------------------------------------------------------------------------------------


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2


def run_size(ns: argparse.Namespace, num_files: int, num_partitions: int) -> dict[str, Any] | None:
    """Both modes at one table size; None when the engines disagree."""
    params = {"num_files": num_files, "num_partitions": num_partitions}
    table_path, built = cached_table(params, rebuild=ns.rebuild)
    uri = table_path.resolve().as_uri()
    print(f"table: {uri} ({built['num_live']:,} live, {built['num_removed']:,} removed)")

    module = "benchmarks.vacuum"
    summaries = measure_interleaved(
        [
            Target("ours-lite", f"{module}:ours_lite", (uri,), f"{module}:ours_setup"),
            Target("rs-default", f"{module}:deltalake_lite", (uri,), f"{module}:deltalake_setup"),
            Target("ours-full", f"{module}:ours_full", (uri,), f"{module}:ours_setup"),
            Target("rs-full", f"{module}:deltalake_full", (uri,), f"{module}:deltalake_setup"),
        ],
        repeat=ns.repeat,
    )
    print()
    print_table(list(summaries.values()))
    modes: dict[str, Any] = {}
    failed = False
    for mode, ours_label, peer_label in (
        ("lite", "ours-lite", "rs-default"),
        ("full", "ours-full", "rs-full"),
    ):
        ours, peer = summaries[ours_label], summaries[peer_label]
        if ours.result["digest"] != peer.result["digest"]:
            print(
                f"MISMATCH ({mode}): ours {ours.result['num_files']:,} files, "
                f"delta-rs {peer.result['num_files']:,}",
                file=sys.stderr,
            )
            failed = True
        ratio = print_ratio(
            f"{NAME} {mode} {num_files:,} files",
            ours=ours.median_s,
            peer=peer.median_s,
            unit="s",
            goal=GOAL_RATIO,
        )
        vacuum_only = {
            "ours": _median([r.result["vacuum_s"] for r in ours.runs]),
            "peer": _median([r.result["vacuum_s"] for r in peer.runs]),
        }
        vacuum_only["ratio"] = vacuum_only["ours"] / vacuum_only["peer"]
        open_only = {
            "ours": _median([r.result["open_s"] for r in ours.runs]),
            "peer": _median([r.result["open_s"] for r in peer.runs]),
        }
        print(
            f"  vacuum call alone: ours {vacuum_only['ours']:.3f} s, delta-rs "
            f"{vacuum_only['peer']:.3f} s ({vacuum_only['ratio']:.2f}x); open: ours "
            f"{open_only['ours']:.3f} s, delta-rs {open_only['peer']:.3f} s"
        )
        modes[mode] = {
            "unit": "s",
            "ours": ours.median_s,
            "peer": peer.median_s,
            "ratio": ratio,
            "best": {"ours": ours.min_s, "peer": peer.min_s, "ratio": ours.min_s / peer.min_s},
            "goal_met": ratio <= GOAL_RATIO,
            "files_found": ours.result["num_files"],
            "vacuum_call_only": vacuum_only,
            "open_only": open_only,
            "peak_rss_mb": {"ours": ours.peak_rss_mb, "peer": peer.peak_rss_mb},
            "import_s": {"ours": ours.median_setup_s, "peer": peer.median_setup_s},
        }
    if failed:
        return None
    return {
        "table": {**params, **built},
        "modes": modes,
        "engines": {label: s.as_dict() for label, s in summaries.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--sizes",
        default="100000,1000000",
        help="comma-separated file counts (one table each, 1,000 files per partition)",
    )
    parser.add_argument("--files", type=int, help="one size only (overrides --sizes)")
    parser.add_argument("--partitions", type=int, help="partitions (default: files / 1000)")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached table")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)

    sizes = [ns.files] if ns.files else [int(v) for v in ns.sizes.split(",") if v]
    load_before = os.getloadavg()
    results: dict[str, Any] = {}
    for num_files in sizes:
        partitions = ns.partitions or max(1, num_files // 1000)
        result = run_size(ns, num_files, partitions)
        if result is None:
            return 1
        results[str(num_files)] = result
    load_after = os.getloadavg()
    if ns.no_write:
        return 0
    worst = max(
        (m for r in results.values() for m in r["modes"].values()), key=lambda m: m["ratio"]
    )
    largest = results[str(max(sizes))]
    path = write_result(
        NAME,
        {
            "unit": "s",
            "ours": worst["ours"],
            "peer": worst["peer"],
            "ratio": worst["ratio"],
            "statistic": (
                "median wall time of open + dry-run vacuum, fresh process, imports excluded; "
                "top-level ours/peer/ratio are the worst mode and size"
            ),
            "goal": f"ours <= {GOAL_RATIO}x delta-rs in each mode at each size",
            "goal_ratio": GOAL_RATIO,
            "goal_met": all(m["goal_met"] for r in results.values() for m in r["modes"].values()),
            "sizes": {k: {"table": r["table"], "modes": r["modes"]} for k, r in results.items()},
            "modes": largest["modes"],
            "peer_name": "deltalake (delta-rs) DeltaTable(uri).vacuum(dry_run=True[, full=True])",
            "table": largest["table"],
            "repeat": ns.repeat,
            "load_average": {"before": load_before, "after": load_after},
            "engines": {k: r["engines"] for k, r in results.items()},
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
