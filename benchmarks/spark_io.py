"""Spark I/O through the ``raydelta`` format vs delta-spark, in one Spark session.

One ``local[2]`` Spark session with delta-spark's jars runs both engines on
the same data (``--rows`` rows x 10 columns, default 1M):

- write and full read, unpartitioned and partitioned by a 100-value column,
  ``--repeat`` times each, interleaved (goal, issue 29: writes at most
  delta-spark's time, ours / delta-spark <= 1.0; reads <= 1.5);
- a selective query on the partitioned table hitting 1% of its files: the
  files our planner keeps, and its time against our full scan (goal <= 0.2);
- 8 concurrent appenders (threads of the one driver) on one table: commits/s
  and failed commits for each engine;
- where a raydelta full read spends its time (``read_profile``): Spark's
  planning (each engine), our task reads alone (in this process), the rest;
- streaming: 100 micro-batches of ``rows / 100`` rows (10k at 1M) from a
  parquet folder into each sink: sustained commits/s and per-batch latency.

The headline (``ours``/``peer``/``ratio``) is the unpartitioned write time.
Before any timing, each engine writes and reads a small warm-up table: Spark's
Python worker daemon (which our format runs in, delta-spark does not) and both
engines' classes start there, not in the first timed write. Each timed write
still creates its table (ours: its TableActor starts in the time).
delta-spark's log replay runs with ``snapshotPartitions=2`` (its default,
50, is sized for clusters, not ``local[2]``). Results:
``benchmarks/results/spark_io.json``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from benchmarks.common import machine_cpu_seconds, print_ratio, write_result

NAME = "spark_io"
PARTITIONS = 100
APPENDERS = 8


def spark_session() -> Any:
    from pyspark.sql import SparkSession

    from tests.delta_spark_jars import delta_jars

    return (
        SparkSession.builder.master("local[2]")
        .appName("raydelta-spark-io")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.memory", "2g")
        .config("spark.jars", ",".join(str(j) for j in delta_jars()))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .config("spark.databricks.delta.snapshotPartitions", "2")
        .getOrCreate()
    )


ENGINES = ("raydelta", "delta")
WRITE_GOAL = 1.0
"""Issue 29: Spark writes through ``raydelta`` at least as fast as delta-spark's."""


def timed_with_cpu(work: Callable[[], Any]) -> tuple[float, float]:
    """Wall seconds of ``work`` and the CPU seconds the whole machine spent meanwhile."""
    cpu = machine_cpu_seconds()
    seconds = timed(work)
    return seconds, machine_cpu_seconds() - cpu


def timed(work: Callable[[], Any]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def source_frame(spark: Any, rows: int) -> Any:
    frame = spark.range(rows, numPartitions=2).selectExpr(
        "id",
        f"cast(id % {PARTITIONS} as int) as part",
        "cast(id * 0.5 as double) as value",
        "concat('name-', cast(id % 1000 as string)) as name",
        "cast(id % 7 as long) as bucket",
        "cast(rand(1) as double) as score",
        "id % 2 = 0 as even",
        "date_add(date'2026-01-01', cast(id % 365 as int)) as day",
        "cast(id as string) as label",
        "cast(id % 97 as int) as small",
    )
    frame = frame.cache()
    frame.count()
    return frame


def full_scan(spark: Any, fmt: str, uri: str, where: str | None = None) -> None:
    frame = spark.read.format(fmt).load(uri)
    if where is not None:
        frame = frame.where(where)
    frame.write.format("noop").mode("overwrite").save()


def warm_up(spark: Any, frame: Any, root: Path) -> dict[str, float]:
    """A small write and read per engine, untimed for the results (returned
    for the record): starts Spark's Python workers and loads both engines."""
    small = frame.limit(1000)
    out: dict[str, float] = {}

    def write_then_read(fmt: str, uri: str) -> None:
        small.write.format(fmt).mode("append").partitionBy("part").save(uri)
        full_scan(spark, fmt, uri)

    for fmt in ("raydelta", "delta"):
        out[f"{fmt}_s"] = timed(partial(write_then_read, fmt, str(root / f"warm-up-{fmt}")))
    return out


def write_and_read(
    spark: Any, frame: Any, root: Path, *, partitioned: bool, repeat: int
) -> dict[str, Any]:
    """``repeat`` timed writes per engine, interleaved (ours, theirs, ours, ...),
    each creating its own table; then ``repeat`` full scans per engine of the
    first table each wrote, interleaved too. Medians, and the machine's CPU
    seconds (Spark's JVM and Python workers, Ray) beside each median."""
    out: dict[str, Any] = {}
    runs: dict[str, dict[str, list[float]]] = {
        fmt: {"write_s": [], "write_cpu_s": [], "read_s": [], "read_cpu_s": []} for fmt in ENGINES
    }
    for r in range(repeat):
        for fmt in ENGINES:
            uri = str(root / f"{fmt}-{'part' if partitioned else 'flat'}-{r}")
            writer = frame.write.format(fmt).mode("append")
            if partitioned:
                writer = writer.partitionBy("part")
            seconds, cpu = timed_with_cpu(partial(writer.save, uri))
            runs[fmt]["write_s"].append(seconds)
            runs[fmt]["write_cpu_s"].append(cpu)
            out.setdefault(f"{fmt}_uri", uri)
    for _ in range(repeat):
        for fmt in ENGINES:
            seconds, cpu = timed_with_cpu(partial(full_scan, spark, fmt, out[f"{fmt}_uri"]))
            runs[fmt]["read_s"].append(seconds)
            runs[fmt]["read_cpu_s"].append(cpu)
    for fmt in ENGINES:
        for key, values in runs[fmt].items():
            out[f"{fmt}_{key}"] = statistics.median(values)
    out["runs"] = runs
    out["write_ratio"] = out["raydelta_write_s"] / out["delta_write_s"]
    out["read_ratio"] = out["raydelta_read_s"] / out["delta_read_s"]
    return out


def read_profile(spark: Any, table: dict[str, Any]) -> dict[str, Any]:
    """Where a full read through ``raydelta`` spends its time: Spark's planning
    on the driver (our planning runs in Spark's Python planner workers),
    the task reads alone (the same splits read in this process, no Spark),
    and the rest (Python task round trips and Arrow -> Spark rows)."""
    from raydelta.spark.options import ReadOptions
    from raydelta.spark.reader import SnapshotReader

    def plan(fmt: str) -> None:  # the scan's input partitions (our partitions() call)
        uri = table[f"{fmt}_uri"]
        spark.read.format(fmt).load(uri)._jdf.queryExecution().toRdd().getNumPartitions()

    out: dict[str, Any] = {}
    for fmt in ("raydelta", "delta"):
        out[f"{fmt}_plan_s"] = min(timed(partial(plan, fmt)) for _ in range(3))
    parallelism = spark.sparkContext.defaultParallelism
    reader = SnapshotReader(table["raydelta_uri"], ReadOptions.parse({}), min_splits=parallelism)
    splits = reader.partitions()

    def read_all() -> None:
        for split in splits:
            for _ in reader.read(split):
                pass

    out["raydelta_splits"] = len(splits)
    out["raydelta_task_reads_in_process_s"] = min(timed(read_all) for _ in range(2))
    out["raydelta_rest_s"] = (
        table["raydelta_read_s"] - out["raydelta_plan_s"] - out["raydelta_task_reads_in_process_s"]
    )
    return out


def selective(spark: Any, uri: str, full_s: float) -> dict[str, Any]:
    from pyspark.sql.datasource import EqualTo

    from raydelta.spark.options import ReadOptions
    from raydelta.spark.reader import SnapshotReader
    from raydelta.storage.snapshot import load_snapshot

    reader = SnapshotReader(uri, ReadOptions.parse({}))
    list(reader.pushFilters([EqualTo(("part",), 7)]))
    planned = reader.planned_files().num_rows
    total = load_snapshot(uri).num_files
    seconds = min(timed(lambda: full_scan(spark, "raydelta", uri, "part = 7")) for _ in range(3))
    return {
        "files_total": total,
        "files_read": planned,
        "files_read_fraction": planned / total,
        "seconds": seconds,
        "full_scan_seconds": full_s,
        "ratio_to_full_scan": seconds / full_s,
        "goal_ratio": 0.2,
    }


def appenders(spark: Any, root: Path, fmt: str, per_writer: int) -> dict[str, Any]:
    uri = str(root / f"appenders-{fmt}")
    spark.range(1).selectExpr("id", "cast(id as string) as name").write.format(fmt).mode(
        "append"
    ).save(uri)
    failures: list[str] = []
    done = [0]
    lock = threading.Lock()

    def run(writer: int) -> None:
        for i in range(per_writer):
            frame = spark.range(writer * 1000 + i, writer * 1000 + i + 1).selectExpr(
                "id", "cast(id as string) as name"
            )
            try:
                frame.coalesce(1).write.format(fmt).mode("append").save(uri)
            except Exception as error:  # a failed commit is a result here
                with lock:
                    failures.append(type(error).__name__ + ": " + str(error).splitlines()[0])
                continue
            with lock:
                done[0] += 1

    threads = [threading.Thread(target=run, args=(w,)) for w in range(APPENDERS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    rows = spark.read.format(fmt).load(uri).count()
    return {
        "commits": done[0],
        "failed_commits": len(failures),
        "failures": failures[:5],
        "seconds": seconds,
        "commits_per_s": done[0] / seconds,
        "rows_in_table": rows,
        "rows_expected": 1 + done[0],
    }


def streaming(spark: Any, root: Path, fmt: str, batches: int, batch_rows: int) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = root / "stream-in"
    if not folder.exists():
        folder.mkdir()
        for b in range(batches):
            ids = pa.array(range(b * batch_rows, (b + 1) * batch_rows), pa.int64())
            pq.write_table(
                pa.table({"id": ids, "v": pa.compute.multiply(ids, 2)}), folder / f"{b:04}.parquet"
            )
    uri = str(root / f"stream-{fmt}")
    frame = (
        spark.readStream.schema("id long, v long")
        .option("maxFilesPerTrigger", 1)
        .parquet(str(folder))
    )
    query = (
        frame.writeStream.format(fmt)
        .option("checkpointLocation", str(root / f"cp-{fmt}"))
        .trigger(availableNow=True)
        .start(uri)
    )
    start = time.perf_counter()
    query.awaitTermination()
    seconds = time.perf_counter() - start
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
    latencies = [p["durationMs"]["triggerExecution"] / 1000 for p in progress]
    commits = [p["durationMs"].get("addBatch", 0) / 1000 for p in progress]
    latencies.sort()
    return {
        "batches": len(progress),
        "seconds": seconds,
        "commits_per_s": len(progress) / seconds,
        "batch_latency_p50_s": statistics.median(latencies),
        "batch_latency_p95_s": latencies[int(0.95 * (len(latencies) - 1))],
        "add_batch_p50_s": statistics.median(commits),
        "rows_in_table": spark.read.format(fmt).load(uri).count(),
        "rows_expected": batches * batch_rows,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=100, help="streaming micro-batches")
    parser.add_argument("--appends", type=int, default=5, help="appends per concurrent writer")
    parser.add_argument("--repeat", type=int, default=5, help="interleaved writes/scans per engine")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    parser.add_argument("--note", default="", help="why this run differs from the issue's sizes")
    ns = parser.parse_args(argv)
    load_at_start = list(os.getloadavg())

    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    spark = spark_session()
    from raydelta.spark import register

    register(spark)
    root = Path(tempfile.mkdtemp(prefix="spark-io-"))
    try:
        frame = source_frame(spark, ns.rows)
        warm = warm_up(spark, frame, root)
        print(f"warm-up (untimed for the results): {warm}", flush=True)
        flat = write_and_read(spark, frame, root, partitioned=False, repeat=ns.repeat)
        print(f"unpartitioned: {flat}", flush=True)
        part = write_and_read(spark, frame, root, partitioned=True, repeat=ns.repeat)
        print(f"partitioned: {part}", flush=True)
        profile = {
            "unpartitioned": read_profile(spark, flat),
            "partitioned": read_profile(spark, part),
        }
        print(f"read profile: {profile}", flush=True)
        chosen = selective(spark, part["raydelta_uri"], part["raydelta_read_s"])
        concurrent = {fmt: appenders(spark, root, fmt, ns.appends) for fmt in ("raydelta", "delta")}
        print(f"appenders: {concurrent}", flush=True)
        batch_rows = max(1, ns.rows // 100)
        stream = {
            fmt: streaming(spark, root, fmt, ns.batches, batch_rows)
            for fmt in ("raydelta", "delta")
        }
        load_at_end = list(os.getloadavg())
    finally:
        spark.stop()
        ray.shutdown()
        shutil.rmtree(root, ignore_errors=True)

    ratio = print_ratio(
        "write (unpartitioned)",
        ours=flat["raydelta_write_s"],
        peer=flat["delta_write_s"],
        unit="s",
        goal=WRITE_GOAL,
    )
    print_ratio(
        "read (unpartitioned)",
        ours=flat["raydelta_read_s"],
        peer=flat["delta_read_s"],
        unit="s",
        goal=1.5,
    )
    print_ratio(
        "write (partitioned)",
        ours=part["raydelta_write_s"],
        peer=part["delta_write_s"],
        unit="s",
        goal=WRITE_GOAL,
    )
    print_ratio(
        "read (partitioned)",
        ours=part["raydelta_read_s"],
        peer=part["delta_read_s"],
        unit="s",
        goal=1.5,
    )
    print(
        f"selective: {chosen['files_read']}/{chosen['files_total']} files, "
        f"{chosen['ratio_to_full_scan']:.3f}x the full scan (goal <= 0.2)"
    )
    for fmt, r in concurrent.items():
        print(
            f"{APPENDERS} appenders {fmt}: {r['commits_per_s']:.2f} commits/s,"
            f" {r['failed_commits']} failed"
        )
    for fmt, r in stream.items():
        print(
            f"streaming {fmt}: {r['commits_per_s']:.2f} batches/s, "
            f"p50 {r['batch_latency_p50_s']:.3f} s, p95 {r['batch_latency_p95_s']:.3f} s"
        )
    if ns.no_write:
        return 0
    for table in (flat, part):
        for key in [k for k in table if k.endswith("_uri")]:
            del table[key]
    path = write_result(
        NAME,
        {
            "unit": "s",
            "ours": flat["raydelta_write_s"],
            "peer": flat["delta_write_s"],
            "ratio": ratio,
            "statistic": f"median of {ns.repeat} interleaved writes of {ns.rows:,} rows"
            " x 10 columns, unpartitioned, each creating its table",
            "peer_name": "delta-spark (format delta) in the same Spark session",
            "goal": "writes: ours / delta-spark <= 1.0 (issue 29), reads <= 1.5,"
            " partitioned and not; selective query <= 0.2x full scan",
            "rows": ns.rows,
            "rows_asked_by_the_issue": 1_000_000,
            "streaming_batches_asked_by_the_issue": 100,
            "note": ns.note,
            "load_average_at_start": load_at_start,
            "load_average_at_end": load_at_end,
            "warm_up_s": warm,
            "goals_met": {
                "write_unpartitioned": flat["write_ratio"] <= WRITE_GOAL,
                "read_unpartitioned": flat["read_ratio"] <= 1.5,
                "write_partitioned": part["write_ratio"] <= WRITE_GOAL,
                "read_partitioned": part["read_ratio"] <= 1.5,
                "selective": chosen["ratio_to_full_scan"] <= 0.2,
            },
            "unpartitioned": flat,
            "partitioned": part,
            "selective": chosen,
            "read_profile": profile,
            "concurrent_appenders": {
                "writers": APPENDERS,
                "appends_each": ns.appends,
                **concurrent,
            },
            "streaming": {"batches": ns.batches, "rows_per_batch": batch_rows, **stream},
        },
    )
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
