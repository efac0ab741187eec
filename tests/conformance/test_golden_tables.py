"""raydelta against delta-spark's 100 golden tables (and the tables nested in them).

One ``test_golden_table`` case per directory of the golden root (every nested
table, every non-table directory), driven by ``golden_expectations.TABLES``;
``test_catalogue_covers_every_directory`` proves that list and the directory
tree agree, so nothing is skipped silently.

For a loadable table the generic case checks, at the latest version and at
every earlier version (time travel by version):

1. raydelta equals a *naive replay* written here: the JSON commits read line
   by line into dicts, the last protocol/metaData winning, files keyed by
   ``(path, deletionVector uniqueId)``. Every golden table keeps all its
   commits, so the replay is independent of checkpoints: where raydelta reads
   a checkpoint, this is also the checkpoint-equals-commits check.
2. raydelta equals ``deltalake`` (``conftest.check_matches_deltalake``),
   unless the catalogue records why deltalake refuses the table; then the
   test checks deltalake still refuses it.
3. ``raydelta.cli.snapshot_document`` describes the same snapshot.

Table-specific expectations (``tests/data/delta-spark-golden/README.md`` and
delta-spark's suites) are separate ``test_golden_check`` cases, so a known
raydelta bug can be ``xfail(strict=True)`` on exactly the check it breaks.
Some checks write: they always work on a copy (``golden_copy``).

Tables whose ``metaData`` has no ``schemaString`` (hand-written by
delta-spark's generator) load in raydelta with an empty schema, as in
delta-spark's own log suites; deltalake refuses them, so for those the naive
replay and delta-spark's stated expectations are the oracles.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from golden_expectations import BY_NAME, TABLES, GoldenTable, Kind

from raydelta.cli.app import snapshot_document
from raydelta.protocol.errors import (
    InvalidProtocolVersionException,
    MissingMetadataError,
    TableNotFoundError,
    VersionNotFoundError,
    VersionsNotContiguousError,
)
from raydelta.protocol.file_names import LogFileKind
from raydelta.protocol.last_checkpoint import parse_last_checkpoint
from raydelta.storage.data.deletion_vectors import read_deletion_vector
from raydelta.storage.snapshot import Snapshot, load_snapshot, load_table_head

REPO_ROOT = Path(__file__).resolve().parents[2]
COMMIT_RE = re.compile(r"^(\d{20})\.json$")

FileKey = tuple[str, str | None]


# --- the naive replay oracle ---------------------------------------------------


def dv_unique_id(dv: dict[str, Any] | None) -> str | None:
    """The spec's uniqueId: storageType + pathOrInlineDv (+ "@" + offset)."""
    if dv is None:
        return None
    offset = dv.get("offset")
    suffix = "" if offset is None else f"@{offset}"
    return f"{dv['storageType']}{dv['pathOrInlineDv']}{suffix}"


@dataclass
class ReplayedVersion:
    version: int
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    files: dict[FileKey, dict[str, Any]] = field(default_factory=dict)
    tombstones: set[FileKey] = field(default_factory=set)
    txns: dict[str, int] = field(default_factory=dict)
    domains: dict[str, str] = field(default_factory=dict)
    commit_info: dict[str, Any] | None = None


def commit_versions(table: Path) -> list[int]:
    names = [p.name for p in (table / "_delta_log").iterdir()]
    return sorted(int(m.group(1)) for n in names if (m := COMMIT_RE.match(n)))


def same_file(path: str) -> str:
    """delta-spark qualifies log paths as Hadoop URIs, so ``/x``, ``file:/x`` and
    ``file:///x`` name one file (DeltaLogSuite's canonicalized-paths cases)."""
    parsed = urllib.parse.urlsplit(path)
    if parsed.scheme == "file" and parsed.netloc == "":
        return parsed.path
    return path


def naive_replay(table: Path) -> list[ReplayedVersion]:
    """State after each commit, read from the JSON commits only (0, 1, 2... no gaps)."""
    versions = commit_versions(table)
    assert versions == list(range(len(versions))), f"commits are not 0..n: {versions}"
    protocol: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    files: dict[FileKey, dict[str, Any]] = {}
    tombstones: set[FileKey] = set()
    txns: dict[str, int] = {}
    domains: dict[str, str] = {}
    out = []
    for version in versions:
        commit_info = None
        text = (table / "_delta_log" / f"{version:020d}.json").read_text()
        for line in text.splitlines():
            if not line.strip():
                continue
            ((name, body),) = json.loads(line).items()
            if name == "protocol":
                protocol = body
            elif name == "metaData":
                metadata = body
            elif name == "add":
                key = (same_file(body["path"]), dv_unique_id(body.get("deletionVector")))
                files[key] = body
                tombstones.discard(key)
            elif name == "remove":
                key = (same_file(body["path"]), dv_unique_id(body.get("deletionVector")))
                files.pop(key, None)
                tombstones.add(key)
            elif name == "txn":
                txns[body["appId"]] = body["version"]
            elif name == "domainMetadata":
                if body.get("removed"):
                    domains.pop(body["domain"], None)
                else:
                    domains[body["domain"]] = body["configuration"]
            elif name == "commitInfo":
                commit_info = body
        out.append(
            ReplayedVersion(
                version,
                protocol,
                metadata,
                dict(files),
                set(tombstones),
                dict(txns),
                dict(domains),
                commit_info,
            )
        )
    return out


_COMPARED_ADD_FIELDS = (
    "partitionValues",
    "size",
    "modificationTime",
    "tags",
    "baseRowId",
    "defaultRowCommitVersion",
    "clusteringProvider",
)
_COMPARED_DV_FIELDS = ("storageType", "pathOrInlineDv", "offset", "sizeInBytes", "cardinality")


def assert_matches_replay(snap: Snapshot, expected: ReplayedVersion) -> None:
    """raydelta's snapshot equals the naive replay.

    ``dataChange`` is not compared (checkpoints rewrite it to false), and
    tombstones read from a checkpoint may be a subset (expired ones dropped).
    """
    assert snap.version == expected.version
    assert snap.protocol.to_json_dict() == expected.protocol
    assert snap.metadata.to_json_dict() == expected.metadata
    ours = {(same_file(a.path), a.dv_unique_id): a.to_json_dict() for a in snap.add_files()}
    assert set(ours) == set(expected.files)
    for key, add in ours.items():
        want = expected.files[key]
        for name in _COMPARED_ADD_FIELDS:
            assert add.get(name) == want.get(name), (key, name)
        if want.get("stats") is not None:
            assert json.loads(add["stats"]) == json.loads(want["stats"]), key
        if want.get("deletionVector") is not None:
            for name in _COMPARED_DV_FIELDS:
                assert add["deletionVector"].get(name) == want["deletionVector"].get(name)
    removes = snap.all_tombstones
    dvs = [dv_unique_id(d) for d in removes.column("deletionVector").to_pylist()]
    paths = [same_file(p) for p in removes.column("path").to_pylist()]
    tombstones = set(zip(paths, dvs, strict=True))
    if snap.log_segment is not None and snap.log_segment.checkpoint is None:
        assert tombstones == expected.tombstones
    else:  # a checkpoint may have dropped tombstones that had expired when it was written
        assert tombstones <= expected.tombstones
    assert snap.txns == expected.txns
    assert {d: m.configuration for d, m in snap.domains.items()} == expected.domains


# --- helpers ----------------------------------------------------------------------


def load(path: Path, **options: Any) -> Snapshot:
    return load_snapshot(str(path), **options)


def live_paths(snap: Snapshot) -> set[str]:
    return {unquote(a.path) for a in snap.add_files()}


def live_rows(snap: Snapshot, table: Path, column: str | None = None) -> list[Any]:
    """The table's live rows, read from its parquet files minus DV-deleted rows.

    With ``column`` the values of that column, else one ``None`` per row.
    """
    rows: list[Any] = []
    for add in snap.add_files():
        data = pq.read_table(table / unquote(add.path))
        deleted: set[int] = set()
        if add.deletion_vector is not None:
            deleted = set(read_deletion_vector(add.deletion_vector, str(table)).to_pylist())
            assert len(deleted) == add.deletion_vector.cardinality
            assert all(0 <= r < data.num_rows for r in deleted)
        values = data.column(column).to_pylist() if column else [None] * data.num_rows
        rows.extend(v for i, v in enumerate(values) if i not in deleted)
    return rows


def deltalake_refuses(path: Path) -> None:
    import deltalake

    with pytest.raises(Exception):  # noqa: B017 - any refusal; the reason is catalogued
        deltalake.DeltaTable(str(path))


# --- the catalogue covers the tree --------------------------------------------------


def discover(root: Path) -> set[str]:
    """Every table (a directory holding ``_delta_log``) and every top-level directory."""
    found = {p.name for p in root.iterdir() if p.is_dir()}
    found |= {p.parent.relative_to(root).as_posix() for p in root.rglob("_delta_log") if p.is_dir()}
    return found


def test_catalogue_covers_every_directory(golden_root: Path) -> None:
    top_level = [p for p in golden_root.iterdir() if p.is_dir()]
    assert len(top_level) == 100
    assert discover(golden_root) == set(BY_NAME)


def test_catalogue_kinds_are_consistent(golden_root: Path) -> None:
    for table in TABLES:
        has_log = (golden_root / table.name / "_delta_log").is_dir()
        assert has_log == (table.kind is not Kind.NOT_A_TABLE), table.name
        assert (table.error is None) == (table.kind is Kind.TABLE), table.name
        for check in table.checks:
            assert check in CHECKS, (table.name, check)
        assert set(table.known_bugs) <= set(table.checks), table.name


# --- the generic per-directory case --------------------------------------------------


@pytest.mark.parametrize("table", [pytest.param(t, id=t.name) for t in TABLES])
def test_golden_table(
    table: GoldenTable, golden_root: Path, assert_matches_deltalake: Callable[..., None]
) -> None:
    path = golden_root / table.name
    if table.kind is not Kind.TABLE:
        assert table.error is not None
        with pytest.raises(table.error) as info:
            load(path)
        assert type(info.value) is table.error, repr(info.value)
        for text in table.error_match:
            assert text in str(info.value)
        with pytest.raises(table.error):
            snapshot_document(str(path), version=None, timestamp=None)
        if table.deltalake_refusal is not None:
            deltalake_refuses(path)
        return

    replay = naive_replay(path)
    snap = load(path)
    assert_matches_replay(snap, replay[-1])
    assert load_table_head(str(path)) == snap.state.head()  # no file action read
    for expected in replay[:-1]:
        older = load(path, version=expected.version)
        assert_matches_replay(older, expected)
        assert load_table_head(str(path), version=expected.version) == older.state.head()

    document = snapshot_document(str(path), version=None, timestamp=None)
    assert document["version"] == snap.version
    assert document["timestamp"] == snap.timestamp
    assert document["protocol"] == snap.protocol.to_json_dict()
    assert document["metadata"] == snap.metadata.to_json_dict()
    assert [(f["path"], f["deletionVectorId"]) for f in document["files"]] == sorted(
        (a.path, a.dv_unique_id) for a in snap.add_files()
    )
    assert document["txns"] == snap.txns

    if table.deltalake_refusal is None:
        assert_matches_deltalake(path)
        for expected in replay[:-1]:
            assert_matches_deltalake(path, expected.version)
    else:
        deltalake_refuses(path)


# --- table-specific checks ------------------------------------------------------------


@dataclass
class Ctx:
    table: GoldenTable
    root: Path
    copy: Callable[[str], Path]

    @property
    def path(self) -> Path:
        return self.root / self.table.name


Check = Callable[[Ctx], None]
CHECKS: dict[str, Check] = {}


def check(function: Check) -> Check:
    CHECKS[function.__name__] = function
    return function


def _last_checkpoint_json(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((path / "_delta_log" / "_last_checkpoint").read_text())
    return data


@check
def checkpoint_v14_one_file(ctx: Ctx) -> None:
    snap = load(ctx.path)
    assert snap.version == 14
    assert snap.num_files == 1
    segment = snap.log_segment
    assert segment is not None and segment.checkpoint is not None
    assert (segment.checkpoint.version, segment.checkpoint.kind) == (
        10,
        LogFileKind.CHECKPOINT_CLASSIC,
    )
    assert segment.commit_versions == [11, 12, 13, 14]
    # The one live file is the one the last commit added.
    last = ctx.path / "_delta_log" / f"{14:020d}.json"
    added = [json.loads(x)["add"]["path"] for x in last.read_text().splitlines() if '"add"' in x]
    assert [a.path for a in snap.add_files()] == added


@check
def corrupted_last_checkpoint_kernel(ctx: Ctx) -> None:
    assert (ctx.path / "_delta_log" / "_last_checkpoint").stat().st_size == 0
    snap = load(ctx.path)
    assert snap.version == 11
    assert snap.log_segment is not None and snap.log_segment.checkpoint is not None
    assert snap.log_segment.checkpoint.version == 10  # found by listing
    assert sorted(live_rows(snap, ctx.path, "id")) == list(range(100))
    copy = ctx.copy(ctx.table.name)
    (copy / "_delta_log" / "_last_checkpoint").unlink()
    assert live_paths(load(copy)) == live_paths(snap)


@check
def corrupted_last_checkpoint(ctx: Ctx) -> None:
    """delta-spark "handle corrupted '_last_checkpoint' file": same snapshot either way."""
    assert _last_checkpoint_json(ctx.path)["version"] == 10
    reference = load(ctx.path)
    assert reference.version == 10
    assert reference.log_segment is not None and reference.log_segment.checkpoint is not None
    assert reference.log_segment.checkpoint.version == 10
    copy = ctx.copy(ctx.table.name)
    hint = copy / "_delta_log" / "_last_checkpoint"
    for content in (b"", b"{not json", b'{"version": 99, "size": 1}', b'{"version": 3}', None):
        if content is None:
            hint.unlink()
        else:
            hint.write_bytes(content)
        snap = load(copy)
        assert snap.version == 10
        assert snap.log_segment is not None and snap.log_segment.checkpoint is not None
        assert snap.log_segment.checkpoint.version == 10
        assert live_paths(snap) == live_paths(reference)


@check
def multi_part_checkpoint(ctx: Ctx) -> None:
    snap = load(ctx.path)
    segment = snap.log_segment
    assert segment is not None and segment.checkpoint is not None
    assert segment.checkpoint.version == 1
    assert segment.checkpoint.kind is LogFileKind.CHECKPOINT_MULTIPART
    assert segment.checkpoint.num_parts == 2
    on_disk = sorted(p.name for p in (ctx.path / "_delta_log").glob("*.checkpoint.*.parquet"))
    assert [f.name for f in segment.checkpoint.files] == on_disk
    raw = _last_checkpoint_json(ctx.path)
    assert (raw["version"], raw["size"], raw["parts"]) == (1, 12, 2)
    info = parse_last_checkpoint((ctx.path / "_delta_log" / "_last_checkpoint").read_bytes())
    assert info is not None and (info.version, info.size, info.parts) == (1, 12, 2)
    # An incomplete multi-part checkpoint is never used: the commits rebuild v1.
    copy = ctx.copy(ctx.table.name)
    (copy / "_delta_log" / on_disk[1]).unlink()
    partial = load(copy)
    assert partial.log_segment is not None and partial.log_segment.checkpoint is None
    assert live_paths(partial) == live_paths(snap)


@check
def v2_checkpoint(ctx: Ctx) -> None:
    snap = load(ctx.path)
    segment = snap.log_segment
    assert segment is not None and segment.checkpoint is not None
    assert (segment.checkpoint.version, segment.checkpoint.kind) == (
        2,
        LogFileKind.CHECKPOINT_UUID,
    )
    (top,) = segment.checkpoint.files
    top_path = ctx.path / "_delta_log" / top.name
    if top.name.endswith(".json"):
        actions = [json.loads(x) for x in top_path.read_text().splitlines() if x.strip()]
        sidecars = [a["sidecar"]["path"] for a in actions if "sidecar" in a]
    else:
        column = pq.read_table(top_path, columns=["sidecar"]).column("sidecar")
        sidecars = [s["path"] for s in column.to_pylist() if s is not None]
    assert len(sidecars) == 2
    on_disk = (ctx.path / "_delta_log" / "_sidecars").glob("*.parquet")
    assert sorted(sidecars) == sorted(p.name for p in on_disk)
    raw = _last_checkpoint_json(ctx.path)
    assert "v2Checkpoint" in raw and raw["size"] == 9 and "parts" not in raw
    assert raw["v2Checkpoint"]["path"] == top.name
    info = parse_last_checkpoint((ctx.path / "_delta_log" / "_last_checkpoint").read_bytes())
    assert info is not None and info.v2_checkpoint_path == top.name and info.parts is None
    assert len(live_rows(snap, ctx.path)) == 10
    # The checkpoint alone (no commits before it) gives the same files.
    copy = ctx.copy(ctx.table.name)
    for version in (0, 1):
        (copy / "_delta_log" / f"{version:020d}.json").unlink()
    assert live_paths(load(copy)) == live_paths(snap)


@check
def only_checkpoint_files(ctx: Ctx) -> None:
    latest = load(ctx.path)
    one = load(ctx.path, version=1)
    for snap, version in ((latest, 2), (one, 1)):
        assert snap.log_segment is not None and snap.log_segment.checkpoint is not None
        assert snap.log_segment.checkpoint.version == version
        assert snap.log_segment.checkpoint.kind is LogFileKind.CHECKPOINT_CLASSIC
    # kernel LogReplaySuite "end to end only checkpoint files": ids 5..9 and 0..19.
    assert sorted(live_rows(latest, ctx.path, "id")) == sorted([*range(5, 10), *range(20)])
    copy = ctx.copy(ctx.table.name)
    for version in commit_versions(copy):
        (copy / "_delta_log" / f"{version:020d}.json").unlink()
    assert live_paths(load(copy)) == live_paths(latest)
    assert load(copy).version == 2
    assert live_paths(load(copy, version=1)) == live_paths(one)


@check
def only_checkpoint_files_before_first_checkpoint(ctx: Ctx) -> None:
    """With every commit deleted, v0 (before the first checkpoint) is unreachable."""
    copy = ctx.copy(ctx.table.name)
    for version in commit_versions(copy):
        (copy / "_delta_log" / f"{version:020d}.json").unlink()
    with pytest.raises(VersionNotFoundError):
        load(copy, version=0)


@check
def spark_variant_checkpoint(ctx: Ctx) -> None:
    snap = load(ctx.path)
    assert snap.log_segment is not None and snap.log_segment.checkpoint is not None
    assert snap.log_segment.checkpoint.version == 2
    assert snap.log_segment.checkpoint.kind is LogFileKind.CHECKPOINT_CLASSIC
    raw = _last_checkpoint_json(ctx.path)
    assert (raw["version"], raw["size"]) == (2, 6)


@check
def update_deleted_directory(ctx: Ctx) -> None:
    snap = load(ctx.path)
    assert snap.version == 0
    assert snap.log_segment is not None and snap.log_segment.checkpoint is not None
    assert snap.log_segment.checkpoint.version == 0
    assert snap.num_files == 10
    copy = ctx.copy(ctx.table.name)
    assert live_paths(load(copy)) == live_paths(snap)
    shutil.rmtree(copy)  # delta-spark SC-8078: the table directory is deleted
    with pytest.raises(TableNotFoundError):
        load(copy)


def _data_files(root: Path, name: str) -> set[str]:
    return {p.name for p in (root / name).iterdir() if p.name.endswith("snappy.parquet")}


_SNAPSHOT_CHAIN = {
    "snapshot-data0": 0,
    "snapshot-data1": 1,
    "snapshot-data2": 2,
    "snapshot-data3": 3,
    "snapshot-data2-deleted": 4,
    "snapshot-repartitioned": 5,
    "snapshot-vacuumed": 5,
}


@check
def snapshot_chain(ctx: Ctx) -> None:
    """delta-spark DeltaLogSuite 'snapshot': each step's live files from directory listings.

    Each table copies its predecessor and adds one write, so the data files
    each step created are found by listing the directories, independently of
    the logs (as delta-spark's test does).
    """
    files = {name: _data_files(ctx.root, name) for name in _SNAPSHOT_CHAIN}
    data01 = files["snapshot-data1"]
    data2 = files["snapshot-data2"] - data01
    expected = {
        0: files["snapshot-data0"],
        1: data01,
        2: data2,
        3: files["snapshot-data3"] - data01,
        4: files["snapshot-data2-deleted"] - data01 - data2,
        5: files["snapshot-vacuumed"],  # vacuum keeps exactly the files live at v5
    }
    latest = _SNAPSHOT_CHAIN[ctx.table.name]
    snap = load(ctx.path)
    assert snap.version == latest
    if ctx.table.name == "snapshot-repartitioned":
        assert snap.num_files == 2
    for version in range(latest + 1):
        assert live_paths(load(ctx.path, version=version)) == expected[version], version


@check
def delete_re_add_same_file(ctx: Ctx) -> None:
    snap = load(ctx.path)
    assert live_paths(snap) == {"foo", "bar"}
    (foo,) = [a for a in snap.add_files() if a.path == "foo"]
    assert foo.modification_time == 1700000000000


@check
def log_replay_dv_key_cases(ctx: Ctx) -> None:
    snap = load(ctx.path)
    (add,) = snap.add_files()
    assert add.deletion_vector is not None
    assert add.deletion_vector.cardinality == 3
    assert len(read_deletion_vector(add.deletion_vector, str(ctx.path))) == 3


@check
def dv_35_live_rows(ctx: Ctx) -> None:
    snap = load(ctx.path)
    by_stats = 0
    for add in snap.add_files():
        assert add.num_records is not None
        cardinality = add.deletion_vector.cardinality if add.deletion_vector else 0
        by_stats += add.num_records - cardinality
    assert by_stats == 35
    assert len(live_rows(snap, ctx.path)) == 35


@check
def special_characters_removed(ctx: Ctx) -> None:
    assert load(ctx.path).num_files == 0
    assert live_paths(load(ctx.path, version=0)) == {"special p@#h"}


@check
def special_characters_added(ctx: Ctx) -> None:
    snap = load(ctx.path)
    assert live_paths(snap) == {"special p@#h"}
    assert [a.path for a in snap.add_files()] == ["special%20p@%23h"]  # kept as logged


@check
def latest_metadata_protocol(ctx: Ctx) -> None:
    snap = load(ctx.path)
    assert snap.metadata.schema_string is not None
    schema = json.loads(snap.metadata.schema_string)
    assert {f["name"] for f in schema["fields"]} == {"col1", "col2"}
    assert (snap.protocol.min_reader_version, snap.protocol.min_writer_version) == (3, 7)


@check
def get_changes_txn(ctx: Ctx) -> None:
    snap = load(ctx.path)
    assert snap.txns == {"fakeAppId": 3}
    assert snap.num_files == 0  # the cdc file is not a data file
    assert load(ctx.path, version=1).txns == {}


@check
def commit_info(ctx: Ctx) -> None:
    snap = load(ctx.path)
    assert snap.version == 0
    assert live_paths(snap) == {"abc"}
    info = snap.commit_infos[0].to_json_dict()
    assert info == naive_replay(ctx.path)[0].commit_info  # every field, round-tripped
    # The generator's CommitInfo(..., new Timestamp(1540415658000L), "user_0", ...).
    assert (info["timestamp"], info["userId"], info["operation"]) == (
        1540415658000,
        "user_0",
        "WRITE",
    )
    assert info["job"]["jobId"] == "job_id_0"
    assert info["notebook"]["notebookId"] == "notebook_id_0"


@check
def vacuum_protocol_check(ctx: Ctx) -> None:
    snap = load(ctx.path)  # loading at all means the feature is supported for reads
    assert "vacuumProtocolCheck" in (snap.protocol.reader_features or [])
    assert "vacuumProtocolCheck" in (snap.protocol.writer_features or [])
    assert len(live_rows(snap, ctx.path)) == 100


@check
def iterator_bug_rows(ctx: Ctx) -> None:
    snap = load(ctx.path)
    values: list[Any] = []
    for add in snap.add_files():  # some files are empty and have no column at all
        data = pq.read_table(ctx.path / unquote(add.path))
        if "col1" in data.column_names:
            values.extend(data.column("col1").to_pylist())
    assert sorted(values) == [1, 2, 3, 4, 5]


_TIME_TRAVEL_START_MS = 1540415658000  # GoldenTables.scala: `val start = 1540415658000L`
_MINUTE_MS = 60_000
_TIME_TRAVEL_CHAIN = (
    "time-travel-start",
    "time-travel-start-start20",
    "time-travel-start-start20-start40",
)


@check
def time_travel_by_timestamp(ctx: Ctx) -> None:
    """delta-spark DeltaTimeTravelSuite, on a copy whose commit mtimes are restored.

    The generator set each commit file's modification time with
    ``setLastModified(start + 20 min * version)``; commitInfo.timestamp holds
    the real write time instead. A git checkout loses mtimes (every file here
    has the same one), so the copy gets them back with ``os.utime``.
    """
    copy = ctx.copy(ctx.table.name)
    versions = commit_versions(copy)
    stamps = {v: _TIME_TRAVEL_START_MS + 20 * _MINUTE_MS * v for v in versions}
    for version, stamp in stamps.items():
        os.utime(copy / "_delta_log" / f"{version:020d}.json", ns=(stamp * 1_000_000,) * 2)
    expected = {
        v: _data_files(ctx.root, _TIME_TRAVEL_CHAIN[v])
        - (_data_files(ctx.root, _TIME_TRAVEL_CHAIN[v - 1]) if v else set())
        for v in versions
    }
    for version, stamp in stamps.items():
        live = set().union(*(expected[v] for v in range(version + 1)))
        exact = load(copy, timestamp=stamp)
        assert (exact.version, exact.timestamp) == (version, stamp)
        assert live_paths(exact) == live
        assert load(copy, timestamp=stamp + 10 * _MINUTE_MS).version == version
        iso = datetime.fromtimestamp(stamp / 1000, tz=UTC)
        assert load(copy, timestamp=iso).version == version
        assert load(copy, timestamp=iso.isoformat()).version == version
    with pytest.raises(VersionNotFoundError):
        load(copy, timestamp=_TIME_TRAVEL_START_MS - 1)
    # After the newest commit: the newest version (delta-spark's reader raises here;
    # protocol.commit_timestamps documents raydelta's choice).
    assert load(copy, timestamp=stamps[versions[-1]] + 10 * _MINUTE_MS).version == versions[-1]


@check
def canonicalized_paths(ctx: Ctx) -> None:
    """delta-spark DeltaLogSuite 'paths should be canonicalized': v1 and no files."""
    snap = load(ctx.path)
    assert snap.version == 1
    assert snap.num_files == 0


@check
def versions_not_contiguous(ctx: Ctx) -> None:
    with pytest.raises(VersionsNotContiguousError) as info:
        load(ctx.path)
    assert info.value.versions == [0, 2]
    assert live_paths(load(ctx.path, version=0)) == {"foo"}  # nothing is missing below v1


@check
def versions_before_broken_checkpoint_load(ctx: Ctx) -> None:
    """Versions 0-9 replay JSON commits only; v10 reads the broken checkpoint."""
    replay = naive_replay(ctx.path)
    for expected in replay[:10]:
        assert_matches_replay(load(ctx.path, version=expected.version), expected)


def _check_params() -> Iterator[Any]:
    for table in TABLES:
        for name in table.checks:
            marks = []
            if name in table.known_bugs:
                marks.append(pytest.mark.xfail(strict=True, reason=table.known_bugs[name]))
            yield pytest.param(table.name, name, id=f"{table.name}::{name}", marks=marks)


@pytest.mark.parametrize(("name", "check_name"), list(_check_params()))
def test_golden_check(name: str, check_name: str, golden_root: Path, golden_copy: Any) -> None:
    CHECKS[check_name](Ctx(BY_NAME[name], golden_root, golden_copy))


# --- the CLI contract ------------------------------------------------------------------

_CLI_JSON_CASES = [
    ("checkpoint", None),
    ("checkpoint", 10),
    ("v2-checkpoint-parquet", None),
    ("log-replay-dv-key-cases", None),
]
_CLI_ERROR_CASES = [
    ("versions-not-contiguous", VersionsNotContiguousError),
    ("no-delta-log-folder", TableNotFoundError),
    ("deltalog-invalid-protocol-version", InvalidProtocolVersionException),
    ("deltalog-state-reconstruction-without-metadata", MissingMetadataError),
]
_DOCUMENT_KEYS = {
    "version",
    "timestamp",
    "protocol",
    "metadata",
    "files",
    "tombstones",
    "txns",
    "domains",
}


def _cli_args(golden_root: Path, name: str, version: int | None) -> tuple[str, ...]:
    extra = () if version is None else ("--version", str(version))
    return ("snapshot", str(golden_root / name), "--json", *extra)


@pytest.fixture(scope="module")
def cli_runs(golden_root: Path) -> dict[tuple[str, ...], subprocess.CompletedProcess[str]]:
    """Every CLI invocation of this module, run concurrently (each is a fresh interpreter)."""
    from concurrent.futures import ThreadPoolExecutor

    cases = [_cli_args(golden_root, n, v) for n, v in _CLI_JSON_CASES]
    cases += [_cli_args(golden_root, n, None) for n, _ in _CLI_ERROR_CASES]

    def run(args: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "raydelta.cli", *args],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=120,
            check=False,
        )

    with ThreadPoolExecutor(max_workers=len(cases)) as pool:
        return dict(zip(cases, pool.map(run, cases), strict=True))


@pytest.mark.parametrize(("name", "version"), _CLI_JSON_CASES)
def test_cli_snapshot_json(
    name: str, version: int | None, golden_root: Path, cli_runs: dict[Any, Any]
) -> None:
    result = cli_runs[_cli_args(golden_root, name, version)]
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("\n") == 1  # exactly one JSON document
    document = json.loads(result.stdout)
    assert set(document) == _DOCUMENT_KEYS
    snap = load(golden_root / name, version=version)
    assert document["version"] == snap.version
    assert document["timestamp"] == snap.timestamp
    assert document["protocol"] == snap.protocol.to_json_dict()
    assert document["metadata"] == snap.metadata.to_json_dict()
    assert [(f["path"], f["deletionVectorId"]) for f in document["files"]] == sorted(
        (a.path, a.dv_unique_id) for a in snap.add_files()
    )
    for entry in document["files"]:
        assert set(entry) >= {"path", "deletionVector", "size", "partitionValues", "numRecords"}
    assert document["txns"] == snap.txns


@pytest.mark.parametrize(("name", "error"), _CLI_ERROR_CASES)
def test_cli_snapshot_error(
    name: str, error: type[Exception], golden_root: Path, cli_runs: dict[Any, Any]
) -> None:
    result = cli_runs[_cli_args(golden_root, name, None)]
    assert result.returncode != 0
    assert result.stdout == ""
    assert result.stderr.startswith(f"{error.__name__}: ")


def test_load_snapshot_rejects_version_and_timestamp(golden_root: Path) -> None:
    with pytest.raises(ValueError):
        load(golden_root / "checkpoint", version=1, timestamp=0)


def test_arrow_files_layout_matches_models(golden_root: Path) -> None:
    """``snap.files`` (Arrow) and ``snap.add_files()`` (models) describe the same adds."""
    snap = load(golden_root / "dv-partitioned-with-checkpoint")
    table = snap.files
    assert isinstance(table, pa.Table)
    assert table.num_rows == snap.num_files
    assert sorted(table.column("path").to_pylist()) == sorted(a.path for a in snap.add_files())
