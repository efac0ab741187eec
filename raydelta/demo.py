"""``raydelta demo [DIR]``: the product end to end on an embedded default.

A local Ray cluster and a local directory (``DIR``, default
``./raydelta-demo``): create a partitioned table; concurrent writers (Ray
tasks) append through the table's ``TableActor``, which rebases every commit
that lost a race instead of bouncing it; when PySpark is installed, a PySpark
job appends through the ``raydelta`` format; a V2 checkpoint with sidecars is
built on Ray; a VACUUM dry run; then the history, the commit rate, the
conflicts resolved, and whether deltalake (when installed) reads the same
rows. The table stays in ``DIR`` for the user to open.

Invariants: the demo only creates ``DIR/events`` (or appends to it when it
exists from an earlier run) and never deletes anything (VACUUM is a dry run).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import sys
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.compute

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("writer", pa.string()),
        ("value", pa.float64()),
        ("date", pa.string()),
    ]
)
DATES = ("2026-11-23", "2026-11-24", "2026-11-25")


def _say(line: str = "") -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _batch(writer: int, commit: int, rows: int) -> pa.Table:
    start = (writer * 1_000 + commit) * rows
    return pa.table(
        {
            "id": pa.array(range(start, start + rows), pa.int64()),
            "writer": [f"ray-{writer}"] * rows,
            "value": [float(i % 97) for i in range(rows)],
            "date": [DATES[(writer + commit) % len(DATES)]] * rows,
        },
        schema=SCHEMA,
    )


def _write_commits(
    uri: str, writer: int, commits: int, rows: int, start_at: float
) -> tuple[list[int], float, float]:
    """One writer's appends, started together at ``start_at`` (wall clock) once
    every writer is ready; returns, per commit, how many winners it was rebased
    over, and when its first and last commits began and ended."""
    import raydelta

    table = raydelta.open_table(uri)
    batches = [_batch(writer, commit, rows) for commit in range(commits)]
    time.sleep(max(0.0, start_at - time.time()))
    began = time.time()
    rebased = []
    for batch in batches:
        table.append(batch)
        reply = table.last_commit
        rebased.append(0 if reply is None else len(reply.rebased_over))
    return rebased, began, time.time()


def _spark_append(uri: str, rows: int) -> str:
    """Append ``rows`` rows from a local PySpark job through the ``raydelta`` format."""
    if importlib.util.find_spec("pyspark") is None:
        return "skipped (pyspark is not installed: pip install 'raydelta[spark]')"
    if shutil.which("java") is None:
        return "skipped (PySpark needs Java 17 on PATH)"
    from pyspark.sql import SparkSession

    from raydelta.spark import register

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    running = SparkSession.getActiveSession()
    spark = running or (
        SparkSession.builder.master("local[2]")
        .appName("raydelta-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    try:
        register(spark)
        frame = spark.createDataFrame(
            _batch(99, 0, rows).to_pylist(),
            schema="id long, writer string, value double, date string",
        )
        frame.write.format("raydelta").mode("append").save(uri)
    finally:
        if running is None:  # stop only a session this demo started
            spark.stop()
    return f"appended {rows} rows through format('raydelta')"


def _deltalake_check(path: str, ours: pa.Table) -> str:
    if importlib.util.find_spec("deltalake") is None:
        return "skipped (deltalake is not installed)"
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(path)
    # QueryBuilder reads V2 checkpoints (to_pyarrow_table refuses that reader feature)
    found = pa.table(
        QueryBuilder()
        .register("events", table)
        .execute("SELECT count(*) AS n, sum(id) AS ids, sum(value) AS total FROM events")
        .read_all()
    ).to_pylist()[0]
    expected = {
        "n": ours.num_rows,
        "ids": pa.compute.sum(ours.column("id")).as_py(),
        "total": pa.compute.sum(ours.column("value")).as_py(),
    }
    verdict = "the same rows" if found == expected else f"DIFFERENT rows: {found} != {expected}"
    return f"deltalake reads version {table.version()}: {found['n']} rows, {verdict}"


# Over 80 lines on purpose: the demo reads top to bottom as the story it prints,
# a few lines per step; split into steps it would hide that story.
def run_demo(
    directory: str,
    *,
    writers: int = 8,
    commits_per_writer: int = 8,
    rows_per_commit: int = 1_000,
    spark: bool = True,
    say: Callable[[str], None] = _say,
) -> dict[str, Any]:
    """Run the demo in ``directory``; returns what it printed as numbers."""
    import ray

    import raydelta

    path = os.path.abspath(os.path.join(directory, "events"))
    os.makedirs(directory, exist_ok=True)
    raydelta.connect()
    say(f"table       {path}")
    table = raydelta.create_table(
        path,
        SCHEMA,
        partition_by=["date"],
        properties={
            "delta.checkpointPolicy": "v2",
            "delta.enableInCommitTimestamps": "true",
            "delta.checkpointInterval": "1000",
        },
        mode="ignore",
    )
    start_version = table.version()

    remote = ray.remote(num_cpus=0)(_write_commits)
    ready = ray.remote(num_cpus=0)(lambda: None)
    ray.get([ready.remote() for _ in range(writers)])  # start the worker processes first
    start_at = time.time() + 2.0
    results = ray.get(
        [
            remote.remote(path, w, commits_per_writer, rows_per_commit, start_at)
            for w in range(writers)
        ]
    )
    seconds = max(r[2] for r in results) - min(r[1] for r in results)
    commits = writers * commits_per_writer
    resolved = sum(1 for per_writer, _, _ in results for count in per_writer if count)
    say(
        f"writers     {writers} Ray tasks x {commits_per_writer} appends: {commits} commits"
        f" in {seconds:.2f} s ({commits / seconds:.0f} commits/s)"
    )
    say(f"conflicts   {resolved} commits lost a race and were rebased by the TableActor, 0 failed")

    spark_line = _spark_append(path, rows_per_commit) if spark else "skipped (--no-spark)"
    say(f"spark       {spark_line}")

    # through the actor handle, as a notebook would: small shards, so several sidecars
    summary = ray.get(
        table.checkpoint_actor.checkpoint.remote(kind="v2", target_actions_per_sidecar=16)
    )
    say(
        f"checkpoint  v{summary.version}: {summary.sidecars_written} sidecars written by Ray tasks"
        f" ({summary.num_adds} files) in {summary.seconds:.2f} s"
    )
    report = table.vacuum()
    say(f"vacuum      dry run: {report.num_files} files would be deleted")

    say("history")
    for entry in list(table.history(limit=5)):
        say(f"  v{entry.version:<4} {entry.operation}")
    rows = table.to_arrow()
    say(f"rows        {rows.num_rows} in {table.snapshot().num_files} files")
    say(f"peer        {_deltalake_check(path, rows)}")
    say(f"open it     raydelta.open_table({path!r})")
    return {
        "version_before": start_version,
        "version": table.version(),
        "commits": commits,
        "seconds": seconds,
        "commits_per_second": commits / seconds,
        "rebased": resolved,
        "rows": rows.num_rows,
        "spark": spark_line,
        "sidecars": summary.sidecars_written,
        "vacuum_files": report.num_files,
    }


def _demo(args: argparse.Namespace) -> int:
    run_demo(args.dir, writers=args.writers, spark=not args.no_spark)
    return 0


def register(subparsers: Any, command: Callable[[str], Callable[[Any], Any]]) -> None:
    """Add ``demo`` to the ``raydelta`` parser (see :mod:`raydelta.cli`)."""
    parser = subparsers.add_parser(
        "demo", help="run the product end to end on a local Ray cluster and directory"
    )
    parser.add_argument("dir", nargs="?", default="raydelta-demo")
    parser.add_argument("--writers", type=int, default=8, help="concurrent Ray writers")
    parser.add_argument("--no-spark", action="store_true", help="skip the PySpark append")
    command("demo")(_demo)
