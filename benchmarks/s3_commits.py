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

The writers, the runs and the checks are :mod:`benchmarks.commit_throughput`'s
(:func:`~benchmarks.commit_throughput.ours_levels`,
:func:`~benchmarks.commit_throughput.peer_levels`,
:func:`~benchmarks.commit_throughput.check_log`), given S3 table URIs, the
storage options and a reader of the log in S3; this module adds those and
its own report.

Goal at 8 writers: ours >= 10x delta-rs commits/s, 0 failed, 0 lost. Also
reported: the single writer's commit latency p50 of both engines.
``ratio`` = ours / peer in commits/s at 8 writers (higher is better).

Run: ``python -m benchmarks.s3_commits [--levels 1 8] [--seconds 8]``.
Writes ``benchmarks/results/s3_commits.json``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import Any

from benchmarks.commit_throughput import (
    _print_level,
    _sound,
    check_log,
    ours_levels,
    peer_levels,
)
from benchmarks.common import measure_once, print_ratio, write_result

NAME = "s3_commits"
GOAL_RATIO = 10.0
GOAL_LEVEL = 8


# --- the runs: commit_throughput's, on S3 -------------------------------------------------


def ours_run(
    bucket: str, options: dict[str, str], levels: list[int], seconds: float
) -> dict[str, Any]:
    """:func:`benchmarks.commit_throughput.ours_levels` on ``s3://bucket/ours-<level>``
    (``Table.append``, ``open_table``'s default transport)."""
    return ours_levels(
        lambda level: f"s3://{bucket}/ours-{level}",
        levels,
        seconds,
        use_channel=None,
        storage_options=options,
        read_commits=lambda uri: s3_commits(uri, options),
    )


def peer_run(
    bucket: str, options: dict[str, str], levels: list[int], seconds: float
) -> dict[str, Any]:
    """:func:`benchmarks.commit_throughput.peer_levels` on ``s3://bucket/peer-<level>``
    (delta-rs's default hooks)."""
    return peer_levels(
        lambda level: f"s3://{bucket}/peer-{level}",
        levels,
        seconds,
        checkpoints=True,
        storage_options=options,
        read_commits=lambda uri: s3_commits(uri, options),
        barrier_timeout_s=300.0,
        start_skew=False,
    )


# --- checking -----------------------------------------------------------------------------


def s3_commits(uri: str, options: dict[str, str]) -> Iterator[tuple[int, list[str]]]:
    """``(version, lines)`` of each commit of the table's log, read through our log store."""
    from raydelta.protocol.file_names import LogFileKind
    from raydelta.storage.log.store import log_store_for

    store = log_store_for(uri, options)
    commits = [f for f in store.list_from(0) if f.kind is LogFileKind.COMMIT]
    for commit, body in zip(commits, store.read_many([f.name for f in commits]), strict=True):
        assert commit.version is not None
        yield commit.version, body.decode().splitlines()


def verify_log(
    uri: str,
    options: dict[str, str],
    records: list[dict[str, Any]],
    warmup_paths: list[str],
    *,
    id_key: str,
) -> dict[str, Any]:
    """The checks of :func:`benchmarks.commit_throughput.check_log`, on the log in S3."""
    return check_log(s3_commits(uri, options), records, warmup_paths, id_key=id_key)


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
            setup="benchmarks.commit_throughput:ours_setup",
            timeout_s=budget,
        )
        print(f"delta-rs: {ns.levels} writers x {ns.seconds:g} s ...", flush=True)
        peer_m = measure_once(
            "benchmarks.s3_commits:peer_run",
            (server.new_bucket("peer"), options, ns.levels, ns.seconds),
            setup="benchmarks.commit_throughput:peer_setup",
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
