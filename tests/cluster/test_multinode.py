"""A real multi-node Ray cluster on this machine: node loss, zombies, checkpoints, metrics.

The cluster (a head and three worker raylets, ``ray.cluster_utils.Cluster``)
lives in one subprocess that runs every scenario of
``tests/cluster/multinode_scenarios.py`` once per module (a cluster costs
tens of seconds to start on 2 busy cores) and writes what it observed. The
subprocess gets a private ``RAY_TMPDIR``, so its cluster never meets the
session's ``ray_cluster`` nor anyone else's, and it stops the cluster with
``Cluster.shutdown()``. The tests here judge those observations against the
tables' logs on disk, read independently (the commit files themselves, our
snapshot reader, deltalake).

What happens to the old actor process when its node goes (measured here):
removing a node kills its raylet, and Ray's workers die with their raylet
(about 0.1 s later); in that window the old process still answers the calls
already on their way (40 commits under load in one run) -- it is still the
actor's incarnation then. A node that is cut off instead (its raylet
frozen) leaves the old process alive after Ray declared the node dead and
restarted the actor elsewhere: that incarnation must serve nothing, and the
incarnation fence (``raydelta.actors.table.incarnation``) makes it exit before it
serves; the call goes through Ray to the new incarnation. Under all of it,
the log is the last fence: every commit is a put-if-absent of the next
version, so no interleaving loses or duplicates an acknowledged commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from raydelta.protocol.actions import AddFile, CommitInfo, parse_actions
from raydelta.protocol.file_names import commit_name

REPO = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).with_name("multinode_scenarios.py")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def observed() -> Any:
    # short: Ray's unix socket paths live under it (107-byte limit)
    root = Path(tempfile.mkdtemp(prefix="rdmn", dir="/tmp"))
    workdir = root / "tables"
    workdir.mkdir()
    out = root / "observed.json"
    env = {**os.environ, "RAY_TMPDIR": str(root), "PYTHONPATH": str(REPO)}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(workdir), str(out)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-5000:]
    results = json.loads(out.read_text())
    yield results


def scenario(observed: dict[str, Any], name: str) -> dict[str, Any]:
    result: dict[str, Any] = observed[name]
    assert "crashed" not in result, result["crashed"]
    return result


def log_of(uri: str) -> dict[int, tuple[str, ...]]:
    """``{version: paths added}`` of every commit file, read from disk."""
    log = Path(uri.removeprefix("file://")) / "_delta_log"
    commits = {}
    for file in log.glob("*.json"):
        if file.name[:20].isdigit() and file.name == commit_name(int(file.name[:20])):
            actions = parse_actions(file.read_bytes())
            assert isinstance(actions[0], CommitInfo)
            commits[int(file.name[:20])] = tuple(a.path for a in actions if isinstance(a, AddFile))
    return commits


def assert_exactly_once(uri: str, acked: list[dict[str, Any]]) -> dict[int, tuple[str, ...]]:
    """Every acknowledged path is in the log once, at the version acknowledged;
    the log has no gap and no path twice."""
    commits = log_of(uri)
    assert sorted(commits) == list(range(max(commits) + 1))
    where = Counter(path for paths in commits.values() for path in paths)
    assert [p for p, n in where.items() if n > 1] == []
    version_of = {path: v for v, paths in commits.items() for path in paths}
    for entry in acked:
        assert entry["path"] in version_of, entry
        assert version_of[entry["path"]] == entry["version"], entry
    return commits


def test_metrics_are_exported_by_the_node_of_the_table_actor(observed: dict[str, Any]) -> None:
    result = scenario(observed, "metrics")
    series, status = result["series"], result["status"]
    assert status["commits"] == 6 and status["conflicts"] == 1
    assert result["conflicts_seen_by_client"] == 1
    # read back from the node's Prometheus endpoint (Ray's metrics agent)
    assert series["ray_raydelta_commits_total[committed]"] == 6
    assert series["ray_raydelta_commits_total[conflict]"] == 1
    assert series["ray_raydelta_commit_latency_seconds_count"] == 7
    assert series["ray_raydelta_commit_latency_seconds_sum"] > 0


def test_node_loss_under_load_loses_and_duplicates_no_commit(observed: dict[str, Any]) -> None:
    result = scenario(observed, "node_loss")
    before, after = result["before"], result["after"]
    assert after["node_id"] != before["node_id"]
    assert after["restarts"] == 1 and after["incarnation"] == 2
    assert not result["old_pid_alive"]
    entries = [entry for log in result["writers"] for entry in log]
    assert [e for e in entries if "error" in e] == []
    assert len(entries) == 4 * 25
    commits = assert_exactly_once(result["uri"], entries)
    assert max(commits) == len(entries)  # the create, then one version per commit
    assert after["version"] == len(entries)
    # writers went on after the node was removed
    assert sum(1 for e in entries if e["acked"] > result["removed_at"]) > 0
    assert all(n >= 5 for n in result["progress_at_removal"])


def test_an_old_incarnation_serves_no_commit_once_the_actor_restarted(
    observed: dict[str, Any],
) -> None:
    result = scenario(observed, "zombie")
    before, after, final = result["before"], result["after"], result["final"]
    assert before["channel"] and result["declared_dead"]
    assert after["node_id"] != before["node_id"] and after["incarnation"] == 2
    # the old process was still alive while the new incarnation served commits...
    assert result["zombie_alive_when_new_incarnation_served"]
    # ... and the commit sent over the channel that still led to it was not served
    # by it: the new incarnation counts every commit made after the restart,
    # that one included (the old process fenced itself and exited)
    acked_after_restart = [e for e in result["acked"] if not e["path"].startswith("before-")]
    assert final["incarnation"] == 2
    assert final["commits"] == len(acked_after_restart)
    assert result["zombie_exit_s"] is not None
    assert "error" in result["direct_to_old_address"]  # nothing answers there any more
    commits = assert_exactly_once(result["uri"], result["acked"])
    assert final["version"] == max(commits) == len(result["acked"])


def test_tables_spread_over_the_hosts_follow_nodes_that_join_and_leave(
    observed: dict[str, Any],
) -> None:
    result = scenario(observed, "warehouse")
    spread, joined, after = result["spread"], result["joined"], result["after"]
    assert len(set(spread.values())) >= 2  # the tables are spread over the workers
    moved_in = {uri for uri, node in joined.items() if node == result["added_node"]}
    assert moved_in  # a node joined: some tables moved to its hosts...
    assert all(spread[uri] == joined[uri] for uri in spread if uri not in moved_in)  # only those
    assert result["removed_node"] not in after.values()  # ...and left with it
    entries = [entry for log in result["writers"] for entry in log]
    assert [e for e in entries if "error" in e] == []
    for uri in result["uris"]:
        mine = [e for e in entries if e["uri"] == uri]
        after_join = [{"path": "after-join.parquet", "version": 1}]
        commits = assert_exactly_once(uri, after_join + mine)
        assert max(commits) == 1 + len(mine)


def test_checkpoint_actor_lost_mid_build_leaves_no_partial_checkpoint(
    observed: dict[str, Any],
) -> None:
    import deltalake

    from raydelta.storage.snapshot import load_snapshot

    result = scenario(observed, "checkpoint")
    assert result["shards_done_at_removal"] is not None
    assert result["node_after"] != result["node_before"]
    root = Path(result["path"])
    log = root / "_delta_log"
    version = result["built"]["version"] + 1  # copy_table(v2=True) added a commit
    assert result["second"]["version"] == version
    assert result["second"]["kind"] == "v2"

    # every top-level V2 checkpoint file names only sidecars that exist
    tops = sorted(log.glob(f"{version:020d}.checkpoint.*.json"))
    assert tops
    for top in tops:
        sidecars = [
            json.loads(line)["sidecar"]["path"]
            for line in top.read_text().splitlines()
            if '"sidecar"' in line
        ]
        assert sidecars and all((log / "_sidecars" / s).is_file() for s in sidecars), top
    last = json.loads((log / "_last_checkpoint").read_text())
    assert last["version"] == version
    named = last["v2Checkpoint"]["path"]
    assert (log / named).is_file()

    # the restarted CheckpointActor's shards, counted by Ray metrics on its node
    second = result["second"]
    shards = [k for k in result["metrics"] if k.startswith("ray_raydelta_checkpoint_shards_done")]
    assert shards, result["metrics"]
    assert result["metrics"][shards[0]] >= second["sidecarsWritten"] + second["sidecarsReused"]

    expected = result["built"]["num_live_files"]
    assert load_snapshot(str(root)).num_files == expected
    assert len(deltalake.DeltaTable(str(root)).file_uris()) == expected
