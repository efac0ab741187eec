"""Metadata cleanup deletes exactly the expired log files and keeps every retained version
readable, for us and for deltalake (delta-rs), whatever the checkpoint naming scheme.

Tables are built commit by commit (JSON lines written here), checkpointed with
our checkpoint writer, and aged with ``os.utime`` (or with in-commit
timestamps). Expected files per version come from the builder's own record
of what each commit added and removed.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from raydelta.protocol.errors import (
    CorruptLogError,
    UnsupportedTableFeatureException,
    VersionNotFoundError,
)
from raydelta.protocol.file_names import (
    LAST_CHECKPOINT_NAME,
    checksum_name,
    classic_checkpoint_name,
    commit_name,
    compaction_name,
    hadoop_crc_name,
    multipart_checkpoint_name,
    parse_log_file_name,
    staged_commit_name,
)
from raydelta.storage.checkpoint.writer import (
    read_checkpoint_sidecars,
    write_v1_checkpoint,
    write_v2_checkpoint_single_process,
)
from raydelta.storage.cleanup.metadata import cleanup_metadata
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot
from tests.hadoop_crc import crc_bytes, disagreeing_crcs, orphan_crcs, write_crc

deltalake = pytest.importorskip("deltalake")

DAY_MS = 86_400_000
NOW = int(time.time() * 1000)
OLD = NOW - 40 * DAY_MS  # expired under the default 30 days
RECENT = NOW - 2 * 3_600_000
SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [{"name": "id", "type": "long", "nullable": True, "metadata": {}}],
    }
)


class LogBuilder:
    """Writes a table's log by hand and remembers the live files of every version."""

    def __init__(
        self,
        root: Path,
        *,
        properties: dict[str, str] | None = None,
        reader_features: list[str] | None = None,
        writer_features: list[str] | None = None,
        ict: bool = False,
        created_ms: int | None = None,
    ) -> None:
        self.root = root
        self.log = root / "_delta_log"
        self.log.mkdir(parents=True)
        self.ict = ict
        self.live: dict[int, set[str]] = {}
        self.times: dict[int, int] = {}
        config = dict(properties or {})
        if ict:
            config["delta.enableInCommitTimestamps"] = "true"
        protocol: dict[str, Any] = {"minReaderVersion": 1, "minWriterVersion": 2}
        if reader_features or writer_features or ict:
            protocol = {
                "minReaderVersion": 3 if reader_features else 1,
                "minWriterVersion": 7,
                "writerFeatures": sorted(
                    set(writer_features or []) | ({"inCommitTimestamp"} if ict else set())
                ),
            }
            if reader_features:
                protocol["readerFeatures"] = sorted(reader_features)
        metadata = {
            "id": str(uuid.UUID(int=42)),
            "format": {"provider": "parquet", "options": {}},
            "schemaString": SCHEMA,
            "partitionColumns": [],
            "configuration": config,
            "createdTime": OLD,
        }
        self.commit([{"protocol": protocol}, {"metaData": metadata}], set(), at_ms=created_ms)

    @property
    def version(self) -> int:
        return max(self.live)

    def commit(
        self, actions: list[dict[str, Any]], live: set[str], *, at_ms: int | None = None
    ) -> int:
        version = len(self.live)
        stamp = at_ms if at_ms is not None else NOW - 60_000 + version
        info: dict[str, Any] = {"timestamp": stamp, "operation": "WRITE"}
        if self.ict:
            info["inCommitTimestamp"] = stamp
        lines = [{"commitInfo": info}, *actions]
        path = self.log / commit_name(version)
        path.write_text("".join(json.dumps(a) + "\n" for a in lines))
        self.live[version] = set(live)
        self.times[version] = stamp
        return version

    def append(
        self, count: int = 1, *, remove: Iterable[str] = (), at_ms: int | None = None
    ) -> int:
        version = len(self.live)
        live = set(self.live[version - 1])
        actions: list[dict[str, Any]] = []
        for path in remove:
            live.discard(path)
            actions.append({"remove": {"path": path, "deletionTimestamp": NOW, "dataChange": True}})
        for index in range(count):
            path = f"part-{version:03d}-{index}.parquet"
            live.add(path)
            actions.append(
                {
                    "add": {
                        "path": path,
                        "partitionValues": {},
                        "size": 100 + index,
                        "modificationTime": NOW,
                        "dataChange": True,
                        "stats": json.dumps({"numRecords": 1}),
                    }
                }
            )
        return self.commit(actions, live, at_ms=at_ms)

    def age(self, versions: Iterable[int], at_ms: int) -> None:
        """Set the modification time of the commit files of ``versions``."""
        for version in versions:
            path = self.log / commit_name(version)
            os.utime(path, ns=(at_ms * 1_000_000, (at_ms + version) * 1_000_000))

    def age_file(self, name: str, at_ms: int) -> None:
        os.utime(self.log / name, ns=(at_ms * 1_000_000, at_ms * 1_000_000))

    # --- checkpoints -------------------------------------------------------------------------

    def v1_checkpoint(self, version: int) -> str:
        store = log_store_for(str(self.root))
        write_v1_checkpoint(store, load_snapshot(str(self.root), version=version).state, now_ms=NOW)
        return classic_checkpoint_name(version)

    def multipart_checkpoint(
        self, version: int, parts: int = 2, *, keep: int | None = None
    ) -> list[str]:
        """A V1 checkpoint split into ``parts`` files (only ``keep`` of them when given)."""
        classic = self.log / self.v1_checkpoint(version)
        table = pq.read_table(classic)
        classic.unlink()
        names = []
        size = -(-table.num_rows // parts)
        for part in range(1, parts + 1):
            name = multipart_checkpoint_name(version, part, parts)
            if keep is None or part <= keep:
                pq.write_table(table.slice((part - 1) * size, size), self.log / name)
                names.append(name)
        return names

    def v2_checkpoint(self, version: int, *, per_sidecar: int = 2) -> str:
        store = log_store_for(str(self.root))
        before = set(os.listdir(self.log))
        write_v2_checkpoint_single_process(
            store,
            load_snapshot(str(self.root), version=version).state,
            now_ms=NOW,
            target_actions_per_sidecar=per_sidecar,
        )
        (name,) = [n for n in set(os.listdir(self.log)) - before if ".checkpoint." in n]
        return name

    def compaction(self, start: int, end: int) -> str:
        """The reconciled actions of commits ``start..end`` (the last action per path wins)."""
        by_path: dict[str, str] = {}
        others: list[str] = []
        for version in range(start, end + 1):
            for line in (self.log / commit_name(version)).read_text().splitlines():
                action = json.loads(line)
                body = action.get("add") or action.get("remove")
                if body is not None:
                    by_path[body["path"]] = line
                elif "commitInfo" not in action:
                    others.append(line)
        lines = others + list(by_path.values())
        name = compaction_name(start, end)
        (self.log / name).write_text("".join(line + "\n" for line in lines))
        return name

    def checksum(self, version: int) -> str:
        name = checksum_name(version)
        body = {
            "tableSizeBytes": 0,
            "numFiles": len(self.live[version]),
            "numMetadata": 1,
            "numProtocol": 1,
        }
        (self.log / name).write_text(json.dumps(body))
        return name

    def staged(self, version: int) -> str:
        name = staged_commit_name(version, str(uuid.uuid4()))
        (self.log / "_staged_commits").mkdir(exist_ok=True)
        (self.log / name).write_text((self.log / commit_name(version)).read_text())
        return name

    # --- views -----------------------------------------------------------------------------------

    def log_names(self) -> set[str]:
        out = set()
        for directory, _, files in os.walk(self.log):
            for file in files:
                out.add(os.path.relpath(os.path.join(directory, file), self.log))
        return out


def deltalake_files(table: Any) -> set[str]:
    import pyarrow as pa

    return set(pa.table(table.get_add_actions(flatten=True)).column("path").to_pylist())


def assert_versions_readable(builder: LogBuilder, versions: Iterable[int]) -> None:
    """Time travel to each version gives the builder's live files, in ours and deltalake."""
    path = str(builder.root)
    for version in versions:
        ours = set(load_snapshot(path, version=version).files.column("path").to_pylist())
        assert ours == builder.live[version], f"ours at v{version}"
        theirs = deltalake_files(deltalake.DeltaTable(path, version=version))
        assert theirs == builder.live[version], f"deltalake at v{version}"
    latest = deltalake.DeltaTable(path)
    assert latest.version() == builder.version
    assert deltalake_files(latest) == builder.live[builder.version]


def assert_version_gone(builder: LogBuilder, version: int) -> None:
    with pytest.raises(VersionNotFoundError):
        load_snapshot(str(builder.root), version=version)


# --- classic, multi-part and V2 checkpoints --------------------------------------------------


def test_classic_checkpoints_delete_commits_checksums_and_compactions(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t")
    for version in range(1, 25):
        b.append(2, remove=[f"part-{version - 1:03d}-0.parquet"] if version > 1 else [])
    for version in range(25):
        b.checksum(version)
    cp5, cp10, cp20 = b.v1_checkpoint(5), b.v1_checkpoint(10), b.v1_checkpoint(20)
    early, mid, late = b.compaction(2, 4), b.compaction(9, 12), b.compaction(21, 23)
    b.age(range(0, 15), OLD)
    b.age(range(15, 25), RECENT)
    before = b.log_names()

    report = cleanup_metadata(str(b.root), now_ms=NOW)

    assert report.cutoff_version == 14
    assert report.kept_checkpoint_version == 10
    assert report.kept_checkpoint == [cp10]
    expected = {commit_name(v) for v in range(10)} | {checksum_name(v) for v in range(10)}
    expected |= {cp5, early, mid}  # compactions starting at or before the kept checkpoint
    assert set(report.deleted) == expected
    assert b.log_names() == before - expected
    assert {cp10, cp20, late, LAST_CHECKPOINT_NAME, commit_name(10)} <= b.log_names()
    assert report.counts == {"commit": 10, "checksum": 10, "checkpoint_classic": 1, "compaction": 2}
    assert report.retained_versions == (10, 24)
    assert_versions_readable(b, range(10, 25))
    assert_version_gone(b, 9)


def test_multipart_checkpoints_and_incomplete_parts(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t")
    for _ in range(1, 16):
        b.append(3)
    incomplete = b.multipart_checkpoint(4, parts=3, keep=1)
    older = b.multipart_checkpoint(6, parts=2)
    kept = b.multipart_checkpoint(10, parts=2)
    b.age(range(0, 12), OLD)

    report = cleanup_metadata(str(b.root), now_ms=NOW)

    assert report.kept_checkpoint == kept
    assert set(incomplete) | set(older) <= set(report.deleted)
    assert set(kept) <= b.log_names()
    assert_versions_readable(b, range(10, 16))


def test_uuid_v2_checkpoint_gets_classic_copy_and_sidecars_are_collected(tmp_path: Path) -> None:
    b = LogBuilder(
        tmp_path / "t",
        properties={"delta.checkpointPolicy": "v2"},
        reader_features=["v2Checkpoint"],
        writer_features=["v2Checkpoint"],
    )
    for _ in range(1, 16):
        b.append(3)
    old_cp = b.v2_checkpoint(5)
    kept_cp = b.v2_checkpoint(10)
    store = log_store_for(str(b.root))
    old_sidecars = {
        f"_sidecars/{s.path}" for s in read_checkpoint_sidecars(store, _log_file(b, old_cp))
    }
    kept_sidecars = {
        f"_sidecars/{s.path}" for s in read_checkpoint_sidecars(store, _log_file(b, kept_cp))
    }
    assert old_sidecars and kept_sidecars and not old_sidecars & kept_sidecars
    orphan_old = f"_sidecars/{uuid.uuid4()}.parquet"
    orphan_young = f"_sidecars/{uuid.uuid4()}.parquet"
    for orphan in (orphan_old, orphan_young):
        (b.log / orphan).write_bytes(b"PAR1")
    for name in old_sidecars | kept_sidecars | {orphan_old}:
        b.age_file(name, OLD)  # the kept checkpoint's sidecars are old, but referenced
    b.age(range(0, 13), OLD)

    report = cleanup_metadata(str(b.root), now_ms=NOW)

    assert report.kept_checkpoint == [kept_cp]
    assert report.classic_copy == classic_checkpoint_name(10)
    assert (b.log / classic_checkpoint_name(10)).exists()
    assert old_cp in report.deleted
    assert set(report.deleted) >= old_sidecars | {orphan_old}
    assert report.counts["sidecar"] == len(old_sidecars) + 1
    names = b.log_names()
    assert kept_sidecars | {orphan_young, kept_cp} <= names
    assert not (old_sidecars | {orphan_old}) & names
    assert_versions_readable(b, range(10, 16))

    # The classic copy alone rebuilds version 10, for us and for delta-rs.
    alone = tmp_path / "classic-only"
    shutil.copytree(b.root, alone)
    (alone / "_delta_log" / kept_cp).unlink()
    (alone / "_delta_log" / LAST_CHECKPOINT_NAME).unlink()
    assert set(load_snapshot(str(alone), version=10).files.column("path").to_pylist()) == b.live[10]
    assert deltalake_files(deltalake.DeltaTable(str(alone), version=10)) == b.live[10]
    assert deltalake_files(deltalake.DeltaTable(str(alone))) == b.live[b.version]


def _log_file(b: LogBuilder, name: str) -> Any:
    from raydelta.protocol.file_names import parse_log_file_name

    return parse_log_file_name(name, size=(b.log / name).stat().st_size)


def test_staged_commits_at_or_below_the_kept_checkpoint(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t")
    for _ in range(1, 14):
        b.append()
    b.v1_checkpoint(10)
    doomed = {b.staged(3), b.staged(10)}
    survivors = {b.staged(11), b.staged(13)}
    b.age(range(0, 12), OLD)

    report = cleanup_metadata(str(b.root), now_ms=NOW)

    assert doomed <= set(report.deleted)
    assert report.counts["staged_commit"] == 2
    assert survivors <= b.log_names()
    assert_versions_readable(b, range(10, 14))


# --- delta-rs 3692 -----------------------------------------------------------------------------


def test_delta_rs_3692_regression_no_checkpoint_before_cutoff(tmp_path: Path) -> None:
    """delta-rs 3692: commits 0..9 with the only checkpoint at 9 and commits 0..4
    expired; delta-rs' cleanup_metadata deleted 0..4 and left versions 5..8 without
    protocol and metadata ("No table metadata or protocol found"). Nothing may go."""
    b = LogBuilder(tmp_path / "t")
    for _ in range(1, 10):
        b.append()
    b.v1_checkpoint(9)
    b.age(range(0, 5), OLD)
    b.age(range(5, 10), RECENT)
    before = b.log_names()

    report = cleanup_metadata(str(b.root), now_ms=NOW)

    assert report.cutoff_version == 4
    assert report.deleted == []
    assert report.skipped is not None and "no complete checkpoint" in report.skipped
    assert b.log_names() == before
    assert_versions_readable(b, range(0, 10))


def test_delta_rs_3692_with_an_older_checkpoint_keeps_what_retained_versions_need(
    tmp_path: Path,
) -> None:
    b = LogBuilder(tmp_path / "t")
    for _ in range(1, 10):
        b.append()
    b.v1_checkpoint(3)
    b.v1_checkpoint(9)
    b.age(range(0, 5), OLD)
    b.age(range(5, 10), RECENT)

    report = cleanup_metadata(str(b.root), now_ms=NOW)

    assert report.kept_checkpoint_version == 3
    assert set(report.deleted) == {commit_name(v) for v in range(3)}
    assert_versions_readable(b, range(3, 10))


# --- timestamps --------------------------------------------------------------------------------


def test_in_commit_timestamps_decide_not_file_times(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t", ict=True, created_ms=OLD)
    for version in range(1, 14):
        b.append(at_ms=(OLD + version) if version < 12 else (RECENT + version))
    b.v1_checkpoint(10)
    b.age(range(0, 14), RECENT)  # file times say "recent": they must be ignored
    report = cleanup_metadata(str(b.root), now_ms=NOW)
    assert report.cutoff_version == 11
    assert report.kept_checkpoint_version == 10
    assert set(report.deleted) == {commit_name(v) for v in range(10)}
    assert_versions_readable(b, range(10, 14))


def test_in_commit_timestamps_recent_keep_everything(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t", ict=True)
    for _ in range(1, 14):
        b.append()  # ICT = now-ish
    b.v1_checkpoint(10)
    b.age(range(0, 14), OLD)  # file times say "old": they must be ignored
    report = cleanup_metadata(str(b.root), now_ms=NOW)
    assert report.deleted == []
    assert report.cutoff_version is None


# --- switches and options --------------------------------------------------------------------


def test_enable_expired_log_cleanup_false(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t", properties={"delta.enableExpiredLogCleanup": "false"})
    for _ in range(1, 14):
        b.append()
    b.v1_checkpoint(10)
    b.age(range(0, 14), OLD)
    before = b.log_names()
    report = cleanup_metadata(str(b.root), now_ms=NOW)
    assert report.skipped == "delta.enableExpiredLogCleanup is false"
    assert b.log_names() == before


def test_table_and_requested_retention(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t", properties={"delta.logRetentionDuration": "interval 60 days"})
    for _ in range(1, 14):
        b.append()
    b.v1_checkpoint(10)
    b.age(range(0, 14), OLD)  # 40 days old: retained under 60 days
    assert cleanup_metadata(str(b.root), now_ms=NOW).deleted == []
    report = cleanup_metadata(str(b.root), now_ms=NOW, retention_ms=7 * DAY_MS)
    assert report.retention_ms == 7 * DAY_MS
    assert set(report.deleted) == {commit_name(v) for v in range(10)}


def test_dry_run_reports_the_plan_and_deletes_nothing(tmp_path: Path) -> None:
    b = LogBuilder(
        tmp_path / "t",
        properties={"delta.checkpointPolicy": "v2"},
        reader_features=["v2Checkpoint"],
        writer_features=["v2Checkpoint"],
    )
    for _ in range(1, 14):
        b.append(2)
    b.v2_checkpoint(5)
    b.v2_checkpoint(10)
    for name in b.log_names():
        if name.startswith("_sidecars/"):
            b.age_file(name, OLD)
    b.age(range(0, 14), OLD)
    before = b.log_names()
    dry = cleanup_metadata(str(b.root), now_ms=NOW, dry_run=True)
    assert b.log_names() == before
    assert dry.classic_copy == classic_checkpoint_name(10)
    real = cleanup_metadata(str(b.root), now_ms=NOW)
    assert real.deleted == dry.deleted
    assert b.log_names() == (before - set(dry.deleted)) | {classic_checkpoint_name(10)}


def test_last_checkpoint_pointing_older_is_respected(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t")
    for _ in range(1, 25):
        b.append()
    b.v1_checkpoint(10)
    hint = (b.log / LAST_CHECKPOINT_NAME).read_bytes()
    b.v1_checkpoint(20)
    (b.log / LAST_CHECKPOINT_NAME).write_bytes(hint)  # a writer that never updated it
    b.age(range(0, 23), OLD)
    report = cleanup_metadata(str(b.root), now_ms=NOW)
    assert report.kept_checkpoint_version == 10
    assert report.notes
    assert_versions_readable(b, range(10, 25))


def test_checkpoint_protection(tmp_path: Path) -> None:
    b = LogBuilder(
        tmp_path / "t",
        properties={"delta.requireCheckpointProtectionBeforeVersion": "12"},
        writer_features=["checkpointProtection"],
    )
    for _ in range(1, 25):
        b.append()
    b.v1_checkpoint(10)
    b.v1_checkpoint(20)
    b.age(range(0, 15), OLD)
    blocked = cleanup_metadata(str(b.root), now_ms=NOW)
    assert blocked.deleted == [] and blocked.skipped and "checkpointProtection" in blocked.skipped
    b.age(range(0, 25), OLD)
    allowed = cleanup_metadata(str(b.root), now_ms=NOW)
    assert allowed.kept_checkpoint_version == 20
    assert set(allowed.deleted) >= {commit_name(v) for v in range(20)}


def test_unsupported_writer_feature_is_refused(tmp_path: Path) -> None:
    b = LogBuilder(tmp_path / "t", writer_features=["someFutureFeature"])
    for _ in range(1, 14):
        b.append()
    b.age(range(0, 14), OLD)
    before = b.log_names()
    with pytest.raises(UnsupportedTableFeatureException):
        cleanup_metadata(str(b.root), now_ms=NOW)
    assert b.log_names() == before


def test_corrupt_kept_checkpoint_deletes_nothing(tmp_path: Path) -> None:
    b = LogBuilder(
        tmp_path / "t",
        properties={"delta.checkpointPolicy": "v2"},
        reader_features=["v2Checkpoint"],
        writer_features=["v2Checkpoint"],
    )
    for _ in range(1, 14):
        b.append(2)
    kept = b.v2_checkpoint(10)
    sidecar = next(n for n in b.log_names() if n.startswith("_sidecars/"))
    (b.log / sidecar).unlink()
    b.age(range(0, 14), OLD)
    before = b.log_names()
    with pytest.raises(CorruptLogError, match="sidecar"):
        cleanup_metadata(str(b.root), now_ms=NOW)
    assert b.log_names() == before
    assert kept in before


# --- killed at any moment ------------------------------------------------------------------------


class Killed(Exception):
    pass


def test_killed_after_every_deletion_keeps_retained_versions_readable(tmp_path: Path) -> None:
    """Stop the run after the k-th deletion, for every k: every retained version still
    reads in both engines, and the next run finishes the job."""
    template = tmp_path / "template"
    b = LogBuilder(
        template,
        properties={"delta.checkpointPolicy": "v2"},
        reader_features=["v2Checkpoint"],
        writer_features=["v2Checkpoint"],
    )
    for _ in range(1, 14):
        b.append(2)
    b.v2_checkpoint(4)
    b.v2_checkpoint(8)
    for name in b.log_names():
        if name.startswith("_sidecars/"):
            b.age_file(name, OLD)
    b.age(range(0, 11), OLD)
    full = cleanup_metadata(str(template), now_ms=NOW, dry_run=True)
    assert len(full.deleted) > 8
    final_names = (b.log_names() - set(full.deleted)) | {classic_checkpoint_name(8)}

    for kill_after in range(1, len(full.deleted)):
        copy = tmp_path / f"kill-{kill_after}"
        shutil.copytree(template, copy, copy_function=shutil.copy2)
        copied = LogBuilder.__new__(LogBuilder)
        copied.__dict__.update(b.__dict__, root=copy, log=copy / "_delta_log")
        deleted: list[str] = []

        def stop(name: str, deleted: list[str] = deleted, limit: int = kill_after) -> None:
            deleted.append(name)
            if len(deleted) == limit:
                raise Killed(name)

        with pytest.raises(Killed):
            cleanup_metadata(str(copy), now_ms=NOW, after_delete=stop)
        assert deleted == full.deleted[:kill_after]  # oldest first, as planned
        assert (copy / "_delta_log" / classic_checkpoint_name(8)).exists()  # copy came first
        assert_versions_readable(copied, range(8, 14))
        cleanup_metadata(str(copy), now_ms=NOW)
        assert copied.log_names() == final_names


# --- Hadoop checksum files (issue 31) ---------------------------------------------------------


def test_hadoop_checksum_files_go_with_their_files(tmp_path: Path) -> None:
    """delta-spark writes every file of a local log through Hadoop's file system,
    which keeps a checksum file (``.<name>.crc``) beside it. Cleanup deletes each
    one with its file (as delta-spark's own cleanup does, through Hadoop), removes
    those whose file is already gone (another tool's leftovers), and never lists,
    counts or reports one as a log file; a hidden temporary file's checksum file
    and ``_last_checkpoint``'s are left alone."""
    b = LogBuilder(
        tmp_path / "t",
        properties={"delta.checkpointPolicy": "v2"},
        reader_features=["v2Checkpoint"],
        writer_features=["v2Checkpoint"],
    )
    for _ in range(1, 16):
        b.append(2)
    for version in range(16):
        b.checksum(version)
    b.v2_checkpoint(5)
    b.v2_checkpoint(10)
    for name in b.log_names():
        if name.startswith("_sidecars/"):
            b.age_file(name, OLD)
    b.age(range(0, 13), OLD)
    for name in b.log_names():
        write_crc(b.log / name)  # as if delta-spark had written the whole log
    gone = b.log / classic_checkpoint_name(3)
    gone.write_bytes(b"PAR1")
    write_crc(gone)
    gone.unlink()  # deleted by a tool that left its checksum file
    temp_crc = b.log / "..00000000000000000016.json.3f2a.tmp.crc"  # a Hadoop writer mid-rename
    temp_crc.write_bytes(crc_bytes(b"{}\n"))

    dry = cleanup_metadata(str(b.root), now_ms=NOW, dry_run=True)
    assert dry.orphan_crcs_deleted == 1 and (b.log / hadoop_crc_name(gone.name)).exists()
    report = cleanup_metadata(str(b.root), now_ms=NOW)

    assert report.kept_checkpoint_version == 10
    assert report.deleted == dry.deleted and report.counts == dry.counts
    assert all(parse_log_file_name(name) is not None for name in report.deleted)
    assert report.counts["checksum"] == 10 and report.counts["sidecar"] > 0
    assert report.orphan_crcs_deleted == 1
    assert orphan_crcs(b.log) == [temp_crc.name]  # the writer's, left to it
    assert disagreeing_crcs(b.log) == []
    assert (b.log / hadoop_crc_name(LAST_CHECKPOINT_NAME)).exists()
    assert_versions_readable(b, range(10, 16))
