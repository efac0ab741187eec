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
from raydelta.protocol.catalog_managed import staged_commit_path
from raydelta.protocol.file_names import commit_name

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
