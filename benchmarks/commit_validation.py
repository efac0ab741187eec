"""Benchmark: what the commit validator costs in a 10,000-file commit.

Work: a table (``date string, value long``, partitioned by ``date``) and
commits of ``N`` = 10,000 ``add`` actions each, every add with full
statistics (``numRecords``, ``minValues``, ``maxValues``, ``nullCount``),
one of 10 partition values and a relative path under the table root:

- ours: the validator alone, ``validate_commit(actions, table_configuration=...,
  table_root=uri, final=False)`` as the ``CommitCoordinator`` calls it
  (paths, sizes, stats, partition values, duplicates; in process, warm);
- peer: the full commit of the same kind of request through the
  ``TableActor`` (``table.transaction().add(*adds).commit()``: the request
  shipped to the actor, validated there, conflict-checked, rebased,
  serialised and written with put-if-absent), each repetition with fresh
  file names so every commit adds 10,000 new files.

The peer here is not another engine: it is our own commit time, so
``ratio`` = validation / commit is the validator's share of a commit.
``ours``/``peer`` are median milliseconds. Goal: ratio <= 0.05.

Run: ``python -m benchmarks.commit_validation [--files 10000] [--repeat 7]``.
Writes ``benchmarks/results/commit_validation.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from statistics import median
from typing import Any

import pyarrow as pa

from benchmarks.common import latency_stats, print_ratio, write_result

NAME = "commit_validation"
GOAL_RATIO = 0.05
SCHEMA = pa.schema([("date", pa.string()), ("value", pa.int64())])
DATES = [f"2024-01-{day:02d}" for day in range(1, 11)]


def make_adds(count: int, tag: str) -> list[Any]:
    from raydelta.protocol.actions import AddFile

    adds = []
    for i in range(count):
        date = DATES[i % len(DATES)]
        stats = json.dumps(
            {
                "numRecords": 1000 + i % 7,
                "minValues": {"value": i},
                "maxValues": {"value": i + 999},
                "nullCount": {"value": i % 3},
            },
            separators=(",", ":"),
        )
        adds.append(
            AddFile(
                path=f"date={date}/part-{i:05d}-{tag}.snappy.parquet",
                partitionValues={"date": date},
                size=10_000 + i,
                modificationTime=1_700_000_000_000 + i,
                dataChange=True,
                stats=stats,
            )
        )
    return adds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=10_000, help="adds per commit")
    parser.add_argument("--repeat", type=int, default=7, help="timed runs of each side")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)

    from raydelta.actors.table.client import TableClient, release_table
    from raydelta.protocol.commit_rules import validate_commit

    workdir = tempfile.mkdtemp(prefix="raydelta-bench-validation-")
    try:
        table = TableClient.create(str(Path(workdir) / "t"), schema=SCHEMA, partition_by=["date"])
        uri = table.uri
        config = table.snapshot().table_configuration

        actions = make_adds(ns.files, "v")
        validate_commit(  # warm-up
            actions, is_create=False, table_configuration=config, final=False, table_root=uri
        )
        validation_s = []
        for _ in range(ns.repeat):
            start = time.perf_counter()
            validate_commit(
                actions, is_create=False, table_configuration=config, final=False, table_root=uri
            )
            validation_s.append(time.perf_counter() - start)

        table.transaction().add(*make_adds(ns.files, "warm")).commit()  # warm-up
        commit_s = []
        for run in range(ns.repeat):
            adds = make_adds(ns.files, f"r{run}")
            txn = table.transaction().add(*adds)
            start = time.perf_counter()
            txn.commit()
            commit_s.append(time.perf_counter() - start)
        release_table(uri)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    ours = median(validation_s) * 1000
    peer = median(commit_s) * 1000
    print(
        f"{ns.files:,}-file commit: validation p50 {ours:.2f} ms"
        f" (min {min(validation_s) * 1000:.2f}); full commit p50 {peer:.1f} ms"
        f" (min {min(commit_s) * 1000:.1f})"
    )
    ratio = print_ratio(
        f"{NAME} @ {ns.files:,} adds", ours=ours, peer=peer, unit="ms", goal=GOAL_RATIO
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
            "statistic": f"median time to validate a {ns.files:,}-add commit (ours) and to"
            " commit one through the TableActor (peer)",
            "peer_name": "our own full commit of the same request (not another engine)",
            "goal": f"ratio <= {GOAL_RATIO:g} (validation under 5% of the commit)",
            "goal_met": ratio <= GOAL_RATIO,
            "files": ns.files,
            "repeat": ns.repeat,
            "validation": latency_stats(validation_s),
            "commit": latency_stats(commit_s),
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
