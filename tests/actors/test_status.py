"""``TableActor.status()``, its counters, and ``raydelta status --address A``.

Runs on the session's Ray cluster; the CLI runs in a subprocess attached to
that cluster by its GCS address.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from raydelta.actors.table.metrics import RATE_WINDOW_S, CommitCounters
from raydelta.protocol.errors import ConcurrentTransactionException

P1 = "2026-11-24"
REPO = Path(__file__).resolve().parents[2]


def test_counters_rate_is_over_the_last_minute_only() -> None:
    now = [1000.0]
    counters = CommitCounters(clock=lambda: now[0])
    for _ in range(30):
        counters.record("committed", rebased=False)
        now[0] += 0.5
    counters.record("conflict", rebased=False)
    counters.record("committed", rebased=True)
    # 31 commits between t=1000 and t=1015, asked at t=1015
    assert counters.outcomes == {"committed": 31, "conflict": 1, "rejected": 0}
    assert counters.rebased == 1
    assert counters.commits_per_second() == pytest.approx(31 / 15.0)
    now[0] += RATE_WINDOW_S + 1  # all of them older than the window
    assert counters.commits_per_second() == 0.0


def test_status_counts_commits_conflicts_and_names_the_node(
    new_table: Any, make_add: Any, ray_cluster: Any
) -> None:
    uri, table = new_table()
    for i in range(3):
        table.transaction().add(make_add(f"date={P1}/{i}.parquet")).commit()
    first, second = table.transaction(), table.transaction()
    for txn, name in ((first, "a"), (second, "b")):
        txn.add(make_add(f"date={P1}/{name}.parquet")).set_app_version("stream", 0)
    first.commit()
    with pytest.raises(ConcurrentTransactionException):
        second.commit()

    status = ray_cluster.get(table.actor.status.remote())
    assert status["table"] == uri
    assert status["version"] == table.version() == 4
    assert status["commits"] == 4  # the create is not a commit request
    assert status["conflicts"] == 1
    assert status["restarts"] == 0 and status["incarnation"] == 1
    assert status["queue_depth"] == 0
    assert status["commits_per_second"] > 0
    assert status["node_id"] in {n["NodeID"] for n in ray_cluster.nodes() if n["Alive"]}

    address = ray_cluster.get_runtime_context().gcs_address
    result = subprocess.run(
        [sys.executable, "-m", "raydelta.cli", "status", "--address", address, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr
    listed = {entry["table"]: entry for entry in json.loads(result.stdout)}
    assert listed[uri]["version"] == 4
    assert listed[uri]["conflicts"] == 1
    assert listed[uri]["node_id"] == status["node_id"]

    text = subprocess.run(
        [sys.executable, "-m", "raydelta.cli", "status", "--address", address],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert text.returncode == 0, text.stderr
    line = next(row for row in text.stdout.splitlines() if row.startswith(uri))
    assert line.split()[1:3] == ["4", "0"]  # version, queue depth


def test_status_without_a_cluster_is_a_clear_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "raydelta.cli", "status", "--address", "127.0.0.1:1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert result.returncode == 2
    assert "no Ray cluster at 127.0.0.1:1" in result.stderr
