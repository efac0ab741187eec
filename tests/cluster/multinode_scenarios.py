"""Scenarios on a real multi-node Ray cluster, run in a fresh process.

``python tests/cluster/multinode_scenarios.py WORKDIR OUT.json`` starts a
``ray.cluster_utils.Cluster`` (a head and three worker nodes, each its own
raylet, object store and workers; the workers carry the custom resource
``table_host`` and only they join the pool of table hosts), runs the scenarios below on tables
under ``WORKDIR`` and writes what each observed to ``OUT.json``. The test
module (:mod:`tests.cluster.test_multinode`) checks those observations
against the tables' logs on disk.

Why a separate process: the pytest session may already be attached to its
own local cluster (``ray_cluster``), and a process attaches to one cluster
at a time. The parent sets ``RAY_TMPDIR`` to a private directory, so this
cluster's sessions and address file never meet anyone else's; the cluster
is stopped through its own ``Cluster.shutdown()``.

Scenarios (each records, never asserts: the test decides):
- ``metrics``: commits and a conflict on a table whose actor is on a worker;
  the node's Prometheus endpoint (Ray's metrics agent) is scraped until the
  ``raydelta`` series appear.
- ``node_loss``: four writers (two over Ray, two over the commit channel)
  commit while the node holding the ``TableActor`` is removed; each writer
  records the unique file path of every commit and the version acknowledged.
- ``zombie``: the raylet of the node holding the actor is frozen (SIGSTOP:
  the node is cut off, the actor's process lives on); once the node is
  declared dead and the actor restarted elsewhere, a client whose channel
  still leads to the old process commits through it, and a fresh
  connection to the old address is tried. (Removing a node kills its
  workers with the raylet: Ray's workers die with their parent raylet, so
  only a cut-off node leaves a live old incarnation.)
- ``warehouse``: 16 tables spread over the worker nodes' table hosts; a
  node is added (some tables move to its hosts), then removed while four
  writers commit to random tables.
- ``checkpoint``: a V2 checkpoint with many sidecars is built; the node
  holding the ``CheckpointActor`` is removed mid-build; then a checkpoint
  is asked for again.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

import ray
from ray.cluster_utils import Cluster

from raydelta.actors.checkpoint.actor import MAX_CONCURRENCY, CheckpointActor
from raydelta.actors.cluster import NAMESPACE, checkpoint_actor_name, start_actor
from raydelta.actors.table.client import TableClient
from raydelta.actors.table.placement import HOST_RESOURCE_ENV
from raydelta.protocol.actions import AddFile
from raydelta.storage.table_location import normalize_uri

TABLE_HOST = "table_host"
SYSTEM_CONFIG = {
    # a removed node is declared dead in ~1.5 s instead of ~30 s, and a frozen
    # one (its raylet stopped: every health check times out instead of being
    # refused) in ~4.5 s instead of ~30 s (3 timeouts of Ray's default 10 s)
    "health_check_initial_delay_ms": 0,
    "health_check_period_ms": 500,
    "health_check_timeout_ms": 1000,
    "health_check_failure_threshold": 3,
    # a worker whose raylet died exits within ~0.1 s (Ray checks every 1 s by
    # default): with 1 s, the old actor process of ``node_loss`` could serve every
    # remaining commit before it noticed, so the actor never restarted (seen 1 run in 3)
    "raylet_death_check_interval_milliseconds": 100,
    "metrics_report_interval_ms": 1000,
}
WRITERS = 4
COMMITS_PER_WRITER = 25
KILL_AFTER_COMMITS = 5
WAREHOUSE_TABLES = 16
WAREHOUSE_COMMITS = 15


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def add_worker(cluster: Cluster, *, wait: bool = True) -> Any:
    return cluster.add_node(
        wait=wait, num_cpus=1, resources={TABLE_HOST: 1}, metrics_export_port=free_port()
    )


def node_of(cluster: Cluster, node_id: str) -> Any:
    for node in cluster.worker_nodes:
        if node.node_id == node_id:
            return node
    raise LookupError(f"node {node_id} is not a worker node of this cluster")


def make_add(path: str) -> AddFile:
    return AddFile.model_validate(
        {
            "path": path,
            "partitionValues": {},
            "size": 100,
            "modificationTime": int(time.time() * 1000),
            "dataChange": True,
            "stats": json.dumps({"numRecords": 1}),
        }
    )


def new_table(path: Path) -> TableClient:
    """A table hosted on a worker node (only nodes with ``table_host`` join the pool)."""
    uri = normalize_uri(str(path))
    import pyarrow as pa

    return TableClient.create(uri, schema=pa.schema([("id", pa.int64())]))


def status_of(table: TableClient) -> dict[str, Any]:
    return dict(ray.get(table.actor.status.remote(), timeout=60))


# --- scenarios ----------------------------------------------------------------------------------


def scenario_metrics(cluster: Cluster, root: Path) -> dict[str, Any]:
    from raydelta.protocol.errors import ConcurrentTransactionException

    table = new_table(root / "metrics")
    for i in range(5):
        table.transaction().add(make_add(f"m-{i}.parquet")).commit()
    first, second = table.transaction(), table.transaction()
    first.add(make_add("a.parquet")).set_app_version("app", 0)
    second.add(make_add("b.parquet")).set_app_version("app", 0)
    first.commit()
    conflicts = 0
    try:
        second.commit()
    except ConcurrentTransactionException:
        conflicts += 1
    status = status_of(table)
    node = node_of(cluster, status["node_id"])
    url = f"http://127.0.0.1:{node.metrics_export_port}/metrics"
    series: dict[str, float] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        series = scrape(url, table.uri)
        if any(name.startswith("ray_raydelta_commit_latency_seconds") for name in series) and (
            sum(v for k, v in series.items() if k.startswith("ray_raydelta_commits")) >= 7
        ):
            break
        time.sleep(0.2)
    return {
        "uri": table.uri,
        "status": status,
        "conflicts_seen_by_client": conflicts,
        "series": series,
    }


def scrape(url: str, table_uri: str) -> dict[str, float]:
    """``{name{labels}: value}`` of the raydelta series of ``table_uri`` at ``url``."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
    except OSError:
        return {}
    found = {}
    for line in text.splitlines():
        if line.startswith("ray_raydelta_") and f'table="{table_uri}"' in line:
            name, _, value = line.rpartition(" ")
            outcome = re.search(r'outcome="([a-z]+)"', name)
            key = name.split("{", 1)[0] + (f"[{outcome.group(1)}]" if outcome else "")
            if "_bucket" in key:
                continue
            found[key] = float(value)
    return found


def writer(
    uri: str, index: int, *, use_channel: bool, log: list[dict[str, Any]], progress: list[int]
) -> None:
    table = TableClient.open(uri, use_channel=use_channel)
    for commit in range(COMMITS_PER_WRITER):
        path = f"w{index}-c{commit}.parquet"
        started = time.time()
        try:
            version = table.transaction().add(make_add(path)).commit()
        except Exception as exc:
            log.append({"path": path, "error": f"{type(exc).__name__}: {exc}", "started": started})
            continue
        log.append({"path": path, "version": version, "started": started, "acked": time.time()})
        progress[index] += 1


def scenario_node_loss(cluster: Cluster, root: Path) -> dict[str, Any]:
    table = new_table(root / "node-loss")
    before = status_of(table)
    logs: list[list[dict[str, Any]]] = [[] for _ in range(WRITERS)]
    progress = [0] * WRITERS
    threads = [
        threading.Thread(
            target=writer,
            args=(table.uri, i),
            kwargs={"use_channel": i % 2 == 1, "log": logs[i], "progress": progress},
        )
        for i in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    while min(progress) < KILL_AFTER_COMMITS and any(t.is_alive() for t in threads):
        time.sleep(0.02)
    progress_at_removal = list(progress)
    removed_at = time.time()
    cluster.remove_node(node_of(cluster, before["node_id"]), allow_graceful=False)
    for thread in threads:
        thread.join(timeout=600)
    after = status_of(table)
    return {
        "uri": table.uri,
        "before": before,
        "after": after,
        "removed_at": removed_at,
        "progress_at_removal": progress_at_removal,
        "writers": logs,
        "old_pid_alive": pid_alive(before["pid"]),
    }


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def wait_pid_gone(pid: int, timeout_s: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if not pid_alive(pid):
            return time.monotonic() - start
        time.sleep(0.02)
    return None


def raylet_pid(node: Any) -> int:
    from ray._private import ray_constants

    return int(node.all_processes[ray_constants.PROCESS_TYPE_RAYLET][0].process.pid)


def wait_node_dead(node_id: str, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not any(n["NodeID"] == node_id and n["Alive"] for n in ray.nodes()):
            return True
        time.sleep(0.1)
    return False


def scenario_zombie(cluster: Cluster, root: Path) -> dict[str, Any]:
    """A node cut off, its actor process alive: frozen raylet (SIGSTOP)."""
    table = new_table(root / "zombie")
    channel_table = TableClient.open(table.uri, use_channel=True)
    acked: list[dict[str, Any]] = []

    def commit(client: TableClient, path: str) -> None:
        acked.append({"path": path, "version": client.transaction().add(make_add(path)).commit()})

    for i in range(3):
        commit(channel_table, f"before-{i}.parquet")
    before = status_of(table)
    old_address = ray.get(table.actor.channel_address.remote())
    node = node_of(cluster, before["node_id"])
    raylet = raylet_pid(node)
    os.kill(raylet, signal.SIGSTOP)  # the node is cut off; the actor's process lives on
    try:
        declared_dead = wait_node_dead(before["node_id"], 120)
        ray_table = TableClient.open(table.uri, use_channel=False)
        for i in range(3):  # answered by the restarted incarnation
            commit(ray_table, f"after-{i}.parquet")
        after = status_of(table)
        zombie_alive_before = pid_alive(before["pid"])
        # the channel client still holds its connection to the old process
        started = time.monotonic()
        commit(channel_table, "through-old-channel.parquet")
        through_old_channel_s = time.monotonic() - started
        zombie_exit_s = wait_pid_gone(before["pid"], 30.0)
        # a fresh connection to the old address: nothing listens any more
        from raydelta.actors.table.channel import ChannelClient

        request = ray_table.transaction().add(make_add("to-old-address.parquet")).request()
        direct: dict[str, Any] = {}
        try:
            client = ChannelClient(old_address)
            try:
                reply = client.call(table.uri, "commit", (request,))
                direct["reply"] = reply.model_dump(mode="json", by_alias=True)
            finally:
                client.close()
        except Exception as exc:
            direct["error"] = f"{type(exc).__name__}: {exc}"
        again = ray.get(ray_table.actor.commit.remote(request))
        acked.append({"path": "to-old-address.parquet", "version": again.version})
        for i in range(2):
            commit(channel_table, f"end-{i}.parquet")
    finally:
        os.kill(raylet, signal.SIGCONT)
    cluster.remove_node(node, allow_graceful=False)
    return {
        "uri": table.uri,
        "before": before,
        "after": after,
        "declared_dead": declared_dead,
        "zombie_alive_when_new_incarnation_served": zombie_alive_before,
        "through_old_channel_s": through_old_channel_s,
        "zombie_exit_s": zombie_exit_s,
        "direct_to_old_address": direct,
        "acked": acked,
        "final": status_of(table),
    }


def spread_writer(
    uris: list[str], index: int, commits: int, log: list[dict[str, Any]], progress: list[int]
) -> None:
    import random

    rng = random.Random(index)
    tables = {uri: TableClient.open(uri, use_channel=index % 2 == 1) for uri in uris}
    for commit in range(commits):
        uri = rng.choice(uris)
        path = f"w{index}-c{commit}.parquet"
        try:
            version = tables[uri].transaction().add(make_add(path)).commit()
        except Exception as exc:
            log.append({"uri": uri, "path": path, "error": f"{type(exc).__name__}: {exc}"})
            continue
        log.append({"uri": uri, "path": path, "version": version})
        progress[index] += 1


def hosts_of(tables: list[TableClient]) -> dict[str, str]:
    """``{table uri: node id}`` of the host each table is active on now."""
    return {t.uri: status_of(t)["node_id"] for t in tables}


def scenario_warehouse(cluster: Cluster, root: Path) -> dict[str, Any]:
    """Tables spread over the worker nodes' hosts; a node added (tables move to
    it); then a node removed while writers commit to every table."""
    tables = [new_table(root / "warehouse" / f"t{i:02d}") for i in range(WAREHOUSE_TABLES)]
    spread = hosts_of(tables)
    added = add_worker(cluster)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(
        n["NodeID"] == added.node_id and n["Alive"] for n in ray.nodes()
    ):
        time.sleep(0.1)
    time.sleep(3.0)  # every process's view of the pool takes the new node in
    for table in tables:
        table.transaction().add(make_add("after-join.parquet")).commit()
    joined = hosts_of(tables)
    logs: list[list[dict[str, Any]]] = [[] for _ in range(WRITERS)]
    progress = [0] * WRITERS
    uris = [t.uri for t in tables]
    threads = [
        threading.Thread(target=spread_writer, args=(uris, i, WAREHOUSE_COMMITS, logs[i], progress))
        for i in range(WRITERS)
    ]
    for thread in threads:
        thread.start()
    while min(progress) < KILL_AFTER_COMMITS and any(t.is_alive() for t in threads):
        time.sleep(0.02)
    victim = added.node_id  # the newest node holds a share of the tables now
    cluster.remove_node(added, allow_graceful=False)
    for thread in threads:
        thread.join(timeout=600)
    return {
        "uris": uris,
        "spread": spread,
        "joined": joined,
        "added_node": added.node_id,
        "removed_node": victim,
        "after": hosts_of(tables),
        "writers": logs,
    }


def scenario_checkpoint(cluster: Cluster, root: Path) -> dict[str, Any]:
    from benchmarks.checkpoint import copy_table
    from benchmarks.table_builder import build_large_table

    source = root / "checkpoint-source"
    built = build_large_table(source, num_files=60_000, num_commits=5)
    path = copy_table(source, root / "checkpoint", v2=True)
    uri = normalize_uri(str(path))
    handle = start_actor(
        CheckpointActor,
        checkpoint_actor_name(uri),
        uri,
        None,
        options={"max_concurrency": MAX_CONCURRENCY, "resources": {TABLE_HOST: 0.01}},
    )
    node_id = ray.get(handle.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()))
    # fanned out (map and shard tasks on every node), whatever the table's size
    fan_out = {"target_actions_per_sidecar": 1_500, "fan_out_min_actions": 0}
    ref = handle.checkpoint.remote(kind="v2", **fan_out)
    shards_done_at_removal = None
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        progress = ray.get(handle.progress.remote())
        if progress is not None and progress.shards_done >= 2:
            shards_done_at_removal = progress.shards_done
            break
        time.sleep(0.05)
    cluster.remove_node(node_of(cluster, node_id), allow_graceful=False)
    first: dict[str, Any] = {}
    try:
        first["summary"] = ray.get(ref, timeout=600).to_json_dict()
    except Exception as exc:
        first["error"] = f"{type(exc).__name__}: {exc}"
    second = ray.get(handle.checkpoint.remote(kind="v2", **fan_out))
    new_node = ray.get(
        handle.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id())
    )
    # the restarted actor's checkpoint metrics, from its node's metrics agent (exported
    # every second: wait until the second checkpoint's shards are in)
    url = f"http://127.0.0.1:{node_of(cluster, new_node).metrics_export_port}/metrics"
    shards = second.sidecars_written + second.sidecars_reused
    series: dict[str, float] = {}
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        series = scrape(url, uri)
        done = [v for k, v in series.items() if k.startswith("ray_raydelta_checkpoint_shards")]
        if done and done[0] >= shards:
            break
        time.sleep(0.2)
    return {
        "uri": uri,
        "path": str(path),
        "built": {"version": built.version, "num_live_files": built.num_live_files},
        "node_before": node_id,
        "node_after": new_node,
        "shards_done_at_removal": shards_done_at_removal,
        "first": first,
        "second": second.to_json_dict(),
        "metrics": series,
    }


SCENARIOS = {
    "warehouse": scenario_warehouse,
    "metrics": scenario_metrics,
    "node_loss": scenario_node_loss,
    "zombie": scenario_zombie,
    "checkpoint": scenario_checkpoint,
}


def main(workdir: str, out: str, names: list[str]) -> int:
    root = Path(workdir)
    started = time.monotonic()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "gcs_server_port": free_port(),
            "num_cpus": 1,
            "include_dashboard": False,
            "metrics_export_port": free_port(),
            "_system_config": SYSTEM_CONFIG,
        },
    )
    results: dict[str, Any] = {}
    try:
        for _ in range(3):  # started one after another, registered together
            add_worker(cluster, wait=False)
        cluster.wait_for_nodes()
        os.environ[HOST_RESOURCE_ENV] = TABLE_HOST  # table hosts on the workers only
        ray.init(
            address=cluster.address,
            namespace=NAMESPACE,
            log_to_driver=False,
            runtime_env={"env_vars": {HOST_RESOURCE_ENV: TABLE_HOST}},
        )
        results["cluster_start_s"] = time.monotonic() - started
        for name in names or list(SCENARIOS):
            workers = sum(1 for n in ray.nodes() if n["Alive"] and TABLE_HOST in n["Resources"])
            while workers < 2:  # every scenario moves an actor from one worker to another
                add_worker(cluster)
                workers += 1
            begun = time.monotonic()
            try:
                results[name] = SCENARIOS[name](cluster, root)
            except Exception:
                results[name] = {"crashed": traceback.format_exc()}
            results[name]["seconds"] = time.monotonic() - begun
            Path(out).write_text(json.dumps(results, indent=1, default=str))
    finally:
        ray.shutdown()
        cluster.shutdown()
    results["total_s"] = time.monotonic() - started
    Path(out).write_text(json.dumps(results, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3:]))
