"""Benchmark: checkpoints of the largest tables this machine holds, memory per process.

Work: the first V2 checkpoint (sidecars, one Ray task each) of a table of
``--files`` files (default 2M; ``--files 5000000`` for the 5M run) built by
``benchmarks.table_builder.build_large_table`` (classic checkpoint + 100
commits), exactly as :mod:`benchmarks.checkpoint` does for 1M, and delta-rs
``create_checkpoint`` on the same table (``--no-peer`` skips it). One run
each, in fresh processes.

What it shows is how the work and the memory split: the driver and the
actor never hold file actions of the previous checkpoint; a map task holds
one row group of it; a shard task holds one shard (about 50,000 actions).
So per-process memory stays flat as the table grows, and the CPU work
(map + shard tasks) spreads over every core of a cluster. From the
measured CPU seconds per file the result file extrapolates the wall time
of a 10M-file table on a cluster (see ``extrapolation``).

Run: ``python -m benchmarks.checkpoint_scale [--files N] [--no-peer]``.
Writes ``benchmarks/results/checkpoint_scale.json`` for the default size,
``checkpoint_scale_<N>m.json`` for others (``--files 5000000``: ``_5m``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from benchmarks.checkpoint import (
    TABLE_ENV,
    WORK_DIR,
    cached_table_in_child,
    copy_table,
    verify_in_child,
)
from benchmarks.common import measure_once, write_result

NAME = "checkpoint_scale"
DEFAULT_FILES = 2_000_000
TARGET_FILES = 10_000_000
CLUSTER_CORES = (16, 64, 256)
"""Cluster sizes the 10M extrapolation is given for."""


def extrapolate(result: dict[str, Any], num_files: int) -> dict[str, Any]:
    """Wall time and memory of a 10M-file table's first V2 checkpoint on a cluster.

    Model (from this run): the driver/actor part (``plan`` + ``top_level``)
    grows with the previous checkpoint's size (its non-file columns are
    read); map and shard work is CPU per file, divided over the cores (no
    task depends on another except shard tasks on the map outputs, so the
    two stages are two waves). Per-task memory does not depend on the
    table's size (one row group / one 50,000-action shard).
    """
    scale = TARGET_FILES / num_files
    phases = result["phases"]
    task_cpu = result["task_seconds"]
    map_cpu = task_cpu.get("map", 0.0) * scale
    shard_cpu = task_cpu.get("shard", 0.0) * scale
    serial = (phases["plan"] + phases["top_level"]) * scale
    cpu_per_million = {kind: seconds / (num_files / 1e6) for kind, seconds in task_cpu.items()}
    memory = result["memory"]
    # how well this run kept its 2 cores busy (Ray's scheduling and object
    # transfers, the barrier between the map and shard waves); applied as is
    efficiency = min(
        1.0, (task_cpu.get("map", 0.0) + task_cpu.get("shard", 0.0)) / (2 * phases["sidecars"])
    )
    return {
        "target_files": TARGET_FILES,
        "model": "wall ~= (plan + top_level) * 10M/N + (map_cpu + shard_cpu) * 10M/N"
        " / (cores * efficiency); per-task memory flat",
        "measured_parallel_efficiency_2_cores": efficiency,
        "wall_seconds_by_cores_ideal": {
            str(cores): serial + (map_cpu + shard_cpu) / cores for cores in CLUSTER_CORES
        },
        "task_cpu_seconds_per_million_files": cpu_per_million,
        "serial_seconds": serial,
        "map_cpu_seconds": map_cpu,
        "shard_cpu_seconds": shard_cpu,
        "num_shards": int(result["num_shards"] * scale),
        "wall_seconds_by_cores": {
            str(cores): serial + (map_cpu + shard_cpu) / (cores * efficiency)
            for cores in CLUSTER_CORES
        },
        "wall_seconds_this_machine_2_cores": serial + (map_cpu + shard_cpu) / (2 * efficiency),
        "peak_rss_mb_per_process": {
            "driver": memory.get("driver"),
            "actor": memory["actor"],
            "map_task_worker": memory["by_task_kind"].get("map"),
            "shard_task_worker": memory["by_task_kind"].get("shard"),
        },
        "private_mb_per_task_worker_at_task_end": memory["task_private_mb_at_end_by_kind"],
        "memory_note": "per-task private memory does not grow with the table (one row group"
        " or one shard per task); a worker's RSS also counts the object-store pages it has"
        " touched, which are shared and bounded by the object store",
        "object_store_mb": result["map_output_bytes"] / 1e6 * scale,
        "object_store_note": "map outputs (decoded rows) in flight between the two waves,"
        " spread over the nodes' object stores (spilled to disk when full)",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=DEFAULT_FILES)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--no-peer", action="store_true", help="skip delta-rs")
    parser.add_argument("--no-write", action="store_true")
    ns = parser.parse_args(argv)

    params = {"num_files": ns.files, "num_commits": ns.commits, "partitioned": False}
    print(f"building / finding a {ns.files:,}-file table ...", flush=True)
    source, built = cached_table_in_child(params, rebuild=False)
    print(f"table: {source} (v{built['version']}, {built['num_live_files']:,} live files)")
    WORK_DIR.mkdir(parents=True, exist_ok=True)

    target = copy_table(source, WORK_DIR / "scale-ours", v2=True)
    ours = measure_once(
        "benchmarks.checkpoint:ours_checkpoint",
        ("v2",),
        setup="benchmarks.checkpoint:ours_setup",
        env={TABLE_ENV: target.resolve().as_uri()},
        timeout_s=3600,
    )
    driver_mb = ours.result["driver_peak_rss_mb"]
    result = {**ours.result, "memory": {**ours.result["memory"], "driver": driver_mb}}
    print(
        f"ours: {result['driver_seconds']:.2f} s, {result['num_shards']} shards, "
        f"{result['bytes_written'] / 1e6:.0f} MB; phases {result['phases']}; "
        f"task CPU {result['task_seconds']}"
    )
    print(f"ours peak RSS MB: {result['memory']}")
    verification = verify_in_child(target, result["version"], int(built["num_live_files"]))
    print(f"verification: {verification}")
    if not verification["ok"]:
        print("MISMATCH: the V2 checkpoint does not give the table", file=sys.stderr)
        return 1

    peer: dict[str, Any] | None = None
    if not ns.no_peer:
        peer_copy = copy_table(source, WORK_DIR / "scale-peer", v2=False)
        m = measure_once(
            "benchmarks.checkpoint:deltalake_checkpoint",
            (str(peer_copy),),
            setup="benchmarks.checkpoint:deltalake_setup",
            timeout_s=3600,
        )
        peer = {"seconds": m.seconds, "peak_rss_mb": m.result["peak_rss_mb"]}
        print(f"delta-rs: {m.seconds:.2f} s, peak RSS {peer['peak_rss_mb']:,.0f} MB")

    extrapolation = extrapolate(result, ns.files)
    print(f"10M extrapolation: {extrapolation['wall_seconds_by_cores']} (cores -> s)")
    if ns.no_write:
        return 0
    name = NAME if ns.files == DEFAULT_FILES else f"{NAME}_{ns.files // 1_000_000}m"
    ours_s = result["driver_seconds"]
    path = write_result(
        name,
        {
            "unit": "s",
            "ours": ours_s,
            "peer": None if peer is None else peer["seconds"],
            "ratio": None if peer is None else ours_s / peer["seconds"],
            "statistic": "one run: wall time of the checkpoint call seen by the driver "
            "(cluster, actor and workers started beforehand)",
            "num_files": ns.files,
            "ours_result": result,
            "peak_rss_mb": {
                "ours": result["memory"],
                "peer": None if peer is None else peer["peak_rss_mb"],
            },
            "peer_name": "deltalake (delta-rs) DeltaTable(path).create_checkpoint()",
            "verification": verification,
            "extrapolation": extrapolation,
            "table": {**params, **built},
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
