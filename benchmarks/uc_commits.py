"""Benchmark: delta's real Unity Catalog client committing through raydelta's server.

Work: ``W`` JVM writer threads (``W`` in ``--writers``, default 1 and 4), each
with its own delta-storage 4.4.0 ``UCCommitCoordinatorClient`` over
delta-spark's default REST client (``/delta/v1``), commit ``--commits``
one-file blind appends to one managed table created through the server
(``tests/uc_api/jvm_clients.py`` drives the classes through py4j). A commit
is what delta-spark's commit step does for a catalog-managed table: list the
log for the last published version, write the staged file through
delta-spark's LogStore, send it to the server (ratified durably by the
``Catalog`` actor), schedule delta's own backfill. A writer that loses a
version (delta's conflict) takes the next one; only successful commits are
timed.

Peer: the same commits on a plain path table, made the way delta-spark
commits a filesystem table: the same LogStore's put-if-absent write of
``_delta_log/<v>.json`` (a writer that finds the file takes the next
version). Both run in one fresh process with one Spark JVM, one local Ray
cluster and one server on loopback.

Measured: commit latency p50/p99 and throughput per mode and writer count;
publish lag (ratified -> ``<v>.json`` by the catalog's publisher, measured
inside the catalog) p50/p99 at the largest writer count. ``ours`` = managed
p50 at 1 writer, ``peer`` = path p50 at 1 writer, ``ratio`` = ours / peer
(goal <= 1.2).

Run: ``python -m benchmarks.uc_commits [--commits 100] [--writers 1 4]``.
Writes ``benchmarks/results/uc_commits.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.common import latency_stats, measure_once, percentile, print_ratio, write_result

NAME = "uc_commits"
WARMUP = 10
GOAL_RATIO = 1.2
STATS = '{"numRecords":100,"minValues":{"id":0},"maxValues":{"id":99},"nullCount":{"id":0}}'


def setup() -> None:
    import pyspark  # noqa: F401
    import ray  # noqa: F401

    import raydelta.catalog  # noqa: F401


def _add(tag: str) -> dict[str, Any]:
    return {
        "add": {
            "path": f"part-{tag}-{uuid.uuid4().hex}.parquet",
            "partitionValues": {},
            "size": 1024,
            "modificationTime": int(time.time() * 1000),
            "dataChange": True,
            "stats": STATS,
        }
    }


def _spark() -> Any:
    from pyspark.sql import SparkSession

    from tests.delta_spark_jars import delta_jars

    return (
        SparkSession.builder.master("local[2]")
        .appName("uc-commits-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.jars", ",".join(str(j) for j in delta_jars()))
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config(
            "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
        )
        .getOrCreate()
    )


def _run_writers(count: int, commits: int, commit_one: Any) -> dict[str, Any]:
    """``count`` threads each making ``WARMUP`` + ``commits`` commits with
    ``commit_one(writer_index, tag) -> seconds of the successful commit``."""
    latencies: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(count + 1)
    errors: list[BaseException] = []

    def writer(index: int) -> None:
        try:
            for j in range(WARMUP):
                commit_one(index, f"w{index}-warm{j}")
            own: list[float] = []
            barrier.wait()
            for j in range(commits):
                own.append(commit_one(index, f"w{index}-{j}"))
            with lock:
                latencies.extend(own)
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    barrier.wait()
    begin = time.perf_counter()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - begin
    if errors:
        raise errors[0]
    return {"commit": latency_stats(latencies), "throughput_per_s": len(latencies) / elapsed}


def _create_managed(api: str, token: str, name: str) -> str:
    from tests.uc_api.conftest import uc_request

    body = {
        "catalog_name": "main",
        "schema_name": "default",
        "name": name,
        "table_type": "MANAGED",
        "data_source_format": "DELTA",
        "columns": [{"name": "id", "type_name": "LONG", "type_text": "bigint", "position": 0}],
    }
    status, info = uc_request("POST", f"{api}/tables", body, token=token)
    if status != 200:
        raise RuntimeError(f"create table: {status} {info}")
    return str(info["storage_location"])


def _managed(spark: Any, server: Any, token: str, count: int, commits: int) -> dict[str, Any]:
    """``count`` delta coordinator clients committing one managed table."""
    from tests.uc_api.jvm_clients import DeltaCommitError, JvmUCClient

    name = f"bench{count}"
    location = _create_managed(server.api, token, name)
    tables = [
        JvmUCClient(spark, uri=server.url, token=token, api="delta").table(
            location, name=("main", "default", name)
        )
        for _ in range(count)
    ]
    state = tables[0].metadata_protocol()
    lock = threading.Lock()
    next_version = [1]
    clock = [0]

    def commit_one(index: int, tag: str) -> float:
        table = tables[index]
        while True:
            with lock:
                version = next_version[0]
                clock[0] = max(clock[0] + 1, int(time.time() * 1000))  # increasing ICTs
                ict = clock[0]
            try:
                table.commit(version, [_add(tag)], ict=ict, state=state)
            except DeltaCommitError as error:
                if not error.conflict:
                    raise
                with lock:  # lost the version: the next one
                    next_version[0] = max(next_version[0], version + 1)
                continue
            with lock:
                next_version[0] = max(next_version[0], version + 1)
            return float(table.last_commit_seconds)

    entry = _run_writers(count, commits, commit_one)
    entry["table"] = f"main.default.{name}"
    entry["location"] = location
    entry["log_store"] = tables[0]
    return entry


def _path(
    spark: Any, root: str, zero: str, store_of: Any, count: int, commits: int
) -> dict[str, Any]:
    """The same commits as put-if-absent ``<v>.json`` through delta-spark's LogStore."""
    jvm = spark._jvm
    log = Path(root, f"path-{count}", "_delta_log")
    log.mkdir(parents=True)
    (log / f"{0:020d}.json").write_text(zero)
    store, conf = store_of.log_store, store_of.hadoop_conf
    lock = threading.Lock()
    next_version = [1]

    def commit_one(index: int, tag: str) -> float:
        while True:
            with lock:
                version = next_version[0]
            lines = jvm.java.util.ArrayList()
            lines.add(json.dumps({"commitInfo": {"timestamp": int(time.time() * 1000)}}))
            lines.add(json.dumps(_add(tag)))
            target = jvm.org.apache.hadoop.fs.Path(str(log / f"{version:020d}.json"))
            start = time.perf_counter()
            try:
                store.write(target, lines.iterator(), False, conf)
            except Exception as error:
                if "FileAlreadyExistsException" not in str(error):
                    raise
                with lock:
                    next_version[0] = max(next_version[0], version + 1)
                continue
            seconds = time.perf_counter() - start
            with lock:
                next_version[0] = max(next_version[0], version + 1)
            return seconds

    return _run_writers(count, commits, commit_one)


def run(root: str, writers: list[int], commits: int) -> dict[str, Any]:
    import ray

    from raydelta.actors.cluster import NAMESPACE
    from raydelta.catalog import Catalog
    from tests.uc_api.conftest import uc_request

    ray.init(num_cpus=2, include_dashboard=False, namespace=NAMESPACE, log_to_driver=False)
    spark = _spark()
    catalog = Catalog(
        name=f"bench-uc-{uuid.uuid4().hex[:8]}",
        root=str(Path(root, "warehouse")),
        authorization=True,  # bearer tokens judged on every request, as served
    )
    server = catalog.serve(host="127.0.0.1", port=0)
    token = catalog.token or ""
    out: dict[str, Any] = {"managed": {}, "path": {}}
    try:
        uc_request("POST", f"{server.api}/catalogs", {"name": "main"}, token=token)
        schema_body = {"catalog_name": "main", "name": "default"}
        uc_request("POST", f"{server.api}/schemas", schema_body, token=token)
        for count in writers:
            ray.get(catalog.actor.publish_lags_ms.remote(clear=True))
            managed = _managed(spark, server, token, count, commits)
            table = managed.pop("table")
            managed.pop("location")
            store_of = managed.pop("log_store")
            last = count * (WARMUP + commits)
            if not ray.get(catalog.actor.wait_published.remote(table, last, 120.0)):
                raise RuntimeError(f"managed/{count}: version {last} not published")
            lags = ray.get(catalog.actor.publish_lags_ms.remote(clear=True))
            managed["publish_lag"] = {
                "p50_ms": percentile(lags, 50),
                "p99_ms": percentile(lags, 99),
                "count": len(lags),
            }
            out["managed"][str(count)] = managed
            zero = (store_of.root / "_delta_log" / f"{0:020d}.json").read_text()
            out["path"][str(count)] = _path(spark, root, zero, store_of, count, commits)
            for mode in ("managed", "path"):
                e = out[mode][str(count)]
                lag = e.get("publish_lag")
                print(
                    f"  {mode:<8} {count} writers: p50 {e['commit']['p50_ms']:.3f} ms,"
                    f" p99 {e['commit']['p99_ms']:.3f} ms, {e['throughput_per_s']:.0f} commits/s"
                    + (f", publish lag p99 {lag['p99_ms']:.2f} ms" if lag else ""),
                    flush=True,
                )
    finally:
        server.stop()
        ray.kill(catalog.actor)
        spark.stop()
        ray.shutdown()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--commits", type=int, default=100, help="timed commits per writer")
    parser.add_argument("--writers", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--no-write", action="store_true", help="do not write the result file")
    ns = parser.parse_args(argv)
    writers = sorted(set(ns.writers))
    root = tempfile.mkdtemp(prefix="raydelta-bench-uc-")
    try:
        results = measure_once(
            "benchmarks.uc_commits:run",
            (root, writers, ns.commits),
            setup="benchmarks.uc_commits:setup",
        ).result
    finally:
        shutil.rmtree(root, ignore_errors=True)
    one, most = str(writers[0]), str(writers[-1])
    ours = results["managed"][one]["commit"]["p50_ms"]
    peer = results["path"][one]["commit"]["p50_ms"]
    ratio = print_ratio(NAME, ours=ours, peer=peer, unit="ms")
    lag_p99 = results["managed"][most]["publish_lag"]["p99_ms"]
    goals = {f"managed_p50_le_{GOAL_RATIO}x_path_p50": ratio <= GOAL_RATIO}
    for goal, met in goals.items():
        print(f"goal {goal}: {'MET' if met else 'NOT MET'}")
    managed_tp = results["managed"][most]["throughput_per_s"]
    path_tp = results["path"][most]["throughput_per_s"]
    print(
        f"throughput at {most} writers: managed {managed_tp:.0f}/s, path {path_tp:.0f}/s;"
        f" publish lag p99 {lag_p99:.2f} ms"
    )
    if not ns.no_write:
        path = write_result(
            NAME,
            {
                "unit": "ms",
                "ours": ours,
                "peer": peer,
                "ratio": ratio,
                "ours_label": (
                    "delta-storage UCCommitCoordinatorClient.commit through raydelta's UC"
                    f" server (/delta/v1), p50, {one} writer"
                ),
                "peer_label": (
                    f"delta-spark LogStore put-if-absent <v>.json (path table), p50, {one} writer"
                ),
                "commits_per_writer": ns.commits,
                "publish_lag_p99_ms": lag_p99,
                "modes": results,
                "goals": goals,
            },
        )
        print(f"wrote {path}")
    print(json.dumps(goals))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
