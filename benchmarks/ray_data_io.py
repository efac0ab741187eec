"""Benchmark: Ray Data write and read of a Delta table, raydelta vs Ray's built-in.

Work, per engine in its own fresh driver process (a local Ray cluster started
in the untimed setup, then a small warm-up write and read on a scratch table
so both engines start with warm Ray workers):

- create: ``--rows`` rows of 10 columns (ints, doubles, strings, a bool, a
  date, a timestamp), already in Ray's object store as ``--blocks`` Arrow
  blocks, written where there is no table yet: ours
  ``raydelta.ray_data.write_delta`` (tasks write through the data writer,
  one commit through the table's TableActor, whose process starts then and
  is part of the time), the peer ``Dataset.write_delta`` (deltalake commit);
- append (the headline ``ratio``): the same rows appended to a table that
  exists (made by a 1,000-row write of the same engine just before; ours:
  its TableActor runs, as for any table a cluster keeps writing);
- read: the whole table the create made, materialized (``materialize()``):
  ours ``raydelta.ray_data.read_delta``, the peer ``ray.data.read_delta``.
  Both readers then also read the other engine's table (``cross_read``), so a
  difference in file layout cannot hide behind the headline.

Concurrency (correctness, not timed): ``--jobs`` threads each append a
distinct dataset of ``--job-rows`` unique ids to one table at once, with each
engine's writer, to a table that exists and to one they race to create; the
ids in the final table are counted: ``landed`` (distinct ids found),
``duplicated``, ``lost`` and the jobs that raised.

Repeated ``--repeat`` times, engines interleaved; the medians are reported.
``ratio`` = ours / peer append seconds; ``create_ratio`` the same for the
create; ``read_ratio`` = ours / peer read
seconds (lower is better; goal <= 1.0 each).

Run: ``python -m benchmarks.ray_data_io [--rows 1000000] [--repeat 3]``.
Writes ``benchmarks/results/ray_data_io.json`` (not with ``--no-write``).

Only the standard library and :mod:`benchmarks.common` are imported at top
level: the children import this module to find their targets.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks.common import measure_once, print_ratio, write_result

NAME = "ray_data_io"
GOAL_RATIO = 1.0
ENGINES = ("ours", "peer")


def setup() -> None:
    import os

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    import ray.data

    import raydelta.ray_data  # noqa: F401

    ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = False
    context.print_on_execution_start = False


def _columns(rows: int, offset: int) -> Any:
    import datetime as dt

    import numpy as np
    import pyarrow as pa

    ids = np.arange(offset, offset + rows, dtype=np.int64)
    rng = np.random.default_rng(abs(offset) + 7)
    return pa.table(
        {
            "id": ids,
            "user": pa.array(rng.integers(0, 100_000, rows), pa.int64()),
            "count": pa.array(rng.integers(0, 1000, rows).astype(np.int32)),
            "amount": rng.random(rows) * 1000,
            "score": rng.standard_normal(rows),
            "name": pa.array([f"user-{i % 50_000}" for i in ids.tolist()], pa.string()),
            "category": pa.array([("a", "b", "c", "d")[i % 4] for i in ids.tolist()]),
            "active": pa.array(ids % 3 == 0),
            "day": pa.array(
                [dt.date(2026, 1, 1) + dt.timedelta(days=i % 365) for i in ids.tolist()],
                pa.date32(),
            ),
            "at": pa.array(ids * 1_000_000 + 1_767_225_600_000_000, pa.timestamp("us", tz="UTC")),
        }
    )


def _dataset(rows: int, blocks: int, offset: int = 0) -> Any:
    import ray.data

    table = _columns(rows, offset)
    step = -(-rows // blocks)
    return ray.data.from_arrow([table.slice(s, step) for s in range(0, rows, step)])


def _write(engine: str, dataset: Any, uri: str) -> None:
    if engine == "ours":
        from raydelta.ray_data import write_delta

        write_delta(dataset, uri)
    else:
        dataset.write_delta(uri)


def _read(engine: str, uri: str) -> int:
    if engine == "ours":
        from raydelta.ray_data import read_delta

        return int(read_delta(uri).materialize().count())
    import ray.data

    return int(ray.data.read_delta(uri).materialize().count())


def _files_of(uri: str) -> int:
    return sum(1 for _ in Path(uri).rglob("*.parquet"))


def run(engine: str, root: str, rows: int, blocks: int, round_index: int) -> dict[str, Any]:
    """One engine's write and read (timed inside), and the cross read."""
    base = Path(root) / f"{engine}-{round_index}"
    warm = str(base / "warm")
    _write(engine, _dataset(1000, 2), warm)
    _read(engine, warm)
    dataset = _dataset(rows, blocks).materialize()
    uri = str(base / "table")
    start = time.perf_counter()
    _write(engine, dataset, uri)
    create_s = time.perf_counter() - start
    start = time.perf_counter()
    read_rows = _read(engine, uri)
    read_s = time.perf_counter() - start
    files = _files_of(uri)
    appended = str(base / "appended")
    _write(engine, _dataset(1000, 1), appended)  # the table exists (ours: its actor runs)
    start = time.perf_counter()
    _write(engine, dataset, appended)
    write_s = time.perf_counter() - start
    other_engine = "peer" if engine == "ours" else "ours"
    cross: dict[str, Any] = {}
    # the other engine's table of this round, else of the round before (engines alternate)
    for other_round in (round_index, round_index - 1):
        other = Path(root) / f"{other_engine}-{other_round}" / "table"
        if other.is_dir():
            break
    if other.is_dir():
        start = time.perf_counter()
        cross = {"rows": _read(engine, str(other)), "seconds": time.perf_counter() - start}
    return {
        "write_s": write_s,
        "create_s": create_s,
        "read_s": read_s,
        "rows_read": read_rows,
        "files": files,
        "cross_read": cross,
    }


def concurrent(
    engine: str, root: str, jobs: int, job_rows: int, table_exists: bool
) -> dict[str, Any]:
    """``jobs`` threads append distinct ids to one table at once (which exists
    before, or which they race to create); count what landed."""
    import pyarrow as pa

    uri = str(Path(root) / f"concurrent-{engine}-{'append' if table_exists else 'create'}")
    if table_exists:
        _write(engine, _dataset(10, 1, offset=-10), uri)
    errors: list[str] = []

    def job(index: int) -> None:
        try:
            _write(engine, _dataset(job_rows, 2, offset=index * job_rows), uri)
        except Exception as error:
            errors.append(f"{type(error).__name__}: {str(error)[:200]}")

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(job, range(jobs)))
    import deltalake

    ids = pa.table(deltalake.DeltaTable(uri).to_pyarrow_table(columns=["id"])).column("id")
    found = [i for i in ids.to_pylist() if i >= 0]
    expected = jobs * job_rows
    distinct = len(set(found))
    return {
        "expected": expected,
        "landed": distinct,
        "lost": expected - distinct,
        "duplicated": len(found) - distinct,
        "failed_jobs": len(errors),
        "errors": errors[:3],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--job-rows", type=int, default=10_000)
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)

    root = tempfile.mkdtemp(prefix="raydelta-bench-raydata-")
    load_at_start = list(os.getloadavg())
    results: dict[str, list[dict[str, Any]]] = {e: [] for e in ENGINES}
    races: dict[str, Any] = {}
    try:
        for round_index in range(ns.repeat):
            for engine in ENGINES if round_index % 2 == 0 else ENGINES[::-1]:
                m = measure_once(
                    "benchmarks.ray_data_io:run",
                    (engine, root, ns.rows, ns.blocks, round_index),
                    setup="benchmarks.ray_data_io:setup",
                    timeout_s=1800,
                )
                r = m.result
                results[engine].append(r)
                print(
                    f"  [{round_index + 1}/{ns.repeat}] {engine:<5} append {r['write_s']:7.3f} s"
                    f"  create {r['create_s']:7.3f} s"
                    f"  read {r['read_s']:7.3f} s  ({r['rows_read']:,} rows, {r['files']} files)"
                    f"  cross read {r['cross_read'].get('seconds', float('nan')):.3f} s",
                    flush=True,
                )
        for scenario, exists in (("existing_table", True), ("racing_to_create", False)):
            for engine in ENGINES:
                try:
                    outcome = measure_once(
                        "benchmarks.ray_data_io:concurrent",
                        (engine, root, ns.jobs, ns.job_rows, exists),
                        setup="benchmarks.ray_data_io:setup",
                        timeout_s=1800,
                    ).result
                except RuntimeError as error:  # the child died: recorded, not hidden
                    outcome = {"child_failed": str(error)[-500:]}
                races.setdefault(scenario, {})[engine] = outcome
                print(f"  concurrent appends, {scenario} ({engine}): {outcome}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)

    def median(engine: str, key: str) -> float:
        return statistics.median(r[key] for r in results[engine])

    for engine in ENGINES:
        for r in results[engine]:
            if r["rows_read"] != ns.rows:
                raise SystemExit(f"{engine} read {r['rows_read']} rows, wrote {ns.rows}")
    ratio = print_ratio(
        f"{NAME} append {ns.rows:,} rows",
        ours=median("ours", "write_s"),
        peer=median("peer", "write_s"),
        unit="s",
        goal=GOAL_RATIO,
    )
    create_ratio = print_ratio(
        f"{NAME} write {ns.rows:,} rows creating the table",
        ours=median("ours", "create_s"),
        peer=median("peer", "create_s"),
        unit="s",
        goal=GOAL_RATIO,
    )
    read_ratio = print_ratio(
        f"{NAME} read {ns.rows:,} rows",
        ours=median("ours", "read_s"),
        peer=median("peer", "read_s"),
        unit="s",
        goal=GOAL_RATIO,
    )
    if ns.no_write:
        return 0
    path = write_result(
        NAME,
        {
            "unit": "s",
            "ours": median("ours", "write_s"),
            "peer": median("peer", "write_s"),
            "ratio": ratio,
            "create_ours": median("ours", "create_s"),
            "create_peer": median("peer", "create_s"),
            "create_ratio": create_ratio,
            "read_ours": median("ours", "read_s"),
            "read_peer": median("peer", "read_s"),
            "read_ratio": read_ratio,
            "statistic": f"median of {ns.repeat} fresh driver processes per engine",
            "goal": "ours <= peer seconds for the write and for the read",
            "ratio_is": "append of --rows rows to an existing table (ours: its TableActor runs);"
            " create_ratio: the write that creates the table (ours starts the TableActor"
            " process then: its start is in the time)",
            "goal_ratio": GOAL_RATIO,
            "goal_met": ratio <= GOAL_RATIO and read_ratio <= GOAL_RATIO,
            "load_average_at_start": load_at_start,
            "peer_name": "Ray's built-in Dataset.write_delta / ray.data.read_delta (deltalake)",
            "rows": ns.rows,
            "columns": 10,
            "blocks": ns.blocks,
            "runs": results,
            "concurrent_appends": {"jobs": ns.jobs, "rows_per_job": ns.job_rows, **races},
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
