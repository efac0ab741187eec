"""Benchmark: checkpoint a 1M-file table.

Work: write a checkpoint of the latest version of the table
``benchmarks.table_builder.build_large_table`` makes (a classic checkpoint
of ``--files`` adds at version 10, then ``--commits`` commits of 10 adds and
5 removes). Every run works on a fresh copy of the table's log and runs in
its own fresh process:

- ours (``raydelta-v2``): the table's ``CheckpointActor`` writes a
  UUID-named V2 checkpoint whose file actions are in sidecars of 50,000
  actions, each written by its own Ray task. The copy gets one more commit
  first (untimed) that turns on ``v2Checkpoint`` and ``checkpointPolicy=v2``.
  Timed: ``ray.get(actor.checkpoint.remote(kind="v2"))`` from the driver,
  with the local Ray cluster (2 CPUs) started, the actor running and two
  task workers warm (a long-lived cluster's steady state). The cluster
  start is reported apart (``setup``).
- ours (``raydelta-v1``): the same actor writing a classic V1 checkpoint of
  the unmodified table (one streaming task), for an apples-to-apples check.
- peer (``delta-rs``): ``DeltaTable(path).create_checkpoint()`` on a copy of
  the unmodified table (a classic checkpoint).
- ours fanned out (``raydelta-v2-fanout``): the same V2 checkpoint with
  ``fan_out_min_actions=0``, i.e. map tasks and one task per sidecar, the
  way tables of 1.5M+ file actions are checkpointed (``raydelta-v2`` at 1M
  files runs in one task on two threads).
- limit (``pyarrow``): ``pyarrow.parquet.write_table`` of the table's live
  ``add`` rows in the checkpoint's ``add`` layout (the same rows), with our
  sidecar writer's settings (``parquet_write_options``: snappy, dictionary
  encoding on partition values and DV storage types only), no Delta logic.
  The rows are built in setup.

Goals: ours <= 0.5x delta-rs, ours <= 2x the pyarrow limit. Peak RSS of every
process is reported: the driver, the actor, each task worker (tasks report
their own ``ru_maxrss``). After the first round, our V2 checkpoint is read
back by our reader and by delta-rs (with the commits it covers deleted) and
must give the table's live file count, else the run fails.

Run: ``python -m benchmarks.checkpoint [--files N] [--commits M] [--repeat R]``.
Writes ``benchmarks/results/checkpoint.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import Measurement, measure_once, print_ratio, write_result

NAME = "checkpoint"
GOAL_VS_PEER = 0.5
GOAL_VS_LIMIT = 2.0
TABLE_ENV = "RAYDELTA_BENCH_TABLE"
WORK_DIR = Path(tempfile.gettempdir()) / "raydelta-bench-checkpoint"


# --- preparing copies (parent process) ----------------------------------------------------


def copy_table(source: Path, target: Path, *, v2: bool) -> Path:
    """A fresh copy of the table's log (no data files exist); with ``v2`` one more
    commit turns on ``v2Checkpoint`` and ``delta.checkpointPolicy=v2``."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    if v2:
        enable_v2_checkpoints(target)
    return target


def enable_v2_checkpoints(root: Path) -> int:
    """Append a commit upgrading the protocol to ``v2Checkpoint``; its version."""
    from raydelta.protocol.actions import (
        CommitInfo,
        Metadata,
        Protocol,
        parse_actions,
        serialize_actions,
    )
    from raydelta.protocol.file_names import commit_name
    from raydelta.protocol.table_features import upgrade_protocol

    log = root / "_delta_log"
    first = parse_actions((log / commit_name(0)).read_bytes())
    protocol = next(a for a in first if isinstance(a, Protocol))
    metadata = next(a for a in first if isinstance(a, Metadata))
    upgraded = upgrade_protocol(
        protocol, reader_features=["v2Checkpoint"], writer_features=["v2Checkpoint"]
    )
    configuration = {**metadata.configuration, "delta.checkpointPolicy": "v2"}
    changed = metadata.model_copy(update={"configuration": configuration})
    version = max(int(p.name.split(".")[0]) for p in log.glob("*.json")) + 1
    info = CommitInfo(timestamp=int(time.time() * 1000), operation="SET TBLPROPERTIES")
    (log / commit_name(version)).write_bytes(serialize_actions([info, upgraded, changed]))
    return version


def peak_rss_mb() -> float:
    """This process's own peak RSS (``VmHWM``), MB.

    ``benchmarks.common`` reports ``ru_maxrss``, which Linux carries over
    ``execve`` from the process that started the child, so after a child
    that held a million files every later child would report at least that.
    """
    from raydelta.actors.checkpoint.process_memory import peak_rss_mb as own_peak

    return own_peak()


# --- ours (child process) ------------------------------------------------------------------

_HANDLE: Any = None


def start_ray() -> Any:
    """A local Ray cluster for this process: 2 CPUs, no dashboard."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    ray.init(
        num_cpus=2,
        include_dashboard=False,
        namespace="raydelta",
        log_to_driver=False,
        configure_logging=False,
    )
    return ray


def warm_workers(ray: Any, count: int = 2) -> None:
    """Start ``count`` task workers and import the checkpoint code in each."""

    @ray.remote(num_cpus=1)  # type: ignore[untyped-decorator]
    def warm(seconds: float) -> int:
        import raydelta.actors.checkpoint.actor
        import raydelta.storage.checkpoint.sources  # noqa: F401

        time.sleep(seconds)
        return os.getpid()

    pids = set(ray.get([warm.remote(0.5) for _ in range(count)]))
    if len(pids) < count:
        ray.get([warm.remote(0.5) for _ in range(count)])


def ours_setup() -> None:
    """Cluster, the table's actor, warm workers (untimed)."""
    global _HANDLE
    ray = start_ray()
    from raydelta.actors.checkpoint.actor import checkpoint_actor

    _HANDLE = checkpoint_actor(os.environ[TABLE_ENV])
    ray.get(_HANDLE.ping.remote())
    warm_workers(ray)


def process_memory(summary: dict[str, Any], driver_mb: float | None = None) -> dict[str, Any]:
    """Peak RSS per process (MB) from a checkpoint summary's task reports."""
    workers: dict[int, float] = {}
    by_kind: dict[str, float] = {}
    for task in summary.get("tasks", []):
        workers[task["pid"]] = max(workers.get(task["pid"], 0.0), task["peakRssMb"])
        by_kind[task["kind"]] = max(by_kind.get(task["kind"], 0.0), task["peakRssMb"])
    private: dict[str, float] = {}
    shared: dict[str, float] = {}
    for task in summary.get("tasks", []):
        kind, now = task["kind"], task.get("memoryMb") or {}
        private[kind] = max(private.get(kind, 0.0), now.get("anon", 0.0))
        shared[kind] = max(shared.get(kind, 0.0), now.get("shmem", 0.0))
    memory: dict[str, Any] = {
        "actor": summary["actorPeakRssMb"],
        "task_private_mb_at_end_by_kind": private,
        "task_object_store_mb_at_end_by_kind": shared,
        "task_workers": {str(pid): mb for pid, mb in sorted(workers.items())},
        "task_worker_max": max(workers.values(), default=0.0),
        "by_task_kind": by_kind,
    }
    if driver_mb is not None:
        memory["driver"] = driver_mb
    return memory


def ours_checkpoint(kind: str, fan_out_min_actions: int | None = None) -> dict[str, Any]:
    import ray

    start = time.perf_counter()
    call = _HANDLE.checkpoint.remote(kind=kind, fan_out_min_actions=fan_out_min_actions)
    summary = ray.get(call).to_json_dict()
    seconds = time.perf_counter() - start
    tasks = summary["tasks"]
    return {
        "driver_seconds": seconds,
        "actor_seconds": summary["seconds"],
        "phases": summary["phases"],
        "kind": summary["kind"],
        "version": summary["version"],
        "top_level": summary["topLevel"],
        "source": summary["source"],
        "execution": summary.get("execution"),
        "sidecars_written": summary["sidecarsWritten"],
        "num_shards": summary["numShards"],
        "num_adds": summary["numAdds"],
        "bytes_written": summary["bytesWritten"],
        "memory": process_memory(summary),
        "task_seconds": {
            kind: sum(t["seconds"] for t in tasks if t["kind"] == kind)
            for kind in sorted({t["kind"] for t in tasks})
        },
        "map_output_bytes": sum(t["outputBytes"] for t in tasks if t["kind"] == "map"),
        "driver_peak_rss_mb": peak_rss_mb(),
        "num_tasks": len(tasks),
    }


# --- peer and limit (child processes) -------------------------------------------------------


def deltalake_setup() -> None:
    import deltalake  # noqa: F401


def deltalake_checkpoint(path: str) -> dict[str, Any]:
    from deltalake import DeltaTable

    table = DeltaTable(path)
    table.create_checkpoint()
    return {"version": table.version(), "peak_rss_mb": peak_rss_mb()}


_ROWS: Any = None


def pyarrow_setup() -> None:
    """The table's live adds in the checkpoint's ``add`` layout (untimed)."""
    global _ROWS
    import pyarrow as pa
    import pyarrow.parquet

    from raydelta.protocol.checkpoint_schema import CheckpointLayout
    from raydelta.storage.snapshot import load_snapshot

    snapshot = load_snapshot(os.environ[TABLE_ENV])
    layout = CheckpointLayout.for_table(snapshot.table_configuration)
    _ROWS = pa.table({"add": layout.add_array(snapshot.files)})


def pyarrow_write(path: str) -> dict[str, Any]:
    import pyarrow.parquet as pq

    from raydelta.storage.checkpoint.writer import parquet_write_options

    pq.write_table(_ROWS, path, **parquet_write_options(_ROWS.schema))
    return {"rows": _ROWS.num_rows, "bytes": os.path.getsize(path), "peak_rss_mb": peak_rss_mb()}


# --- verification ---------------------------------------------------------------------------


def verify_v2(root: str, version: int, expected_files: int) -> dict[str, Any]:
    """Our V2 checkpoint alone (commits through ``version`` deleted) gives the table.

    Runs in a child process (:func:`verify_in_child`): a parent that loaded a
    million files would pass its peak RSS on to every child it starts
    (Linux keeps ``ru_maxrss`` across ``execve``).
    """
    import pyarrow as pa
    from deltalake import DeltaTable

    from raydelta.protocol.file_names import commit_name
    from raydelta.storage.snapshot import load_snapshot

    table = Path(root)
    for v in range(version + 1):
        (table / "_delta_log" / commit_name(v)).unlink(missing_ok=True)
    ours = load_snapshot(table.resolve().as_uri())
    assert ours.log_segment is not None and ours.log_segment.checkpoint is not None
    peer = DeltaTable(str(table))
    peer_files = pa.table(peer.get_add_actions(flatten=True)).num_rows
    return {
        "checkpoint": ours.log_segment.checkpoint.files[0].name,
        "ours_num_files": ours.num_files,
        "deltalake_num_files": peer_files,
        "expected": expected_files,
        "ok": ours.num_files == peer_files == expected_files,
    }


def verify_in_child(root: Path, version: int, expected_files: int) -> dict[str, Any]:
    result: dict[str, Any] = measure_once(
        "benchmarks.checkpoint:verify_v2", (str(root), version, expected_files)
    ).result
    return result


# --- main -----------------------------------------------------------------------------------


def _summary(label: str, runs: list[Measurement], key: str | None = None) -> dict[str, Any]:
    seconds = [r.result[key] if key else r.seconds for r in runs]
    return {
        "label": label,
        "median_s": statistics.median(seconds),
        "min_s": min(seconds),
        "median_setup_s": statistics.median(r.setup_seconds for r in runs),
        "peak_rss_mb": max(r.peak_rss_mb for r in runs),
        "runs": [
            {
                "seconds": s,
                "work_seconds": r.seconds,
                "setup_seconds": r.setup_seconds,
                "peak_rss_mb": r.peak_rss_mb,
                "result": r.result,
            }
            for s, r in zip(seconds, runs, strict=True)
        ],
    }


def build_cached(params_json: str, rebuild: bool) -> dict[str, Any]:
    """Build (or find) the cached table; run in a child so the parent stays small."""
    from benchmarks.snapshot_load import cached_table

    root, built = cached_table(json.loads(params_json), rebuild=rebuild)
    return {"root": str(root), "built": built}


def cached_table_in_child(params: dict[str, Any], *, rebuild: bool) -> tuple[Path, dict[str, Any]]:
    result = measure_once(
        "benchmarks.checkpoint:build_cached", (json.dumps(params), rebuild), timeout_s=7200
    ).result
    return Path(result["root"]), result["built"]


def main(argv: list[str] | None = None) -> int:

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-classic", action="store_true", help="skip our V1 checkpoint")
    parser.add_argument(
        "--no-fanout", action="store_true", help="skip our V2 checkpoint forced to fan out"
    )
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached table")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)

    params = {"num_files": ns.files, "num_commits": ns.commits, "partitioned": False}
    source, built = cached_table_in_child(params, rebuild=ns.rebuild)
    print(f"table: {source} (v{built['version']}, {built['num_live_files']:,} live files)")
    WORK_DIR.mkdir(parents=True, exist_ok=True)
    labels = ["raydelta-v2", "delta-rs", "pyarrow"]
    labels += [] if ns.no_fanout else ["raydelta-v2-fanout"]
    labels += [] if ns.no_classic else ["raydelta-v1"]
    runs: dict[str, list[Measurement]] = {label: [] for label in labels}
    verification: dict[str, Any] | None = None
    for round_index in range(ns.repeat):
        for label in labels:
            target = WORK_DIR / label
            copy_table(source, target, v2=label.startswith("raydelta-v2"))
            uri = target.resolve().as_uri()
            env = {TABLE_ENV: uri}
            if label.startswith("raydelta"):
                kind = "v2" if label.startswith("raydelta-v2") else "classic"
                fan_out = 0 if label == "raydelta-v2-fanout" else None
                m = measure_once(
                    "benchmarks.checkpoint:ours_checkpoint",
                    (kind, fan_out),
                    setup="benchmarks.checkpoint:ours_setup",
                    env=env,
                )
                memory = {**m.result["memory"], "driver": m.result["driver_peak_rss_mb"]}
                m = Measurement(
                    m.seconds,
                    m.setup_seconds,
                    m.result["driver_peak_rss_mb"],
                    m.rss_after_setup_mb,
                    {**m.result, "memory": memory},
                )
                shown = m.result["driver_seconds"]
            elif label == "delta-rs":
                m = measure_once(
                    "benchmarks.checkpoint:deltalake_checkpoint",
                    (str(target),),
                    setup="benchmarks.checkpoint:deltalake_setup",
                )
                shown = m.seconds
                m = Measurement(
                    m.seconds,
                    m.setup_seconds,
                    m.result["peak_rss_mb"],
                    m.rss_after_setup_mb,
                    m.result,
                )
            else:
                m = measure_once(
                    "benchmarks.checkpoint:pyarrow_write",
                    (str(WORK_DIR / "limit.parquet"),),
                    setup="benchmarks.checkpoint:pyarrow_setup",
                    env=env,
                )
                shown = m.seconds
                m = Measurement(
                    m.seconds,
                    m.setup_seconds,
                    m.result["peak_rss_mb"],
                    m.rss_after_setup_mb,
                    m.result,
                )
            runs[label].append(m)
            print(
                f"  [{round_index + 1}/{ns.repeat}] {label:<12} {shown:8.3f} s"
                f"  (setup {m.setup_seconds:.1f} s, peak RSS {m.peak_rss_mb:,.0f} MB,"
                f" load {os.getloadavg()[0]:.1f})",
                flush=True,
            )
            if label == "raydelta-v2" and verification is None:
                verification = verify_in_child(
                    target, m.result["version"], int(built["num_live_files"])
                )
                print(f"  verification: {verification}")
                if not verification["ok"]:
                    print("MISMATCH: the V2 checkpoint does not give the table", file=sys.stderr)
                    return 1

    ours = _summary("raydelta-v2", runs["raydelta-v2"], "driver_seconds")
    peer = _summary("delta-rs", runs["delta-rs"])
    limit = _summary("pyarrow", runs["pyarrow"])
    classic = (
        None if ns.no_classic else _summary("raydelta-v1", runs["raydelta-v1"], "driver_seconds")
    )
    fanned = (
        None
        if ns.no_fanout
        else _summary("raydelta-v2-fanout", runs["raydelta-v2-fanout"], "driver_seconds")
    )
    print()
    ratio = print_ratio(
        NAME, ours=ours["median_s"], peer=peer["median_s"], unit="s", goal=GOAL_VS_PEER
    )
    over_limit = print_ratio(
        f"{NAME} vs pyarrow limit",
        ours=ours["median_s"],
        peer=limit["median_s"],
        unit="s",
        goal=GOAL_VS_LIMIT,
    )
    last = runs["raydelta-v2"][-1].result
    memory = {
        "ours": {
            "driver": max(r.peak_rss_mb for r in runs["raydelta-v2"]),
            "actor": max(r.result["memory"]["actor"] for r in runs["raydelta-v2"]),
            "task_worker_max": max(
                r.result["memory"]["task_worker_max"] for r in runs["raydelta-v2"]
            ),
            "by_task_kind": last["memory"]["by_task_kind"],
            "task_workers_last_run": last["memory"]["task_workers"],
        },
        "peer": peer["peak_rss_mb"],
        "pyarrow": limit["peak_rss_mb"],
    }
    if classic is not None:
        memory["ours_classic"] = {
            "driver": max(r.peak_rss_mb for r in runs["raydelta-v1"]),
            "actor": max(r.result["memory"]["actor"] for r in runs["raydelta-v1"]),
            "task_worker_max": max(
                r.result["memory"]["task_worker_max"] for r in runs["raydelta-v1"]
            ),
        }
    print(f"peak RSS MB: {json.dumps(memory)}")
    if classic is not None:
        print(f"raydelta classic V1: {classic['median_s']:.3f} s (median)")
    fan_out_over_limit = None
    if fanned is not None:
        fan_out_over_limit = fanned["median_s"] / limit["median_s"]
        print(
            f"raydelta V2 fanned out: {fanned['median_s']:.3f} s (median),"
            f" {fan_out_over_limit:.2f}x the pyarrow limit"
        )
    if ns.no_write:
        return 0
    path = write_result(
        NAME,
        {
            "unit": "s",
            "ours": ours["median_s"],
            "peer": peer["median_s"],
            "ratio": ratio,
            "statistic": "median wall time of the checkpoint call seen by the driver; "
            "ours with a running cluster and actor (setup excluded)",
            "goal": f"ours <= {GOAL_VS_PEER}x delta-rs and <= {GOAL_VS_LIMIT}x the pyarrow limit",
            "goal_ratio": GOAL_VS_PEER,
            "goal_met": ratio <= GOAL_VS_PEER,
            "limit_pyarrow_write_s": limit["median_s"],
            "ours_over_limit": over_limit,
            "goal_vs_limit_met": over_limit <= GOAL_VS_LIMIT,
            "ours_classic_v1_s": None if classic is None else classic["median_s"],
            "ours_execution": last.get("execution"),
            "ours_fan_out_s": None if fanned is None else fanned["median_s"],
            "ours_fan_out_over_limit": fan_out_over_limit,
            "ours_fan_out_task_cpu_seconds_last_run": (
                None if fanned is None else runs["raydelta-v2-fanout"][-1].result["task_seconds"]
            ),
            "ours_phases_last_run": last["phases"],
            "ours_task_cpu_seconds_last_run": last["task_seconds"],
            "ours_layout": {
                "num_shards": last["num_shards"],
                "sidecars_written": last["sidecars_written"],
                "bytes_written": last["bytes_written"],
                "source": last["source"],
                "num_tasks": last["num_tasks"],
            },
            "peak_rss_mb": memory,
            "peak_rss_note": "VmHWM of each process (its own address space); ru_maxrss of a"
            " child carries its starter's peak over execve on Linux",
            "load_average_at_end": os.getloadavg(),
            "import_s": {
                "ours_cluster_and_actor_start": ours["median_setup_s"],
                "peer": peer["median_setup_s"],
            },
            "peer_name": "deltalake (delta-rs) DeltaTable(path).create_checkpoint()",
            "verification": verification,
            "table": {**params, **built},
            "repeat": ns.repeat,
            "engines": {
                s["label"]: s
                for s in (ours, peer, limit, *(x for x in (classic, fanned) if x is not None))
            },
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
