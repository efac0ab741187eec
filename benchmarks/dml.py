"""Benchmark: DELETE, UPDATE and MERGE on one table, ours vs deltalake.

Work, on copies of the same ``--rows``-row, ``--files``-file table (columns
``id`` int64, ``part`` string of 4 values, ``x`` int64, ``s`` string;
unpartitioned), each operation in a fresh process (:func:`benchmarks.common.measure_once`)
on a fresh copy:

- delete of 0.1% of rows (``id % 1000 = 0``);
- update of 1% (``x = x + 1`` where ``id % 100 = 7``);
- merge upserting 10k rows (``target.id = source.id``; half the ids exist,
  every ``rows/5000``-th; half are new), ``when_matched_update_all`` +
  ``when_not_matched_insert_all``;
- ours only: the 0.1% delete with deletion vectors (``delta.enableDeletionVectors``)
  against copy-on-write; and an update of 1% on a table of ``--scale-files``
  files with 1, 2 and 4 Ray workers (``ray.init(num_cpus=N)``, 2 tasks per
  CPU through :mod:`raydelta.dml.execution`).

Both engines open the table first (ours: the TableActor is up and has the
snapshot; deltalake: ``DeltaTable(path)``); the time is the operation alone,
measured inside the child. ``ratio`` = our merge / deltalake's merge
(lower is better; goal <= 1.0 for each operation).

Run: ``python -m benchmarks.dml [--rows 1000000] [--files 100] [--scale-files 1000]``.
Writes ``benchmarks/results/dml.json``.

Only the standard library and :mod:`benchmarks.common` are imported at top
level: the children import this module to find their targets.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import measure_once, print_ratio, write_result

NAME = "dml"
GOAL_RATIO = 1.0
ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def _chunk(start: int, count: int) -> Any:
    import pyarrow as pa

    ids = pa.array(range(start, start + count), pa.int64())
    return pa.table(
        {
            "id": ids,
            "part": pa.array(
                [("p0", "p1", "p2", "p3")[i % 4] for i in range(start, start + count)],
                pa.string(),
            ),
            "x": pa.array([i * 7 % 1000 for i in range(start, start + count)], pa.int64()),
            "s": pa.array([f"row-{i}" for i in range(start, start + count)], pa.string()),
        }
    )


def build_table(path: str, rows: int, files: int, dv: bool) -> None:
    """A table of ``files`` files in one commit (written by raydelta's writer)."""
    import ray

    import raydelta
    from raydelta.storage.data.writer import write_data

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    properties = {"delta.enableDeletionVectors": "true"} if dv else {}
    table = raydelta.create_table(path, _chunk(0, 0).schema, properties=properties)
    txn = table.transaction()
    per_file = rows // files
    for index in range(files):
        result = write_data(
            table.uri,
            _chunk(index * per_file, per_file),
            protocol=txn.protocol,
            metadata=txn.metadata,
        )
        txn.add(*result.adds)
    txn.commit(operation="WRITE", operation_parameters={"mode": "Append"})
    ray.shutdown()


def _source(rows: int) -> Any:
    import pyarrow as pa

    step = max(1, rows // 5000)
    existing = list(range(0, rows, step))[:5000]
    new = list(range(rows, rows + 10_000 - len(existing)))
    ids = existing + new
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "part": pa.array(["p9"] * len(ids)),
            "x": pa.array([-i for i in ids], pa.int64()),
            "s": pa.array([f"new-{i}" for i in ids]),
        }
    )


def _warm_worker() -> int:
    import raydelta.storage.data.dml  # noqa: F401

    return os.getpid()


def _warm_remote() -> Any:
    import ray

    return ray.remote(num_cpus=1)(_warm_worker)


def ours(path: str, operation: str, rows: int, cpus: int, tasks: int | None) -> dict[str, Any]:
    import ray

    import raydelta
    from raydelta.dml.operations import stage_update

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    table = raydelta.open_table(path)
    table.snapshot()
    if tasks is not None:  # a running cluster's workers have the engine imported
        warm = _warm_remote()
        ray.get([warm.remote() for _ in range(tasks)])
    source = _source(rows) if operation == "merge" else None
    started, cpu = time.perf_counter(), time.process_time()
    if operation == "delete":
        metrics: Any = table.delete("id % 1000 = 0")
        changed = metrics.num_deleted_rows
    elif operation == "update":
        if tasks is None:
            metrics = table.update({"x": "x + 1"}, predicate="id % 100 = 7")
        else:
            metrics = stage_update(
                table, {"x": "x + 1"}, predicate="id % 100 = 7", tasks=tasks
            ).commit()
        changed = metrics.num_updated_rows
    else:
        metrics = (
            table.merge(source, "target.id = source.id")
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        changed = metrics.num_target_rows_updated + metrics.num_target_rows_inserted
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    ray.shutdown()
    return {"seconds": seconds, "cpu_seconds": cpu, "changed": changed}


def peer(path: str, operation: str, rows: int) -> dict[str, Any]:
    import deltalake

    table = deltalake.DeltaTable(path)
    source = _source(rows)
    started, cpu = time.perf_counter(), time.process_time()
    if operation == "delete":
        changed = table.delete("id % 1000 = 0")["num_deleted_rows"]
    elif operation == "update":
        changed = table.update(updates={"x": "x + 1"}, predicate="id % 100 = 7")["num_updated_rows"]
    else:
        result = (
            table.merge(
                source, "target.id = source.id", source_alias="source", target_alias="target"
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        changed = result["num_target_rows_updated"] + result["num_target_rows_inserted"]
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"seconds": seconds, "cpu_seconds": cpu, "changed": changed}


def spark_peer(path: str, operation: str, rows: int) -> dict[str, Any]:
    """delta-spark (local[2], the session benchmarks/spark_io.py starts) on
    the same work; the session is up and the table opened before the clock
    starts (the JVM is as cold as our process is)."""
    from delta.tables import DeltaTable

    from benchmarks.spark_io import spark_session

    spark = spark_session()
    spark.sparkContext.setLogLevel("ERROR")
    table = DeltaTable.forPath(spark, path)
    table.toDF().limit(1).collect()
    source = spark.createDataFrame(_source(rows).to_pandas())
    source.cache().count()
    started = time.perf_counter()
    if operation == "delete":
        table.delete("id % 1000 = 0")
    elif operation == "update":
        table.update("id % 100 = 7", {"x": "x + 1"})
    else:
        (
            table.alias("target")
            .merge(source.alias("source"), "target.id = source.id")
            .whenMatchedUpdateAll()
            .whenNotMatchedInsertAll()
            .execute()
        )
    seconds = time.perf_counter() - started
    metrics = table.history(1).select("operationMetrics").collect()[0][0]
    if operation == "delete":
        changed = int(metrics["numDeletedRows"])
    elif operation == "update":
        changed = int(metrics["numUpdatedRows"])
    else:
        changed = int(metrics["numTargetRowsUpdated"]) + int(metrics["numTargetRowsInserted"])
    spark.stop()
    return {"seconds": seconds, "changed": changed}


def _run(base: str, work: str, args: list[Any], repeat: int) -> tuple[float, Any, float | None]:
    """Median wall seconds, rows changed, median CPU seconds of the process
    (None when not measured: the JVM's is not ours to see)."""
    times, cpus, changed = [], [], None
    for _ in range(repeat):
        with tempfile.TemporaryDirectory(prefix="raydelta-dml-") as tmp:
            copy = str(Path(tmp) / "t")
            shutil.copytree(base, copy)
            result = measure_once(work, [copy, *args], env=ENV, timeout_s=1800).result
        times.append(result["seconds"])
        if "cpu_seconds" in result:
            cpus.append(result["cpu_seconds"])
        changed = result["changed"]
    return statistics.median(times), changed, statistics.median(cpus) if cpus else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=100)
    parser.add_argument("--scale-files", type=int, default=1000)
    parser.add_argument("--workers", type=int, nargs="*", default=[1, 2, 4])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-spark", action="store_true", help="skip delta-spark")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args()
    out: dict[str, Any] = {"unit": "seconds", "rows": ns.rows, "files": ns.files}
    load_at_start = list(os.getloadavg())
    with tempfile.TemporaryDirectory(prefix="raydelta-dml-base-") as tmp:
        plain, dv, many = (str(Path(tmp) / n) for n in ("plain", "dv", "many"))
        measure_once("benchmarks.dml:build_table", [plain, ns.rows, ns.files, False], env=ENV)
        measure_once("benchmarks.dml:build_table", [dv, ns.rows, ns.files, True], env=ENV)
        operations: dict[str, Any] = {}
        for operation in ("delete", "update", "merge"):
            load = os.getloadavg()[0]
            mine, mine_changed, mine_cpu = _run(
                plain, "benchmarks.dml:ours", [operation, ns.rows, 2, None], ns.repeat
            )
            theirs, their_changed, their_cpu = _run(
                plain, "benchmarks.dml:peer", [operation, ns.rows], ns.repeat
            )
            if mine_changed != their_changed:
                raise RuntimeError(
                    f"{operation}: ours changed {mine_changed} rows, deltalake {their_changed}"
                )
            entry: dict[str, Any] = {
                "ours": mine,
                "peer": theirs,
                "ratio": print_ratio(
                    f"{operation} (vs deltalake)", ours=mine, peer=theirs, unit="s", goal=GOAL_RATIO
                ),
                "ours_cpu_s": mine_cpu,
                "peer_cpu_s": their_cpu,
                "cpu_ratio": mine_cpu / their_cpu if mine_cpu and their_cpu else None,
                "rows_changed": mine_changed,
            }
            if not ns.no_spark:
                spark_s, spark_changed, _ = _run(
                    plain, "benchmarks.dml:spark_peer", [operation, ns.rows], ns.repeat
                )
                if spark_changed != mine_changed:
                    raise RuntimeError(
                        f"{operation}: ours changed {mine_changed} rows, "
                        f"delta-spark {spark_changed}"
                    )
                entry["delta_spark"] = spark_s
                entry["ratio_vs_delta_spark"] = print_ratio(
                    f"{operation} (vs delta-spark)", ours=mine, peer=spark_s, unit="s", goal=None
                )
            entry["load_average_1m_before"] = load
            operations[operation] = entry
        with_dv, _, _ = _run(dv, "benchmarks.dml:ours", ["delete", ns.rows, 2, None], ns.repeat)
        cow = operations["delete"]["ours"]
        out["deletion_vectors"] = {
            "delete_dv_s": with_dv,
            "delete_copy_on_write_s": cow,
            "speedup": cow / with_dv if with_dv else None,
            "goal_speedup": 5.0,
        }
        print(f"0.1% delete: DV {with_dv:.3f}s, copy-on-write {cow:.3f}s, x{cow / with_dv:.1f}")
        measure_once("benchmarks.dml:build_table", [many, ns.rows, ns.scale_files, False], env=ENV)
        scaling = {}
        for workers in ns.workers:
            seconds, _, _ = _run(
                many, "benchmarks.dml:ours", ["update", ns.rows, workers, 2 * workers], ns.repeat
            )
            scaling[str(workers)] = seconds
            print(f"{ns.scale_files}-file update on {workers} Ray worker CPUs: {seconds:.3f}s")
        out["scaling_update"] = {
            "files": ns.scale_files,
            "tasks_per_worker": 2,
            "workers_warmed": True,
            "seconds_by_workers": scaling,
            "note": "ray.init(num_cpus=N) on this machine's usable cores; N beyond them "
            "cannot run in parallel",
        }
    out["operations"] = operations
    out["ours"] = operations["merge"]["ours"]
    out["peer"] = operations["merge"]["peer"]
    out["ratio"] = operations["merge"]["ratio"]
    out["peer_name"] = "deltalake"
    out["goal_ratio"] = GOAL_RATIO
    out["delta_spark"] = (
        "not measured (--no-spark)"
        if ns.no_spark
        else {op: operations[op]["delta_spark"] for op in operations}
    )
    out["load_average_at_start"] = load_at_start
    out["load_average_at_end"] = list(os.getloadavg())
    if ns.no_write:
        print(json.dumps({k: out[k] for k in ("unit", "ours", "peer", "ratio") if k in out}))
        return
    path = write_result(NAME, out)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
