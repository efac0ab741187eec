"""Benchmark: how cost grows with table size, 100k to 10M files (issue 15's series).

For each size the table of :mod:`benchmarks.huge_table_build` (partitioned,
full stats, 5% of files with deletion vectors, a checkpoint + 100 commits;
built once and cached under ``~/.cache/raydelta-bench``) is measured, every
step in its own fresh process, peak RSS (``VmHWM``) read by each process
itself (driver, actor, Ray workers):

- ``snapshot``: cold ``load_snapshot`` (version, protocol, metadata, counts,
  txns, domains; the file list held as Arrow); ``head``: ``load_table_head``
  (the same without the file list and counts); at <= 1M files delta-rs
  ``DeltaTable(uri)`` + ``get_add_actions(flatten=True)`` on the same table;
- ``state``: the same state with the file list counted in a stream, never
  held (:func:`state_counts`: ``load_table_head`` + ``count_live_files``);
- ``scan``: the whole file list walked in Arrow batches (:func:`scan_files`:
  the engine's ``iter_live_files`` when it has one);
- ``commit``: ``open_table`` (the actor loads the table), one warm-up commit,
  then timed 1-file blind appends; the actor's RSS comes from the actor;
- ``checkpoint``: a full V2 checkpoint (sidecars written by Ray tasks) on a
  local 2-CPU Ray (``benchmarks.checkpoint``), then on a local cluster of 1,
  2, 4 one-CPU worker nodes (``benchmarks.checkpoint_cluster``); the limit:
  pyarrow writing the same rows (read back from our sidecars) with the
  writer settings our checkpoint writer uses (``parquet_write_options``);
- ``vacuum``: dry-run lite and full on the table (its data files are not on
  disk: this is the log side of vacuum); at 100k and 1M also ours vs delta-rs
  on ``benchmarks.vacuum``'s table of real files.

Every checkpoint is read back: at <= 1M files its live files must equal a
full replay's (path, deletion vector, size, stats), above only the counts
(a replay of 10M files would not fit next to the other engineers' work).

Checkpoint layouts (issue 32): ``--layouts auto,64k,1m,1mx10`` measures
each size once per layout of its source checkpoint: ``auto`` is the
builder's own (row groups sized by bytes, one file), ``64k`` / ``1m`` one
file of 65,536- / 1,000,000-row groups, ``<rows>x<parts>`` a multi-part
checkpoint of that many parts. A layout other than ``auto`` is recorded in
each of its rows (``checkpoint_layout``, with the files' measured row groups
under ``tables``) and suffixes its steps (``snapshot@1m``, ``checkpoint@1mx10``).

Top-level ``unit``/``ours``/``peer``/``ratio``: the 1M-file cold snapshot's
peak RSS, ours vs delta-rs (goal ratio <= 0.75).

Run: ``python -m benchmarks.huge_table --sizes 100k,1m,3m,10m``;
``--markdown`` prints the result's README table, ``--resummarise`` recomputes
its summary (goals, growth, extrapolation) from its rows.
Writes ``benchmarks/results/huge_table.json``. Only the standard library
and :mod:`benchmarks.common` are imported at top level (children import it).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import measure_once, write_result

NAME = "huge_table"
GOAL_RSS_RATIO = 0.75
PEER_MAX_FILES = 1_000_000
"""delta-rs and the full-content checkpoint check run up to this size."""
TABLE_ENV = "RAYDELTA_BENCH_TABLE"
SIDECARS_ENV = "RAYDELTA_BENCH_SIDECARS"
SCAN_BATCH_ROWS = 65_536
SUFFIXES = {"k": 1_000, "m": 1_000_000}


def parse_size(text: str) -> int:
    """``"100k"`` -> 100000, ``"10m"`` -> 10000000, ``"2500"`` -> 2500."""
    text = text.strip().lower()
    if text and text[-1] in SUFFIXES:
        return int(float(text[:-1]) * SUFFIXES[text[-1]])
    return int(text)


def size_label(num_files: int) -> str:
    if num_files % 1_000_000 == 0:
        return f"{num_files // 1_000_000}m"
    if num_files % 1_000 == 0:
        return f"{num_files // 1_000}k"
    return str(num_files)


def peak_rss_mb() -> float:
    from raydelta.actors.checkpoint.process_memory import peak_rss_mb as own_peak

    return own_peak()


# --- children: the table, snapshot, scan --------------------------------------------------


def build_child(params_json: str) -> dict[str, Any]:
    from benchmarks.huge_table_build import cached_table

    return cached_table(json.loads(params_json))


def snapshot_setup() -> None:
    import pyarrow  # noqa: F401

    import raydelta.storage.snapshot  # noqa: F401


def snapshot_state(uri: str) -> dict[str, Any]:
    """Cold snapshot: everything a reader asks first, as our engine loads it."""
    from raydelta.storage.snapshot import load_snapshot

    snapshot = load_snapshot(uri)
    return {
        "version": snapshot.version,
        "protocol": snapshot.protocol.model_dump(by_alias=True, exclude_none=True),
        "metadata_id": snapshot.metadata.id,
        "partition_columns": list(snapshot.metadata.partition_columns),
        "num_files": snapshot.num_files,
        "txns": snapshot.txns,
        "domains": sorted(snapshot.domains),
        "files_arrow_mb": snapshot.files.nbytes / 1e6,
        "peak_rss_mb": peak_rss_mb(),
    }


def head_state(uri: str) -> dict[str, Any]:
    """Protocol, metadata, txns and domains without the file list."""
    from raydelta.storage.snapshot import load_table_head

    head = load_table_head(uri)
    return {
        "version": head.version,
        "txns": {app: txn.version for app, txn in head.txns.items()},
        "domains": sorted(head.domains),
        "peak_rss_mb": peak_rss_mb(),
    }


def deltalake_setup() -> None:
    import deltalake  # noqa: F401
    import pyarrow  # noqa: F401


def deltalake_snapshot(uri: str) -> dict[str, Any]:
    """delta-rs's cold snapshot with its file list, as ``benchmarks.snapshot_load`` does."""
    import pyarrow as pa
    from deltalake import DeltaTable

    table = DeltaTable(uri)
    actions = pa.table(table.get_add_actions(flatten=True))
    return {
        "version": table.version(),
        "num_files": actions.num_rows,
        "peak_rss_mb": peak_rss_mb(),
    }


def _live_file_batches(uri: str, columns: list[str], batch_rows: int) -> tuple[bool, Any]:
    """(streamed, batches): the engine's streamed scan when it has one
    (``raydelta.storage.live_files.iter_live_files``), else the loaded snapshot's
    file table cut into batches."""
    try:
        from raydelta.storage.live_files import iter_live_files
    except ImportError:
        from raydelta.storage.snapshot import load_snapshot

        files = load_snapshot(uri).files.select(columns)
        return False, files.to_batches(max_chunksize=batch_rows)
    return True, iter_live_files(uri, columns=columns, batch_rows=batch_rows)


def scan_files(uri: str, batch_rows: int = SCAN_BATCH_ROWS) -> dict[str, Any]:
    """Walk every live file in Arrow batches; what a planner reads (paths, sizes,
    deletion vectors, the stats' ``numRecords``), totals returned for checks."""
    import pyarrow.compute as pc

    started = time.perf_counter()
    columns = ["path", "size", "deletionVector", "stats"]
    streamed, batches = _live_file_batches(uri, columns, batch_rows)
    rows = count = total_bytes = dv_files = records = largest = 0
    for batch in batches:
        count += 1
        rows += batch.num_rows
        largest = max(largest, batch.num_rows)
        total_bytes += int(pc.sum(batch.column("size")).as_py() or 0)
        dv_files += int(pc.sum(pc.is_valid(batch.column("deletionVector"))).as_py() or 0)
        numbers = pc.extract_regex(batch.column("stats"), r'"numRecords":(?P<n>\d+)')
        records += int(pc.sum(pc.cast(pc.struct_field(numbers, [0]), "int64")).as_py() or 0)
    return {
        "streamed": streamed,
        "source": "raydelta.storage.live_files.iter_live_files"
        if streamed
        else "load_snapshot(uri).files.to_batches()",
        "num_files": rows,
        "num_batches": count,
        "largest_batch_rows": largest,
        "bytes": total_bytes,
        "num_dv_files": dv_files,
        "num_records": records,
        "walk_s": time.perf_counter() - started,
        "peak_rss_mb": peak_rss_mb(),
    }


def state_counts(uri: str) -> dict[str, Any]:
    """The state without the file list in memory: head + a streamed count of the
    live files (``load_snapshot`` when the engine has no streamed scan)."""
    from raydelta.storage.snapshot import load_table_head

    try:
        from raydelta.storage.live_files import count_live_files
    except ImportError:
        return {**snapshot_state(uri), "streamed": False}
    head = load_table_head(uri)
    num_files = count_live_files(uri, version=head.version)
    return {
        "version": head.version,
        "protocol": head.protocol.model_dump(by_alias=True, exclude_none=True)
        if head.protocol is not None
        else None,
        "num_files": num_files,
        "txns": {app: txn.version for app, txn in head.txns.items()},
        "domains": sorted(head.domains),
        "streamed": True,
        "peak_rss_mb": peak_rss_mb(),
    }


# --- children: one commit -----------------------------------------------------------------


def commit_setup() -> None:
    import ray  # noqa: F401

    import raydelta.actors.table.client  # noqa: F401


def _actor_memory(table: Any) -> dict[str, Any]:
    import ray

    def report(_self: Any) -> dict[str, Any]:
        import os as os_
        import socket

        from raydelta.actors.checkpoint.process_memory import memory_mb
        from raydelta.actors.checkpoint.process_memory import peak_rss_mb as own_peak

        return {
            "pid": os_.getpid(),
            "host": socket.gethostname(),
            "peak_rss_mb": own_peak(),
            "now_mb": memory_mb(),
        }

    result: dict[str, Any] = ray.get(table.actor.__ray_call__.remote(report))
    return result


def new_add_file(tag: str) -> Any:
    """A 1-file blind append into one partition of the table (stats like the builder's)."""
    import uuid

    from benchmarks.large_table_commit import STATS
    from benchmarks.table_builder import PARTITION_COLUMN
    from raydelta.protocol.actions import AddFile

    part = "00007"
    return AddFile(
        path=f"{PARTITION_COLUMN}={part}/bench-{tag}-{uuid.uuid4().hex}.parquet",
        partitionValues={PARTITION_COLUMN: part},
        size=1024,
        modificationTime=int(time.time() * 1000),
        dataChange=True,
        stats=STATS,
    )


def commit_run(uri: str, repeat: int, expected_version: int, expected_files: int) -> dict[str, Any]:
    """Open (the actor loads the table), one warm-up commit, ``repeat`` timed commits."""
    import ray

    from raydelta.actors.cluster import NAMESPACE
    from raydelta.actors.table.client import TableClient

    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    try:
        started = time.perf_counter()
        table = TableClient.open(uri)
        loaded_version = ray.get(table.actor.ping.remote())
        load_s = time.perf_counter() - started
        if loaded_version != expected_version:
            raise RuntimeError(f"actor loaded v{loaded_version}, expected v{expected_version}")
        started = time.perf_counter()
        version = table.transaction().add(new_add_file("warmup")).commit()
        first_s = time.perf_counter() - started
        commit_s: list[float] = []
        for i in range(repeat):
            txn = table.transaction().add(new_add_file(str(i)))
            started = time.perf_counter()
            version = txn.commit()
            commit_s.append(time.perf_counter() - started)
        snapshot = table.snapshot()
        if (snapshot.version, snapshot.num_files) != (version, expected_files + repeat + 1):
            raise RuntimeError(f"after commits: v{snapshot.version}, {snapshot.num_files} files")
        return {
            "actor_load_s": load_s,
            "first_commit_s": first_s,
            "commit_s": commit_s,
            "median_commit_s": statistics.median(commit_s),
            "version": version,
            "num_files": snapshot.num_files,
            "actor": _actor_memory(table),
            "peak_rss_mb": peak_rss_mb(),
        }
    finally:
        ray.shutdown()


# --- children: the checkpoint's limit and check --------------------------------------------

_ROWS: Any = None


def limit_setup() -> None:
    """Our sidecars' rows, read back into one table (untimed)."""
    global _ROWS
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = json.loads(os.environ[SIDECARS_ENV])
    # chunks kept as read (one per sidecar row group): no second copy of the rows
    _ROWS = pa.concat_tables([pq.read_table(p) for p in paths])


def limit_write(out: str) -> dict[str, Any]:
    """pyarrow writes the rows in one file with our checkpoint writer's settings."""
    import pyarrow.parquet as pq

    from raydelta.storage.checkpoint.writer import parquet_write_options

    options = parquet_write_options(_ROWS.schema)
    pq.write_table(_ROWS, out, **options)
    return {
        "rows": _ROWS.num_rows,
        "bytes": os.path.getsize(out),
        "options": {k: v for k, v in options.items() if k != "use_dictionary"},
        "peak_rss_mb": peak_rss_mb(),
    }


def _live_digest(files: Any) -> dict[str, Any]:
    """Order-free digest of live files: path, DV id, size, stats."""
    import hashlib

    import pyarrow as pa
    import pyarrow.compute as pc

    dv = files.column("deletionVector")
    dv_id = pc.if_else(
        pc.is_valid(dv),
        pc.binary_join_element_wise(
            pc.struct_field(dv, "storageType"),
            pc.struct_field(dv, "pathOrInlineDv"),
            pc.cast(pc.struct_field(dv, "offset"), pa.string()),
            "",
        ),
        pa.scalar("", pa.string()),
    )
    rows = pa.table(
        {
            "path": files.column("path"),
            "dv": dv_id,
            "size": files.column("size"),
            "stats": files.column("stats"),
        }
    ).sort_by([("path", "ascending"), ("dv", "ascending")])
    digest = hashlib.sha256()
    for batch in rows.to_batches(max_chunksize=100_000):
        for column in batch.columns:
            for buffer in column.buffers():
                if buffer is not None:
                    digest.update(buffer)
    return {"num_files": rows.num_rows, "sha256": digest.hexdigest()}


def replay_digest(uri: str) -> dict[str, Any]:
    """Digest of the live files of a table loaded from its log as it is."""
    from raydelta.storage.snapshot import load_snapshot

    snapshot = load_snapshot(uri)
    return {"version": snapshot.version, **_live_digest(snapshot.files)}


def verify_checkpoint(root: str, version: int, expected: dict[str, Any]) -> dict[str, Any]:
    """The V2 checkpoint at ``version`` alone (its commits deleted) gives the table.

    ``expected``: ``num_files`` and, for a full check, ``sha256`` from :func:`replay_digest`.
    """
    import pyarrow.parquet as pq

    from raydelta.protocol.file_names import commit_name
    from raydelta.storage.snapshot import load_snapshot

    log = Path(root) / "_delta_log"
    sidecars = sorted(str(p) for p in (log / "_sidecars").glob("*.parquet"))
    sidecar_rows = sum(pq.ParquetFile(p).metadata.num_rows for p in sidecars)
    out: dict[str, Any] = {"sidecars": sidecars, "sidecar_rows": sidecar_rows}
    if "sha256" not in expected:
        out["ok"] = sidecar_rows == expected["num_files"]
        out["check"] = "sidecar rows == live files"
        return out
    for v in range(version + 1):
        (log / commit_name(v)).unlink(missing_ok=True)
    snapshot = load_snapshot(Path(root).resolve().as_uri())
    assert snapshot.log_segment is not None and snapshot.log_segment.checkpoint is not None
    got = _live_digest(snapshot.files)
    out.update(got)
    out["check"] = "live files (path, dv, size, stats) == full replay's"
    out["checkpoint"] = snapshot.log_segment.checkpoint.files[0].name
    out["ok"] = snapshot.version == version and got == {
        "num_files": expected["num_files"],
        "sha256": expected["sha256"],
    }
    return out


# --- children: vacuum -----------------------------------------------------------------------


def vacuum_setup() -> None:
    import deltalake  # noqa: F401


def vacuum_run(uri: str, engine: str, mode: str) -> dict[str, Any]:
    """Dry-run vacuum through ``benchmarks.vacuum``'s targets, plus this process's peak."""
    import benchmarks.vacuum as bench

    target = {
        ("ours", "lite"): bench.ours_lite,
        ("ours", "full"): bench.ours_full,
        ("delta-rs", "lite"): bench.deltalake_lite,
        ("delta-rs", "full"): bench.deltalake_full,
    }[(engine, mode)]
    return {**target(uri), "peak_rss_mb": peak_rss_mb()}


def lite_dry_run_files(uri: str) -> dict[str, Any]:
    """How many files a lite VACUUM dry run must list on this table (no data
    files on disk): every removed path and every DV file only removed files
    name (a lite dry run, as delta-spark's, does not look at the disk).
    Replayed from the raw log (the builder's checkpoint holds adds only, every
    later commit is JSON; every remove is past the retention)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from raydelta.protocol.cleanup_rules import dv_file_path

    log = Path(uri.removeprefix("file://")) / "_delta_log"
    adds = pq.read_table(next(log.glob("*.checkpoint.parquet")), columns=["add"]).column("add")
    adds = adds.filter(pc.is_valid(adds)).combine_chunks()
    live_dv: dict[str, str] = {}
    for path, dv in zip(
        adds.field("path").to_pylist(), adds.field("deletionVector").to_pylist(), strict=True
    ):
        if dv is not None:
            live_dv[path] = dv_file_path(dv["storageType"], dv["pathOrInlineDv"])
    removed: set[str] = set()
    removed_dv: set[str] = set()
    for commit in sorted(p for p in log.glob("*.json") if ".checkpoint." not in p.name):
        if int(commit.name.split(".")[0]) <= 10:
            continue
        for line in commit.read_text().splitlines():
            action = json.loads(line)
            if "add" in action:
                live_dv.pop(action["add"]["path"], None)
            elif "remove" in action:
                remove = action["remove"]
                removed.add(remove["path"])
                live_dv.pop(remove["path"], None)
                dv = remove.get("deletionVector")
                if dv is not None:
                    removed_dv.add(dv_file_path(dv["storageType"], dv["pathOrInlineDv"]))
    return {"num_files": len(removed | (removed_dv - set(live_dv.values())))}


def vacuum_table_child(num_files: int) -> dict[str, Any]:
    """``benchmarks.vacuum``'s table of real files (built once, cached by it)."""
    from benchmarks.vacuum import cached_table

    # the partition count benchmarks/vacuum.py uses, so both share one cached table
    params = {"num_files": num_files, "num_partitions": max(1, num_files // 1000)}
    root, built = cached_table(params)
    return {"uri": root.resolve().as_uri(), **built}


# the parent side is in benchmarks.huge_table_series (kept apart: modules stay small)


def main(argv: list[str] | None = None) -> int:
    from benchmarks.huge_table_series import STEPS, parse_layout, run_series

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="100k,1m,3m,10m")
    parser.add_argument("--workers", default="1,2,4", help="worker node counts for checkpoints")
    parser.add_argument("--repeat", type=int, default=3, help="runs per step at <= 1M files")
    parser.add_argument("--commits", type=int, default=20, help="timed commits per size")
    parser.add_argument("--workdir", default=None, help="copies of the tables go here")
    parser.add_argument(
        "--steps",
        default=",".join(STEPS),
        help=f"steps to measure (of {','.join(STEPS)}); with --merge the others keep"
        " their recorded rows",
    )
    parser.add_argument(
        "--layouts",
        default="auto",
        help="source checkpoint layouts, e.g. auto,64k,1m,1mx10 (see the module docstring)",
    )
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--merge",
        action="store_true",
        help="keep the result file's rows of the sizes not measured now",
    )
    parser.add_argument(
        "--resummarise", action="store_true", help="recompute the result file's summary only"
    )
    parser.add_argument(
        "--markdown", action="store_true", help="print the result file's README table only"
    )
    ns = parser.parse_args(argv)
    if ns.resummarise or ns.markdown:
        from benchmarks.common import RESULTS_DIR
        from benchmarks.huge_table_report import render_markdown, resummarise

        path = RESULTS_DIR / f"{NAME}.json"
        if ns.resummarise:
            body = resummarise(path)
            body.pop("name", None)
            body.pop("machine", None)
            body.pop("recorded_at", None)
            previous = json.loads(path.read_text(encoding="utf-8"))
            path.write_text(json.dumps({**previous, **body}, indent=2) + "\n", encoding="utf-8")
        print(render_markdown(json.loads(path.read_text(encoding="utf-8"))))
        return 0
    sizes = [parse_size(s) for s in ns.sizes.split(",") if s.strip()]
    workers = [int(n) for n in ns.workers.split(",") if n.strip()]
    workdir = Path(ns.workdir or Path(tempfile.gettempdir()) / "raydelta-bench-huge")

    def save(result: dict[str, Any]) -> None:
        if not ns.no_write:
            print(f"wrote {write_result(NAME, result)}", flush=True)

    previous = None
    if ns.merge:
        from benchmarks.common import RESULTS_DIR

        previous = json.loads((RESULTS_DIR / f"{NAME}.json").read_text(encoding="utf-8"))
    try:
        layouts = [parse_layout(text) for text in ns.layouts.split(",") if text.strip()]
    except ValueError as exc:
        parser.error(str(exc))
    steps = [step for step in ns.steps.split(",") if step.strip()]
    unknown = sorted(set(steps) - set(STEPS))
    if unknown:
        parser.error(f"unknown steps {unknown}; steps are {list(STEPS)}")
    result = run_series(
        sizes,
        steps=steps,
        workers=workers,
        repeat=ns.repeat,
        commits=ns.commits,
        workdir=workdir,
        save=save,
        previous=previous,
        layouts=layouts,
    )
    failed = [c for c in result["checks"] if not c["ok"]]
    for check in failed:
        print(f"CHECK FAILED: {check}", file=sys.stderr)
    return 1 if failed else 0


def measure(
    work: str, args: tuple[Any, ...], *, setup: str | None = None, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``measure_once`` with this module's targets; the child's result plus its times."""
    m = measure_once(
        f"benchmarks.huge_table:{work}",
        args,
        setup=None if setup is None else f"benchmarks.huge_table:{setup}",
        env=env,
        timeout_s=7200,
    )
    return {**m.result, "seconds": m.seconds, "setup_seconds": m.setup_seconds}


if __name__ == "__main__":
    sys.exit(main())
