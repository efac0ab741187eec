"""Benchmark: the next checkpoint after 10 small commits, vs the full one.

Work, per run, in a fresh process on a fresh copy of the 1M-file table of
:mod:`benchmarks.checkpoint` (``v2Checkpoint`` turned on):

1. a full V2 checkpoint with sidecars (timed: ``full``);
2. 10 small commits written to the log (untimed), one of these workloads:
   - ``append``: each commit adds 1 new file (a trickle of streaming appends);
   - ``append10``: each commit adds 10 new files;
   - ``update``: each commit adds 10 new files and removes 5 existing ones
     (the shape of the table builder's own commits);
3. the next V2 checkpoint (timed: ``incremental``): shards no commit touched
   reuse their sidecar, touched shards are rebuilt from their own previous
   sidecar plus the committed actions (no map tasks, no hashing of old rows).

Peer: delta-rs on a copy of the same table, same commits: ``create_checkpoint``
(full), the 10 commits, ``create_checkpoint`` again (it has no incremental
mode). Goal: our incremental checkpoint <= 10% of our full one.

Each commit file touches random keys, so which shards are touched is
random; the shard count (21 for 1M files) bounds how much can be reused:
with ``k`` touched keys about ``21 * (1 - (20/21)**k)`` shards are rebuilt.

Run: ``python -m benchmarks.incremental_checkpoint [--repeat R] [--workload W ...]``.
Writes ``benchmarks/results/incremental_checkpoint.json``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.checkpoint import (
    TABLE_ENV,
    WORK_DIR,
    cached_table_in_child,
    copy_table,
    process_memory,
)
from benchmarks.common import measure_once, write_result

NAME = "incremental_checkpoint"
GOAL = 0.10
WORKLOADS = {"append": (1, 0), "append10": (10, 0), "update": (10, 5)}
"""Workload: (adds, removes) per commit."""
NUM_COMMITS = 10
BASE_TIME_MS = 1_800_000_000_000


def sample_paths(checkpoint: str, count: int, seed: int) -> list[str]:
    """``count`` live file paths of the table's classic checkpoint."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(checkpoint)
    column = parquet.read_row_group(0, columns=["add.path"]).column("add").combine_chunks()
    column = column.field("path")
    paths = column.filter(pc.is_valid(column)).to_pylist()
    return random.Random(seed).sample(paths, count)


def write_commits(root: str, workload: str, removable: list[str], seed: int) -> int:
    """Append :data:`NUM_COMMITS` commits of ``workload`` to the table; the last version."""
    from raydelta.protocol.actions import AddFile, CommitInfo, RemoveFile, serialize_actions
    from raydelta.protocol.file_names import commit_name

    adds_per_commit, removes_per_commit = WORKLOADS[workload]
    log = Path(root) / "_delta_log"
    version = max(int(p.name.split(".")[0]) for p in log.glob("*.json"))
    rng = random.Random(seed)
    pool = list(removable)
    for k in range(NUM_COMMITS):
        version += 1
        when = BASE_TIME_MS + k
        actions: list[Any] = [CommitInfo(timestamp=when, operation="WRITE")]
        for _ in range(removes_per_commit):
            path = pool.pop(rng.randrange(len(pool)))
            actions.append(
                RemoveFile(
                    path=path,
                    deletionTimestamp=int(time.time() * 1000),
                    dataChange=True,
                    extendedFileMetadata=True,
                    partitionValues={},
                    size=1000,
                )
            )
        for i in range(adds_per_commit):
            actions.append(
                AddFile(
                    path=f"part-inc-{seed}-{k:03d}-{i:03d}-{rng.getrandbits(64):016x}.parquet",
                    partitionValues={},
                    size=1000,
                    modificationTime=when,
                    dataChange=True,
                    stats='{"numRecords":10}',
                )
            )
        (log / commit_name(version)).write_bytes(serialize_actions(actions))
    return version


def ours_run(root: str, workload: str, removable: list[str], seed: int) -> dict[str, Any]:
    import ray

    from benchmarks import checkpoint as bench

    handle = bench._HANDLE
    start = time.perf_counter()
    full = ray.get(handle.checkpoint.remote(kind="v2")).to_json_dict()
    full_s = time.perf_counter() - start
    last = write_commits(root, workload, removable, seed)
    start = time.perf_counter()
    incremental = ray.get(handle.checkpoint.remote(kind="v2")).to_json_dict()
    incremental_s = time.perf_counter() - start
    assert incremental["version"] == last
    return {
        "full_s": full_s,
        "incremental_s": incremental_s,
        "full": {k: full[k] for k in ("numShards", "sidecarsWritten", "bytesWritten", "phases")},
        "incremental": {
            k: incremental[k]
            for k in (
                "version",
                "overflowActions",
                "shardsChecked",
                "source",
                "numShards",
                "sidecarsWritten",
                "sidecarsReused",
                "bytesWritten",
                "phases",
                "seconds",
            )
        },
        "memory_full": process_memory(full),
        "memory_incremental": process_memory(incremental),
        "driver_peak_rss_mb": bench.peak_rss_mb(),
    }


def deltalake_setup() -> None:
    import deltalake  # noqa: F401


def deltalake_run(root: str, workload: str, removable: list[str], seed: int) -> dict[str, Any]:
    from deltalake import DeltaTable

    start = time.perf_counter()
    DeltaTable(root).create_checkpoint()
    full_s = time.perf_counter() - start
    last = write_commits(root, workload, removable, seed)
    start = time.perf_counter()
    table = DeltaTable(root)
    table.create_checkpoint()
    incremental_s = time.perf_counter() - start
    assert table.version() == last
    from benchmarks.checkpoint import peak_rss_mb

    return {"full_s": full_s, "incremental_s": incremental_s, "peak_rss_mb": peak_rss_mb()}


def verify(root: str) -> dict[str, Any]:
    """Our last checkpoint alone gives the same files as delta-rs on the full log."""
    import pyarrow as pa
    from deltalake import DeltaTable

    from raydelta.protocol.file_names import commit_name
    from raydelta.storage.snapshot import load_snapshot

    expected = pa.table(DeltaTable(root).get_add_actions(flatten=True)).num_rows
    ours_full_log = load_snapshot(Path(root).resolve().as_uri())
    for v in range(ours_full_log.version + 1):
        (Path(root) / "_delta_log" / commit_name(v)).unlink(missing_ok=True)
    ours = load_snapshot(Path(root).resolve().as_uri())
    peer = pa.table(DeltaTable(root).get_add_actions(flatten=True)).num_rows
    return {
        "expected": expected,
        "ours": ours.num_files,
        "deltalake_on_our_checkpoint": peer,
        "ok": expected == ours.num_files == peer == ours_full_log.num_files,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    parser.add_argument("--no-write", action="store_true")
    ns = parser.parse_args(argv)
    workloads = ns.workload or ["append", "append10", "update"]

    params = {"num_files": ns.files, "num_commits": ns.commits, "partitioned": False}
    source, built = cached_table_in_child(params, rebuild=False)
    print(f"table: {source} (v{built['version']}, {built['num_live_files']:,} live files)")
    removable = measure_once(  # in a child: the parent stays small (see benchmarks.checkpoint)
        "benchmarks.incremental_checkpoint:sample_paths",
        (built["checkpoint"], 2 * NUM_COMMITS * 5, 7),
    ).result
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    verification: dict[str, Any] | None = None
    for workload in workloads:
        ours_runs: list[dict[str, Any]] = []
        peer_runs: list[dict[str, Any]] = []
        for round_index in range(ns.repeat):
            seed = 1000 * round_index + len(workload)
            ours_copy = copy_table(source, WORK_DIR / "incremental-ours", v2=True)
            m = measure_once(
                "benchmarks.incremental_checkpoint:ours_run",
                (str(ours_copy), workload, removable, seed),
                setup="benchmarks.checkpoint:ours_setup",
                env={TABLE_ENV: ours_copy.resolve().as_uri()},
            )
            ours_runs.append(m.result)
            if verification is None:
                verification = measure_once(
                    "benchmarks.incremental_checkpoint:verify", (str(ours_copy),)
                ).result
                print(f"  verification: {verification}")
                if not verification["ok"]:
                    print("MISMATCH: the incremental checkpoint lost files", file=sys.stderr)
                    return 1
            peer_copy = copy_table(source, WORK_DIR / "incremental-peer", v2=False)
            p = measure_once(
                "benchmarks.incremental_checkpoint:deltalake_run",
                (str(peer_copy), workload, removable, seed),
                setup="benchmarks.incremental_checkpoint:deltalake_setup",
            )
            peer_runs.append(p.result)
            inc = m.result["incremental"]
            print(
                f"  [{workload} {round_index + 1}/{ns.repeat}]"
                f" ours full {m.result['full_s']:.3f} s,"
                f" incremental {m.result['incremental_s']:.3f} s"
                f" ({inc['sidecarsWritten']} sidecars written, {inc['sidecarsReused']} reused,"
                f" {inc['overflowActions']} actions in the overflow);"
                f" delta-rs full {p.result['full_s']:.3f} s, after commits"
                f" {p.result['incremental_s']:.3f} s",
                flush=True,
            )
        full = statistics.median(r["full_s"] for r in ours_runs)
        incremental = statistics.median(r["incremental_s"] for r in ours_runs)
        peer_incremental = statistics.median(r["incremental_s"] for r in peer_runs)
        ratio = incremental / full
        print(
            f"{workload}: incremental {incremental:.3f} s / full {full:.3f} s = {ratio:.3f}"
            f"  goal <= {GOAL:.2f}: {'MET' if ratio <= GOAL else 'NOT MET'};"
            f" vs delta-rs {incremental / peer_incremental:.2f}x"
        )
        results[workload] = {
            "adds_per_commit": WORKLOADS[workload][0],
            "removes_per_commit": WORKLOADS[workload][1],
            "ours_full_s": full,
            "ours_incremental_s": incremental,
            "incremental_over_full": ratio,
            "goal_met": ratio <= GOAL,
            "peer_full_s": statistics.median(r["full_s"] for r in peer_runs),
            "peer_after_commits_s": peer_incremental,
            "ours_over_peer": incremental / peer_incremental,
            "sidecars_written": [r["incremental"]["sidecarsWritten"] for r in ours_runs],
            "sidecars_reused": [r["incremental"]["sidecarsReused"] for r in ours_runs],
            "ours_runs": ours_runs,
            "peer_runs": peer_runs,
        }
    if ns.no_write:
        return 0
    main_workload = "append" if "append" in results else workloads[0]
    headline = results[main_workload]
    path = write_result(
        NAME,
        {
            "unit": "s",
            "ours": headline["ours_incremental_s"],
            "peer": headline["peer_after_commits_s"],
            "ratio": headline["ours_over_peer"],
            "statistic": f"median; headline workload {main_workload!r}: ours = our checkpoint "
            "after 10 commits, peer = delta-rs create_checkpoint after the same commits",
            "goal": f"our incremental checkpoint <= {GOAL:.0%} of our full checkpoint",
            "goal_ratio": GOAL,
            "goal_met": {w: r["goal_met"] for w, r in results.items()},
            "incremental_over_full": {w: r["incremental_over_full"] for w, r in results.items()},
            "workloads": results,
            "verification": verification,
            "table": {**params, **built},
            "repeat": ns.repeat,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    sys.exit(main())
