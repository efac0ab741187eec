"""Benchmark: a 1M-file V2 checkpoint on a local multi-node Ray cluster of 1, 2 and 4 worker nodes.

Work: the first V2 checkpoint (sidecars, one Ray task each) of the table
:mod:`benchmarks.checkpoint` uses (``build_large_table``: classic checkpoint
+ 100 commits, ``--files`` files), on a ``ray.cluster_utils.Cluster`` with a
CPU-less head (the ``CheckpointActor`` lives there, as in
``ray_cluster.yaml``) and ``N`` worker nodes of one CPU each, every node its
own raylet and object store. One run per ``N``, each in a fresh process
with a fresh cluster (private ``RAY_TMPDIR``), workers warmed first; the
time is the checkpoint call as the driver sees it.

On this 2-core machine the "nodes" share the same two cores: going from 1
to 2 nodes can use the second core, 4 nodes cannot go faster than 2 (and
pay for more object transfers between node stores). What the numbers show
is how the work splits over nodes, not a real cluster's speed; the argument
for a real cluster is in ``benchmarks/README.md`` (``checkpoint_cluster``).

``ours`` is the 4-node time, ``peer`` the 1-node time (the same code on one
node: there is no other engine to compare a cluster against), ``ratio`` =
ours / peer.

Run: ``python -m benchmarks.checkpoint_cluster [--files N] [--nodes 1,2,4]``.
Writes ``benchmarks/results/checkpoint_cluster.json`` (default size only).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import tempfile
from typing import Any

from benchmarks.checkpoint import (
    TABLE_ENV,
    WORK_DIR,
    cached_table_in_child,
    copy_table,
    verify_in_child,
)
from benchmarks.common import measure_once, write_result

NAME = "checkpoint_cluster"
DEFAULT_FILES = 1_000_000
NODES_ENV = "RAYDELTA_BENCH_NODES"
OBJECT_STORE_BYTES = 1024 * 1024 * 1024
"""Per node: room for its share of the map outputs without spilling."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def run_on_cluster(num_nodes: int) -> dict[str, Any]:
    """Start the cluster (untimed), time the checkpoint, stop the cluster."""
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    import benchmarks.checkpoint as checkpoint_bench
    from raydelta.actors.checkpoint.actor import MAX_CONCURRENCY, CheckpointActor
    from raydelta.actors.cluster import NAMESPACE, checkpoint_actor_name, start_actor

    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "gcs_server_port": _free_port(),
            "include_dashboard": False,
            "object_store_memory": OBJECT_STORE_BYTES // 2,
        },
    )
    try:
        for _ in range(num_nodes):
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, namespace=NAMESPACE, log_to_driver=False)
        uri = os.environ[TABLE_ENV]
        handle = start_actor(
            CheckpointActor,
            checkpoint_actor_name(uri),
            uri,
            options={
                "max_concurrency": MAX_CONCURRENCY,
                "scheduling_strategy": NodeAffinitySchedulingStrategy(
                    cluster.head_node.node_id, soft=False
                ),
            },
        )
        ray.get(handle.ping.remote())
        checkpoint_bench.warm_workers(ray, count=num_nodes)
        checkpoint_bench._HANDLE = handle
        # fanned out whatever the size: this measures map and shard tasks across nodes
        result = checkpoint_bench.ours_checkpoint("v2", 0)
        result["num_nodes"] = num_nodes
        result["task_nodes"] = len(
            {n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU")}
        )
        return result
    finally:
        ray.shutdown()
        cluster.shutdown()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=DEFAULT_FILES)
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--nodes", default="1,2,4", help="worker node counts to run")
    parser.add_argument("--no-write", action="store_true")
    ns = parser.parse_args(argv)
    counts = [int(n) for n in ns.nodes.split(",")]

    params = {"num_files": ns.files, "num_commits": ns.commits, "partitioned": False}
    print(f"building / finding a {ns.files:,}-file table ...", flush=True)
    source, built = cached_table_in_child(params, rebuild=False)
    print(f"table: {source} (v{built['version']}, {built['num_live_files']:,} live files)")
    WORK_DIR.mkdir(parents=True, exist_ok=True)

    runs: dict[int, dict[str, Any]] = {}
    for count in counts:
        target = copy_table(source, WORK_DIR / f"cluster-{count}", v2=True)
        ray_tmp = tempfile.mkdtemp(prefix="rdbc", dir="/tmp")
        measurement = measure_once(
            "benchmarks.checkpoint_cluster:run_on_cluster",
            (count,),
            env={TABLE_ENV: target.resolve().as_uri(), "RAY_TMPDIR": ray_tmp},
            timeout_s=3600,
        )
        result = measurement.result
        verification = verify_in_child(target, result["version"], int(built["num_live_files"]))
        if not verification["ok"]:
            print(f"MISMATCH at {count} nodes: {verification}", file=sys.stderr)
            return 1
        runs[count] = {**result, "verification": verification}
        print(
            f"{count} node(s): {result['driver_seconds']:.2f} s, {result['num_shards']} shards,"
            f" task CPU {result['task_seconds']}, phases {result['phases']}",
            flush=True,
        )

    base = runs[counts[0]]["driver_seconds"]
    table = {
        str(count): {
            "seconds": run["driver_seconds"],
            "speedup_vs_1_node": base / run["driver_seconds"],
            "phases": run["phases"],
            "task_cpu_seconds": run["task_seconds"],
        }
        for count, run in runs.items()
    }
    for count, row in table.items():
        print(f"  {count} nodes: {row['seconds']:.2f} s  x{row['speedup_vs_1_node']:.2f}")
    if ns.no_write or ns.files != DEFAULT_FILES:
        return 0
    most, least = max(counts), min(counts)
    path = write_result(
        NAME,
        {
            "unit": "s",
            "ours": runs[most]["driver_seconds"],
            "peer": runs[least]["driver_seconds"],
            "ratio": runs[most]["driver_seconds"] / runs[least]["driver_seconds"],
            "statistic": "one run per node count: wall time of the checkpoint call seen by"
            " the driver (cluster, actor and warm workers started beforehand)",
            "ours_name": f"raydelta V2 checkpoint on {most} worker nodes (1 CPU each)",
            "peer_name": f"the same on {least} worker node (no other engine to compare with)",
            "num_files": ns.files,
            "by_nodes": table,
            "runs": {str(count): run for count, run in runs.items()},
            "table": {**params, **built},
            "note": "local nodes share this machine's 2 cores: see benchmarks/README.md",
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
