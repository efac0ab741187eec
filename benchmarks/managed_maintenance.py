"""Benchmark: commit latency of a managed table with the catalog's automatic
maintenance on vs off, while maintenance runs; and trigger-to-checkpoint time.

Work: ``--writers`` threads of one driver commit ``--commits`` one-row
appends each to a fresh catalog-managed table (``delta.checkpointInterval``
``--interval``, auto-compaction after ``--compact-files`` small files), in two
modes, each in a fresh process with its own local Ray cluster:

- ``off``: ``MaintenanceDefaults(enabled=False)``: the peer;
- ``on``: the catalog checkpoints, cleans up and compacts the table while
  the writers commit (its jobs run as Ray tasks beside them).

Measured: commit latency p50/p99 (the ``append`` call alone) per mode;
``ratio`` = on p50 / off p50 (goal <= 1.1, the same for p99 reported). For
``on``, the time from the policy's trigger (the version that is a multiple
of the interval being published) to that checkpoint being readable
(``_last_checkpoint`` naming it), p50/max over the checkpoints of the run.

Run: ``python -m benchmarks.managed_maintenance [--commits 200] [--writers 4]``.
Writes ``benchmarks/results/managed_maintenance.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import latency_stats, measure_once, percentile, print_ratio, write_result

NAME = "managed_maintenance"
MODES = ("off", "on")
GOAL_RATIO = 1.1
WARMUP = 5


def setup() -> None:
    import pyarrow  # noqa: F401
    import ray  # noqa: F401

    import raydelta.catalog  # noqa: F401


def _watch_checkpoints(
    log: Path, interval: int, stop: threading.Event, seen: dict[int, float]
) -> None:
    """Record when each interval version's commit file and ``_last_checkpoint``
    naming it (or a newer one) appeared."""
    from raydelta.protocol.file_names import commit_name

    published: dict[int, float] = {}
    while not stop.is_set():
        now = time.perf_counter()
        version = 0
        while (log / commit_name(version + interval)).exists():
            version += interval
            published.setdefault(version, now)
        try:
            last = json.loads((log / "_last_checkpoint").read_text())["version"]
        except (OSError, ValueError, KeyError):
            last = None
        if last is not None and last in published and last not in seen:
            seen[last] = now - published[last]
        time.sleep(0.005)


def run_mode(
    root: str, mode: str, writers: int, commits: int, interval: int, compact_files: int
) -> dict[str, Any]:
    import pyarrow as pa
    import ray

    from raydelta.actors.cluster import NAMESPACE
    from raydelta.catalog import Catalog
    from raydelta.protocol.maintenance_policy import MaintenanceDefaults

    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    defaults = MaintenanceDefaults(enabled=mode == "on", compaction_min_files=compact_files)
    catalog = Catalog(
        name=f"bench-{uuid.uuid4().hex[:8]}", root=str(Path(root, mode)), maintenance=defaults
    )
    try:
        properties = {"delta.checkpointInterval": str(interval)}
        catalog.create_table("t", pa.schema([("id", pa.int64())]), properties=properties)
        handles = [catalog.open_table("t") for _ in range(writers)]
        for i, handle in enumerate(handles):
            for j in range(WARMUP):
                handle.append(pa.table({"id": [-(i * 1000 + j) - 1]}))
        log = Path(handles[0].uri.removeprefix("file://")) / "_delta_log"
        stop = threading.Event()
        seen: dict[int, float] = {}
        watcher = threading.Thread(target=_watch_checkpoints, args=(log, interval, stop, seen))
        watcher.start()
        latencies: list[float] = []
        lock = threading.Lock()
        barrier = threading.Barrier(writers + 1)

        def writer(handle: Any, index: int) -> None:
            own = []
            barrier.wait()
            for j in range(commits):
                start = time.perf_counter()
                handle.append(pa.table({"id": [index * 1_000_000 + j]}))
                own.append(time.perf_counter() - start)
            with lock:
                latencies.extend(own)

        threads = [threading.Thread(target=writer, args=(h, i)) for i, h in enumerate(handles)]
        for thread in threads:
            thread.start()
        barrier.wait()
        for thread in threads:
            thread.join()
        if mode == "on":
            handles[0].maintenance_settled(timeout_s=300)
            time.sleep(0.2)  # the watcher's last look
        stop.set()
        watcher.join()
        rows = handles[0].to_arrow().num_rows
        if rows != writers * (commits + WARMUP):
            raise RuntimeError(f"{mode}: {rows} rows, expected {writers * (commits + WARMUP)}")
        trigger = sorted(seen.values())
        entry: dict[str, Any] = {
            "commit": latency_stats(latencies),
            "checkpoints_readable": len(trigger),
            "trigger_to_checkpoint": {
                "p50_ms": percentile(trigger, 50) * 1e3,
                "max_ms": max(trigger) * 1e3 if trigger else float("nan"),
            },
        }
        if mode == "on":
            runs = ray.get(catalog.actor.maintenance_status.remote())
            kinds = [run["kind"] for table in runs for run in table["history"]]
            entry["maintenance_runs"] = {kind: kinds.count(kind) for kind in sorted(set(kinds))}
        print(
            f"  {mode:<3}: p50 {entry['commit']['p50_ms']:.2f} ms,"
            f" p99 {entry['commit']['p99_ms']:.2f} ms,"
            f" trigger->checkpoint p50 {entry['trigger_to_checkpoint']['p50_ms']:.0f} ms"
            f" ({len(trigger)} checkpoints)",
            flush=True,
        )
        return entry
    finally:
        ray.kill(catalog.actor)
        ray.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=200, help="timed commits per writer")
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--interval", type=int, default=10, help="delta.checkpointInterval")
    parser.add_argument("--compact-files", type=int, default=50, help="small files per OPTIMIZE")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)
    root = tempfile.mkdtemp(prefix="raydelta-bench-maintenance-")
    args = (ns.writers, ns.commits, ns.interval, ns.compact_files)
    try:
        results = {
            mode: measure_once(
                "benchmarks.managed_maintenance:run_mode",
                (root, mode, *args),
                setup="benchmarks.managed_maintenance:setup",
            ).result
            for mode in MODES
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ours = results["on"]["commit"]["p50_ms"]
    peer = results["off"]["commit"]["p50_ms"]
    ratio = print_ratio(NAME, ours=ours, peer=peer, unit="ms", goal=GOAL_RATIO)
    p99_ratio = results["on"]["commit"]["p99_ms"] / results["off"]["commit"]["p99_ms"]
    print(f"p99 on/off = {p99_ratio:.2f}x")
    goals = {"p50_ratio_le_1.1": ratio <= GOAL_RATIO, "p99_ratio_le_1.1": p99_ratio <= GOAL_RATIO}
    if not ns.no_write:
        path = write_result(
            NAME,
            {
                "unit": "ms",
                "ours": ours,
                "peer": peer,
                "ratio": ratio,
                "p99_ratio": p99_ratio,
                "ours_label": f"commit p50, maintenance on, {ns.writers} writers",
                "peer_label": f"commit p50, maintenance off, {ns.writers} writers",
                "commits_per_writer": ns.commits,
                "checkpoint_interval": ns.interval,
                "modes": results,
                "goals": goals,
            },
        )
        print(f"wrote {path}")
    print(json.dumps(goals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
