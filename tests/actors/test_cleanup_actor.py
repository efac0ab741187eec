"""End to end: the CleanupActor on a real local Ray cluster.

On demand and on policy (after a checkpoint), listing fanned out to Ray tasks,
the CLI, and crashes in the middle of a vacuum and of a metadata cleanup
(crash-once fault points): nothing live or protected is ever deleted, every
retained version stays readable, and the retried call finishes the work.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from raydelta.actors.cleanup.actor import actor_name, ensure_cleaner, ray_lister
from raydelta.actors.cluster import NAMESPACE
from raydelta.actors.faults import FAULT_FILE_ENV, arm
from raydelta.actors.table.client import TableClient
from raydelta.protocol.actions import AddFile
from raydelta.protocol.file_names import commit_name
from raydelta.storage.checkpoint.writer import write_checkpoint
from raydelta.storage.cleanup.listing import list_sequential
from raydelta.storage.history import load_history
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot

deltalake = pytest.importorskip("deltalake")

DAY_MS = 86_400_000
OLD = int(time.time() * 1000) - 40 * DAY_MS


def local(uri: str) -> Path:
    return Path(uri[len("file://") :])


def touch(path: Path, at_ms: int = OLD) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x")
    os.utime(path, ns=(at_ms * 1_000_000, at_ms * 1_000_000))


def age_commits(uri: str, at_ms: int = OLD) -> None:
    log = local(uri) / "_delta_log"
    for name in os.listdir(log):
        if name.endswith(".json") and len(name) == len(commit_name(0)):
            os.utime(log / name, ns=(at_ms * 1_000_000, at_ms * 1_000_000))


@pytest.fixture
def reap_cleaners(reap_actors: str) -> Iterator[str]:
    """Kill this test's detached cleanup actors at teardown (table actors: reap_actors)."""
    import ray

    yield reap_actors
    prefix = actor_name(reap_actors)
    for entry in ray.util.list_named_actors(all_namespaces=True):
        if entry["namespace"] == NAMESPACE and entry["name"].startswith(prefix):
            try:
                ray.kill(ray.get_actor(entry["name"], namespace=NAMESPACE), no_restart=True)
            except ValueError:
                continue


def table_with_tombstones(
    new_table: Callable[..., tuple[str, TableClient]],
    make_add: Callable[..., AddFile],
    *,
    dates: int = 3,
    per_date: int = 4,
) -> tuple[str, TableClient, set[str], set[str]]:
    """A table whose first file of each date is live and the others were removed
    long ago; returns ``(uri, table, live paths, expired paths)``, all on disk."""
    uri, table = new_table()
    root = local(uri)
    adds = [
        make_add(f"date=2024-01-0{d}/part-{i}.parquet", date=f"2024-01-0{d}")
        for d in range(1, dates + 1)
        for i in range(per_date)
    ]
    table.transaction().add(*adds).commit()
    removed = [a for a in adds if not a.path.endswith("part-0.parquet")]
    txn = table.transaction()
    for file in removed:
        txn.remove(file, deletion_timestamp=OLD)
    txn.commit(operation="DELETE")
    for file in adds:
        touch(root / file.path)
    return uri, table, {a.path for a in adds} - {r.path for r in removed}, {r.path for r in removed}


def test_on_demand_vacuum_and_cleanup(
    new_table: Any, make_add: Any, reap_cleaners: str, ray_cluster: Any
) -> None:
    uri, table, live, expired = table_with_tombstones(new_table, make_add)
    touch(local(uri) / "stray.parquet")
    cleaner = ensure_cleaner(table)
    assert ray_cluster.get_actor(actor_name(uri), namespace=NAMESPACE) is not None
    assert ensure_cleaner(table)._actor_id == cleaner._actor_id  # one actor per table

    lite = ray_cluster.get(cleaner.vacuum.remote(lite=True, dry_run=True))
    assert set(lite.files) == expired and lite.mode == "lite"
    full = ray_cluster.get(cleaner.vacuum.remote(dry_run=True))
    assert set(full.files) == expired | {"stray.parquet"}
    version_before = table.version()
    done = ray_cluster.get(cleaner.vacuum.remote())
    assert set(done.files) == expired | {"stray.parquet"} and not done.dry_run
    assert all((local(uri) / p).exists() for p in live)
    assert not any((local(uri) / p).exists() for p in expired)
    # like delta-spark, a VACUUM that deletes is recorded by two commitInfo-only commits
    history = load_history(table.uri, limit=2)
    assert [h.version for h in history] == [version_before + 2, version_before + 1]
    end, start = history
    assert (start.operation, end.operation) == ("VACUUM START", "VACUUM END")
    assert start.commit_info["operationMetrics"] == {
        "numFilesToDelete": str(len(done.files)),
        "sizeOfDataToDelete": str(done.total_bytes),
    }
    assert start.commit_info["operationParameters"]["specifiedRetentionMillis"] == done.retention_ms
    assert end.commit_info["operationParameters"] == {"status": "COMPLETED"}
    assert end.commit_info["operationMetrics"]["numDeletedFiles"] == str(len(done.files))
    assert load_snapshot(uri).num_files == len(live)  # no file action in either commit

    report = ray_cluster.get(cleaner.cleanup.remote(dry_run=True))
    assert report.skipped is not None  # every commit is fresh
    reports = ray_cluster.get(cleaner.last_reports.remote())
    assert reports["vacuum"]["files"] == done.files
    assert ray_cluster.get(cleaner.progress.remote())["state"] == "idle"
    before_dry_run = table.version()
    ray_cluster.get(cleaner.vacuum.remote(dry_run=True))
    assert table.version() == before_dry_run  # a dry run records nothing


def test_policy_cleanup_runs_after_a_checkpoint(
    new_table: Any, make_add: Any, reap_cleaners: str, ray_cluster: Any
) -> None:
    uri, table = new_table()
    for index in range(6):
        table.transaction().add(make_add(f"date=2024-01-01/p{index}.parquet")).commit()
    ensure_cleaner(table)
    table.transaction().add(make_add("date=2024-01-01/before.parquet")).commit()
    assert not (local(uri) / "_delta_log" / "_last_checkpoint").exists()  # no checkpoint yet
    age_commits(uri)
    store = log_store_for(uri)
    write_checkpoint(store, load_snapshot(uri).state, now_ms=int(time.time() * 1000))
    checkpoint_version = table.version()
    table.transaction().add(make_add("date=2024-01-01/after.parquet")).commit()

    log = local(uri) / "_delta_log"
    cleaner = ensure_cleaner(table)
    deadline = time.monotonic() + 30
    report = None
    while report is None and time.monotonic() < deadline:
        report = ray_cluster.get(cleaner.last_reports.remote())["cleanup"]
        time.sleep(0.1)
    assert report is not None, "no cleanup ran after the checkpoint"
    assert report["keptCheckpointVersion"] == checkpoint_version
    assert not any((log / commit_name(v)).exists() for v in range(checkpoint_version))
    assert (log / commit_name(checkpoint_version)).exists()
    latest = table.version()
    for version in range(checkpoint_version, latest + 1):
        ours = load_snapshot(uri, version=version).num_files
        theirs = deltalake.DeltaTable(uri, version=version)
        assert pa.table(theirs.get_add_actions(flatten=True)).num_rows == ours


def test_parallel_listing_through_ray_tasks_matches(
    new_table: Any, make_add: Any, reap_cleaners: str, ray_cluster: Any
) -> None:
    uri, table, live, expired = table_with_tombstones(new_table, make_add, dates=5)
    for d in range(1, 6):
        touch(local(uri) / f"date=2024-01-0{d}" / "stray.parquet")
    store = log_store_for(uri)
    partitions = frozenset({"date"})
    sequential = list_sequential(store, partitions, live)
    fanned = ray_lister(uri, None, tasks=2)(store, partitions, live)
    assert sorted(fanned.files.column("path").to_pylist()) == sorted(
        sequential.files.column("path").to_pylist()
    )
    assert fanned.num_seen == sequential.num_seen == len(live) + len(expired) + 5

    cleaner = ensure_cleaner(table)
    parallel = ray_cluster.get(cleaner.vacuum.remote(dry_run=True, parallel=True))
    serial = ray_cluster.get(cleaner.vacuum.remote(dry_run=True, parallel=False))
    assert parallel.files == serial.files
    assert set(parallel.files) == expired | {
        f"date=2024-01-0{d}/stray.parquet" for d in range(1, 6)
    }


def test_killed_mid_vacuum_deletes_nothing_protected_and_the_retry_finishes(
    new_table: Any, make_add: Any, reap_cleaners: str, ray_cluster: Any, tmp_path: Path
) -> None:
    uri, table, live, expired = table_with_tombstones(new_table, make_add)
    # A fresh tombstone: its file is protected by the retention.
    protected = make_add("date=2024-01-09/fresh.parquet", date="2024-01-09")
    table.transaction().add(protected).commit()
    touch(local(uri) / protected.path)
    table.transaction().remove(protected).commit(operation="DELETE")
    rows_before = load_snapshot(uri).num_files

    fault_file = tmp_path / "faults.json"
    arm(str(fault_file), "mid_vacuum")
    cleaner = ensure_cleaner(
        table, runtime_env={"env_vars": {FAULT_FILE_ENV: str(fault_file)}}, subscribe=False
    )
    report = ray_cluster.get(cleaner.vacuum.remote(), timeout=120)

    assert json.loads(fault_file.read_text()) == []  # the actor did die mid-vacuum
    assert len(report.files) == len(expired) - 1  # the rerun found one already gone
    assert not any((local(uri) / p).exists() for p in expired)
    assert all((local(uri) / p).exists() for p in live)
    assert (local(uri) / protected.path).exists()
    assert load_snapshot(uri).num_files == rows_before
    assert pa.table(deltalake.DeltaTable(uri).get_add_actions(flatten=True)).num_rows == rows_before


def test_killed_mid_cleanup_keeps_retained_versions_and_the_retry_finishes(
    new_table: Any, make_add: Any, reap_cleaners: str, ray_cluster: Any, tmp_path: Path
) -> None:
    uri, table = new_table()
    for index in range(8):
        table.transaction().add(make_add(f"date=2024-01-01/p{index}.parquet")).commit()
    store = log_store_for(uri)
    write_checkpoint(store, load_snapshot(uri, version=5).state, now_ms=int(time.time() * 1000))
    age_commits(uri)
    latest = table.version()
    expected = {v: load_snapshot(uri, version=v).num_files for v in range(5, latest + 1)}

    fault_file = tmp_path / "faults.json"
    arm(str(fault_file), "mid_cleanup")
    cleaner = ensure_cleaner(
        table, runtime_env={"env_vars": {FAULT_FILE_ENV: str(fault_file)}}, subscribe=False
    )
    report = ray_cluster.get(cleaner.cleanup.remote(), timeout=120)

    assert json.loads(fault_file.read_text()) == []  # the actor did die mid-cleanup
    assert report.kept_checkpoint_version == 5
    assert report.deleted == [commit_name(v) for v in range(1, 5)]  # 0 went before the crash
    log = local(uri) / "_delta_log"
    assert not any((log / commit_name(v)).exists() for v in range(5))
    for version, num_files in expected.items():
        assert load_snapshot(uri, version=version).num_files == num_files
        theirs = deltalake.DeltaTable(uri, version=version).get_add_actions(flatten=True)
        assert pa.table(theirs).num_rows == num_files


def test_cli_vacuum_and_cleanup(
    new_table: Any,
    make_add: Any,
    reap_cleaners: str,
    ray_cluster: Any,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from raydelta.cli import main

    uri, _, _, expired = table_with_tombstones(new_table, make_add)
    assert main(["vacuum", uri, "--dry-run", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["command"] == "vacuum" and document["dryRun"] is True
    assert set(document["files"]) == expired and document["numFiles"] == len(expired)

    assert main(["vacuum", uri, "--retention", "1 hour", "--no-dry-run"]) == 1
    captured = capsys.readouterr()
    assert captured.err.splitlines()[-1].startswith("RetentionTooShortError:")

    assert main(["vacuum", uri, "--lite"]) == 0  # a dry run by default, as in the API
    assert "would delete" in capsys.readouterr().out
    assert all((local(uri) / p).exists() for p in expired)
    assert main(["vacuum", uri, "--lite", "--no-dry-run"]) == 0
    assert "deleted" in capsys.readouterr().out
    assert not any((local(uri) / p).exists() for p in expired)
    orphan = local(uri) / ".gone.parquet.crc"  # a Hadoop checksum file left by another tool
    orphan.write_bytes(b"crc\x00\x00\x00\x02\x00")
    month_ago = time.time() - 30 * 86_400
    os.utime(orphan, (month_ago, month_ago))
    assert main(["vacuum", uri]) == 0
    assert "would delete 1 orphaned .crc files" in capsys.readouterr().out
    assert main(["vacuum", uri, "--no-dry-run"]) == 0
    assert "deleted    1 orphaned .crc files" in capsys.readouterr().out and not orphan.exists()

    assert main(["cleanup", uri, "--retention", "0 days", "--dry-run", "--json"]) == 0
    cleanup = json.loads(capsys.readouterr().out)
    assert cleanup["command"] == "cleanup" and cleanup["dryRun"] is True
    assert main(["cleanup", uri, "--retention", "3 months"]) == 1
    assert capsys.readouterr().err.splitlines()[-1].startswith("InvalidArgumentError:")

    missing = str(Path(local(uri)).parent / "no-such-table")
    assert main(["vacuum", missing, "--dry-run"]) == 1
    assert capsys.readouterr().err.splitlines()[-1].startswith("TableNotFoundError:")
