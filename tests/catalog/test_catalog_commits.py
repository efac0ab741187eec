"""Commits through the catalog: concurrent writers, conflicts, staged commits,
the backlog bound, upgrading a filesystem table, the rules of the feature."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pytest
import ray

import raydelta
from raydelta.catalog import Catalog
from raydelta.protocol.actions import AddFile, CommitInfo, Protocol, parse_actions
from raydelta.protocol.errors import (
    ConcurrentDeleteDeleteException,
    ProtocolDowngradeError,
    PublishBacklogError,
)

SCHEMA = pa.schema([("date", pa.string()), ("value", pa.int64())])
NewCatalog = Callable[..., Catalog]


def add(path: str, date: str = "2024-01-01") -> AddFile:
    return AddFile.model_validate(
        {
            "path": path,
            "partitionValues": {"date": date},
            "size": 100,
            "modificationTime": 1_700_000_000_000,
            "dataChange": True,
            "stats": json.dumps({"numRecords": 1}),
        }
    )


def published_txns(uri: str) -> dict[str, list[int]]:
    log = Path(uri.removeprefix("file://")) / "_delta_log"
    found: dict[str, list[int]] = {}
    for name in os.listdir(log):
        if len(name) == 25 and name.endswith(".json"):
            info = parse_actions((log / name).read_bytes())[0]
            assert isinstance(info, CommitInfo) and info.txn_id
            found.setdefault(info.txn_id, []).append(int(name[:20]))
    return found


def test_concurrent_writers_are_rebased(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = catalog.create_table("c", SCHEMA, partition_by=["date"])
    versions: list[int] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        handle = catalog.open_table("c")
        for i in range(5):
            txn = handle.transaction().add(add(f"date=2024-01-01/w{w}-{i}.parquet"))
            version = txn.commit()
            with lock:
                versions.append(version)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(versions) == list(range(1, 21))
    assert table.snapshot().num_files == 20
    assert ray.get(catalog.actor.wait_published.remote("c", 20))
    txns = published_txns(table.uri)
    assert sorted(v for vs in txns.values() for v in vs) == list(range(21))
    assert all(len(vs) == 1 for vs in txns.values())


def test_conflict_carries_the_missed_commits(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = catalog.create_table("k", SCHEMA, partition_by=["date"])
    table.transaction().add(add("date=2024-01-01/a.parquet")).commit()
    first, second = table.transaction(), table.transaction()
    file = table.snapshot().files.to_pylist()[0]["path"]
    first.remove(file).commit()
    with pytest.raises(ConcurrentDeleteDeleteException) as caught:
        second.remove(file).commit()
    missed = caught.value.missed_commits  # type: ignore[attr-defined]
    assert [c.version for c in missed] == [2]
    assert missed[0].actions is not None
    assert any(getattr(a, "path", None) == file for a in missed[0].actions)
    assert table.version() == 2


def test_staged_commit_ratified_as_is_or_restaged(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    catalog.create_table("s", SCHEMA, partition_by=["date"])
    table = catalog.open_table("s", commit_mode="staged")
    ray.get(catalog.actor.pause_publishing.remote(True))
    first, second = table.transaction(), table.transaction()
    first.add(add("date=2024-01-01/a.parquet"))
    second.add(add("date=2024-01-02/b.parquet", "2024-01-02"))
    assert first.commit() == 1
    assert second.commit() == 2  # staged for version 1, rebased to 2
    held = catalog.get_ratified_commits("s")
    assert held.latest_version == 2
    assert [c.version for c in held.commits] == [1, 2]
    staged_dir = Path(table.uri.removeprefix("file://")) / "_delta_log" / "_staged_commits"
    names = sorted(os.listdir(staged_dir))
    paths = [c.path for c in held.commits]
    assert all(p is not None for p in paths)
    # the winner's own file was ratified; the loser's was re-staged under 2, its
    # version-1 file deleted: only the two ratified files remain
    assert sorted(p.rsplit("/", 1)[-1] for p in paths if p) == names
    assert names[0].startswith(f"{1:020d}.") and names[1].startswith(f"{2:020d}.")
    info = parse_actions((staged_dir / names[1]).read_bytes())[0]
    assert isinstance(info, CommitInfo) and info.txn_id == second.txn_id
    assert table.snapshot().num_files == 2  # read from the staged files
    ray.get(catalog.actor.pause_publishing.remote(False))
    assert ray.get(catalog.actor.wait_published.remote("s", 2))
    assert catalog.get_ratified_commits("s").commits == ()


def test_backlog_bound_is_retryable(new_catalog: NewCatalog) -> None:
    catalog = new_catalog(max_unpublished=2)
    table = catalog.create_table("b", SCHEMA, partition_by=["date"])
    assert ray.get(catalog.actor.wait_published.remote("b", 0))
    ray.get(catalog.actor.pause_publishing.remote(True))
    table.append_files(add("date=2024-01-01/1.parquet"))
    table.append_files(add("date=2024-01-01/2.parquet"))
    with pytest.raises(PublishBacklogError) as caught:
        table.append_files(add("date=2024-01-01/3.parquet"), txn_id="third")
    assert caught.value.setting == "max_unpublished" and caught.value.backlog == 2
    assert table.version() == 2
    ray.get(catalog.actor.pause_publishing.remote(False))
    assert ray.get(catalog.actor.wait_published.remote("b", 2))
    assert table.append_files(add("date=2024-01-01/3.parquet"), txn_id="third") == 3


def test_upgrade_filesystem_table_then_filesystem_commits_refused(
    new_catalog: NewCatalog, tmp_path: Path
) -> None:
    path = str(tmp_path / "fs-table")
    plain = raydelta.create_table(path, SCHEMA, partition_by=["date"])
    plain.append_files(add("date=2024-01-01/x.parquet"))
    catalog = new_catalog()
    managed = catalog.upgrade_table("up", path)
    assert catalog.resolve("up").catalog_managed
    assert managed.version() == 2
    assert managed.append_files(add("date=2024-01-01/y.parquet")) == 3
    with pytest.raises(raydelta.CatalogManagedTableError):
        plain.append_files(add("date=2024-01-01/z.parquet"))
    assert managed.snapshot().num_files == 2
    # downgrade: a protocol without catalogManaged is refused, table unchanged
    txn = managed.transaction()
    txn._actions.append(
        Protocol(
            minReaderVersion=3,
            minWriterVersion=7,
            readerFeatures=[],
            writerFeatures=["inCommitTimestamp"],
        )
    )
    with pytest.raises(ProtocolDowngradeError):
        txn.commit()
    assert managed.version() == 3


def test_retried_txn_gets_its_original_version(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = catalog.create_table("r", SCHEMA, partition_by=["date"])
    first = table.append_files(add("date=2024-01-01/1.parquet"), txn_id="same")
    table.append_files(add("date=2024-01-01/2.parquet"))
    assert table.append_files(add("date=2024-01-01/1.parquet"), txn_id="same") == first
    assert table.version() == 2


def test_drop_and_list(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    catalog.create_table("a", SCHEMA)
    catalog.create_table("b", SCHEMA)
    with pytest.raises(raydelta.TableAlreadyExistsError):
        catalog.create_table("a", SCHEMA)
    assert [e.name for e in catalog.list_tables()] == ["a", "b"]
    dropped = catalog.drop_table("a")
    assert [e.name for e in catalog.list_tables()] == ["b"]
    assert os.path.isdir(dropped.location.removeprefix("file://"))  # soft delete
    with pytest.raises(raydelta.TableNotFoundError):
        catalog.open_table("a")


def test_staged_garbage_collected(new_catalog: NewCatalog) -> None:
    catalog = new_catalog()
    table = catalog.create_table("g", SCHEMA, partition_by=["date"])
    table.append_files(add("date=2024-01-01/1.parquet"))
    staged_dir = Path(table.uri.removeprefix("file://")) / "_delta_log" / "_staged_commits"
    staged_dir.mkdir(exist_ok=True)
    orphan = staged_dir / f"{1:020d}.00000000-0000-4000-8000-000000000000.json"
    orphan.write_text('{"commitInfo":{}}\n')
    young = staged_dir / f"{9:020d}.00000000-0000-4000-8000-000000000001.json"
    young.write_text('{"commitInfo":{}}\n')
    deleted = ray.get(
        catalog.actor.collect_staged_garbage.remote("g", catalog.token, older_than_s=0)
    )
    assert sorted(deleted) == sorted(f"_staged_commits/{p.name}" for p in (orphan, young))
    assert not orphan.exists()
    kept = ray.get(catalog.actor.collect_staged_garbage.remote("g", catalog.token))
    assert kept == []
