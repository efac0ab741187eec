"""Benchmark: commits through the Catalog (inline, staged) vs filesystem commits.

Work: ``W`` writers (threads of one driver, each with its own table handle)
each commit ``--commits`` 1-file blind appends (``append_files``) to one fresh
table, for ``W`` in ``--writers`` (1, 4, 8), in three modes, each mode in a
fresh process with its own local Ray cluster:

- ``filesystem``: a plain table through its ``TableActor`` (checks, rebases,
  ``put_if_absent`` of ``<v>.json``): the peer;
- ``inline``: a catalog-managed table through the ``Catalog`` actor, the
  actions sent in the request (ratified in the SQLite store, then published
  by the catalog's publisher thread);
- ``staged``: the same, the client writing ``_staged_commits/<v>.<uuid>.json``
  first and sending its path (a writer that lost the race is re-staged by
  the catalog).

Measured per mode and writer count: commit latency p50/p99 (the call alone)
and throughput (commits/s over the whole run). For the catalog modes, the
publish lag (ratified -> ``<v>.json`` written, measured inside the catalog)
p50/p99 under the largest writer count.

Goals: inline p50 <= filesystem p50 (1 writer); inline throughput at 8
writers >= filesystem's; publish lag p99 <= 50 ms. ``ours`` = inline p50,
``peer`` = filesystem p50 (1 writer), ``ratio`` = ours / peer.

Run: ``python -m benchmarks.catalog_commits [--commits 200] [--writers 1 4 8]``.
Writes ``benchmarks/results/catalog_commits.json``.
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

NAME = "catalog_commits"
MODES = ("filesystem", "inline", "staged")
WARMUP = 10
PUBLISH_LAG_GOAL_MS = 50.0
STATS = '{"numRecords":100,"minValues":{"id":0},"maxValues":{"id":99},"nullCount":{"id":0}}'


def setup() -> None:
    import pyarrow  # noqa: F401
    import ray  # noqa: F401

    import raydelta.catalog  # noqa: F401


def _add(index: int) -> Any:
    from raydelta.protocol.actions import AddFile

    return AddFile(
        path=f"part-{index:06d}-{uuid.uuid4().hex}.parquet",
        size=1024,
        modificationTime=int(time.time() * 1000),
        dataChange=True,
        stats=STATS,
    )


def run_mode(root: str, mode: str, writers: list[int], commits: int) -> dict[str, Any]:
    import pyarrow as pa
    import ray

    from raydelta.actors.cluster import NAMESPACE
    from raydelta.actors.table.client import TableClient
    from raydelta.catalog import Catalog

    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    schema = pa.schema([("id", pa.int64())])
    catalog = None
    out: dict[str, Any] = {}
    try:
        if mode != "filesystem":
            catalog = Catalog(name=f"bench-{uuid.uuid4().hex[:8]}", root=str(Path(root, mode)))
        for count in writers:
            name = f"t{count}"
            if catalog is None:
                uri = Path(root, f"fs-{count}").as_uri()
                TableClient.create(uri, schema=schema)
                handles = [TableClient.open(uri) for _ in range(count)]
            else:
                catalog.create_table(name, schema)
                handles = [
                    catalog.open_table(name, commit_mode=mode)  # type: ignore[arg-type]
                    for _ in range(count)
                ]
            for i, handle in enumerate(handles):  # warm each handle's path
                for j in range(WARMUP):
                    handle.append_files(_add(i * 1000 + j))
            if catalog is not None:
                ray.get(catalog.actor.publish_lags_ms.remote(clear=True))
            latencies: list[float] = []
            lock = threading.Lock()
            barrier = threading.Barrier(count + 1)

            def writer(
                handle: Any,
                index: int,
                barrier: threading.Barrier = barrier,
                lock: threading.Lock = lock,
                latencies: list[float] = latencies,
            ) -> None:
                own: list[float] = []
                barrier.wait()
                for j in range(commits):
                    start = time.perf_counter()
                    handle.append_files(_add(index * 100_000 + j))
                    own.append(time.perf_counter() - start)
                with lock:
                    latencies.extend(own)

            threads = [threading.Thread(target=writer, args=(h, i)) for i, h in enumerate(handles)]
            for thread in threads:
                thread.start()
            barrier.wait()
            begin = time.perf_counter()
            for thread in threads:
                thread.join()
            elapsed = time.perf_counter() - begin
            expected = count * (WARMUP + commits)
            if handles[0].version() != expected:
                raise RuntimeError(f"{mode}/{count}: v{handles[0].version()}, expected {expected}")
            entry: dict[str, Any] = {
                "commit": latency_stats(latencies),
                "throughput_per_s": len(latencies) / elapsed,
            }
            if catalog is not None:
                assert ray.get(catalog.actor.wait_published.remote(name, expected, 60.0))
                lags = ray.get(catalog.actor.publish_lags_ms.remote(clear=True))
                entry["publish_lag"] = {
                    "p50_ms": percentile(lags, 50),
                    "p99_ms": percentile(lags, 99),
                    "count": len(lags),
                }
            out[str(count)] = entry
            print(
                f"  {mode:<10} {count} writers: p50 {entry['commit']['p50_ms']:.3f} ms,"
                f" p99 {entry['commit']['p99_ms']:.3f} ms,"
                f" {entry['throughput_per_s']:.0f} commits/s"
                + (
                    f", publish lag p50 {entry['publish_lag']['p50_ms']:.2f}"
                    f" p99 {entry['publish_lag']['p99_ms']:.2f} ms"
                    if "publish_lag" in entry
                    else ""
                ),
                flush=True,
            )
    finally:
        if catalog is not None:
            ray.kill(catalog.actor)
        ray.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=200, help="timed commits per writer")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)
    writers = sorted(set(ns.writers))
    root = tempfile.mkdtemp(prefix="raydelta-bench-catalog-")
    try:
        results = {
            mode: measure_once(
                "benchmarks.catalog_commits:run_mode",
                (root, mode, writers, ns.commits),
                setup="benchmarks.catalog_commits:setup",
            ).result
            for mode in MODES
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    one, most = str(writers[0]), str(writers[-1])
    ours = results["inline"][one]["commit"]["p50_ms"]
    peer = results["filesystem"][one]["commit"]["p50_ms"]
    ratio = print_ratio(NAME, ours=ours, peer=peer, unit="ms")
    inline_tp = results["inline"][most]["throughput_per_s"]
    fs_tp = results["filesystem"][most]["throughput_per_s"]
    lag_p99 = results["inline"][most]["publish_lag"]["p99_ms"]
    goals = {
        "inline_p50_le_filesystem_p50": ours <= peer,
        f"inline_throughput_{most}_ge_filesystem": inline_tp >= fs_tp,
        "publish_lag_p99_le_50ms": lag_p99 <= PUBLISH_LAG_GOAL_MS,
    }
    for goal, met in goals.items():
        print(f"goal {goal}: {'MET' if met else 'NOT MET'}")
    print(
        f"throughput at {most} writers: inline {inline_tp:.0f}/s, "
        f"staged {results['staged'][most]['throughput_per_s']:.0f}/s, filesystem {fs_tp:.0f}/s; "
        f"publish lag p99 {lag_p99:.2f} ms"
    )
    if not ns.no_write:
        path = write_result(
            NAME,
            {
                "unit": "ms",
                "ours": ours,
                "peer": peer,
                "ratio": ratio,
                "ours_label": f"inline commit p50, {one} writer",
                "peer_label": f"filesystem (TableActor) commit p50, {one} writer",
                "commits_per_writer": ns.commits,
                "modes": results,
                "goals": goals,
            },
        )
        print(f"wrote {path}")
    print(json.dumps(goals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
