"""An autoscaling Ray cluster on this machine: checkpoint shards bring workers up,
idle workers go; the main job submitted with ``JobSubmissionClient``; ``raydelta status``.

The cluster is Ray's fake multi-node provider (what
``ray.cluster_utils.AutoscalingCluster`` drives): ``ray start --head`` with an
autoscaling config whose node types are ``ray_cluster.yaml``'s, sized for
this machine (1 CPU per worker, at most 2 workers, idle timeout 6 s); the
autoscaler starts each worker as a real raylet. The head has no CPU, as in
``ray_cluster.yaml``: table actors live there (``num_cpus=0``), every task
that needs a CPU needs a worker.

Not ``AutoscalingCluster.start()`` itself: it runs ``ray stop --force``,
which would stop every Ray cluster of this machine. The head is started
here with a private ``RAY_TMPDIR``, free ports and the dashboard (the job
server); it is stopped by ending exactly the processes that carry that
``RAY_TMPDIR`` in their environment (this cluster's, nobody else's). The
pytest process never attaches to this cluster (it may be attached to the
session's): jobs run the drivers, the dashboard's HTTP API is polled.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import psutil
import pytest
import yaml

from tests.cluster.fake_cluster import fake_config

REPO = Path(__file__).resolve().parents[2]
JOB_DIR = REPO / "raydelta" / "examples" / "ray_job"

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class FakeCluster:
    root: Path
    gcs_address: str
    dashboard_url: str

    def alive_workers(self) -> list[dict[str, Any]]:
        """The alive nodes other than the head (from the dashboard's state API)."""
        url = f"{self.dashboard_url}/api/v0/nodes?limit=100"
        with urllib.request.urlopen(url, timeout=30) as response:
            body = json.loads(response.read())
        nodes = body["data"]["result"]["result"]
        return [n for n in nodes if n["state"] == "ALIVE" and not n["is_head_node"]]


def our_processes(root: Path) -> list[psutil.Process]:
    """Processes whose environment has our private RAY_TMPDIR: this cluster's."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        if proc.pid == os.getpid():
            continue
        try:
            if proc.environ().get("RAY_TMPDIR") == str(root):
                found.append(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def stop_cluster(root: Path) -> None:
    procs = our_processes(root)
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            continue
    # Most go at once; the GCS, the raylet and the autoscaler's monitor, stopped
    # together, wait on each other and outlive any grace period (10 s measured):
    # they are killed after a short one.
    _, alive = psutil.wait_procs(procs, timeout=2)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(alive, timeout=10)


@pytest.fixture(scope="module")
def cluster() -> Iterator[FakeCluster]:
    import ray._private.services

    root = Path(tempfile.mkdtemp(prefix="rdas", dir="/tmp"))
    ip = ray._private.services.get_node_ip_address()
    port, dashboard = free_port(), free_port()
    config = root / "autoscaling.yaml"
    config.write_text(yaml.safe_dump(fake_config(f"{ip}:{port}")))
    env = {
        **os.environ,
        "RAY_TMPDIR": str(root),
        "RAY_FAKE_CLUSTER": "1",
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": str(REPO),
        # as ray_cluster.yaml's start commands: only the head hosts tables
        "RAYDELTA_HOST_RESOURCE": "table_host",
    }
    env.pop("RAY_ADDRESS", None)
    command = [
        str(Path(sys.executable).parent / "ray"),
        "start",
        "--head",
        f"--port={port}",
        "--num-cpus=0",
        '--resources={"table_host": 1}',
        f"--temp-dir={root}",
        f"--autoscaling-config={config}",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        f"--dashboard-port={dashboard}",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--dashboard-agent-grpc-port={free_port()}",
        f"--runtime-env-agent-port={free_port()}",
        f"--metrics-export-port={free_port()}",
        f"--ray-client-server-port={free_port()}",
        "--disable-usage-stats",
    ]
    try:
        subprocess.run(command, env=env, check=True, capture_output=True, timeout=300)
        fake = FakeCluster(root, f"{ip}:{port}", f"http://127.0.0.1:{dashboard}")
        deadline = time.monotonic() + 120
        while True:  # the dashboard answers
            try:
                fake.alive_workers()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.25)
        yield fake
    finally:
        stop_cluster(root)


def run_job(cluster: FakeCluster, entrypoint: str, *, timeout_s: float = 600) -> tuple[str, str]:
    """Submit ``entrypoint`` (working dir: the example) and wait; (status, logs)."""
    from ray.job_submission import JobStatus, JobSubmissionClient

    client = JobSubmissionClient(cluster.dashboard_url)
    job = client.submit_job(entrypoint=entrypoint, runtime_env={"working_dir": str(JOB_DIR)})
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = client.get_job_status(job)
        if status in {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED}:
            return str(status.value), client.get_job_logs(job)
        time.sleep(0.25)
    client.stop_job(job)
    return "TIMEOUT", client.get_job_logs(job)


class WorkerWatch:
    """The most alive workers seen, polled in a thread."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.most = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                self.most = max(self.most, len(self.cluster.alive_workers()))
            self._stop.wait(0.5)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.most


def wait_no_workers(cluster: FakeCluster, timeout_s: float) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if not cluster.alive_workers():
            return time.monotonic() - start
        time.sleep(0.25)
    return None


def test_checkpoint_shards_bring_workers_up_and_idle_workers_go(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    from benchmarks.checkpoint import copy_table
    from benchmarks.table_builder import build_large_table
    from raydelta.storage.snapshot import load_snapshot

    assert cluster.alive_workers() == []  # min_workers 0: nothing runs yet
    source = tmp_path / "source"
    built = build_large_table(source, num_files=30_000, num_commits=5)
    table = copy_table(source, tmp_path / "table", v2=True)
    watch = WorkerWatch(cluster)
    status, logs = run_job(
        cluster,
        f"{sys.executable} -m raydelta.actors.checkpoint.job {table} --v2 --json --quiet"
        " --actions-per-sidecar 5000",
    )
    most = watch.stop()
    assert status == "SUCCEEDED", logs[-3000:]
    summary = json.loads(logs[logs.index("{") : logs.rindex("}") + 1])
    assert summary["version"] == built.version + 1
    assert summary["kind"] == "v2"
    assert most >= 1  # the shard tasks' CPUs came from workers the autoscaler added
    last = json.loads((table / "_delta_log" / "_last_checkpoint").read_text())
    assert last["version"] == built.version + 1
    assert load_snapshot(str(table)).num_files == built.num_live_files
    # idle workers are released (idle timeout 6 s, plus the autoscaler's rounds)
    assert wait_no_workers(cluster, 180) is not None


def test_the_main_job_submitted_to_the_cluster_succeeds(
    cluster: FakeCluster, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    from raydelta.storage.snapshot import load_snapshot

    status, logs = run_job(cluster, f"{sys.executable} main_job.py {tmp_path / 'demo'}")
    assert status == "SUCCEEDED", logs[-3000:]
    result = json.loads(logs[logs.index("RESULT ") + len("RESULT ") :].splitlines()[0])
    assert result["commits"] == 16 and result["sidecars"] >= 1
    log = tmp_path / "demo" / "events" / "_delta_log"
    last = json.loads((log / "_last_checkpoint").read_text())
    assert (log / last["v2Checkpoint"]["path"]).is_file()  # built by shard tasks on workers
    # read back from the log and the data files (deltalake does not read v2Checkpoint)
    root = tmp_path / "demo" / "events"
    snapshot = load_snapshot(str(root))
    assert snapshot.version == result["version"]
    paths = snapshot.files.column("path").to_pylist()
    assert sum(pq.read_metadata(root / unquote(p)).num_rows for p in paths) == result["rows"]

    # the demo table's actor runs on in the cluster: `raydelta status` lists it
    listed = subprocess.run(
        [
            sys.executable,
            "-m",
            "raydelta.cli",
            "status",
            "--json",
            "--address",
            cluster.gcs_address,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "RAY_TMPDIR": str(cluster.root)},
    )
    assert listed.returncode == 0, listed.stderr
    statuses = {s["table"]: s for s in json.loads(listed.stdout)}
    uri = "file://" + str(tmp_path / "demo" / "events")
    assert statuses[uri]["version"] == result["version"]
    assert statuses[uri]["commits"] == result["commits"]
