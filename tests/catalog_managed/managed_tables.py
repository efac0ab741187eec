"""Hand-built catalog-managed tables for the client-rule tests.

Every commit is written from actions built here, and the tests derive their
expectations from those same actions (:func:`expected_files`), never from
hard-coded counts.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    Metadata,
    Protocol,
    RemoveFile,
    serialize_actions,
)
from raydelta.protocol.catalog_managed import RatifiedCommit, staged_commit_path
from raydelta.protocol.file_names import commit_name
from raydelta.storage.checkpoint.writer import write_checkpoint
from raydelta.storage.compaction import write_log_compaction
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import Snapshot, load_snapshot

SCHEMA_STRING = json.dumps(
    {
        "type": "struct",
        "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
    }
)
MANAGED_PROTOCOL = Protocol(
    minReaderVersion=3,
    minWriterVersion=7,
    readerFeatures=["catalogManaged"],
    writerFeatures=["catalogManaged", "inCommitTimestamp"],
)
ICT_ON = {"delta.enableInCommitTimestamps": "true"}
BASE_TIME = 1_700_000_000_000


def metadata(**configuration: str) -> Metadata:
    return Metadata(
        id="5fba94ed-9794-4965-ba6e-6ee3c0d22af9",
        schemaString=SCHEMA_STRING,
        partitionColumns=[],
        configuration={**ICT_ON, **configuration},
        createdTime=BASE_TIME,
    )


def commit_info(version: int, *, txn: str | None = None) -> CommitInfo:
    return CommitInfo(
        inCommitTimestamp=BASE_TIME + 1000 * version,
        timestamp=BASE_TIME + 1000 * version,
        operation="WRITE",
        txnId=txn or f"txn-{version}",
    )


def add(path: str, version: int) -> AddFile:
    return AddFile(
        path=path,
        partitionValues={},
        size=100 + version,
        modificationTime=BASE_TIME + version,
        dataChange=True,
    )


def remove(path: str, version: int) -> RemoveFile:
    return RemoveFile(path=path, deletionTimestamp=BASE_TIME + version, dataChange=True)


def creation(version: int = 0) -> list[Action]:
    return [commit_info(version), MANAGED_PROTOCOL, metadata(), add(f"part-{version}.parquet", 0)]


def data_commit(version: int, *, tag: str = "") -> list[Action]:
    """Adds ``part-<v><tag>.parquet``; every third version also removes the
    file added two versions before (so reconciliation matters)."""
    actions: list[Action] = [commit_info(version), add(f"part-{version}{tag}.parquet", version)]
    if version % 3 == 0 and version >= 2:
        actions.append(remove(f"part-{version - 2}.parquet", version))
    return actions


def expected_files(commits: Sequence[Sequence[Action]]) -> set[str]:
    """Live paths after replaying ``commits`` in order (adds and removes only)."""
    live: set[str] = set()
    for actions in commits:
        for action in actions:
            if isinstance(action, AddFile):
                live.add(action.path)
            elif isinstance(action, RemoveFile):
                live.discard(action.path)
    return live


def live_paths(snapshot: Snapshot) -> set[str]:
    return set(snapshot.files.column("path").to_pylist())


def log_dir(root: Path) -> Path:
    path = root / "_delta_log"
    path.mkdir(parents=True, exist_ok=True)
    return path


def publish(root: Path, version: int, actions: Sequence[Action]) -> None:
    (log_dir(root) / commit_name(version)).write_bytes(serialize_actions(list(actions)))


def stage(root: Path, version: int, actions: Sequence[Action], *, partial: bool = False) -> str:
    """Write a staged commit; returns its path relative to the table root."""
    relative = staged_commit_path(version, str(uuid.uuid4()))
    target = root / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    data = serialize_actions(list(actions))
    target.write_bytes(data[: len(data) // 2] if partial else data)
    return relative


class SpecExample:
    """The table of the spec's example and what its catalog returns."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.uri = root.as_uri()
        self.commits: list[list[Action]] = [creation()] + [data_commit(v) for v in range(1, 8)]
        for version, actions in enumerate(self.commits):
            publish(root, version, actions)
            if version == 2:  # the checkpoint the catalog lets us write: published 2
                snap = load_snapshot(self.uri, latest_ratified_version=2)
                write_checkpoint(log_store_for(self.uri), snap.state, now_ms=BASE_TIME)
        write_log_compaction(log_store_for(self.uri), 3, 5, max_published_version=7)
        self.staged_7 = stage(root, 7, self.commits[7])  # ratified and published
        self.commits.append(data_commit(8))
        self.staged_8 = stage(root, 8, self.commits[8])  # ratified
        self.rejected_8 = stage(root, 8, data_commit(8, tag="-rejected"))
        self.unratified_10 = stage(root, 10, data_commit(10))
        self.partial_10 = stage(root, 10, data_commit(10, tag="-partial"), partial=True)
        changed = metadata(**{"delta.appendOnly": "false", "owner": "catalog"})
        self.commits.append([commit_info(9), changed, *data_commit(9)[1:]])
        self.ratified = [
            RatifiedCommit.staged(7, self.staged_7),
            RatifiedCommit.staged(8, self.staged_8),
            RatifiedCommit.inline(9, self.commits[9]),
        ]
