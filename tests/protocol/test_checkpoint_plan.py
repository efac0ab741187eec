"""Checkpoint planning (shards, stable hash, reuse) and the checkpoint Arrow layout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    Metadata,
    Protocol,
    RemoveFile,
    Sidecar,
    Txn,
)
from raydelta.protocol.checkpoint_plan import (
    SHARD_HASH,
    TAG_LAYOUT,
    TAG_MIN_DELETION_TIMESTAMP,
    TAG_NUM_SHARDS,
    TAG_SHARD,
    checkpoint_view,
    choose_num_shards,
    key_string,
    key_strings,
    non_file_actions,
    plan_v2_checkpoint,
    reusable_sidecars,
    select_shard,
    shard_of,
    shard_tags,
    shards_of_keys,
    shards_of_table,
    split_by_shard,
    stable_hash64,
    touched_keys_of,
)
from raydelta.protocol.checkpoint_schema import (
    CheckpointLayout,
    assemble_rows,
    non_file_rows,
    protocol_row,
)
from raydelta.protocol.file_actions import (
    ADD_SCHEMA,
    REMOVE_SCHEMA,
    actions_to_table,
    canonical_path,
    table_keys,
)
from raydelta.protocol.reconciliation import TableState, replay
from raydelta.protocol.table_configuration import TableConfiguration

MASK64 = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for octet in data:
        h = ((h ^ octet) * 0x100000001B3) & MASK64
    return h


def fmix64(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    return h ^ (h >> 33)


def test_reference_fnv_matches_published_vectors() -> None:
    # Test vectors of the FNV specification (draft-eastlake-fnv).
    assert fnv1a64(b"") == 0xCBF29CE484222325
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C
    assert fnv1a64(b"foobar") == 0x85944171F73967E8


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=30), st.integers(0, 5))
def test_stable_hash_is_fnv1a_then_fmix(values: list[str | None], offset: int) -> None:
    array = pa.array(["pad"] * offset + values, type=pa.string()).slice(offset)
    expected = [fmix64(fnv1a64((v or "").encode("utf-8"))) for v in values]
    assert stable_hash64(array).to_pylist() == expected


def test_shards_are_the_same_in_another_process(tmp_path: Path) -> None:
    keys = [f"part-{i:05d}-{i * 7919}.parquet" for i in range(300)] + ["", "é/ü", "x" * 500]
    here = shard_of(pa.array(keys), 17).to_pylist()
    script = (
        "import json, sys, pyarrow as pa\n"
        "from raydelta.protocol.checkpoint_plan import shard_of\n"
        "keys = json.loads(sys.stdin.read())\n"
        "print(json.dumps(shard_of(pa.array(keys), 17).to_pylist()))\n"
    )
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONHASHSEED": "12345", "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(keys),
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=root,
    )
    assert json.loads(out.stdout) == here


def test_shard_of_rejects_zero_shards() -> None:
    with pytest.raises(ValueError):
        shard_of(pa.array(["a"]), 0)


# --- keys -----------------------------------------------------------------------------------

dv_strategy = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {
            "storageType": st.sampled_from(["u", "p", "i"]),
            "pathOrInlineDv": st.text(min_size=1, max_size=20),
            "offset": st.one_of(st.none(), st.integers(1, 2**31 - 1)),
            "sizeInBytes": st.integers(1, 1000),
            "cardinality": st.integers(1, 1000),
        }
    ),
)


def _add(path: str, dv: dict[str, Any] | None = None, **extra: Any) -> AddFile:
    body: dict[str, Any] = {"path": path, "size": 1, "modificationTime": 1, **extra}
    if dv is not None:
        body["deletionVector"] = {k: v for k, v in dv.items() if v is not None}
    return AddFile.model_validate(body)


def _remove(path: str, stamp: int | None, dv: dict[str, Any] | None = None) -> RemoveFile:
    body: dict[str, Any] = {"path": path}
    if stamp is not None:
        body["deletionTimestamp"] = stamp
    if dv is not None:
        body["deletionVector"] = {k: v for k, v in dv.items() if v is not None}
    return RemoveFile.model_validate(body)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=30), dv_strategy), max_size=20))
def test_key_strings_agree_with_file_key(rows: list[tuple[str, dict[str, Any] | None]]) -> None:
    table = actions_to_table([_add(p, dv) for p, dv in rows], ADD_SCHEMA)
    expected = [key_string(k) for k in table_keys(table)]
    assert key_strings(table).to_pylist() == expected


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.text(min_size=1, max_size=20), dv_strategy), max_size=40),
    st.integers(1, 9),
)
def test_split_by_shard_partitions_rows(
    rows: list[tuple[str, dict[str, Any] | None]], num_shards: int
) -> None:
    table = actions_to_table([_add(p, dv) for p, dv in rows], ADD_SCHEMA)
    parts = split_by_shard(table, num_shards)
    assert len(parts) == num_shards
    assert sum(p.num_rows for p in parts) == table.num_rows
    shards = shards_of_table(table, num_shards).to_pylist()
    for shard, part in enumerate(parts):
        expected = [r for r, s in zip(table.to_pylist(), shards, strict=True) if s == shard]
        assert part.to_pylist() == expected  # rows kept, original order kept
        assert select_shard(table, shard, num_shards).to_pylist() == expected
        # the key-level function puts the part's keys in the same shard
        assert shards_of_keys(table_keys(part), num_shards) <= {shard}


def test_add_and_remove_of_one_key_share_a_shard() -> None:
    dv = {"storageType": "u", "pathOrInlineDv": "ab^-aqEH.-t@S}K{vb[*k^", "offset": 4}
    dv |= {"sizeInBytes": 10, "cardinality": 2}
    paths = [f"f{i}.parquet" for i in range(50)]
    adds = actions_to_table([_add(p, dv) for p in paths], ADD_SCHEMA)
    removes = actions_to_table([_remove(p, 5, dv) for p in paths], REMOVE_SCHEMA)
    assert shards_of_table(adds, 7).to_pylist() == shards_of_table(removes, 7).to_pylist()


def test_shards_spread_keys() -> None:
    keys = pa.array([f"part-{i:06d}.snappy.parquet" for i in range(20_000)])
    counts = pa.compute.value_counts(shard_of(keys, 10)).field("counts").to_pylist()
    assert len(counts) == 10
    assert min(counts) > 1_700 and max(counts) < 2_300


def test_choose_num_shards() -> None:
    assert choose_num_shards(0) == 1
    assert choose_num_shards(50_000) == 1
    assert choose_num_shards(50_001) == 2
    assert choose_num_shards(1_000_000, target_actions_per_sidecar=50_000) == 20
    # the previous count is kept while it gives between half and twice the target
    assert choose_num_shards(1_300_000, previous_num_shards=20) == 20
    assert choose_num_shards(2_100_000, previous_num_shards=20) == 42
    assert choose_num_shards(400_000, previous_num_shards=20) == 8
    assert choose_num_shards(10, previous_num_shards=1) == 1
    with pytest.raises(ValueError):
        choose_num_shards(10, target_actions_per_sidecar=0)


# --- non-file actions and the checkpoint view -------------------------------------------

SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "id", "type": "long", "nullable": True, "metadata": {}},
            {"name": "part", "type": "date", "nullable": True, "metadata": {}},
        ],
    }
)


def _state(
    configuration: dict[str, str] | None = None,
    protocol: Protocol | None = None,
    partitioned: bool = False,
) -> TableState:
    metadata = Metadata(
        id="t",
        schemaString=SCHEMA,
        partitionColumns=["part"] if partitioned else [],
        configuration=configuration or {},
    )
    proto = protocol or Protocol(minReaderVersion=1, minWriterVersion=2)
    return replay([(0, [proto, metadata])])


def test_non_file_actions_order_and_contents() -> None:
    base = _state()
    state = replay(
        [
            (
                1,
                [
                    CommitInfo(operation="x"),
                    Txn(appId="b", version=2),
                    Txn(appId="a", version=1),
                    DomainMetadata(domain="keep", configuration="{}"),
                    DomainMetadata(domain="gone", configuration="{}"),
                ],
            ),
            (2, [DomainMetadata(domain="gone", configuration="{}", removed=True)]),
        ],
        base=base,
    )
    v1 = non_file_actions(state)
    assert [type(a).__name__ for a in v1] == [
        "Protocol",
        "Metadata",
        "Txn",
        "Txn",
        "DomainMetadata",
    ]
    assert [a.app_id for a in v1 if isinstance(a, Txn)] == ["a", "b"]
    assert [a.domain for a in v1 if isinstance(a, DomainMetadata)] == ["keep"]
    v2 = non_file_actions(state, checkpoint_version=2)
    assert type(v2[0]).__name__ == "CheckpointMetadata" and v2[1:] == v1


def test_checkpoint_view_expires_tombstones_and_txns() -> None:
    hour = 3_600_000
    base = _state(
        {
            "delta.deletedFileRetentionDuration": "interval 1 hours",
            "delta.setTransactionRetentionDuration": "interval 2 hours",
        }
    )
    now = 100 * hour
    state = replay(
        [
            (
                1,
                [
                    _remove("old", now - hour - 1),
                    _remove("edge", now - hour),
                    _remove("new", now - 5),
                    _remove("nostamp", None),
                    Txn(appId="stale", version=1, lastUpdated=now - 2 * hour - 1),
                    Txn(appId="fresh", version=1, lastUpdated=now - 2 * hour),
                    Txn(appId="timeless", version=1),
                ],
            )
        ],
        base=base,
    )
    config = TableConfiguration(state.protocol, state.metadata)  # type: ignore[arg-type]
    view = checkpoint_view(state, config, now_ms=now)
    assert sorted(view.removes.column("path").to_pylist()) == ["edge", "new"]
    assert sorted(view.txns) == ["fresh", "timeless"]


# --- tags and reuse ---------------------------------------------------------------------


def _sidecar(shard: int, num_shards: int, layout: str, **tags: str) -> Sidecar:
    empty = REMOVE_SCHEMA.empty_table()
    base = shard_tags(
        shard, num_shards, layout=layout, adds=ADD_SCHEMA.empty_table(), removes=empty
    )
    return Sidecar(
        path=f"s{shard}.parquet", sizeInBytes=1, modificationTime=1, tags={**base, **tags}
    )


def test_shard_tags_record_the_shard_function() -> None:
    removes = actions_to_table([_remove("a", 30), _remove("b", 20)], REMOVE_SCHEMA)
    tags = shard_tags(3, 20, layout="L", adds=ADD_SCHEMA.empty_table(), removes=removes)
    assert tags[TAG_SHARD] == "3" and tags[TAG_NUM_SHARDS] == "20"
    assert tags["raydelta.shardHash"] == SHARD_HASH
    assert tags[TAG_MIN_DELETION_TIMESTAMP] == "20"
    assert tags["raydelta.numAdds"] == "0" and tags["raydelta.numRemoves"] == "2"


def test_reusable_sidecars_keeps_untouched_shards_only() -> None:
    num_shards = 8
    touched = {("a.parquet", None), ("b.parquet", "uabc")}
    touched_shards = shards_of_keys(touched, num_shards)
    previous = [_sidecar(s, num_shards, "L") for s in range(num_shards)]
    reused = reusable_sidecars(
        previous, touched, num_shards=num_shards, layout="L", tombstone_cutoff_ms=0
    )
    assert set(reused) == set(range(num_shards)) - touched_shards
    assert all(reused[s] is previous[s] for s in reused)
    # another shard count, another layout, or a foreign sidecar: nothing reused
    assert not reusable_sidecars(previous, (), num_shards=4, layout="L", tombstone_cutoff_ms=0)
    assert not reusable_sidecars(previous, (), num_shards=8, layout="M", tombstone_cutoff_ms=0)
    foreign = Sidecar(path="x.parquet", sizeInBytes=1, modificationTime=1, tags={})
    assert not reusable_sidecars([foreign], (), num_shards=1, layout="L", tombstone_cutoff_ms=0)


def test_reusable_sidecars_rewrites_shards_with_expired_tombstones() -> None:
    stale = _sidecar(0, 2, "L", **{"raydelta.numRemoves": "1", TAG_MIN_DELETION_TIMESTAMP: "99"})
    fresh = _sidecar(1, 2, "L", **{"raydelta.numRemoves": "1", TAG_MIN_DELETION_TIMESTAMP: "100"})
    reused = reusable_sidecars(
        [stale, fresh], (), num_shards=2, layout="L", tombstone_cutoff_ms=100
    )
    assert reused == {1: fresh}


def test_reusable_sidecars_distrusts_duplicate_shards() -> None:
    a, b = _sidecar(0, 2, "L"), _sidecar(0, 2, "L")
    assert reusable_sidecars([a, b], (), num_shards=2, layout="L", tombstone_cutoff_ms=0) == {}


def test_touched_keys_of() -> None:
    dv = {"storageType": "u", "pathOrInlineDv": "abc", "sizeInBytes": 1, "cardinality": 1}
    commits: list[list[Action]] = [
        [_add("a"), CommitInfo()],
        [_remove("b", 1, dv), Txn(appId="x", version=1)],
    ]
    assert touched_keys_of(commits) == {("a", None), ("b", "uabc")}


def test_plan_v2_checkpoint_shards_and_reuses() -> None:
    base = _state()
    adds = [_add(f"f{i}.parquet") for i in range(40)]
    state = replay([(1, adds)], base=base)
    plan = plan_v2_checkpoint(state, now_ms=0, target_actions_per_sidecar=10)
    assert plan.num_shards == 4 and not plan.reused
    assert sorted(p for w in plan.to_write for p in w.adds.column("path").to_pylist()) == sorted(
        a.path for a in adds
    )
    # pretend the shards were written; one new file touches exactly one shard
    previous = [
        _sidecar(w.shard, w.num_shards, plan.layout.fingerprint, **{"raydelta.numAdds": "10"})
        for w in plan.to_write
    ]
    later = replay([(2, [_add("new.parquet")])], base=state)
    touched = touched_keys_of([[_add("new.parquet")]])
    again = plan_v2_checkpoint(
        later,
        now_ms=0,
        target_actions_per_sidecar=10,
        previous_sidecars=previous,
        touched_keys=touched,
    )
    assert again.num_shards == 4  # 41 actions: kept by the hysteresis
    (new_shard,) = shards_of_keys(touched, 4)
    assert [w.shard for w in again.to_write] == [new_shard]
    assert set(again.reused) == {w.shard for w in plan.to_write} - {new_shard}


# --- layout -----------------------------------------------------------------------------


def test_protocol_row_feature_lists() -> None:
    legacy = protocol_row(Protocol(minReaderVersion=1, minWriterVersion=2))
    assert legacy["readerFeatures"] is None and legacy["writerFeatures"] is None
    writer_only = protocol_row(
        Protocol(minReaderVersion=1, minWriterVersion=7, writerFeatures=["appendOnly"])
    )
    assert writer_only["readerFeatures"] is None and writer_only["writerFeatures"] == ["appendOnly"]
    empty = protocol_row(Protocol(minReaderVersion=3, minWriterVersion=7))
    assert empty["readerFeatures"] == [] and empty["writerFeatures"] == []


def test_layout_follows_table_properties() -> None:
    def add_fields(state: TableState) -> list[str]:
        config = TableConfiguration(state.protocol, state.metadata)  # type: ignore[arg-type]
        return [f.name for f in CheckpointLayout.for_table(config).add_type]

    assert "stats" in add_fields(_state())
    assert "stats_parsed" not in add_fields(_state(partitioned=True))
    structs = add_fields(_state({"delta.checkpoint.writeStatsAsStruct": "true"}, partitioned=True))
    assert "stats_parsed" in structs and "partitionValues_parsed" in structs
    unpartitioned = add_fields(_state({"delta.checkpoint.writeStatsAsStruct": "true"}))
    assert "stats_parsed" in unpartitioned and "partitionValues_parsed" not in unpartitioned
    no_json = add_fields(_state({"delta.checkpoint.writeStatsAsJson": "false"}))
    assert "stats" not in no_json


def test_layout_converts_rows() -> None:
    state = _state({"delta.checkpoint.writeStatsAsStruct": "true"}, partitioned=True)
    stats = '{"numRecords":3,"minValues":{"id":1},"maxValues":{"id":9},"nullCount":{"id":0}}'
    add = _add("x", partitionValues={"part": "2024-01-02"}, stats=stats)
    adds = actions_to_table([add, _add("y", partitionValues={"part": None})], ADD_SCHEMA)
    config = TableConfiguration(state.protocol, state.metadata)  # type: ignore[arg-type]
    layout = CheckpointLayout.for_table(config)
    rows = layout.add_array(adds).to_pylist()
    assert str(rows[0]["partitionValues_parsed"]["part"]) == "2024-01-02"
    assert rows[1]["partitionValues_parsed"]["part"] is None
    parsed = rows[0]["stats_parsed"]
    assert parsed["numRecords"] == 3 and parsed["minValues"]["id"] == 1
    assert parsed["maxValues"]["id"] == 9 and parsed["nullCount"]["id"] == 0
    assert rows[1]["stats_parsed"] is None
    assert layout.remove_array(REMOVE_SCHEMA.empty_table()).type.get_field_index("stats") == -1


def test_layout_fingerprint_changes_with_layout() -> None:
    def fingerprint(state: TableState) -> str:
        config = TableConfiguration(state.protocol, state.metadata)  # type: ignore[arg-type]
        return CheckpointLayout.for_table(config).fingerprint

    plain = fingerprint(_state())
    assert plain == fingerprint(_state())
    assert plain != fingerprint(_state({"delta.checkpoint.writeStatsAsStruct": "true"}))


def test_assemble_rows_sets_one_column_per_row() -> None:
    state = _state()
    config = TableConfiguration(state.protocol, state.metadata)  # type: ignore[arg-type]
    layout = CheckpointLayout.for_table(config)
    blocks = list(non_file_rows(non_file_actions(state)).items())
    adds = actions_to_table([_add("a"), _add("b")], ADD_SCHEMA)
    blocks.append(("add", layout.add_array(adds)))
    table = assemble_rows(layout.schema(), blocks)
    assert table.num_rows == 4
    for row in table.to_pylist():
        assert sum(value is not None for value in row.values()) == 1
    assert [r["add"]["path"] for r in table.to_pylist() if r["add"]] == ["a", "b"]
    assert table.column("protocol")[0].as_py()["minWriterVersion"] == 2


def test_v2_layout_has_checkpoint_metadata_and_sidecar() -> None:
    state = replace(_state(), version=3)
    config = TableConfiguration(state.protocol, state.metadata)  # type: ignore[arg-type]
    layout = CheckpointLayout.for_table(config)
    assert "checkpointMetadata" not in layout.schema().names
    assert {"checkpointMetadata", "sidecar"} <= set(layout.schema(v2=True).names)
    assert layout.sidecar_schema().names == ["add", "remove"]
    assert TAG_LAYOUT == "raydelta.layout"


@given(
    st.lists(
        st.sampled_from(
            [
                "/t/a.parquet",
                "file:/t/a.parquet",
                "file:///t/a.parquet",
                "file://host/t/a.parquet",
                "file:rel.parquet",
                "file:",
                "file:/",
                "rel/b%20c.parquet",
                "s3://bucket/t/d.parquet",
            ]
        ),
        min_size=1,
        max_size=12,
    )
)
def test_key_strings_use_the_canonical_spelling_of_each_path(paths: list[str]) -> None:
    """``file:/x``, ``file:///x`` and ``/x`` are one logical file: they must get one
    key string, hence one shard (else a remove would miss its add's sidecar)."""
    table = pa.table({"path": pa.array(paths, pa.string())})
    assert key_strings(table).to_pylist() == [canonical_path(p) for p in paths]
    keys = [(canonical_path(p), None) for p in paths]
    assert shards_of_keys(keys, 7) == set(shard_of(key_strings(table), 7).to_pylist())
