"""Benchmark: single-writer commit latency vs the put-if-absent floor and delta-rs.

Work: one writer commits ``--commits`` 1-file blind appends, one at a time, to
a fresh table:

- ours: ``txn = table.transaction(); txn.add(AddFile(...))``, then the timed
  ``txn.commit()`` (one call to the ``TableActor``, which checks, rebases and
  writes the commit file with ``put_if_absent``), once per transport
  (``--transports``): ``ray`` (plain Ray actor calls, the default) and
  ``channel`` (the opt-in commit channel, ``use_channel=True``);
- floor: right after each of our commits, in the same process, the bytes of
  the commit file just written are put again with
  ``LocalLogStore.put_if_absent`` (temp file + fsync + ``os.link``) under a new
  name in a sibling log on the same disk; the no-fsync floor
  (``fsync=False``) is measured the same way. Interleaving op by op gives the
  floor the same disk state as our commit;
- peer (delta-rs): ``dt.update_incremental()`` (untimed), then the timed
  ``dt.create_write_transaction([AddAction(...)], "append", schema)`` with
  delta-rs's default post-commit hooks.

Each round runs each engine (and each of our transports) in a fresh process;
``ours``/``peer`` are the median over rounds of each round's p50, ``ours``
for the first transport listed (``ray`` by default); ``transports`` holds
every transport's. Goal (issue 15): ours p50 <= floor p50 + 0.5 ms. ``ratio`` = ours /
peer (ms; below 1 means we are faster).

Run: ``python -m benchmarks.commit_latency [--commits 500] [--repeat 3]
[--transports ray channel]``.
Writes ``benchmarks/results/commit_latency.json``.

Only the standard library and :mod:`benchmarks.common` are imported at top
level: the children import this module to find their targets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import latency_stats, measure_once, print_ratio, write_result
from raydelta.actors.cluster import NAMESPACE

NAME = "commit_latency"
GOAL_OVER_FLOOR_MS = 0.5
WARMUP = 30
TRANSPORTS = ("ray", "channel")
STATS = '{"numRecords":100,"minValues":{"id":0},"maxValues":{"id":99},"nullCount":{"id":0}}'


def ours_setup() -> None:
    import pyarrow  # noqa: F401
    import ray  # noqa: F401

    import raydelta.actors.table.client
    import raydelta.storage.log.store  # noqa: F401


def ours_run(root: str, commits: int, transport: str = "ray") -> dict[str, Any]:
    import pyarrow as pa
    import ray
    from fsspec.implementations.local import LocalFileSystem

    from raydelta.actors.table.client import TableClient, release_table
    from raydelta.protocol.actions import AddFile
    from raydelta.protocol.file_names import commit_name
    from raydelta.storage.backends.local import LocalLogStore

    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    table_dir = Path(root, f"ours-{transport}")
    local = LocalFileSystem()
    floors = {
        "fsync": LocalLogStore(local, str(Path(root, f"floor-fsync-{transport}")), fsync=True),
        "no_fsync": LocalLogStore(
            local, str(Path(root, f"floor-nofsync-{transport}")), fsync=False
        ),
    }
    table = TableClient.create(
        table_dir.as_uri(),
        schema=pa.schema([("id", pa.int64())]),
        use_channel=transport == "channel",
    )
    commit_s: list[float] = []
    iteration_s: list[float] = []
    floor_s: dict[str, list[float]] = {k: [] for k in floors}
    sizes: list[int] = []
    try:
        for i in range(WARMUP + commits):
            begin = time.perf_counter()
            txn = table.transaction()
            txn.add(
                AddFile(
                    path=f"part-{i:06d}-{uuid.uuid4().hex}.parquet",
                    size=1024,
                    modificationTime=int(time.time() * 1000),
                    dataChange=True,
                    stats=STATS,
                )
            )
            call = time.perf_counter()
            version = txn.commit(operation="WRITE", operation_parameters={"mode": "Append"})
            end = time.perf_counter()
            data = (table_dir / "_delta_log" / commit_name(version)).read_bytes()
            floor_times: dict[str, float] = {}
            for kind, store in floors.items():
                start = time.perf_counter()
                store.put_if_absent(commit_name(i), data)
                floor_times[kind] = time.perf_counter() - start
            if i < WARMUP:
                continue
            commit_s.append(end - call)
            iteration_s.append(end - begin)
            sizes.append(len(data))
            for kind, seconds in floor_times.items():
                floor_s[kind].append(seconds)
    finally:
        release_table(table.uri)  # its host deactivates it: memory back, log intact
        ray.shutdown()
    return {
        "commit": latency_stats(commit_s),
        "transaction_and_commit": latency_stats(iteration_s),
        "floor_fsync": latency_stats(floor_s["fsync"]),
        "floor_no_fsync": latency_stats(floor_s["no_fsync"]),
        "commit_file_bytes": statistics.median(sizes),
    }


def peer_setup() -> None:
    import deltalake  # noqa: F401
    import pyarrow  # noqa: F401


def peer_run(root: str, commits: int) -> dict[str, Any]:
    import pyarrow as pa
    from deltalake import DeltaTable, Schema
    from deltalake.transaction import AddAction

    path = str(Path(root, "peer"))
    arrow_schema = pa.schema([("id", pa.int64())])
    DeltaTable.create(path, schema=arrow_schema)
    schema = Schema.from_arrow(arrow_schema)
    dt = DeltaTable(path)
    commit_s: list[float] = []
    iteration_s: list[float] = []
    for i in range(WARMUP + commits):
        action = AddAction(
            f"part-{i:06d}-{uuid.uuid4().hex}.parquet",
            1024,
            {},
            int(time.time() * 1000),
            True,
            STATS,
        )
        begin = time.perf_counter()
        dt.update_incremental()
        call = time.perf_counter()
        dt.create_write_transaction([action], "append", schema)
        end = time.perf_counter()
        if i >= WARMUP:
            commit_s.append(end - call)
            iteration_s.append(end - begin)
    dt.update_incremental()
    if dt.version() != WARMUP + commits:
        raise RuntimeError(f"delta-rs table at v{dt.version()}, expected {WARMUP + commits}")
    return {"commit": latency_stats(commit_s), "update_and_commit": latency_stats(iteration_s)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=500, help="timed commits per round")
    parser.add_argument("--repeat", type=int, default=3, help="rounds (fresh processes)")
    parser.add_argument(
        "--transports",
        nargs="+",
        choices=TRANSPORTS,
        default=list(TRANSPORTS),
        help="our transports, each in a fresh process; the first is the headline `ours`",
    )
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)
    transports: list[str] = list(dict.fromkeys(ns.transports))
    headline = transports[0]

    load_before = list(os.getloadavg())
    rounds: list[dict[str, Any]] = []
    for index in range(ns.repeat):
        root = tempfile.mkdtemp(prefix="raydelta-bench-latency-")
        try:
            ours_by_transport = {
                transport: measure_once(
                    "benchmarks.commit_latency:ours_run",
                    (root, ns.commits, transport),
                    setup="benchmarks.commit_latency:ours_setup",
                ).result
                for transport in transports
            }
            peer_m = measure_once(
                "benchmarks.commit_latency:peer_run",
                (root, ns.commits),
                setup="benchmarks.commit_latency:peer_setup",
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
        p = peer_m.result
        rounds.append(
            {
                "ours": ours_by_transport[headline],
                **{f"ours_{t}": o for t, o in ours_by_transport.items()},
                "peer": p,
            }
        )
        for transport, o in ours_by_transport.items():
            print(
                f"  [{index + 1}/{ns.repeat}] p50 ms: ours ({transport}) commit"
                f" {o['commit']['p50_ms']:.3f}"
                f" (txn+commit {o['transaction_and_commit']['p50_ms']:.3f}),"
                f" floor fsync {o['floor_fsync']['p50_ms']:.3f},"
                f" no-fsync {o['floor_no_fsync']['p50_ms']:.3f}",
                flush=True,
            )
        print(f"  [{index + 1}/{ns.repeat}] p50 ms: delta-rs commit {p['commit']['p50_ms']:.3f}")

    def median_of(engine: str, key: str, stat: str = "p50_ms") -> float:
        return float(statistics.median(r[engine][key][stat] for r in rounds))

    ours = median_of("ours", "commit")
    peer = median_of("peer", "commit")
    floor = median_of("ours", "floor_fsync")
    floor_no_fsync = median_of("ours", "floor_no_fsync")
    print()
    print(f"{'':<36} {'p50 ms':>8} {'p99 ms':>8}")
    rows: list[tuple[str, str, str]] = []
    for transport in transports:
        rows += [
            (f"raydelta {transport} txn.commit()", f"ours_{transport}", "commit"),
            (
                f"raydelta {transport} transaction+commit",
                f"ours_{transport}",
                "transaction_and_commit",
            ),
        ]
    rows += [
        ("floor put_if_absent+fsync", "ours", "floor_fsync"),
        ("floor put_if_absent no fsync", "ours", "floor_no_fsync"),
        ("delta-rs commit", "peer", "commit"),
        ("delta-rs update+commit", "peer", "update_and_commit"),
    ]
    for label, engine, key in rows:
        print(
            f"{label:<36} {median_of(engine, key):>8.3f} {median_of(engine, key, 'p99_ms'):>8.3f}"
        )
    ratios = {
        transport: print_ratio(
            f"{NAME} ({transport})",
            ours=median_of(f"ours_{transport}", "commit"),
            peer=peer,
            unit="ms",
        )
        for transport in transports
    }
    ratio = ratios[headline]
    goal_met = ours <= floor + GOAL_OVER_FLOOR_MS
    print(
        f"goal ({headline}): ours p50 {ours:.3f} ms"
        f" <= floor {floor:.3f} + {GOAL_OVER_FLOOR_MS:g} ms"
        f" = {floor + GOAL_OVER_FLOOR_MS:.3f} ms: {'MET' if goal_met else 'NOT MET'}"
        f" (ours - floor = {ours - floor:.3f} ms)"
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
            "statistic": "median over rounds of the p50 of one 1-file blind-append commit call",
            "ours_transport": headline,
            "transports": {
                transport: {
                    "p50_ms": median_of(f"ours_{transport}", "commit"),
                    "p99_ms": median_of(f"ours_{transport}", "commit", "p99_ms"),
                    "transaction_and_commit_p50_ms": median_of(
                        f"ours_{transport}", "transaction_and_commit"
                    ),
                    "ratio": ratios[transport],
                    "over_floor_ms": median_of(f"ours_{transport}", "commit") - floor,
                    "own_floor_ms": median_of(f"ours_{transport}", "floor_fsync"),
                    "over_own_floor_ms": median_of(f"ours_{transport}", "commit")
                    - median_of(f"ours_{transport}", "floor_fsync"),
                    "goal_met": median_of(f"ours_{transport}", "commit")
                    <= median_of(f"ours_{transport}", "floor_fsync") + GOAL_OVER_FLOOR_MS,
                }
                for transport in transports
            },
            "floor_ms": floor,
            "floor_no_fsync_ms": floor_no_fsync,
            "ours_over_floor_ms": ours - floor,
            "goal": f"ours p50 <= floor (put_if_absent with fsync) + {GOAL_OVER_FLOOR_MS:g} ms",
            "goal_ms": floor + GOAL_OVER_FLOOR_MS,
            "goal_met": goal_met,
            "ours_p99_ms": median_of("ours", "commit", "p99_ms"),
            "peer_p99_ms": median_of("peer", "commit", "p99_ms"),
            "ours_transaction_and_commit_p50_ms": median_of("ours", "transaction_and_commit"),
            "peer_update_and_commit_p50_ms": median_of("peer", "update_and_commit"),
            "peer_name": "deltalake (delta-rs) create_write_transaction, default hooks,"
            " after an untimed update_incremental",
            "commits_per_round": ns.commits,
            "repeat": ns.repeat,
            "rounds": rounds,
            "load_average_before": load_before,
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
