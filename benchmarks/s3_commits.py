"""Benchmark: concurrent commits to one table on S3 (moto's server on loopback).

Work: ``N`` writer processes each commit 1-file blind appends, one at a time,
for ``--seconds`` seconds, to one fresh table per engine and level, on the
same local S3 server (``tests/s3_server.py``: moto, conditional writes made
atomic), at 1 and 8 writers:

- ours: each writer is a Ray actor looping ``table.append_files(AddFile(...))``
  on ``open_table(uri, storage_options=...)``; every commit goes through the
  table's one ``TableActor``, which writes ``<v>.json`` with a conditional
  ``PutObject`` (``If-None-Match: *``);
- peer (delta-rs): each writer is a process looping ``dt.update_incremental();
  dt.create_write_transaction(...)`` with deltalake's S3 defaults (conditional
  put, 15 commit retries, post-commit hooks). A commit that raises counts as
  failed.

Both sides get the deltalake-style ``AWS_*`` storage options. Every commit
carries a unique id and adds a unique path; after the run the table's log is
read back from S3 and every acknowledged commit must be in it exactly once
(``lost``/``duplicated`` as in :mod:`benchmarks.commit_throughput`).

Goal at 8 writers: ours >= 10x delta-rs commits/s, 0 failed, 0 lost. Also
reported: the single writer's commit latency p50 of both engines.
``ratio`` = ours / peer in commits/s at 8 writers (higher is better).

Run: ``python -m benchmarks.s3_commits [--levels 1 8] [--seconds 8]``.
Writes ``benchmarks/results/s3_commits.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from benchmarks.commit_throughput import (
    START_DELAY_S,
    OursWriter,
    _peer_commit_one,
    _print_level,
    _sound,
    summarise,
)
from benchmarks.common import measure_once, print_ratio, write_result
from raydelta.actors.cluster import NAMESPACE

NAME = "s3_commits"
GOAL_RATIO = 10.0
GOAL_LEVEL = 8


# --- ours ---------------------------------------------------------------------------------


class S3OursWriter(OursWriter):
    """:class:`benchmarks.commit_throughput.OursWriter` on a table opened with options."""

    def __init__(self, uri: str, writer_id: int, options: dict[str, str]) -> None:
        super().__init__(uri, writer_id)
        self.options = options

    def prepare(self) -> str:
        from raydelta.actors.table.client import open_table

        self.table = open_table(self.uri, storage_options=self.options)
        record = self._commit_one("warmup")
        if not record["ok"]:
            raise RuntimeError(f"warm-up commit failed: {record['error']}")
        return str(record["path"])


def ours_setup() -> None:
    import pyarrow  # noqa: F401
    import ray  # noqa: F401

    import raydelta.actors.table.client  # noqa: F401


def ours_run(bucket: str, options: dict[str, str], levels: list[int], seconds: float) -> Any:
    import pyarrow as pa
    import ray

    from raydelta.actors.table.client import create_table

    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    writer_class: Any = ray.remote(num_cpus=0, max_restarts=0)(S3OursWriter)
    out: dict[str, Any] = {}
    try:
        for level in levels:
            uri = f"s3://{bucket}/ours-{level}"
            table = create_table(
                uri, schema=pa.schema([("id", pa.int64())]), storage_options=options
            )
            writers = [writer_class.remote(uri, i, options) for i in range(level)]
            warmup_paths = ray.get([w.prepare.remote() for w in writers])
            start_at = time.time() + START_DELAY_S
            per_writer = ray.get([w.run.remote(start_at, seconds) for w in writers])
            for writer in writers:
                ray.kill(writer)
            ray.kill(table.actor)
            records = [r for rs in per_writer for r in rs]
            check = verify_log(uri, options, records, warmup_paths, id_key="txnId")
            out[str(level)] = summarise(records, start_at, check)
    finally:
        ray.shutdown()
    return out


# --- delta-rs -----------------------------------------------------------------------------


def _peer_writer(
    uri: str, options: dict[str, str], writer_id: int, seconds: float, barrier: Any, queue: Any
) -> None:
    from deltalake import DeltaTable, Schema

    dt = DeltaTable(uri, storage_options=options)
    schema = Schema.from_arrow(dt.schema().to_arrow())
    warmup = _peer_commit_one(dt, schema, None, writer_id, "warmup")
    barrier.wait()
    start_at = time.time()
    deadline = start_at + seconds
    records = []
    count = 0
    while time.time() < deadline:
        records.append(_peer_commit_one(dt, schema, None, writer_id, str(count)))
        count += 1
    queue.put({"warmup": warmup, "records": records, "start_at": start_at})


def peer_setup() -> None:
    import deltalake  # noqa: F401
    import pyarrow  # noqa: F401


def peer_run(bucket: str, options: dict[str, str], levels: list[int], seconds: float) -> Any:
    import multiprocessing as mp

    import pyarrow as pa
    from deltalake import DeltaTable

    ctx = mp.get_context("spawn")
    out: dict[str, Any] = {}
    for level in levels:
        uri = f"s3://{bucket}/peer-{level}"
        DeltaTable.create(uri, schema=pa.schema([("id", pa.int64())]), storage_options=options)
        barrier = ctx.Barrier(level + 1)
        queue = ctx.Queue()
        procs = [
            ctx.Process(target=_peer_writer, args=(uri, options, i, seconds, barrier, queue))
            for i in range(level)
        ]
        for proc in procs:
            proc.start()
        barrier.wait(timeout=300)
        bodies = [queue.get(timeout=seconds + 300) for _ in procs]
        for proc in procs:
            proc.join()
        warmups = [b["warmup"] for b in bodies]
        records = [r for b in bodies for r in b["records"]]
        warmup_paths = [w["path"] for w in warmups if w["ok"]]
        check = verify_log(uri, options, records, warmup_paths, id_key="benchTxnId")
        summary = summarise(records, min(b["start_at"] for b in bodies), check)
        summary["failed_warmups"] = sum(1 for w in warmups if not w["ok"])
        out[str(level)] = summary
    return out


# --- checking -----------------------------------------------------------------------------


def verify_log(
    uri: str,
    options: dict[str, str],
    records: list[dict[str, Any]],
    warmup_paths: list[str],
    *,
    id_key: str,
) -> dict[str, Any]:
    """The checks of :func:`benchmarks.commit_throughput.verify_log`, on the log in S3."""
    from raydelta.protocol.file_names import LogFileKind
    from raydelta.storage.log.store import log_store_for

    store = log_store_for(uri, options)
    commits = [f for f in store.list_from(0) if f.kind is LogFileKind.COMMIT]
    versions = [f.version for f in commits]
    path_versions: dict[str, list[int]] = {}
    path_ids: dict[str, str | None] = {}
    for commit, body in zip(commits, store.read_many([f.name for f in commits]), strict=True):
        commit_id: str | None = None
        adds: list[str] = []
        for line in body.decode().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "commitInfo" in action:
                commit_id = action["commitInfo"].get(id_key)
            elif "add" in action:
                adds.append(action["add"]["path"])
        for add in adds:
            assert commit.version is not None
            path_versions.setdefault(add, []).append(commit.version)
            path_ids[add] = commit_id
    lost = [
        r["path"]
        for r in records
        if r["ok"]
        and (
            not path_versions.get(r["path"])
            or (r["version"] is not None and r["version"] not in path_versions[r["path"]])
            or path_ids.get(r["path"]) != r["txn_id"]
        )
    ]
    failed_present = [r["path"] for r in records if not r["ok"] and r["path"] in path_versions]
    duplicated = [p for p, vs in path_versions.items() if len(vs) > 1]
    expected_commits = 1 + len(warmup_paths) + sum(1 for r in records if r["ok"])
    return {
        "log_versions": len(versions),
        "latest_version": versions[-1] if versions else -1,
        "versions_contiguous": versions == list(range(len(versions))),
        "expected_commits": expected_commits,
        "unexpected_commits": len(versions) - expected_commits,
        "lost": len(lost),
        "lost_examples": lost[:5],
        "duplicated": len(duplicated),
        "failed_but_present": len(failed_present),
        "warmups_missing": sum(1 for p in warmup_paths if p not in path_versions),
    }


# --- driver -------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, GOAL_LEVEL])
    parser.add_argument("--seconds", type=float, default=8.0, help="per level and engine")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)

    from tests.s3_server import start_s3_server

    server = start_s3_server()
    budget = len(ns.levels) * (ns.seconds + 180) + 180
    try:
        options = server.aws_options
        print(f"ours: {ns.levels} writers x {ns.seconds:g} s on {server.endpoint} ...", flush=True)
        ours_m = measure_once(
            "benchmarks.s3_commits:ours_run",
            (server.new_bucket("ours"), options, ns.levels, ns.seconds),
            setup="benchmarks.s3_commits:ours_setup",
            timeout_s=budget,
        )
        print(f"delta-rs: {ns.levels} writers x {ns.seconds:g} s ...", flush=True)
        peer_m = measure_once(
            "benchmarks.s3_commits:peer_run",
            (server.new_bucket("peer"), options, ns.levels, ns.seconds),
            setup="benchmarks.s3_commits:peer_setup",
            timeout_s=budget,
        )
    finally:
        server.stop()
    ours: dict[str, Any] = ours_m.result
    peer: dict[str, Any] = peer_m.result

    print()
    print(
        f"{'engine':<19} {'N':>3} {'commits/s':>10} {'commits':>8} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'failed':>7} {'lost':>5} {'dup':>5} {'contiguous':>10}"
    )
    for level in map(str, ns.levels):
        _print_level("raydelta", level, ours[level])
        _print_level("delta-rs", level, peer[level])
    key = str(GOAL_LEVEL) if str(GOAL_LEVEL) in ours else str(max(ns.levels))
    single = str(min(ns.levels))
    o, p = ours[key], peer[key]
    ratio = print_ratio(
        f"{NAME} @ {key} writers",
        ours=o["commits_per_s"],
        peer=p["commits_per_s"],
        unit="commits/s",
        goal=GOAL_RATIO,
        higher_is_better=True,
    )
    latency_ratio = print_ratio(
        f"{NAME} latency p50 @ {single} writer",
        ours=ours[single]["latency"]["p50_ms"],
        peer=peer[single]["latency"]["p50_ms"],
        unit="ms",
    )
    sound = _sound(ours)
    goal_met = ratio >= GOAL_RATIO and o["failed"] == 0 and o["lost"] == 0 and sound
    print(
        f"goal (>= {GOAL_RATIO:g}x at {key} writers, 0 failed, 0 lost): "
        f"{'MET' if goal_met else 'NOT MET'}"
    )
    if ns.no_write:
        return 0 if sound else 1
    path = write_result(
        NAME,
        {
            "unit": "commits/s",
            "ours": o["commits_per_s"],
            "peer": p["commits_per_s"],
            "ratio": ratio,
            "higher_is_better": True,
            "statistic": f"acknowledged commits/s at {key} concurrent writer processes, "
            "one table on moto's S3 server on loopback",
            "goal": f"ours >= {GOAL_RATIO:g}x delta-rs commits/s at {GOAL_LEVEL} writers,"
            " 0 failed, 0 lost",
            "goal_ratio": GOAL_RATIO,
            "goal_met": goal_met,
            "peer_name": "deltalake (delta-rs) update_incremental + create_write_transaction"
            " on S3 (conditional put, default hooks)",
            "seconds_per_level": ns.seconds,
            "single_writer_latency_p50_ms": {
                "ours": ours[single]["latency"]["p50_ms"],
                "peer": peer[single]["latency"]["p50_ms"],
                "ratio": latency_ratio,
            },
            "sound": {"ours": sound, "peer": _sound(peer)},
            "levels": {
                level: {"ours": ours[level], "peer": peer[level]} for level in map(str, ns.levels)
            },
            "wall_s": {"ours": ours_m.seconds, "peer": peer_m.seconds},
        },
    )
    print(f"wrote {path}")
    return 0 if sound else 1


if __name__ == "__main__":
    sys.exit(main())
