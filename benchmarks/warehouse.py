"""Benchmark: a warehouse of many filesystem tables on the pool of table hosts.

Work, on a fresh local Ray cluster started by this process:

- **cost growth**: tables are created (``TableClient.create`` + one blind
  append each, 8 threads) up to each size of ``--sizes`` in turn; at each
  size: the total RSS of every Ray process (this driver's whole process
  tree: GCS, raylet, workers, hosts), the hosts' RSS per active table, the
  create time per table, then every table is deactivated and the hosts' RSS
  per deactivated table is taken (an upper bound: freed arenas stay
  resident), and ``--activations`` deactivated 10-file tables get their first
  call (``version()`` from a fresh handle), timed one by one.
- **peer** (delta-rs): a child process opens the same tables with
  ``deltalake.DeltaTable`` and holds them: memory added per table and open
  time per table. ``ratio`` = our memory per deactivated table / deltalake's
  per open table (goal ≤ 1.0), and ``active_ratio`` = ours per active table /
  deltalake's (goal ≤ 10).
- **throughput**: ``--writers`` writer actors commit 1-file appends to random
  tables of the largest size for ``--seconds`` (0 lost is checked against
  the log); and on ``--dedicated-tables`` tables, the pool against every
  table on a dedicated host (today's old design: a process per table),
  interleaved ``--repeat`` times: commits/s and the hosts' memory.
- **hosts**: commits to different tables with 1 host against 2 hosts per
  node (each in a fresh cluster), interleaved.

Run: ``python -m benchmarks.warehouse [--sizes 100 1000 10000] [--seconds 10]``.
Writes ``benchmarks/results/warehouse.json``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import latency_stats, load_average, write_result

NAME = "warehouse"
STATS = '{"numRecords":1}'


def _add(path: str) -> Any:
    from raydelta.protocol.actions import AddFile

    return AddFile.model_validate(
        {
            "path": path,
            "partitionValues": {},
            "size": 100,
            "modificationTime": int(time.time() * 1000),
            "dataChange": True,
            "stats": STATS,
        }
    )


def _ray_rss_mb() -> float:
    """RSS of this process's whole tree (the local cluster it started), in MB."""
    import psutil

    me = psutil.Process()
    total = 0
    for process in [me, *me.children(recursive=True)]:
        try:
            total += process.memory_info().rss
        except psutil.Error:
            continue
    return total / 2**20


def _host_handles() -> list[Any]:
    import ray

    from raydelta.actors.cluster import NAMESPACE
    from raydelta.actors.table.placement import HOST_PREFIX

    return [
        ray.get_actor(entry["name"], namespace=NAMESPACE)
        for entry in ray.util.list_named_actors(all_namespaces=True)
        if entry["namespace"] == NAMESPACE and entry["name"].startswith(HOST_PREFIX)
    ]


def _hosts_rss_mb() -> float:
    import ray

    return sum(ray.get(h.status.remote())["rss_bytes"] for h in _host_handles()) / 2**20


def _deactivate_all(root: str) -> None:
    import ray

    ray.get([h.release_under.remote([root]) for h in _host_handles()])


def _start_cluster(tmp: str, per_node: int | None = None) -> None:
    import ray

    from raydelta.actors.cluster import NAMESPACE
    from raydelta.actors.table.placement import HOSTS_PER_NODE_ENV

    env = {}
    if per_node is not None:
        os.environ[HOSTS_PER_NODE_ENV] = str(per_node)
        env[HOSTS_PER_NODE_ENV] = str(per_node)
    ray.init(
        namespace=NAMESPACE,
        include_dashboard=False,
        log_to_driver=False,
        _temp_dir=tempfile.mkdtemp(prefix="ray", dir=tmp),
        runtime_env={"env_vars": env} if env else None,
    )


def _stop_cluster() -> None:
    import ray

    from raydelta.actors.table import placement

    ray.shutdown()
    placement.POOL._read_at = float("-inf")
    placement._handles.clear()


def _create(uri: str, appends: int) -> float:
    import pyarrow as pa

    from raydelta.actors.table.client import TableClient

    started = time.perf_counter()
    table = TableClient.create(uri, schema=pa.schema([("id", pa.int64())]))
    for i in range(appends):
        table.append_files(_add(f"part-{i}.parquet"))
    return time.perf_counter() - started


def cost_growth(root: Path, sizes: list[int], activations: int) -> list[dict[str, Any]]:
    from raydelta.actors.table.client import TableClient

    rows = []
    uris: list[str] = []
    baseline_hosts = 0.0
    with ThreadPoolExecutor(max_workers=8) as pool:
        for size in sizes:
            new = [f"file://{root}/t{i:06d}" for i in range(len(uris), size)]
            started = time.perf_counter()
            list(pool.map(lambda uri: _create(uri, 1), new))
            create_s = (time.perf_counter() - started) / max(1, len(new))
            uris.extend(new)
            if not baseline_hosts:
                baseline_hosts = _hosts_rss_mb()  # the hosts' own cost, with a first batch
            for uri in uris:  # every table active at once
                TableClient.open(uri).version()
            active_mb = _hosts_rss_mb()
            total_active = _ray_rss_mb()
            _deactivate_all(str(root))
            rows.append(
                {
                    "tables": size,
                    "create_s_per_table": create_s,
                    "ray_rss_mb_all_active": total_active,
                    "hosts_rss_mb_all_active": active_mb,
                    "hosts_rss_mb_deactivated": _hosts_rss_mb(),
                    "ray_rss_mb_deactivated": _ray_rss_mb(),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    # per-table costs from the growth between the first and the last size
    first, last = rows[0], rows[-1]
    grown = max(1, last["tables"] - first["tables"])
    summary = {
        "active_kb_per_table": 1024
        * (last["hosts_rss_mb_all_active"] - first["hosts_rss_mb_all_active"])
        / grown,
        "deactivated_kb_per_table": 1024
        * (last["hosts_rss_mb_deactivated"] - first["hosts_rss_mb_deactivated"])
        / grown,
    }
    ten = [f"file://{root}/ten{i:04d}" for i in range(activations)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda uri: _create(uri, 10), ten))
    _deactivate_all(str(root))
    times = []
    for uri in ten:
        started = time.perf_counter()
        TableClient.open(uri).version()
        times.append(time.perf_counter() - started)
    summary["activation"] = latency_stats(times)
    return [*rows, summary]


def _peer_child(uris: list[str], out: Any) -> None:
    import deltalake
    import psutil

    process = psutil.Process()
    before = process.memory_info().rss
    held = []
    started = time.perf_counter()
    for uri in uris:
        held.append(deltalake.DeltaTable(uri))
    open_s = (time.perf_counter() - started) / len(uris)
    out.put(
        {"kb_per_table": (process.memory_info().rss - before) / 1024 / len(uris), "open_s": open_s}
    )


def peer(root: Path, count: int) -> dict[str, Any]:
    uris = [f"{root}/t{i:06d}" for i in range(count)]
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=_peer_child, args=(uris, queue))
    child.start()
    result: dict[str, Any] = queue.get(timeout=3600)
    child.join()
    return result


class Writer:
    """A writer process: 1-file appends to random tables of a list."""

    def __init__(self, uris: list[str], seed: int) -> None:
        from raydelta.actors.table.client import TableClient

        self.rng = random.Random(seed)
        self.tables = {uri: TableClient.open(uri) for uri in uris}
        self.seed = seed

    def ready(self) -> bool:
        return True

    def run(self, start_at: float, seconds: float) -> list[tuple[str, int, str]]:
        while time.time() < start_at:
            time.sleep(0.001)
        acked = []
        uris = list(self.tables)
        i = 0
        while time.time() < start_at + seconds:
            uri = self.rng.choice(uris)
            path = f"w{self.seed}-{i}.parquet"
            acked.append((uri, self.tables[uri].append_files(_add(path)), path))
            i += 1
        return acked


def _drive(uris: list[str], writers: int, seconds: float) -> dict[str, Any]:
    import ray

    actors = [
        ray.remote(num_cpus=0)(Writer).remote(uris, seed)  # type: ignore[call-overload]
        for seed in range(writers)
    ]
    ray.get([w.ready.remote() for w in actors])
    start_at = time.time() + 1.0
    acked = [
        a for batch in ray.get([w.run.remote(start_at, seconds) for w in actors]) for a in batch
    ]
    for actor in actors:
        ray.kill(actor)
    lost = 0
    for uri, version, path in acked:
        text = Path(uri.removeprefix("file://"), "_delta_log", f"{version:020d}.json").read_text()
        lost += path not in text
    return {"commits": len(acked), "commits_per_s": len(acked) / seconds, "lost": lost}


def pooled_vs_dedicated(
    root: Path, count: int, writers: int, seconds: float, repeat: int
) -> dict[str, Any]:
    from raydelta.actors.table.client import TableClient, release_table
    from raydelta.actors.table.placement import set_dedicated

    runs: dict[str, list[dict[str, Any]]] = {"pooled": [], "dedicated": []}
    for r in range(repeat):
        for mode in ("pooled", "dedicated"):
            base = root / f"{mode}-{r}"
            uris = [f"file://{base}/t{i:03d}" for i in range(count)]
            before = _ray_rss_mb()
            for uri in uris:
                if mode == "dedicated":
                    set_dedicated(uri, True)
                _create(uri, 1)
            for uri in uris:
                TableClient.open(uri).version()
            memory = _ray_rss_mb() - before
            result = _drive(uris, writers, seconds)
            result["memory_mb"] = memory
            runs[mode].append(result)
            print(mode, json.dumps(result), flush=True)
            for uri in uris:
                release_table(uri)
            time.sleep(2.0)  # stopped processes give their memory back

    def median(mode: str, key: str) -> float:
        return statistics.median(run[key] for run in runs[mode])

    return {
        "tables": count,
        "runs": runs,
        "commits_per_s_ratio": median("pooled", "commits_per_s")
        / median("dedicated", "commits_per_s"),
        "memory_ratio": median("pooled", "memory_mb") / max(1e-9, median("dedicated", "memory_mb")),
        "lost": sum(run["lost"] for mode in runs for run in runs[mode]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--activations", type=int, default=200)
    parser.add_argument("--writers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--dedicated-tables", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    load_start = load_average()
    tmp = tempfile.mkdtemp(prefix="warehouse-")
    root = Path(tmp, "tables")
    try:
        _start_cluster(tmp)
        growth = cost_growth(root, sorted(args.sizes), args.activations)
        throughput = _drive(
            [f"file://{root}/t{i:06d}" for i in range(max(args.sizes))], args.writers, args.seconds
        )
        print("throughput", json.dumps(throughput), flush=True)
        versus = pooled_vs_dedicated(
            Path(tmp, "versus"), args.dedicated_tables, args.writers, args.seconds, args.repeat
        )
        _stop_cluster()
        hosts: dict[int, list[float]] = {1: [], 2: []}
        for r in range(args.repeat):
            for per_node in (1, 2):
                _start_cluster(tmp, per_node)
                base = Path(tmp, f"hosts-{per_node}-{r}")
                uris = [f"file://{base}/t{i:03d}" for i in range(32)]
                for uri in uris:
                    _create(uri, 1)
                hosts[per_node].append(_drive(uris, args.writers, args.seconds)["commits_per_s"])
                _stop_cluster()
        theirs = peer(root, max(args.sizes))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary = growth[-1]
    result = {
        "unit": "KB per table (ours: deactivated; peer: deltalake.DeltaTable held open)",
        "ours": summary["deactivated_kb_per_table"],
        "peer": theirs["kb_per_table"],
        "ratio": summary["deactivated_kb_per_table"] / theirs["kb_per_table"],
        "active_kb_per_table": summary["active_kb_per_table"],
        "active_ratio": summary["active_kb_per_table"] / theirs["kb_per_table"],
        "peer_open_s_per_table": theirs["open_s"],
        "activation_s": summary["activation"],
        "growth": growth[:-1],
        "throughput_largest_size": throughput,
        "pooled_vs_dedicated": versus,
        "two_hosts_over_one": statistics.median(hosts[2]) / statistics.median(hosts[1]),
        "hosts_commits_per_s": hosts,
        "goals": {
            "ray_rss_mb_at_10000": 4096,
            "deactivated_kb": 20,
            "active_kb": 2048,
            "activation_p50_s": 0.030,
            "activation_p99_s": 0.200,
            "pooled_over_dedicated_commits": 2.0,
            "pooled_over_dedicated_memory": 0.1,
            "two_hosts_over_one": 1.6,
            "ratio": 1.0,
            "active_ratio": 10.0,
        },
        "load_average_start": load_start,
        "load_average_end": load_average(),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "growth"}, indent=1, default=str))
    if not args.no_write:
        write_result(NAME, result)


if __name__ == "__main__":
    main()
