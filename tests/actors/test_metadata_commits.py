"""actors.catalog.unity.metadata_commits: the last metadata-changing commit that
``loadTable`` reports, found backwards, remembered, and unknown once unreadable."""

from __future__ import annotations

from collections.abc import Sequence

from raydelta.actors.catalog.unity.metadata_commits import (
    CHUNK,
    LastMetadataCommits,
    MetadataCommit,
)
from raydelta.protocol.actions import Action, AddFile, CommitInfo, Metadata


def info(ict: int) -> CommitInfo:
    return CommitInfo.model_validate({"inCommitTimestamp": ict, "operation": "WRITE"})


def metadata() -> Metadata:
    return Metadata.model_validate(
        {
            "id": "t",
            "format": {"provider": "parquet", "options": {}},
            "schemaString": '{"type":"struct","fields":[]}',
            "partitionColumns": [],
            "configuration": {},
        }
    )


def add(version: int) -> AddFile:
    return AddFile.model_validate(
        {
            "path": f"{version}.parquet",
            "partitionValues": {},
            "size": 1,
            "modificationTime": 0,
            "dataChange": True,
        }
    )


class Log:
    """Commits by version; ``gone`` ones raise as a cleaned-up log does."""

    def __init__(self, with_metadata: set[int], latest: int, gone: int = -1) -> None:
        self.commits = {
            v: [info(1000 + v), metadata() if v in with_metadata else add(v)]
            for v in range(latest + 1)
        }
        self.gone = gone
        self.reads: list[range] = []

    def read(self, versions: range) -> Sequence[Sequence[Action]]:
        self.reads.append(versions)
        if versions.start <= self.gone:
            raise FileNotFoundError(versions.start)
        return [self.commits[v] for v in versions]


def test_found_backwards_then_only_newer_versions_read() -> None:
    log = Log({0, 5}, latest=3 * CHUNK)
    found = LastMetadataCommits()
    assert found.find("t", 3 * CHUNK, log.read) == MetadataCommit(5, 1005)
    assert log.reads[0] == range(2 * CHUNK + 1, 3 * CHUNK + 1)  # newest chunk first
    log.reads.clear()
    log.commits[3 * CHUNK + 1] = [info(9), add(0)]
    assert found.find("t", 3 * CHUNK + 1, log.read) == MetadataCommit(5, 1005)
    assert log.reads == [range(3 * CHUNK + 1, 3 * CHUNK + 2)]  # data only: unchanged
    log.commits[3 * CHUNK + 2] = [info(7), metadata()]
    assert found.find("t", 3 * CHUNK + 2, log.read) == MetadataCommit(3 * CHUNK + 2, 7)


def test_unreadable_history_is_unknown() -> None:
    log = Log({0}, latest=10, gone=3)  # commits 0-3 cleaned up
    assert LastMetadataCommits().find("t", 10, log.read) is None


def test_found_past_a_cleaned_up_prefix() -> None:
    log = Log({0, 8}, latest=10, gone=3)  # commits 0-3 cleaned up; 8 still readable
    assert LastMetadataCommits().find("t", 10, log.read) == MetadataCommit(8, 1008)
