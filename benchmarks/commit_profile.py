"""Profile: where one commit's time goes, stage by stage, Ray call included.

One writer commits ``--commits`` 1-file blind appends (the request
``table.append_files`` sends) to a fresh local table, three ways:

- ``inline``: a :class:`~raydelta.actors.table.coordinator.CommitCoordinator` in
  this process, no Ray: the actor's own work alone;
- ``ray``: through the ``TableActor`` with plain Ray calls (the default);
- ``channel``: through the same actor over the opt-in commit channel.

Stages are timed by wrapping the functions the commit path calls (in the
actor's process for ``ray``/``channel``, installed through Ray's
``__ray_call__``): request validation (``validate_commit``), conflict check,
commitInfo + rebase, serialization (``serialize_actions``), the temp-file
write, its ``fsync``, the ``os.link`` that publishes the version, and the
in-memory apply. The rest of a call (client-observed latency minus the
actor's ``commit``) is the transport: Ray's task submission, argument and
reply (de)serialization, scheduling on the actor's thread, the lock. CPU
seconds per commit of the driver, the actor, the raylet and the GCS are read
from ``/proc`` around the timed commits, which bounds what 2 cores can do.
A ``cProfile`` of the actor's process (top functions by own time) is saved
in the result.

Run: ``python -m benchmarks.commit_profile [--commits 2000]``; writes
``benchmarks/results/commit_profile.json``. A profile, not a peer
comparison: ``ours`` is the Ray transport's p50 ms, ``peer`` the measured
put-if-absent-with-fsync floor's p50, ``ratio`` = ours / floor.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.common import latency_stats, write_result

NAME = "commit_profile"
WARMUP = 50
COUNTERS = ("groups", "grouped_requests")
STATS = '{"numRecords":100,"minValues":{"id":0},"maxValues":{"id":99},"nullCount":{"id":0}}'

STAGES = (
    ("validate", "raydelta.actors.table.coordinator", "validate_commit"),
    ("conflicts", "raydelta.actors.table.coordinator", "check_conflicts"),
    ("rebase", "raydelta.actors.table.coordinator", "rebase"),
    ("serialize", "raydelta.actors.table.committer", "serialize_actions"),
)


def install_stage_timers(_actor: Any = None) -> bool:
    """Wrap the commit path's stages in this process (idempotent); returns True."""
    import raydelta.actors.table.coordinator as coordinator_module
    import raydelta.storage.backends.local as log_store_module

    if getattr(coordinator_module, "_profile_times", None) is not None:
        return True
    times: dict[str, float] = {}
    coordinator_module._profile_times = times  # type: ignore[attr-defined]

    def timed(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                times[name] = times.get(name, 0.0) + time.perf_counter() - start

        return wrapper

    for name, module_name, attribute in STAGES:
        module = sys.modules[module_name]
        setattr(module, attribute, timed(name, getattr(module, attribute)))
    cls = coordinator_module.CommitCoordinator
    cls.commit = timed("actor_commit", cls.commit)  # type: ignore[method-assign]
    commit_many = cls.commit_many

    def counted(self: Any, requests: Any) -> Any:
        times["groups"] = times.get("groups", 0.0) + 1
        times["grouped_requests"] = times.get("grouped_requests", 0.0) + len(requests)
        return commit_many(self, requests)

    cls.commit_many = counted  # type: ignore[method-assign]
    cls._commit_info = timed("commit_info", cls._commit_info)  # type: ignore[method-assign]
    cls._apply = timed("apply", cls._apply)  # type: ignore[method-assign]
    committer_cls = sys.modules["raydelta.actors.table.committer"].FilesystemCommitter
    committer_cls.put_commit = timed("put_commit", committer_cls.put_commit)
    store_cls = log_store_module.LocalLogStore
    store_cls._write_temp = timed("write_temp", store_cls._write_temp)  # type: ignore[method-assign]

    class _Os:
        """``os`` for the log store module, with fsync/link/unlink timed."""

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        fsync = staticmethod(timed("fsync", os.fsync))
        link = staticmethod(timed("link", os.link))
        unlink = staticmethod(timed("unlink_temp", os.unlink))

    log_store_module.os = _Os()  # type: ignore[assignment]
    return True


def take_stage_times(_actor: Any = None) -> dict[str, float]:
    import raydelta.actors.table.coordinator as coordinator_module

    times: dict[str, float] = coordinator_module._profile_times  # type: ignore[attr-defined]
    out = dict(times)
    times.clear()
    return out


def process_cpu(_actor: Any = None) -> tuple[int, float]:
    """``(pid, CPU seconds)`` of this process."""
    return os.getpid(), time.process_time()


def start_profile(actor: Any) -> None:
    """Start a cProfile in the actor's process (kept on the actor object)."""
    profiler = cProfile.Profile()
    actor._commit_profiler = profiler
    profiler.enable()


def stop_profile(actor: Any) -> str:
    profiler: cProfile.Profile = actor._commit_profiler
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(25)
    return out.getvalue()


def _cpu_of(pid: int) -> float:
    """CPU seconds (user + system) of any process, from /proc."""
    with open(f"/proc/{pid}/stat") as handle:
        fields = handle.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


def _session_processes() -> dict[str, list[int]]:
    """The pids of this Ray session's raylet and GCS (started by ``ray.init``)."""
    from ray._private import worker

    node = worker._global_node
    out: dict[str, list[int]] = {}
    for kind, infos in node.all_processes.items():
        name = "raylet" if "raylet" in kind else "gcs_server" if "gcs" in kind else None
        if name is not None:
            out.setdefault(name, []).extend(info.process.pid for info in infos)
    return out


def _request(index: int) -> Any:
    from raydelta.protocol.actions import AddFile
    from raydelta.protocol.events import CommitRequest, ReadSet

    add = AddFile(
        path=f"part-{index:06d}-{uuid.uuid4().hex}.parquet",
        size=1024,
        modificationTime=int(time.time() * 1000),
        dataChange=True,
        stats=STATS,
    )
    return CommitRequest(
        txn_id=str(uuid.uuid4()),
        read_set=ReadSet(read_version=None),
        actions=(add,),
        operation="WRITE",
        operation_parameters={"mode": "Append"},
        commit_time_ms=int(time.time() * 1000),
    )


def _floor(root: Path, commits: int, data: bytes) -> dict[str, Any]:
    from fsspec.implementations.local import LocalFileSystem

    from raydelta.protocol.file_names import commit_name
    from raydelta.storage.backends.local import LocalLogStore

    store = LocalLogStore(LocalFileSystem(), str(root / "floor"), fsync=True)
    seconds = []
    for index in range(commits):
        start = time.perf_counter()
        store.put_if_absent(commit_name(index), data)
        seconds.append(time.perf_counter() - start)
    return latency_stats(seconds)


def run_inline(root: Path, commits: int) -> dict[str, Any]:
    import pyarrow as pa

    from raydelta.actors.table.coordinator import CommitCoordinator
    from raydelta.protocol.actions import Metadata, Protocol
    from raydelta.protocol.events import CommitRequest, ReadSet
    from raydelta.protocol.schema import serialize_schema
    from raydelta.protocol.schema_arrow import from_arrow

    install_stage_timers()
    uri = (root / "inline").as_uri()
    coordinator = CommitCoordinator(uri)
    schema = serialize_schema(from_arrow(pa.schema([("id", pa.int64())])))
    coordinator.create(
        CommitRequest(
            txn_id=str(uuid.uuid4()),
            read_set=ReadSet(read_version=None),
            actions=(
                Protocol(minReaderVersion=1, minWriterVersion=2),
                Metadata.model_validate(
                    {
                        "id": str(uuid.uuid4()),
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": schema,
                        "partitionColumns": [],
                        "configuration": {},
                    }
                ),
            ),
            operation="CREATE TABLE",
            operation_parameters={},
            commit_time_ms=int(time.time() * 1000),
        )
    )
    for index in range(WARMUP):
        coordinator.commit(_request(index))
    take_stage_times()
    seconds = []
    cpu = time.process_time()
    for index in range(commits):
        request = _request(index)
        start = time.perf_counter()
        coordinator.commit(request)
        seconds.append(time.perf_counter() - start)
    cpu = time.process_time() - cpu
    stages = take_stage_times()
    return {
        "commit": latency_stats(seconds),
        "stages_ms_per_commit": {
            k: v * 1000 / commits for k, v in stages.items() if k not in COUNTERS
        },
        "groups_per_commit": stages.get("groups", 0.0) / commits,
        "cpu_ms_per_commit": {"this process": cpu * 1000 / commits},
    }


def run_actor(root: Path, commits: int, transport: str) -> dict[str, Any]:
    import pyarrow as pa
    import ray

    from raydelta.actors.table.client import TableClient

    uri = (root / f"actor-{transport}").as_uri()
    table = TableClient.create(
        uri, schema=pa.schema([("id", pa.int64())]), use_channel=transport == "channel"
    )
    actor = table.actor
    ray.get(actor.__ray_call__.remote(install_stage_timers))
    for index in range(WARMUP):
        table._call("commit", _request(index))
    ray.get(actor.__ray_call__.remote(take_stage_times))
    actor_pid, _ = ray.get(actor.__ray_call__.remote(process_cpu))
    others = _session_processes()
    before = {"actor": _cpu_of(actor_pid)}
    for name, pids in others.items():
        before[name] = sum(_cpu_of(p) for p in pids)
    driver_cpu = time.process_time()
    pings = []
    for _ in range(200):
        start = time.perf_counter()
        table._call("ping")
        pings.append(time.perf_counter() - start)
    seconds = []
    ray.get(actor.__ray_call__.remote(take_stage_times))
    driver_cpu = time.process_time()
    for name in before:
        before[name] = (
            _cpu_of(actor_pid) if name == "actor" else sum(_cpu_of(p) for p in others[name])
        )
    for index in range(commits):
        request = _request(index)
        start = time.perf_counter()
        table._call("commit", request)
        seconds.append(time.perf_counter() - start)
    driver_cpu = time.process_time() - driver_cpu
    cpu = {"driver (writer)": driver_cpu}
    cpu["actor"] = _cpu_of(actor_pid) - before["actor"]
    for name, pids in others.items():
        cpu[name] = sum(_cpu_of(p) for p in pids) - before[name]
    stages = ray.get(actor.__ray_call__.remote(take_stage_times))
    ray.get(actor.__ray_call__.remote(start_profile))
    for index in range(min(commits, 500)):
        table._call("commit", _request(index))
    profile = ray.get(actor.__ray_call__.remote(stop_profile))
    ray.kill(actor)
    return {
        "commit": latency_stats(seconds),
        "ping": latency_stats(pings),
        "stages_ms_per_commit": {
            k: v * 1000 / commits for k, v in stages.items() if k not in COUNTERS
        },
        "groups_per_commit": stages.get("groups", 0.0) / commits,
        "cpu_ms_per_commit": {k: v * 1000 / commits for k, v in cpu.items()},
        "actor_profile_top": profile,
    }


def run_concurrent(root: Path, seconds: float, transport: str, writers: int) -> dict[str, Any]:
    """``writers`` threads of this process commit for ``seconds``: group sizes and CPU."""
    import threading

    import pyarrow as pa
    import ray

    from raydelta.actors.table.client import TableClient

    uri = (root / f"group-{transport}").as_uri()
    table = TableClient.create(uri, schema=pa.schema([("id", pa.int64())]))
    actor = table.actor
    ray.get(actor.__ray_call__.remote(install_stage_timers))
    handles = [TableClient.open(uri, use_channel=transport == "channel") for _ in range(writers)]
    for handle in handles:
        handle._call("commit", _request(0))
    ray.get(actor.__ray_call__.remote(take_stage_times))
    actor_pid, _ = ray.get(actor.__ray_call__.remote(process_cpu))
    actor_cpu = _cpu_of(actor_pid)
    counts = [0] * writers
    stop = time.perf_counter() + seconds

    def write(index: int) -> None:
        while time.perf_counter() < stop:
            handles[index]._call("commit", _request(counts[index]))
            counts[index] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    actor_cpu = _cpu_of(actor_pid) - actor_cpu
    stages = ray.get(actor.__ray_call__.remote(take_stage_times))
    ray.kill(actor)
    total = sum(counts)
    groups = stages.get("groups", 0.0)
    return {
        "writers": writers,
        "commits": total,
        "commits_per_s": total / elapsed,
        "groups": groups,
        "mean_group_size": stages.get("grouped_requests", 0.0) / groups if groups else None,
        "fsync_ms_per_commit": stages.get("fsync", 0.0) * 1000 / max(total, 1),
        "actor_cpu_ms_per_commit": actor_cpu * 1000 / max(total, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=2000)
    parser.add_argument("--writers", type=int, default=8, help="threads of the group run")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of the group run")
    parser.add_argument("--no-write", action="store_true")
    ns = parser.parse_args(argv)

    import ray

    from raydelta.actors.cluster import NAMESPACE

    load_before = os.getloadavg()
    root = Path(tempfile.mkdtemp(prefix="raydelta-commit-profile-"))
    results: dict[str, Any] = {"inline": run_inline(root, ns.commits)}
    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    try:
        for transport in ("ray", "channel"):
            results[transport] = run_actor(root, ns.commits, transport)
        concurrent = {
            transport: run_concurrent(root, ns.seconds, transport, ns.writers)
            for transport in ("ray", "channel")
        }
    finally:
        ray.shutdown()
    sample = next((root / "inline" / "_delta_log").glob("*01.json")).read_bytes()
    floor = _floor(root, ns.commits, sample)
    load_after = os.getloadavg()
    for name, result in results.items():
        print(f"\n== {name}: p50 {result['commit']['p50_ms']:.3f} ms")
        for stage, ms in sorted(result["stages_ms_per_commit"].items(), key=lambda kv: -kv[1]):
            print(f"   {stage:<14} {ms:7.3f} ms/commit")
        if "ping" in result:
            print(f"   ping p50       {result['ping']['p50_ms']:7.3f} ms")
        for process, ms in result["cpu_ms_per_commit"].items():
            print(f"   CPU {process:<18} {ms:7.3f} ms/commit")
    for transport, group in concurrent.items():
        print(
            f"\n== {transport}, {group['writers']} writer threads: "
            f"{group['commits_per_s']:.0f} commits/s, mean group {group['mean_group_size']}, "
            f"fsync {group['fsync_ms_per_commit']:.3f} ms/commit, "
            f"actor CPU {group['actor_cpu_ms_per_commit']:.3f} ms/commit"
        )
    print(f"\nfloor (put_if_absent with fsync) p50 {floor['p50_ms']:.3f} ms")
    print(f"load average before {load_before}, after {load_after}")
    if ns.no_write:
        return 0
    ours = results["ray"]["commit"]["p50_ms"]
    path = write_result(
        NAME,
        {
            "unit": "ms",
            "ours": ours,
            "peer": floor["p50_ms"],
            "ratio": ours / floor["p50_ms"],
            "statistic": "p50 ms of one 1-file blind append (Ray transport) vs the fsync floor",
            "peer_name": "LocalLogStore.put_if_absent with fsync of the same bytes (the floor)",
            "floor": floor,
            "transports": results,
            "concurrent": concurrent,
            "commits": ns.commits,
            "load_average": {"before": load_before, "after": load_after},
            "note": "a profile; stage times are wall ms per commit inside the actor",
        },
    )
    print(f"wrote {path}")
    shutil_rmtree(root)
    return 0


def shutil_rmtree(root: Path) -> None:
    import shutil

    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
