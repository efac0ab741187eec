"""Benchmark: commit throughput of 1, 4 and 8 concurrent blind-append writers.

Work: ``N`` writer processes each commit 1-file blind appends, one commit at a
time, for ``--seconds`` seconds, on a fresh table per engine and level:

- ours: each writer is a Ray actor (its own process) looping
  ``table.append_files(AddFile(...))`` (or, with ``--api transaction``,
  ``txn = table.transaction(); txn.add(AddFile(...)); txn.commit()``) on a
  handle from ``TableClient.open(uri, use_channel=...)``; all commits go through
  the table's one ``TableActor``. Once per transport (``--transports``),
  each in a fresh driver process: ``ray`` (plain Ray actor calls, the
  default transport) and ``channel`` (the opt-in commit channel,
  ``use_channel=True``: a direct authenticated socket to the actor,
  :mod:`raydelta.actors.table.channel`);
- peer (delta-rs): each writer is a ``multiprocessing`` process looping
  ``dt.update_incremental(); dt.create_write_transaction([AddAction(...)],
  "append", schema)`` with delta-rs's default commit retries (15) and
  post-commit hooks. A commit that raises counts as failed.

Every commit carries a unique id (ours: ``commitInfo.txnId``; delta-rs:
``commitInfo.benchTxnId`` via ``custom_metadata``) and adds a unique path.
After the run the final ``_delta_log`` is read back: a commit is **lost** when
it was acknowledged but its path/id is not in the log (ours: not at the
version it was acknowledged with), **duplicated** when its path is in more
than one commit. Versions must be contiguous.

Each engine runs in a fresh driver process (:func:`benchmarks.common.measure_once`).
Goal at 8 writers: ours >= 10x delta-rs commits/s, 0 failed, 0 lost.
``ours`` is the first transport listed (``ray`` by default); ``ratio`` = ours /
peer in commits/s (higher is better here); ``transports`` holds each
transport's numbers and ratio, and ``ray_over_channel`` the share of the
channel's commits/s that Ray calls reach (the issue's bar for deleting the
channel is 0.8).

Run: ``python -m benchmarks.commit_throughput [--levels 1 4 8] [--seconds 10]
[--transports ray channel]``.
Writes ``benchmarks/results/commit_throughput.json``.

Only the standard library and :mod:`benchmarks.common` are imported at top
level: the children import this module to find their targets.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from benchmarks.common import latency_stats, measure_once, print_ratio, write_result
from raydelta.actors.cluster import NAMESPACE

NAME = "commit_throughput"
GOAL_RATIO = 10.0
GOAL_LEVEL = 8
GOAL_COMMITS_PER_S = 2500.0
"""Issue 15: half the fsync floor's rate, 0 failed, 0 lost."""
TRANSPORTS = ("ray", "channel")
STATS = '{"numRecords":100,"minValues":{"id":0},"maxValues":{"id":99},"nullCount":{"id":0}}'
START_DELAY_S = 1.0
"""Writers are told to start this long after they are all ready."""


# --- our writers ------------------------------------------------------------------------


class OursWriter:
    """One writer process (a Ray actor): ``open_table`` + a commit loop.

    ``use_channel=None`` leaves the transport to ``open_table``'s default
    (``RAYDELTA_CHANNEL``); ``storage_options`` go to ``open_table``."""

    def __init__(
        self,
        uri: str,
        writer_id: int,
        api: str = "append",
        use_channel: bool | None = False,
        storage_options: dict[str, str] | None = None,
    ) -> None:
        self.uri = uri
        self.writer_id = writer_id
        self.api = api
        self.use_channel = use_channel
        self.storage_options = storage_options
        self.table: Any = None

    def prepare(self) -> str:
        """Import, open the table and make one warm-up commit (not counted)."""
        from raydelta.actors.table.client import TableClient

        self.table = TableClient.open(
            self.uri, storage_options=self.storage_options, use_channel=self.use_channel
        )
        record = self._commit_one("warmup")
        if not record["ok"]:
            raise RuntimeError(f"warm-up commit failed: {record['error']}")
        return str(record["path"])

    def _commit_one(self, tag: str) -> dict[str, Any]:
        from raydelta.protocol.actions import AddFile

        path = f"w{self.writer_id}-{tag}-{uuid.uuid4().hex}.parquet"
        add = AddFile(
            path=path,
            size=1024,
            modificationTime=int(time.time() * 1000),
            dataChange=True,
            stats=STATS,
        )
        txn_id = str(uuid.uuid4())
        begin = time.perf_counter()
        try:
            if self.api == "append":  # Table.append: one round trip, no read version
                call = begin
                version = self.table.append_files(add, txn_id=txn_id)
            else:  # transaction(): fetch the head, then commit
                txn = self.table.transaction()
                txn.add(add)
                txn_id = txn.txn_id
                call = time.perf_counter()
                version = txn.commit(operation="WRITE", operation_parameters={"mode": "Append"})
        except Exception as error:  # counted, never hidden
            return {
                "ok": False,
                "path": path,
                "error": f"{type(error).__name__}: {error}"[:300],
                "latency": time.perf_counter() - begin,
            }
        end = time.perf_counter()
        return {
            "ok": True,
            "path": path,
            "txn_id": txn_id,
            "version": version,
            "latency": end - begin,
            "commit_call": end - call,
            "end_wall": time.time(),
        }

    def run(self, start_at: float, seconds: float) -> list[dict[str, Any]]:
        """Commit one at a time from ``start_at`` (wall clock) for ``seconds``."""
        time.sleep(max(0.0, start_at - time.time()))
        deadline = start_at + seconds
        records = []
        count = 0
        while time.time() < deadline:
            records.append(self._commit_one(str(count)))
            count += 1
        return records


def ours_setup() -> None:
    import pyarrow  # noqa: F401
    import ray  # noqa: F401

    import raydelta.actors.table.client  # noqa: F401


def ours_run(
    root: str, levels: list[int], seconds: float, api: str = "append", transport: str = "ray"
) -> dict[str, Any]:
    """All levels in one Ray session; a fresh local table per level."""
    return ours_levels(
        lambda level: Path(root, f"ours-{transport}-{level}").resolve().as_uri(),
        levels,
        seconds,
        api=api,
        use_channel=transport == "channel",
        read_commits=lambda uri: local_commits(uri_path(uri)),
    )


def ours_levels(
    uri_of: Callable[[int], str],
    levels: list[int],
    seconds: float,
    *,
    api: str = "append",
    use_channel: bool | None = False,
    storage_options: dict[str, str] | None = None,
    read_commits: Callable[[str], Iterable[tuple[int, Iterable[str]]]],
) -> dict[str, Any]:
    """Our writers at every level, in one Ray session: a fresh table at
    ``uri_of(level)`` per level, its log read back by ``read_commits(uri)``
    (:func:`check_log`). The storage is the caller's: local folders here,
    S3 in :mod:`benchmarks.s3_commits`."""
    import pyarrow as pa
    import ray

    from raydelta.actors.table.client import TableClient, release_table

    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    writer_class: Any = ray.remote(num_cpus=0, max_restarts=0)(OursWriter)
    out: dict[str, Any] = {}
    try:
        for level in levels:
            uri = uri_of(level)
            table = TableClient.create(
                uri, schema=pa.schema([("id", pa.int64())]), storage_options=storage_options
            )
            writers = [
                writer_class.remote(uri, i, api, use_channel, storage_options) for i in range(level)
            ]
            warmup_paths = ray.get([w.prepare.remote() for w in writers])
            start_at = time.time() + START_DELAY_S
            per_writer = ray.get([w.run.remote(start_at, seconds) for w in writers])
            for writer in writers:
                ray.kill(writer)
            release_table(table.uri)  # its host deactivates it: memory back, log intact
            records = [r for rs in per_writer for r in rs]
            check = check_log(read_commits(uri), records, warmup_paths, id_key="txnId")
            out[str(level)] = summarise(records, start_at, check)
    finally:
        ray.shutdown()
    return out


# --- delta-rs writers -------------------------------------------------------------------


def _peer_commit_one(dt: Any, schema: Any, hooks: Any, writer_id: int, tag: str) -> dict[str, Any]:
    from deltalake.transaction import AddAction, CommitProperties

    path = f"w{writer_id}-{tag}-{uuid.uuid4().hex}.parquet"
    bench_id = str(uuid.uuid4())
    begin = time.perf_counter()
    try:
        dt.update_incremental()
        call = time.perf_counter()
        dt.create_write_transaction(
            [AddAction(path, 1024, {}, int(time.time() * 1000), True, STATS)],
            "append",
            schema,
            commit_properties=CommitProperties(custom_metadata={"benchTxnId": bench_id}),
            post_commithook_properties=hooks,
        )
    except Exception as error:  # counted, never hidden
        return {
            "ok": False,
            "path": path,
            "error": f"{type(error).__name__}: {error}"[:300],
            "latency": time.perf_counter() - begin,
        }
    end = time.perf_counter()
    return {
        "ok": True,
        "path": path,
        "txn_id": bench_id,
        "version": None,
        "latency": end - begin,
        "commit_call": end - call,
        "end_wall": time.time(),
    }


def _peer_writer(
    path: str,
    writer_id: int,
    seconds: float,
    checkpoints: bool,
    barrier: Any,
    queue: Any,
    storage_options: dict[str, str] | None = None,
) -> None:
    """A delta-rs writer process: warm up, wait for the others, commit for ``seconds``."""
    from deltalake import DeltaTable, Schema
    from deltalake.transaction import PostCommitHookProperties

    dt = DeltaTable(path, storage_options=storage_options)
    schema = Schema.from_arrow(dt.schema().to_arrow())
    hooks = None if checkpoints else PostCommitHookProperties(create_checkpoint=False)
    warmup = _peer_commit_one(dt, schema, hooks, writer_id, "warmup")
    barrier.wait()
    start_at = time.time()
    deadline = start_at + seconds
    records = []
    count = 0
    while time.time() < deadline:
        records.append(_peer_commit_one(dt, schema, hooks, writer_id, str(count)))
        count += 1
    queue.put({"warmup": warmup, "records": records, "start_at": start_at})


def peer_setup() -> None:
    import deltalake  # noqa: F401
    import pyarrow  # noqa: F401


def peer_run(root: str, levels: list[int], seconds: float, checkpoints: bool) -> dict[str, Any]:
    return peer_levels(
        lambda level: str(Path(root, f"peer-{level}").resolve()),
        levels,
        seconds,
        checkpoints=checkpoints,
        read_commits=local_commits,
    )


def peer_levels(
    uri_of: Callable[[int], str],
    levels: list[int],
    seconds: float,
    *,
    checkpoints: bool,
    storage_options: dict[str, str] | None = None,
    read_commits: Callable[[str], Iterable[tuple[int, Iterable[str]]]],
    barrier_timeout_s: float = 120.0,
    start_skew: bool = True,
) -> dict[str, Any]:
    """delta-rs's writers at every level (spawned processes), as
    :func:`ours_levels`; ``start_skew``: report ``start_skew_s``."""
    import multiprocessing as mp

    import pyarrow as pa
    from deltalake import DeltaTable

    ctx = mp.get_context("spawn")
    out: dict[str, Any] = {}
    for level in levels:
        path = uri_of(level)
        DeltaTable.create(
            path, schema=pa.schema([("id", pa.int64())]), storage_options=storage_options
        )
        barrier = ctx.Barrier(level + 1)
        queue = ctx.Queue()
        procs = [
            ctx.Process(
                target=_peer_writer,
                args=(path, i, seconds, checkpoints, barrier, queue, storage_options),
            )
            for i in range(level)
        ]
        for proc in procs:
            proc.start()
        barrier.wait(timeout=barrier_timeout_s)
        start_at = time.time()
        bodies = [queue.get(timeout=seconds + 300) for _ in procs]
        for proc in procs:
            proc.join()
        warmups = [b["warmup"] for b in bodies]
        failed_warmups = [w for w in warmups if not w["ok"]]
        records = [r for b in bodies for r in b["records"]]
        warmup_paths = [w["path"] for w in warmups if w["ok"]]
        check = check_log(read_commits(path), records, warmup_paths, id_key="benchTxnId")
        summary = summarise(records, min(b["start_at"] for b in bodies), check)
        summary["failed_warmups"] = len(failed_warmups)
        if start_skew:
            summary["start_skew_s"] = max(b["start_at"] for b in bodies) - start_at
        out[str(level)] = summary
    return out


# --- checking and summarising -----------------------------------------------------------


def uri_path(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def verify_log(
    table_path: str, records: list[dict[str, Any]], warmup_paths: list[str], *, id_key: str
) -> dict[str, Any]:
    """:func:`check_log` on the log of the local table at ``table_path``."""
    return check_log(local_commits(table_path), records, warmup_paths, id_key=id_key)


def local_commits(table_path: str) -> Iterator[tuple[int, list[str]]]:
    """``(version, lines)`` of each ``<version>.json`` in a local ``_delta_log``."""
    log = Path(table_path, "_delta_log")
    versions = sorted(int(p.name.split(".")[0]) for p in log.glob("*.json"))
    for version in versions:
        with open(log / f"{version:020d}.json", encoding="utf-8") as handle:
            lines = list(handle)
        yield version, lines


def check_log(
    commits: Iterable[tuple[int, Iterable[str]]],
    records: list[dict[str, Any]],
    warmup_paths: list[str],
    *,
    id_key: str,
) -> dict[str, Any]:
    """Check every writer's claims against the final log, ``(version, lines)``
    of each commit in version order (whatever storage it was read from).

    ``lost``: acknowledged, but its path is not in the log, or (when the writer
    was told a version) not in that version's file, or its id not with it.
    ``duplicated``: a path added by more than one commit.
    ``failed_but_present``: reported failed, yet its path is in the log.
    """
    versions: list[int] = []
    path_versions: dict[str, list[int]] = {}
    path_ids: dict[str, str | None] = {}
    for version, lines in commits:
        versions.append(version)
        commit_id: str | None = None
        adds: list[str] = []
        for line in lines:
            if not line.strip():
                continue
            action = json.loads(line)
            if "commitInfo" in action:
                commit_id = action["commitInfo"].get(id_key)
            elif "add" in action:
                adds.append(action["add"]["path"])
        for add in adds:
            path_versions.setdefault(add, []).append(version)
            path_ids[add] = commit_id
    lost = []
    for record in records:
        if not record["ok"]:
            continue
        found = path_versions.get(record["path"])
        if (
            not found
            or (record["version"] is not None and record["version"] not in found)
            or path_ids.get(record["path"]) != record["txn_id"]
        ):
            lost.append(record["path"])
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


def summarise(
    records: list[dict[str, Any]], start_at: float, check: dict[str, Any]
) -> dict[str, Any]:
    ok = [r for r in records if r["ok"]]
    failed = [r for r in records if not r["ok"]]
    elapsed = max((r["end_wall"] for r in ok), default=start_at) - start_at
    errors: dict[str, int] = {}
    for record in failed:
        kind = str(record["error"]).split(":", 1)[0]
        errors[kind] = errors.get(kind, 0) + 1
    return {
        "commits": len(ok),
        "failed": len(failed),
        "lost": check["lost"],
        "elapsed_s": elapsed,
        "commits_per_s": len(ok) / elapsed if elapsed > 0 else 0.0,
        "latency": latency_stats([r["latency"] for r in ok]),
        "commit_call_latency": latency_stats([r["commit_call"] for r in ok]),
        "failed_latency": latency_stats([r["latency"] for r in failed]),
        "errors": errors,
        "error_examples": [r["error"] for r in failed[:3]],
        "log_check": check,
    }


# --- driver -----------------------------------------------------------------------------


def _print_level(engine: str, level: str, s: dict[str, Any]) -> None:
    lat = s["latency"]
    check = s["log_check"]
    print(
        f"{engine:<19} {level:>3} {s['commits_per_s']:>10.1f} {s['commits']:>8}"
        f" {lat['p50_ms']:>8.1f} {lat['p99_ms']:>8.1f} {s['failed']:>7} {s['lost']:>5}"
        f" {check['duplicated']:>5} {'yes' if check['versions_contiguous'] else 'NO':>10}",
        flush=True,
    )


def _sound(levels: dict[str, Any]) -> bool:
    return all(
        s["failed"] == 0
        and s["lost"] == 0
        and s["log_check"]["duplicated"] == 0
        and s["log_check"]["versions_contiguous"]
        for s in levels.values()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--seconds", type=float, default=10.0, help="per level and engine")
    parser.add_argument(
        "--transports",
        nargs="+",
        choices=TRANSPORTS,
        default=["ray", "channel"],
        help="our transports, each in a fresh driver; the first is the headline `ours`",
    )
    parser.add_argument(
        "--peer-no-checkpoint",
        action="store_true",
        help="turn off delta-rs's post-commit checkpoint hook (default: delta-rs defaults)",
    )
    parser.add_argument(
        "--api",
        choices=["append", "transaction"],
        default="append",
        help="our blind-append path: Table.append (one round trip) or transaction()+commit()",
    )
    parser.add_argument("--keep", action="store_true", help="keep the tables written")
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)
    transports: list[str] = list(dict.fromkeys(ns.transports))

    load_before = list(os.getloadavg())
    root = tempfile.mkdtemp(prefix="raydelta-bench-throughput-")
    budget = len(ns.levels) * (ns.seconds + 120) + 120
    ours_ms: dict[str, Any] = {}
    try:
        for transport in transports:
            print(f"ours ({transport}): {ns.levels} writers x {ns.seconds:g} s ...", flush=True)
            ours_ms[transport] = measure_once(
                "benchmarks.commit_throughput:ours_run",
                (root, ns.levels, ns.seconds, ns.api, transport),
                setup="benchmarks.commit_throughput:ours_setup",
                timeout_s=budget,
            )
        print(f"delta-rs: {ns.levels} writers x {ns.seconds:g} s ...", flush=True)
        peer_m = measure_once(
            "benchmarks.commit_throughput:peer_run",
            (root, ns.levels, ns.seconds, not ns.peer_no_checkpoint),
            setup="benchmarks.commit_throughput:peer_setup",
            timeout_s=budget,
        )
    finally:
        if not ns.keep:
            shutil.rmtree(root, ignore_errors=True)
    by_transport: dict[str, dict[str, Any]] = {t: m.result for t, m in ours_ms.items()}
    peer: dict[str, Any] = peer_m.result

    print()
    print(
        f"{'engine':<19} {'N':>3} {'commits/s':>10} {'commits':>8} {'p50 ms':>8} {'p99 ms':>8}"
        f" {'failed':>7} {'lost':>5} {'dup':>5} {'contiguous':>10}"
    )
    for level in map(str, ns.levels):
        for transport, result in by_transport.items():
            _print_level(f"raydelta {transport}", level, result[level])
        _print_level("delta-rs", level, peer[level])
    headline = transports[0]
    ours = by_transport[headline]
    key = str(GOAL_LEVEL) if str(GOAL_LEVEL) in ours else str(max(ns.levels))
    o, p = ours[key], peer[key]
    ratios = {
        transport: print_ratio(
            f"{NAME} ({transport}) @ {key} writers",
            ours=result[key]["commits_per_s"],
            peer=p["commits_per_s"],
            unit="commits/s",
            goal=GOAL_RATIO,
            higher_is_better=True,
        )
        for transport, result in by_transport.items()
    }
    ratio = ratios[headline]
    ray_over_channel: float | None = None
    if "ray" in by_transport and "channel" in by_transport:
        channel_rate = by_transport["channel"][key]["commits_per_s"]
        ray_over_channel = by_transport["ray"][key]["commits_per_s"] / channel_rate
        print(
            f"ray calls reach {ray_over_channel:.0%} of the channel's commits/s at {key} writers"
            " (the bar for deleting the channel: 80%)"
        )
    sound = all(_sound(result) for result in by_transport.values())
    goal_met = ratio >= GOAL_RATIO and o["failed"] == 0 and o["lost"] == 0 and sound
    print(
        f"goal (>= {GOAL_RATIO:g}x at {key} writers, 0 failed, 0 lost, {headline}): "
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
            "statistic": f"acknowledged commits/s at {key} concurrent writer processes",
            "goal": f"ours >= {GOAL_RATIO:g}x delta-rs commits/s at {GOAL_LEVEL} writers,"
            " 0 failed, 0 lost",
            "goal_ratio": GOAL_RATIO,
            "goal_met": goal_met,
            "peer_name": "deltalake (delta-rs) update_incremental + create_write_transaction"
            + (" (checkpoint hook off)" if ns.peer_no_checkpoint else " (default hooks)"),
            "seconds_per_level": ns.seconds,
            "ours_api": ns.api,
            "ours_transport": headline,
            "transports": {
                transport: {
                    "commits_per_s": result[key]["commits_per_s"],
                    "ratio": ratios[transport],
                    "p50_ms": result[key]["latency"]["p50_ms"],
                    "sound": _sound(result),
                    "rate_goal_met": result[key]["commits_per_s"] >= GOAL_COMMITS_PER_S
                    and _sound(result),
                }
                for transport, result in by_transport.items()
            },
            "ray_over_channel": ray_over_channel,
            "rate_goal": f">= {GOAL_COMMITS_PER_S:g} commits/s at {GOAL_LEVEL} writers,"
            " 0 failed, 0 lost (issue 15)",
            "rate_goal_met": o["commits_per_s"] >= GOAL_COMMITS_PER_S and sound,
            "load_average_before": load_before,
            "levels": {
                level: {
                    **{f"ours_{t}": result[level] for t, result in by_transport.items()},
                    "ours": ours[level],
                    "peer": peer[level],
                }
                for level in map(str, ns.levels)
            },
            "peak_rss_mb": {
                **{f"ours_{t}_driver": m.peak_rss_mb for t, m in ours_ms.items()},
                "peer_driver": peer_m.peak_rss_mb,
            },
            "import_s": {
                **{f"ours_{t}": m.setup_seconds for t, m in ours_ms.items()},
                "peer": peer_m.setup_seconds,
            },
            "wall_s": {
                **{f"ours_{t}": m.seconds for t, m in ours_ms.items()},
                "peer": peer_m.seconds,
            },
        },
    )
    print(f"wrote {path}")
    return 0 if sound else 1


if __name__ == "__main__":
    sys.exit(main())
