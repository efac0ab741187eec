"""Checkpoints we write replace the log for us and for independent readers.

Every test builds a real table (deltalake, or a copy of a delta-spark golden
table), reconciles it with our reader, writes a checkpoint, deletes the
commit files the checkpoint covers, and checks that our reader, deltalake
(delta-rs) and duckdb's delta extension still see the same table.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from raydelta.protocol.actions import (
    CommitInfo,
    Protocol,
    Sidecar,
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.checkpoint_plan import (
    TAG_NUM_SHARDS,
    TAG_SHARD,
    plan_v2_checkpoint,
    shards_of_keys,
    touched_keys_of,
)
from raydelta.protocol.errors import CheckpointWriteError
from raydelta.protocol.file_actions import table_keys
from raydelta.protocol.file_names import (
    LAST_CHECKPOINT_NAME,
    FileFormat,
    LogFileKind,
    classic_checkpoint_name,
    commit_name,
)
from raydelta.protocol.last_checkpoint import LastCheckpointInfo, parse_last_checkpoint
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.storage.checkpoint.writer import (
    classic_checkpoint_exists,
    create_classic_checkpoint,
    read_checkpoint_sidecars,
    write_checkpoint,
    write_last_checkpoint,
    write_shard_sidecar,
    write_sidecar,
    write_v1_checkpoint,
    write_v2_checkpoint,
    write_v2_checkpoint_single_process,
)
from raydelta.storage.log.store import LogStore, log_store_for
from raydelta.storage.snapshot import Snapshot, load_snapshot
from tests.hadoop_crc import crc_matches, write_crc

deltalake = pytest.importorskip("deltalake")
duckdb = pytest.importorskip("duckdb")

HOUR_MS = 3_600_000


def _now_ms() -> int:
    return int(time.time() * 1000)


# --- peers -----------------------------------------------------------------------------------


def duck_rows(con: Any, path: Path) -> list[tuple[Any, ...]]:
    return sorted(con.execute(f"SELECT * FROM delta_scan('{path}')").fetchall(), key=repr)


def deltalake_view(path: Path) -> dict[str, Any]:
    """What delta-rs sees: version, files, add actions and rows."""
    table = deltalake.DeltaTable(str(path))
    adds = pa.table(table.get_add_actions(flatten=True))
    try:
        rows = table.to_pyarrow_table()
    except deltalake.exceptions.DeltaProtocolError:
        # delta-rs' pyarrow dataset path refuses some reader features itself
        # (v2Checkpoint, deletionVectors, columnMapping), whatever the
        # checkpoint; its DataFusion engine reads those tables.
        query = deltalake.QueryBuilder().register("t", table).execute("select * from t")
        rows = pa.table(query.read_all())
    return {
        "version": table.version(),
        "files": sorted(table.file_uris()),
        "adds": sorted(
            zip(adds.column("path").to_pylist(), adds.column("size_bytes").to_pylist(), strict=True)
        ),
        "rows": sorted(tuple(str(v) for v in r.values()) for r in rows.to_pylist()),
    }


def sorted_keys(table: pa.Table) -> list[tuple[str, str | None]]:
    return sorted(table_keys(table), key=lambda k: (k[0], k[1] or ""))


def our_view(path: Path) -> dict[str, Any]:
    snap = load_snapshot(str(path))
    return {
        "version": snap.version,
        "adds": sorted_keys(snap.files),
        "removes": sorted_keys(snap.all_tombstones),
        "metadata": snap.metadata,
        "protocol": snap.protocol,
        "txns": snap.txns,
        "domains": snap.domains,
    }


def all_views(path: Path, con: Any) -> dict[str, Any]:
    return {
        "ours": our_view(path),
        "deltalake": deltalake_view(path),
        "duckdb": duck_rows(con, path),
    }


def delete_commits_through(path: Path, version: int) -> list[str]:
    deleted = []
    for v in range(version + 1):
        commit = path / "_delta_log" / commit_name(v)
        if commit.exists():
            commit.unlink()
            deleted.append(commit.name)
    return deleted


def log_names(path: Path) -> list[str]:
    return sorted(p.name for p in (path / "_delta_log").iterdir())


# --- tables --------------------------------------------------------------------------------


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"n{i}" for i in ids]),
            "part": pa.array([i % 3 for i in ids], pa.int32()),
        }
    )


def build_history(path: Path, configuration: dict[str, str] | None = None) -> None:
    """A partitioned table with appends, an overwrite and deletes (tombstones)."""
    write = deltalake.write_deltalake
    write(str(path), _batch(0, 9), partition_by=["part"], configuration=configuration)
    write(str(path), _batch(100, 6), partition_by=["part"], mode="append")
    deltalake.DeltaTable(str(path)).delete("id = 2")
    write(str(path), _batch(200, 12), partition_by=["part"], mode="overwrite")
    write(str(path), _batch(300, 4), partition_by=["part"], mode="append")
    deltalake.DeltaTable(str(path)).delete("id >= 302")


def build_v2_table(path: Path, configuration: dict[str, str] | None = None) -> None:
    """A table with reader 3 / writer 7, ``v2Checkpoint`` and checkpointPolicy=v2."""
    config = {"delta.checkpointPolicy": "v2", **(configuration or {})}
    write = deltalake.write_deltalake
    write(str(path), _batch(0, 9), partition_by=["part"], configuration=config)
    deltalake.DeltaTable(str(path)).alter.add_feature(
        [deltalake.TableFeatures.V2Checkpoint], allow_protocol_versions_increase=True
    )
    write(str(path), _batch(100, 6), partition_by=["part"], mode="append")
    deltalake.DeltaTable(str(path)).delete("id = 2 or id = 104")
    write(str(path), _batch(300, 4), partition_by=["part"], mode="append")


def tag(sidecar: Sidecar, key: str) -> str:
    value = (sidecar.tags or {}).get(key)
    assert value is not None, f"sidecar {sidecar.path} has no tag {key}"
    return value


def store_of(path: Path) -> LogStore:
    return log_store_for(str(path))


def checkpoint_then_replace_log(
    path: Path, con: Any, write: Any, *, later_commit: bool = True
) -> tuple[dict[str, Any], Snapshot]:
    """Checkpoint version v (the latest) with ``write`` while a commit v+1
    exists beside it, then delete the commits through v.

    Returns what every reader saw on the full log, before any checkpoint.
    """
    snap = load_snapshot(str(path))
    if later_commit:
        deltalake.write_deltalake(str(path), _batch(900, 3), partition_by=["part"], mode="append")
    before = all_views(path, con)
    write(store_of(path), snap)
    assert delete_commits_through(path, snap.version)
    return before, snap


def assert_same_views(path: Path, con: Any, before: dict[str, Any]) -> None:
    after = all_views(path, con)
    assert after["ours"] == before["ours"]
    assert after["deltalake"] == before["deltalake"]
    assert after["duckdb"] == before["duckdb"]


# --- V1 --------------------------------------------------------------------------------------


def test_v1_checkpoint_replaces_the_log(tmp_path: Path, duck: Any) -> None:
    path = tmp_path / "t"
    build_history(path)
    before, snap = checkpoint_then_replace_log(
        path, duck, lambda store, s: write_v1_checkpoint(store, s.state, now_ms=_now_ms())
    )
    assert classic_checkpoint_name(snap.version) in log_names(path)
    assert commit_name(snap.version) not in log_names(path)
    assert before["ours"]["removes"]  # tombstones within retention are carried
    assert_same_views(path, duck, before)
    # our reader really started from the checkpoint
    segment = load_snapshot(str(path)).log_segment
    assert segment is not None and segment.checkpoint is not None
    assert segment.checkpoint.version == snap.version


def test_v1_checkpoint_file_and_last_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_history(path)
    snap = load_snapshot(str(path))
    info = write_v1_checkpoint(store_of(path), snap.state, now_ms=_now_ms())
    file = path / "_delta_log" / classic_checkpoint_name(snap.version)
    schema = pq.read_schema(file)
    assert schema.names == ["protocol", "metaData", "txn", "add", "remove", "domainMetadata"]
    remove_fields = {f.name for f in schema.field("remove").type}
    assert "stats" not in remove_fields and "tags" not in remove_fields
    add_fields = {f.name for f in schema.field("add").type}
    assert "stats" in add_fields and "stats_parsed" not in add_fields
    table = pq.read_table(file)
    protocol_rows = [p for p in table.column("protocol").to_pylist() if p]
    assert protocol_rows == [
        {
            "minReaderVersion": 1,
            "minWriterVersion": 2,
            "readerFeatures": None,
            "writerFeatures": None,
        }
    ]
    # every row holds one action
    for row in table.to_pylist():
        assert sum(v is not None for v in row.values()) == 1
    hint = parse_last_checkpoint((path / "_delta_log" / LAST_CHECKPOINT_NAME).read_bytes())
    assert hint is not None and hint.checksum is not None  # the checksum verifies
    assert hint == info.model_copy(update={"checksum": hint.checksum})
    assert hint.version == snap.version
    assert hint.size == table.num_rows
    assert hint.size_in_bytes == file.stat().st_size
    assert hint.num_of_add_files == table.column("add").drop_null().__len__() == snap.num_files


def test_v1_checkpoint_of_a_reader3_writer7_table_has_feature_lists(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_v2_table(path)
    snap = load_snapshot(str(path))
    write_v1_checkpoint(store_of(path), snap.state, now_ms=_now_ms())
    table = pq.read_table(path / "_delta_log" / classic_checkpoint_name(snap.version))
    (protocol,) = [p for p in table.column("protocol").to_pylist() if p]
    assert protocol["readerFeatures"] == snap.protocol.reader_features
    assert protocol["writerFeatures"] == snap.protocol.writer_features
    assert protocol["readerFeatures"] is not None and protocol["writerFeatures"] is not None
    field = pq.read_schema(path / "_delta_log" / classic_checkpoint_name(snap.version))
    names = [f.name for f in field.field("protocol").type]
    assert names[2:] == ["readerFeatures", "writerFeatures"]


def test_v1_checkpoint_drops_expired_tombstones(tmp_path: Path, duck: Any) -> None:
    path = tmp_path / "t"
    build_history(path, {"delta.deletedFileRetentionDuration": "interval 1 hours"})
    time.sleep(0.05)
    deltalake.DeltaTable(str(path)).delete("id = 201")
    snap = load_snapshot(str(path))
    stamps = snap.all_tombstones.column("deletionTimestamp").to_pylist()
    newest = max(stamps)
    now = newest + HOUR_MS  # cutoff = newest: only the newest delete's tombstones survive
    expected = sorted(
        key
        for key, stamp in zip(table_keys(snap.all_tombstones), stamps, strict=True)
        if stamp >= now - HOUR_MS
    )
    assert expected and len(expected) < len(stamps)
    before_files = deltalake_view(path)
    before_rows = duck_rows(duck, path)
    info = write_v1_checkpoint(store_of(path), snap.state, now_ms=now)
    table = pq.read_table(path / "_delta_log" / classic_checkpoint_name(snap.version))
    removes = [r for r in table.column("remove").to_pylist() if r]
    assert sorted((r["path"], None) for r in removes) == expected
    assert all(r["deletionTimestamp"] >= now - HOUR_MS for r in removes)
    assert info.size == table.num_rows
    delete_commits_through(path, snap.version)
    ours = our_view(path)
    assert ours["removes"] == expected
    assert ours["adds"] == sorted_keys(snap.files)
    assert deltalake_view(path) == before_files
    assert duck_rows(duck, path) == before_rows


def test_v1_checkpoint_stats_as_struct(tmp_path: Path, duck: Any) -> None:
    path = tmp_path / "t"
    build_history(
        path,
        {
            "delta.checkpoint.writeStatsAsStruct": "true",
            "delta.checkpoint.writeStatsAsJson": "false",
        },
    )
    snap = load_snapshot(str(path))
    json_stats = {
        p: json.loads(s)
        for p, s in zip(
            snap.files.column("path").to_pylist(),
            snap.files.column("stats").to_pylist(),
            strict=True,
        )
    }
    before, _ = checkpoint_then_replace_log(
        path,
        duck,
        lambda store, s: write_v1_checkpoint(store, s.state, now_ms=_now_ms()),
        later_commit=False,
    )
    file = path / "_delta_log" / classic_checkpoint_name(snap.version)
    add_type = pq.read_schema(file).field("add").type
    add_fields = [f.name for f in add_type]
    assert "stats" not in add_fields
    assert "stats_parsed" in add_fields and "partitionValues_parsed" in add_fields
    assert add_type.field("partitionValues_parsed").type == pa.struct(
        [pa.field("part", pa.int32())]
    )
    adds = [a for a in pq.read_table(file).column("add").to_pylist() if a]
    assert len(adds) == snap.num_files
    for add in adds:
        expected = json_stats[add["path"]]
        parsed = add["stats_parsed"]
        assert parsed["numRecords"] == expected["numRecords"]
        assert parsed["minValues"]["id"] == expected["minValues"]["id"]
        assert parsed["maxValues"]["name"] == expected["maxValues"]["name"]
        assert parsed["nullCount"]["id"] == expected["nullCount"]["id"]
        assert add["partitionValues_parsed"]["part"] == int(add["partitionValues"][0][1])
    assert_same_views(path, duck, before)
    # our reader rebuilt the JSON stats from stats_parsed
    reloaded = load_snapshot(str(path))
    for p, s in zip(
        reloaded.files.column("path").to_pylist(),
        reloaded.files.column("stats").to_pylist(),
        strict=True,
    ):
        assert json.loads(s)["numRecords"] == json_stats[p]["numRecords"]


def _copy_golden(golden_root: Path, name: str, target: Path) -> Path:
    shutil.copytree(golden_root / name, target)
    for p in target.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return target


def test_column_mapping_struct_stats_use_physical_names(
    tmp_path: Path, golden_root: Path, duck: Any
) -> None:
    path = _copy_golden(golden_root, "dv-with-columnmapping", tmp_path / "t")
    store = store_of(path)
    snap = load_snapshot(str(path))
    configuration = {**snap.metadata.configuration, "delta.checkpoint.writeStatsAsStruct": "true"}
    metadata = snap.metadata.model_copy(update={"configuration": configuration})
    store.put_if_absent(
        commit_name(snap.version + 1),
        serialize_actions(
            [CommitInfo(timestamp=_now_ms(), operation="SET TBLPROPERTIES"), metadata]
        ),
    )
    snap = load_snapshot(str(path))
    config = TableConfiguration(snap.protocol, snap.metadata)
    before = all_views(path, duck)
    write_v1_checkpoint(
        store, snap.state, now_ms=max(snap.all_tombstones.column("deletionTimestamp").to_pylist())
    )
    add_type = (
        pq.read_schema(path / "_delta_log" / classic_checkpoint_name(snap.version))
        .field("add")
        .type
    )
    parsed_partitions = [f.name for f in add_type.field("partitionValues_parsed").type]
    assert parsed_partitions == config.physical_partition_columns
    assert parsed_partitions != config.partition_columns  # physical names differ
    stats_type = add_type.field("stats_parsed").type
    physical_data = {
        config.physical_name(f)
        for f in config.schema.fields
        if f.name not in config.partition_columns
    }
    assert {f.name for f in stats_type.field("nullCount").type} == physical_data
    delete_commits_through(path, snap.version)
    assert_same_views(path, duck, before)


@pytest.mark.parametrize("golden", ["log-replay-dv-key-cases", "dv-partitioned-with-checkpoint"])
def test_deletion_vector_keys_survive_v1_checkpoint(
    tmp_path: Path, golden_root: Path, duck: Any, golden: str
) -> None:
    path = _copy_golden(golden_root, golden, tmp_path / "t")
    snap = load_snapshot(str(path))
    assert snap.files.column("deletionVector").null_count < snap.num_files
    before = all_views(path, duck)
    # keep every tombstone: "now" is the newest deletion
    now = max(snap.all_tombstones.column("deletionTimestamp").to_pylist())
    write_v1_checkpoint(store_of(path), snap.state, now_ms=now)
    delete_commits_through(path, snap.version)
    assert_same_views(path, duck, before)


def test_last_checkpoint_is_not_moved_backwards(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_history(path)
    store = store_of(path)
    latest = load_snapshot(str(path))
    write_v1_checkpoint(store, latest.state, now_ms=_now_ms())
    older = load_snapshot(str(path), version=1)
    write_v1_checkpoint(store, older.state, now_ms=_now_ms())
    assert classic_checkpoint_name(1) in log_names(path)
    hint = parse_last_checkpoint(store.read(LAST_CHECKPOINT_NAME))
    assert hint is not None and hint.version == latest.version


# --- V2 --------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["json", "parquet"])
@pytest.mark.parametrize("with_sidecars", [True, False], ids=["sidecars", "embedded"])
def test_v2_checkpoint_replaces_the_log(
    tmp_path: Path, duck: Any, fmt: FileFormat, with_sidecars: bool
) -> None:
    path = tmp_path / "t"
    build_v2_table(path)

    def write(store: LogStore, snap: Snapshot) -> None:
        if with_sidecars:
            write_v2_checkpoint_single_process(
                store, snap.state, now_ms=_now_ms(), target_actions_per_sidecar=3, fmt=fmt
            )
        else:
            write_v2_checkpoint(store, snap.state, None, now_ms=_now_ms(), fmt=fmt)

    before, snap = checkpoint_then_replace_log(path, duck, write)
    top = [n for n in log_names(path) if n.startswith(f"{snap.version:020d}.checkpoint.")]
    assert len(top) == 1 and top[0].endswith(f".{fmt}")
    hint = parse_last_checkpoint((path / "_delta_log" / LAST_CHECKPOINT_NAME).read_bytes())
    assert hint is not None and hint.version == snap.version
    sidecar_dir = path / "_delta_log" / "_sidecars"
    sidecar_files = sorted(p.name for p in sidecar_dir.iterdir()) if sidecar_dir.exists() else []
    if with_sidecars:
        assert hint.v2_checkpoint_path == top[0]
        listed = sorted(s["path"] for s in hint.v2_checkpoint["sidecarFiles"])  # type: ignore[index]
        assert listed == sidecar_files and len(sidecar_files) > 1
        total = snap.num_files + snap.all_tombstones.num_rows
        top_bytes = (path / "_delta_log" / top[0]).stat().st_size
        assert hint.size_in_bytes == top_bytes + sum(
            (sidecar_dir / n).stat().st_size for n in sidecar_files
        )
        non_file = len(hint.v2_checkpoint["nonFileActions"])  # type: ignore[index]
        assert hint.size == non_file + len(sidecar_files) + total
    else:
        assert sidecar_files == []
    assert hint.num_of_add_files == snap.num_files
    assert_same_views(path, duck, before)


def test_v2_checkpoint_file_holds_checkpoint_metadata_first(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_v2_table(path)
    snap = load_snapshot(str(path))
    store = store_of(path)
    write_v2_checkpoint_single_process(
        store, snap.state, now_ms=_now_ms(), target_actions_per_sidecar=4, fmt="json"
    )
    (top,) = [f for f in store.list_from(snap.version) if f.kind is LogFileKind.CHECKPOINT_UUID]
    actions = parse_actions(store.read(top.name))
    names = [type(a).__name__ for a in actions]
    assert names[0] == "CheckpointMetadata" and actions[0].version == snap.version  # type: ignore[union-attr]
    assert names.count("Protocol") == 1 and names.count("Metadata") == 1
    assert "AddFile" not in names and "RemoveFile" not in names and "CommitInfo" not in names
    sidecars = read_checkpoint_sidecars(store, top)
    assert len(sidecars) == names.count("Sidecar") > 1
    total = snap.num_files + snap.all_tombstones.num_rows
    num_shards = -(-total // 4)
    # Paths are random, so which shards end up empty (and write no sidecar) varies.
    keys = table_keys(snap.state.adds) + table_keys(snap.all_tombstones)
    non_empty = shards_of_keys(keys, num_shards)
    rows = 0
    for sidecar in sidecars:
        file = path / "_delta_log" / "_sidecars" / sidecar.path
        assert file.stat().st_size == sidecar.size_in_bytes
        assert pq.read_schema(file).names == ["add", "remove"]
        rows += pq.read_metadata(file).num_rows
        assert tag(sidecar, TAG_NUM_SHARDS) == str(num_shards)
    assert sorted(int(tag(s, TAG_SHARD)) for s in sidecars) == sorted(non_empty)
    assert rows == total


def test_v2_classic_named_copy_is_readable_alone(tmp_path: Path, duck: Any) -> None:
    path = tmp_path / "t"
    build_v2_table(path)
    store = store_of(path)

    def write(store: LogStore, snap: Snapshot) -> None:
        write_v2_checkpoint_single_process(
            store,
            snap.state,
            now_ms=_now_ms(),
            target_actions_per_sidecar=3,
            fmt="json",
            classic_copy=True,
        )

    before, snap = checkpoint_then_replace_log(path, duck, write)
    classic = path / "_delta_log" / classic_checkpoint_name(snap.version)
    table = pq.read_table(classic)
    assert {"checkpointMetadata", "sidecar"} <= set(table.column_names)
    assert table.column("checkpointMetadata").drop_null().to_pylist() == [
        {"version": snap.version, "tags": None}
    ]
    assert table.column("add").null_count == table.num_rows
    uuid_named = [f for f in store.list_from(snap.version) if f.kind is LogFileKind.CHECKPOINT_UUID]
    assert sorted(s["path"] for s in table.column("sidecar").drop_null().to_pylist()) == sorted(
        s.path for s in read_checkpoint_sidecars(store, uuid_named[0])
    )
    # with only the classic copy left, every reader still gets the table
    (path / "_delta_log" / uuid_named[0].name).unlink()
    (path / "_delta_log" / LAST_CHECKPOINT_NAME).unlink()
    assert_same_views(path, duck, before)
    segment = load_snapshot(str(path)).log_segment
    assert segment is not None and segment.checkpoint is not None
    assert [f.name for f in segment.checkpoint.files] == [classic.name]


def test_incremental_v2_checkpoint_reuses_untouched_shards(tmp_path: Path, duck: Any) -> None:
    path = tmp_path / "t"
    build_v2_table(path)
    store = store_of(path)
    first = load_snapshot(str(path))
    deltalake.write_deltalake(str(path), _batch(500, 1), partition_by=["part"], mode="append")
    second = load_snapshot(str(path))
    before = all_views(path, duck)  # the full log, no checkpoint yet
    write_v2_checkpoint_single_process(
        store, first.state, now_ms=_now_ms(), target_actions_per_sidecar=2, fmt="parquet"
    )
    (checkpoint,) = [
        f for f in store.list_from(first.version) if f.kind is LogFileKind.CHECKPOINT_UUID
    ]
    previous = read_checkpoint_sidecars(store, checkpoint)
    touched = touched_keys_of(
        parse_actions(store.read(commit_name(v)))
        for v in range(first.version + 1, second.version + 1)
    )
    assert len(touched) == 1
    write_v2_checkpoint_single_process(
        store,
        second.state,
        now_ms=_now_ms(),
        target_actions_per_sidecar=2,
        fmt="parquet",
        previous_sidecars=previous,
        touched_keys=touched,
    )
    (latest,) = [
        f for f in store.list_from(second.version) if f.kind is LogFileKind.CHECKPOINT_UUID
    ]
    current = read_checkpoint_sidecars(store, latest)
    num_shards = int(tag(previous[0], TAG_NUM_SHARDS))
    assert all(tag(s, TAG_NUM_SHARDS) == str(num_shards) for s in current)
    (touched_shard,) = shards_of_keys(touched, num_shards)
    old = {int(tag(s, TAG_SHARD)): s.path for s in previous}
    new = {int(tag(s, TAG_SHARD)): s.path for s in current}
    assert {k for k in new if new[k] == old.get(k)} == set(old) - {touched_shard}
    assert new[touched_shard] != old.get(touched_shard)
    # the reused sidecars are referenced, not copied
    assert len(list((path / "_delta_log" / "_sidecars").iterdir())) == len(old) + 1
    delete_commits_through(path, second.version)
    assert_same_views(path, duck, before)


def test_v2_checkpoint_refuses_missing_or_wrong_sidecars(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_v2_table(path)
    store = store_of(path)
    snap = load_snapshot(str(path))
    now = _now_ms()
    plan = plan_v2_checkpoint(snap.state, now_ms=now, target_actions_per_sidecar=3)
    sidecars = [write_shard_sidecar(store, w, layout=plan.layout) for w in plan.to_write]
    listing = log_names(path)
    wrong_size = [sidecars[0].model_copy(update={"size_in_bytes": 1}), *sidecars[1:]]
    with pytest.raises(CheckpointWriteError):
        write_v2_checkpoint(store, snap.state, wrong_size, now_ms=now)
    (path / "_delta_log" / "_sidecars" / sidecars[0].path).unlink()
    with pytest.raises(CheckpointWriteError):
        write_v2_checkpoint(store, snap.state, sidecars, now_ms=now)
    with pytest.raises(CheckpointWriteError):
        write_v2_checkpoint(store, snap.state, [], now_ms=now)
    assert log_names(path) == listing  # no checkpoint, no _last_checkpoint
    assert LAST_CHECKPOINT_NAME not in listing


def test_v2_checkpoint_needs_the_table_feature(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_history(path)
    snap = load_snapshot(str(path))
    with pytest.raises(CheckpointWriteError):
        write_v2_checkpoint(store_of(path), snap.state, None, now_ms=_now_ms())
    assert not any(".checkpoint." in n for n in log_names(path))


def test_write_sidecar_returns_its_action(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_v2_table(path)
    snap = load_snapshot(str(path))
    plan = plan_v2_checkpoint(snap.state, now_ms=_now_ms())
    sidecar = write_sidecar(
        store_of(path), plan.view.adds, plan.view.removes, layout=plan.layout, tags={"k": "v"}
    )
    file = path / "_delta_log" / "_sidecars" / sidecar.path
    assert "/" not in sidecar.path and file.stat().st_size == sidecar.size_in_bytes
    assert abs(sidecar.modification_time - file.stat().st_mtime * 1000) < 2_000
    assert sidecar.tags == {"k": "v"}
    table = pq.read_table(file)
    assert table.column("add").drop_null().to_pylist()[0]["path"] in set(
        plan.view.adds.column("path").to_pylist()
    )
    assert pc.sum(pc.is_valid(table.column("add"))).as_py() == plan.view.adds.num_rows
    assert pc.sum(pc.is_valid(table.column("remove"))).as_py() == plan.view.removes.num_rows


def test_protocol_feature_lists_in_v2_parquet_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_v2_table(path)
    snap = load_snapshot(str(path))
    write_v2_checkpoint(store_of(path), snap.state, None, now_ms=_now_ms(), fmt="parquet")
    (top,) = [
        f for f in store_of(path).list_from(snap.version) if f.kind is LogFileKind.CHECKPOINT_UUID
    ]
    (protocol,) = (
        pq.read_table(path / "_delta_log" / top.name).column("protocol").drop_null().to_pylist()
    )
    assert Protocol.model_validate(protocol) == snap.protocol


def test_write_checkpoint_follows_the_checkpoint_policy(tmp_path: Path) -> None:
    classic, v2 = tmp_path / "classic", tmp_path / "v2"
    build_history(classic)
    build_v2_table(v2)
    for path in (classic, v2):
        snap = load_snapshot(str(path))
        write_checkpoint(store_of(path), snap.state, now_ms=_now_ms())
    classic_kinds = {f.kind for f in store_of(classic).list_from(0) if f.is_checkpoint}
    v2_kinds = {f.kind for f in store_of(v2).list_from(0) if f.is_checkpoint}
    assert classic_kinds == {LogFileKind.CHECKPOINT_CLASSIC}
    assert v2_kinds == {LogFileKind.CHECKPOINT_UUID}


# --- a checkpoint another engine wrote (issue 31) ---------------------------------------------


def _as_delta_spark_left_it(file: Path) -> Path:
    """Rewrite ``file`` with the same rows in other bytes, and give it a Hadoop checksum
    file: what delta-spark leaves when it checkpoints a version we checkpoint too."""
    pq.write_table(pq.read_table(file), file, compression="gzip")
    return write_crc(file)


def test_a_classic_checkpoint_already_there_is_left_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_history(path)
    store = store_of(path)
    snap = load_snapshot(str(path))
    write_v1_checkpoint(store, snap.state, now_ms=_now_ms())
    theirs = path / "_delta_log" / classic_checkpoint_name(snap.version)
    crc = _as_delta_spark_left_it(theirs)
    before, hint = theirs.read_bytes(), store.read(LAST_CHECKPOINT_NAME)

    info = write_v1_checkpoint(store, snap.state, now_ms=_now_ms())
    assert info.version == snap.version
    assert theirs.read_bytes() == before and crc_matches(crc)  # Hadoop still verifies it
    assert store.read(LAST_CHECKPOINT_NAME) == hint
    assert not create_classic_checkpoint(store, snap.version, b"other bytes")
    assert theirs.read_bytes() == before and crc_matches(crc)
    assert classic_checkpoint_exists(store, snap.version)
    assert load_snapshot(str(path)).num_files == snap.num_files


def test_an_empty_classic_file_or_a_lone_checksum_file_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_history(path)
    store = store_of(path)
    version = load_snapshot(str(path)).version
    file = path / "_delta_log" / classic_checkpoint_name(version)
    file.write_bytes(b"")  # no checkpoint: a writer without atomic visibility died
    crc = write_crc(file)
    assert not classic_checkpoint_exists(store, version)
    assert create_classic_checkpoint(store, version, b"ours")
    assert file.read_bytes() == b"ours" and not crc.exists()
    file.write_bytes(b"theirs")
    write_crc(file)
    file.unlink()  # a tool that deleted the file and not its checksum file
    assert create_classic_checkpoint(store, version, b"ours again")
    assert file.read_bytes() == b"ours again" and not crc.exists()


def test_the_classic_copy_of_a_v2_checkpoint_leaves_one_already_there(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_v2_table(path)
    store = store_of(path)
    snap = load_snapshot(str(path))
    write_v2_checkpoint_single_process(store, snap.state, now_ms=_now_ms(), classic_copy=True)
    theirs = path / "_delta_log" / classic_checkpoint_name(snap.version)
    crc = _as_delta_spark_left_it(theirs)
    before = theirs.read_bytes()
    write_v2_checkpoint_single_process(store, snap.state, now_ms=_now_ms(), classic_copy=True)
    assert theirs.read_bytes() == before and crc_matches(crc)


def test_last_checkpoint_is_not_rewritten_for_the_version_it_names(tmp_path: Path) -> None:
    store = store_of(tmp_path / "t")
    assert write_last_checkpoint(store, LastCheckpointInfo(version=10, size=3))
    first = store.read(LAST_CHECKPOINT_NAME)
    assert not write_last_checkpoint(store, LastCheckpointInfo(version=10, size=4))
    assert not write_last_checkpoint(store, LastCheckpointInfo(version=9, size=4))
    assert store.read(LAST_CHECKPOINT_NAME) == first
    assert write_last_checkpoint(store, LastCheckpointInfo(version=11, size=4))
