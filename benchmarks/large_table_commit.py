"""Benchmark: one blind append on a large table, and how its cost grows with size.

Work: on a copy of a synthetic table (``table_builder``: checkpoint with
``N`` files + 100 commits) with ``N`` = 10k, 100k and 1M, time single 1-file
blind-append commits once the engine has the table loaded:

- ours: ``TableClient.open(uri)`` (the ``TableActor`` loads the table), one untimed
  warm-up commit, then per repetition ``txn = table.transaction();
  txn.add(AddFile(...))`` and the timed ``txn.commit()``;
- peer (delta-rs): ``DeltaTable(uri)`` loaded, then per repetition the timed
  ``dt.create_write_transaction([AddAction(...)], "append", schema)`` (default
  post-commit hooks; no checkpoint falls due in the measured versions),
  followed by an untimed ``dt.update_incremental()`` so the next commit starts
  from the latest version as ours does.

Each engine and size runs in a fresh process. ``ours``/``peer`` are median
milliseconds at the largest size; ``ratio`` = ours / peer.
Goals: ours <= 5 ms at 1M files, and flat: ours(largest) <= 1.5x ours(smallest).

Run: ``python -m benchmarks.large_table_commit [--sizes 10000 100000 1000000] [--repeat 10]``.
Writes ``benchmarks/results/large_table_commit.json``.

Only the standard library and :mod:`benchmarks.common` are imported at top
level: the children import this module to find their targets.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import latency_stats, measure_once, print_ratio, write_result
from raydelta.actors.cluster import NAMESPACE

NAME = "large_table_commit"
GOAL_MS = 5.0
GOAL_GROWTH = 1.5
NUM_COMMITS = 100
STATS = '{"numRecords":100,"minValues":{"id":0},"maxValues":{"id":99},"nullCount":{"id":0}}'


def prepare_table(num_files: int, *, rebuild: bool = False) -> tuple[Path, dict[str, Any]]:
    """The cached synthetic table with ``num_files`` files (built once, shared with
    ``snapshot_load``). Never write to it: use :func:`table_copy`."""
    from benchmarks.snapshot_load import cached_table

    params = {"num_files": num_files, "num_commits": NUM_COMMITS, "partitioned": False}
    return cached_table(params, rebuild=rebuild)


def table_copy(source: Path, workdir: str, label: str) -> Path:
    """A private copy of the table at ``source`` (the benchmarks commit to it)."""
    target = Path(workdir, label)
    shutil.copytree(source, target)
    return target.resolve()


def new_add_file(tag: str) -> Any:
    from raydelta.protocol.actions import AddFile

    return AddFile(
        path=f"bench-{tag}-{uuid.uuid4().hex}.parquet",
        size=1024,
        modificationTime=int(time.time() * 1000),
        dataChange=True,
        stats=STATS,
    )


def new_add_action(tag: str) -> Any:
    from deltalake.transaction import AddAction

    path = f"bench-{tag}-{uuid.uuid4().hex}.parquet"
    return AddAction(path, 1024, {}, int(time.time() * 1000), True, STATS)


def ours_setup() -> None:
    import pyarrow  # noqa: F401
    import ray  # noqa: F401

    import raydelta.actors.table.client  # noqa: F401


def ours_run(uri: str, repeat: int, expected_version: int) -> dict[str, Any]:
    import ray

    from raydelta.actors.table.client import TableClient, release_table

    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    table = TableClient.open(uri)
    try:
        start = time.perf_counter()
        loaded_version = ray.get(table.actor.ping.remote())
        load_s = time.perf_counter() - start
        if loaded_version != expected_version:
            raise RuntimeError(f"actor loaded v{loaded_version}, expected v{expected_version}")
        txn = table.transaction().add(new_add_file("warmup"))
        start = time.perf_counter()
        version = txn.commit()
        first_s = time.perf_counter() - start
        commit_s: list[float] = []
        begin_s: list[float] = []
        for i in range(repeat):
            start = time.perf_counter()
            txn = table.transaction()
            txn.add(new_add_file(str(i)))
            call = time.perf_counter()
            version = txn.commit(operation="WRITE", operation_parameters={"mode": "Append"})
            commit_s.append(time.perf_counter() - call)
            begin_s.append(call - start)
        if version != expected_version + 1 + repeat:
            raise RuntimeError(
                f"last commit won v{version}, expected v{expected_version + 1 + repeat}"
            )
    finally:
        release_table(table.uri)  # its host deactivates it: memory back, log intact
        ray.shutdown()
    return {
        "commit": latency_stats(commit_s),
        "transaction_begin": latency_stats(begin_s),
        "first_commit_ms": first_s * 1e3,
        "actor_load_s": load_s,
        "last_version": version,
    }


def peer_setup() -> None:
    import deltalake  # noqa: F401
    import pyarrow  # noqa: F401


def peer_run(uri: str, repeat: int, expected_version: int) -> dict[str, Any]:
    from deltalake import DeltaTable, Schema

    start = time.perf_counter()
    dt = DeltaTable(uri)
    load_s = time.perf_counter() - start
    if dt.version() != expected_version:
        raise RuntimeError(f"delta-rs loaded v{dt.version()}, expected v{expected_version}")
    schema = Schema.from_arrow(dt.schema().to_arrow())
    commit_s: list[float] = []
    update_s: list[float] = []
    first_s = 0.0
    for i in range(1 + repeat):
        action = new_add_action("warmup" if i == 0 else str(i))
        start = time.perf_counter()
        dt.create_write_transaction([action], "append", schema)
        done = time.perf_counter()
        dt.update_incremental()
        if i == 0:
            first_s = done - start
        else:
            commit_s.append(done - start)
            update_s.append(time.perf_counter() - done)
    if dt.version() != expected_version + 1 + repeat:
        raise RuntimeError(
            f"delta-rs at v{dt.version()}, expected v{expected_version + 1 + repeat}"
        )
    return {
        "commit": latency_stats(commit_s),
        "update_incremental_after": latency_stats(update_s),
        "first_commit_ms": first_s * 1e3,
        "load_s": load_s,
        "last_version": dt.version(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--repeat", type=int, default=10, help="timed commits per engine and size")
    parser.add_argument("--rebuild", action="store_true", help="ignore the cached tables")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)

    sizes: dict[str, dict[str, Any]] = {}
    for num_files in ns.sizes:
        source, built = prepare_table(num_files, rebuild=ns.rebuild)
        workdir = tempfile.mkdtemp(prefix="raydelta-bench-largecommit-")
        try:
            ours_uri = table_copy(source, workdir, "ours").as_uri()
            peer_uri = table_copy(source, workdir, "peer").as_uri()
            args = (ns.repeat, built["version"])
            ours_m = measure_once(
                "benchmarks.large_table_commit:ours_run",
                (ours_uri, *args),
                setup="benchmarks.large_table_commit:ours_setup",
            )
            peer_m = measure_once(
                "benchmarks.large_table_commit:peer_run",
                (peer_uri, *args),
                setup="benchmarks.large_table_commit:peer_setup",
            )
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        o, p = ours_m.result, peer_m.result
        sizes[str(num_files)] = {
            "ours": o,
            "peer": p,
            "live_files": built["num_live_files"],
            "version": built["version"],
            "peak_rss_mb": {"ours_driver": ours_m.peak_rss_mb, "peer": peer_m.peak_rss_mb},
        }
        print(
            f"  {num_files:>9,} files: ours commit p50 {o['commit']['p50_ms']:8.3f} ms"
            f" (first {o['first_commit_ms']:.1f} ms, actor load {o['actor_load_s']:.2f} s);"
            f" delta-rs commit p50 {p['commit']['p50_ms']:9.3f} ms"
            f" (first {p['first_commit_ms']:.1f} ms, load {p['load_s']:.2f} s)",
            flush=True,
        )

    print()
    print(
        f"{'files':>10} {'ours p50 ms':>12} {'ours p99 ms':>12}"
        f" {'delta-rs p50 ms':>16} {'ratio':>7}"
    )
    for key, row in sizes.items():
        o, p = row["ours"]["commit"], row["peer"]["commit"]
        print(
            f"{int(key):>10,} {o['p50_ms']:>12.3f} {o['p99_ms']:>12.3f} {p['p50_ms']:>16.3f}"
            f" {o['p50_ms'] / p['p50_ms']:>7.4f}"
        )
    smallest, largest = str(min(ns.sizes)), str(max(ns.sizes))
    ours = sizes[largest]["ours"]["commit"]["p50_ms"]
    peer = sizes[largest]["peer"]["commit"]["p50_ms"]
    growth = ours / sizes[smallest]["ours"]["commit"]["p50_ms"]
    peer_growth = peer / sizes[smallest]["peer"]["commit"]["p50_ms"]
    ratio = print_ratio(f"{NAME} @ {int(largest):,} files", ours=ours, peer=peer, unit="ms")
    abs_met = ours <= GOAL_MS
    flat_met = growth <= GOAL_GROWTH
    print(f"goal ours <= {GOAL_MS:g} ms: {'MET' if abs_met else 'NOT MET'} ({ours:.3f} ms)")
    print(
        f"goal flat (ours {int(largest):,} / {int(smallest):,} <= {GOAL_GROWTH:g}x):"
        f" {'MET' if flat_met else 'NOT MET'} ({growth:.2f}x; delta-rs {peer_growth:.1f}x)"
    )
    if ns.no_write:
        return 0
    path = write_result(
        NAME,
        {
            "unit": "ms",
            "ours": ours,
            "peer": peer,
            "ratio": ratio,
            "statistic": f"median commit-call time of a 1-file blind append at {int(largest):,}"
            " files, table loaded, warm",
            "goal": f"ours <= {GOAL_MS:g} ms at 1M files; ours(largest) <= {GOAL_GROWTH:g}x"
            " ours(smallest)",
            "goal_ms": GOAL_MS,
            "goal_met": abs_met and flat_met,
            "goal_ms_met": abs_met,
            "goal_flat_met": flat_met,
            "ours_growth": growth,
            "peer_growth": peer_growth,
            "peer_name": "deltalake (delta-rs) create_write_transaction on a loaded DeltaTable",
            "repeat": ns.repeat,
            "sizes": sizes,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
