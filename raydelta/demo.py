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


def _write_commits(uri: str, writer: int, commits: int, rows: int) -> list[int]:
    """One writer's appends; returns, per commit, how many winners it was rebased over."""
    import raydelta

    table = raydelta.open_table(uri)
    rebased = []
    for commit in range(commits):
        table.append(_batch(writer, commit, rows))
        reply = table.last_commit
        rebased.append(0 if reply is None else len(reply.rebased_over))
    return rebased


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
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("raydelta-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    try:
        register(spark)
        frame = spark.createDataFrame(_batch(99, 0, rows).to_pandas())
        frame.write.format("raydelta").mode("append").save(uri)
    finally:
        spark.stop()
    return f"appended {rows} rows through format('raydelta')"


def _deltalake_check(path: str, ours: pa.Table) -> str:
    if importlib.util.find_spec("deltalake") is None:
        return "skipped (deltalake is not installed)"
    from deltalake import DeltaTable

    theirs = pa.table(DeltaTable(path).to_pyarrow_table())
    same = sorted(theirs.column("id").to_pylist()) == sorted(ours.column("id").to_pylist())
    verdict = "the same rows" if same else "DIFFERENT rows"
    return f"deltalake {DeltaTable(path).version()} reads {theirs.num_rows} rows: {verdict}"


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
    began = time.perf_counter()
    rebased = ray.get(
        [remote.remote(path, w, commits_per_writer, rows_per_commit) for w in range(writers)]
    )
    seconds = time.perf_counter() - began
    commits = writers * commits_per_writer
    resolved = sum(1 for per_writer in rebased for count in per_writer if count)
    say(
        f"writers     {writers} Ray tasks x {commits_per_writer} appends: {commits} commits"
        f" in {seconds:.2f} s ({commits / seconds:.0f} commits/s)"
    )
    say(f"conflicts   {resolved} commits lost a race and were rebased by the TableActor, 0 failed")

    spark_line = _spark_append(path, rows_per_commit) if spark else "skipped (--no-spark)"
    say(f"spark       {spark_line}")

    summary = table.checkpoint(kind="v2")
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
