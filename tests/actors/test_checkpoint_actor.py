"""The CheckpointActor: checkpoints of every kind, built by Ray tasks, read back by peers.

Pure parts first (the fast shard hash, the sharded merge against the
spec's reconciliation, log compaction), then end-to-end tests on the
session's Ray cluster: V1, V2 (JSON and parquet top-level, with sidecars),
incremental reuse, tombstone expiry, the commit-interval policy, crashes of
the actor and of single tasks, and the command line. Every checkpoint is
read back by our reader, deltalake and duckdb, also after the commit files
it covers are deleted, and compared with what they saw before it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raydelta.actors.checkpoint.actor import actor_name, checkpoint_actor, ensure_checkpointer
from raydelta.actors.checkpoint.tasks import MAP_TASK_FAULT, SHARD_TASK_FAULT
from raydelta.actors.cluster import NAMESPACE
from raydelta.actors.faults import FAULT_FILE_ENV, arm
from raydelta.protocol.actions import (
    Action,
    AddFile,
    CommitInfo,
    DomainMetadata,
    RemoveFile,
    Sidecar,
    Txn,
    parse_actions,
    serialize_actions,
)
from raydelta.protocol.checkpoint_plan import (
    SHARD_HASH,
    SHARD_HASH_FNV,
    TAG_SHARD_HASH,
    shard_of,
    shards_of_keys,
    sidecar_shard,
    stable_hash64,
    words_hash64,
)
from raydelta.protocol.events import CommitPublished
from raydelta.protocol.file_actions import DV_TYPE, table_keys
from raydelta.protocol.file_names import (
    LogFileKind,
    classic_checkpoint_name,
    commit_name,
    compaction_name,
    parse_log_file_name,
)
from raydelta.protocol.reconciliation import TableState, apply_commits
from raydelta.storage.checkpoint.fingerprints import (
    decode_fingerprints,
    encode_fingerprints,
    key_fingerprints,
)
from raydelta.storage.checkpoint.shards import (
    full_rows,
    group_bounds,
    merge_shard_rows,
    partition_rows,
    partition_rows_grouped,
    shard_slice,
    slim_rows,
    split_delta,
)
from raydelta.storage.checkpoint.writer import read_checkpoint_sidecars, write_v1_checkpoint
from raydelta.storage.compaction import compacted_actions, write_log_compaction
from raydelta.storage.log.reader import read_last_checkpoint, sidecar_path
from raydelta.storage.log.store import log_store_for
from raydelta.storage.snapshot import load_snapshot
from raydelta.storage.table_location import normalize_uri
from tests.hadoop_crc import crc_matches, write_crc

deltalake = pytest.importorskip("deltalake")
duckdb = pytest.importorskip("duckdb")

DAY_MS = 86_400_000
MASK64 = (1 << 64) - 1

# --- the shard hash ---------------------------------------------------------------------------


def words_reference(data: bytes) -> int:
    """``words64-fmix64`` one key at a time, straight from its definition."""
    n = len(data)
    k = (n + 7) // 8
    data = data + b"\0" * (8 * k - n)
    h = 0x9E3779B97F4A7C15 ^ ((n * 0xC2B2AE3D27D4EB4F) & MASK64)
    for j in range(k):
        word = int.from_bytes(data[8 * j : 8 * j + 8], "little")
        h = ((h ^ word) * 0x9FB21C651E98DF25) & MASK64
        h ^= h >> 29
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & MASK64
    return h ^ (h >> 33)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.text(max_size=70)), max_size=40), st.integers(0, 5))
def test_words_hash_matches_its_definition(values: list[str | None], offset: int) -> None:
    array = pa.array(["pad"] * offset + values, type=pa.string()).slice(offset)
    expected = [words_reference((v or "").encode("utf-8")) for v in values]
    assert words_hash64(array).to_pylist() == expected
    assert words_hash64(pa.chunked_array([array], type=pa.string())).to_pylist() == expected


def test_shard_hash_is_named_in_tags_and_old_sidecars_stay_readable() -> None:
    keys = pa.array([f"part-{i:05d}.parquet" for i in range(64)])
    by_fnv = shard_of(keys, 7, hash_name=SHARD_HASH_FNV)
    fnv = stable_hash64(keys).to_pylist()
    assert by_fnv.to_pylist() == [h % 7 for h in fnv]
    assert shard_of(keys, 7).to_pylist() == [h % 7 for h in words_hash64(keys).to_pylist()]
    old = Sidecar(
        path="a.parquet",
        sizeInBytes=1,
        modificationTime=1,
        tags={"raydelta.shard": "2", "raydelta.numShards": "7", TAG_SHARD_HASH: SHARD_HASH_FNV},
    )
    assert sidecar_shard(old) is None  # another hash: never located with the new one
    assert sidecar_shard(old, hash_name=SHARD_HASH_FNV) == (2, 7)
    with pytest.raises(ValueError):
        shard_of(keys, 3, hash_name="md5")


def test_key_fingerprints_round_trip_through_footer_text() -> None:
    keys = pa.array([f"part-{i}.parquet" for i in range(1000)])
    table = pa.table({"path": keys, "deletionVector": pa.nulls(1000, DV_TYPE)})
    fingerprints = key_fingerprints(table)
    assert fingerprints.to_pylist() == [h >> 32 for h in words_hash64(keys).to_pylist()]
    text = encode_fingerprints(fingerprints.slice(10, 500))
    assert decode_fingerprints(text).to_pylist() == fingerprints.slice(10, 500).to_pylist()
    assert decode_fingerprints(encode_fingerprints(pa.array([], pa.uint32()))).to_pylist() == []


# --- the sharded merge equals reconciliation ------------------------------------------------

paths = st.sampled_from([f"p{i}.parquet" for i in range(12)])
dvs = st.one_of(
    st.none(),
    st.sampled_from(
        [
            {"storageType": "u", "pathOrInlineDv": "ab", "sizeInBytes": 1, "cardinality": 1},
            {
                "storageType": "i",
                "pathOrInlineDv": "xy",
                "offset": 3,
                "sizeInBytes": 1,
                "cardinality": 2,
            },
        ]
    ),
)


@st.composite
def file_action(draw: Any) -> AddFile | RemoveFile:
    path, dv = draw(paths), draw(dvs)
    if draw(st.booleans()):
        return AddFile(path=path, size=1, modificationTime=0, deletionVector=dv, partitionValues={})
    stamp = draw(st.sampled_from([None, 10, 1_000, 5_000]))
    return RemoveFile(path=path, deletionTimestamp=stamp, deletionVector=dv)


def _key_set(table: pa.Table) -> list[tuple[str, str | None]]:
    return sorted(table_keys(table), key=lambda k: (k[0], k[1] or ""))


@settings(max_examples=120, deadline=None)
@given(
    st.lists(st.lists(file_action(), max_size=6), max_size=4),
    st.lists(st.lists(file_action(), max_size=4), max_size=3),
    st.integers(1, 5),
    st.integers(1, 3),
    st.sampled_from([0, 500, 2_000]),
    st.integers(1, 3),
)
def test_sharded_checkpoint_rows_equal_reconciliation(
    base_commits: list[list[AddFile | RemoveFile]],
    later_commits: list[list[AddFile | RemoveFile]],
    num_shards: int,
    num_pieces: int,
    cutoff: int,
    num_groups: int,
) -> None:
    """Map tasks over pieces of the previous checkpoint + shard merges == the spec's fold."""
    base = apply_commits(TableState(), [(v, c) for v, c in enumerate(base_commits)])
    expected = apply_commits(base, [(100 + v, c) for v, c in enumerate(later_commits)])
    expected = expected.without_expired_tombstones(cutoff)
    delta = apply_commits(TableState(), [(100 + v, c) for v, c in enumerate(later_commits)])
    delta_parts = split_delta(delta.adds, delta.removes, num_shards)
    touched = pa.concat_arrays(
        [t.column("path").combine_chunks() for t in (delta.adds, delta.removes)]
    )
    exclude = pa.array(
        [
            k[0] if k[1] is None else f"{k[0]}\x00{k[1]}"
            for k in table_keys(delta.adds) + table_keys(delta.removes)
        ],
        type=pa.string(),
    )
    assert len(exclude) == len(touched)
    # shuffle mode: the previous checkpoint cut into pieces, each split by shard
    pieces = []
    raw_pieces = []
    for i in range(num_pieces):
        adds = base.adds.slice(i * base.adds.num_rows // num_pieces)
        adds = adds.slice(
            0, (i + 1) * base.adds.num_rows // num_pieces - i * base.adds.num_rows // num_pieces
        )
        removes = base.removes.slice(i * base.removes.num_rows // num_pieces)
        removes = removes.slice(
            0,
            (i + 1) * base.removes.num_rows // num_pieces - i * base.removes.num_rows // num_pieces,
        )
        raw_pieces.append((adds, removes))
        pieces.append(
            partition_rows(
                adds,
                removes,
                num_shards=num_shards,
                exclude_keys=exclude,
                tombstone_cutoff_ms=cutoff,
            )
        )
    shuffled = [
        merge_shard_rows(
            [p[s] for p in pieces],
            *delta_parts[s],
            tombstone_cutoff_ms=cutoff,
            base_filtered=True,
        )
        for s in range(num_shards)
    ]
    # the same, shipped the way map tasks do: groups of shards, slimmed, sliced back
    groups = [
        [
            slim_rows(a, r)
            for a, r in partition_rows_grouped(
                adds,
                removes,
                num_shards=num_shards,
                num_groups=num_groups,
                exclude_keys=exclude,
                tombstone_cutoff_ms=cutoff,
            )
        ]
        for adds, removes in raw_pieces
    ]
    bounds = group_bounds(num_shards, num_groups)
    grouped = []
    for s in range(num_shards):
        g = next(i for i in range(len(bounds) - 1) if bounds[i] <= s < bounds[i + 1])
        parts = [full_rows(shard_slice(p[g][0], s), shard_slice(p[g][1], s)) for p in groups]
        grouped.append(
            merge_shard_rows(parts, *delta_parts[s], tombstone_cutoff_ms=cutoff, base_filtered=True)
        )
    # aligned mode: the previous checkpoint already sharded, merged unfiltered
    base_parts = split_delta(base.adds, base.removes, num_shards)
    aligned = [
        merge_shard_rows(
            [base_parts[s]], *delta_parts[s], tombstone_cutoff_ms=cutoff, base_filtered=False
        )
        for s in range(num_shards)
    ]
    for shards in (shuffled, grouped, aligned):
        adds = pa.concat_tables([a for a, _ in shards])
        removes = pa.concat_tables([r for _, r in shards])
        assert _key_set(adds) == _key_set(expected.adds)
        assert _key_set(removes) == _key_set(expected.removes)
        assert adds.num_rows == expected.adds.num_rows  # no key twice
        assert removes.num_rows == expected.removes.num_rows


# --- log compaction ---------------------------------------------------------------------------


def test_compacted_actions_follow_the_spec_example() -> None:
    def add(path: str) -> AddFile:
        return AddFile(path=path, size=1, modificationTime=0, partitionValues={})

    commits: list[list[Action]] = [
        [CommitInfo(), add("f2"), RemoveFile(path="f1", deletionTimestamp=1)],
        [
            CommitInfo(),
            add("f3"),
            add("f4"),
            Txn(appId="app", version=4389),
        ],
        [CommitInfo(), RemoveFile(path="f3", deletionTimestamp=2), Txn(appId="app", version=4390)],
    ]
    out = compacted_actions(commits)
    assert not any(isinstance(a, CommitInfo) for a in out)
    assert sorted(a.path for a in out if isinstance(a, AddFile)) == ["f2", "f4"]
    assert sorted(a.path for a in out if isinstance(a, RemoveFile)) == ["f1", "f3"]
    assert [a.version for a in out if isinstance(a, Txn)] == [4390]
    removed = DomainMetadata(domain="d", configuration="{}", removed=True)
    assert removed in compacted_actions(
        [[DomainMetadata(domain="d", configuration="x")], [removed]]
    )


# --- peers ------------------------------------------------------------------------------------


def our_view(path: Path) -> dict[str, Any]:
    snap = load_snapshot(str(path))
    return {
        "version": snap.version,
        "adds": sorted(table_keys(snap.files), key=lambda k: (k[0], k[1] or "")),
        "tombstones": sorted(r.path for r in snap.tombstones()),
        "metadata": snap.metadata,
        "protocol": snap.protocol,
        "txns": snap.txns,
        "domains": snap.domains,
    }


def deltalake_view(path: Path, *, rows: bool = True) -> dict[str, Any]:
    table = deltalake.DeltaTable(str(path))
    view: dict[str, Any] = {"version": table.version(), "files": sorted(table.file_uris())}
    if rows:
        query = deltalake.QueryBuilder().register("t", table).execute("select * from t")
        view["rows"] = sorted(
            tuple(str(v) for v in r.values()) for r in pa.table(query.read_all()).to_pylist()
        )
    return view


def all_views(path: Path, con: Any) -> dict[str, Any]:
    return {
        "ours": our_view(path),
        "deltalake": deltalake_view(path),
        "duckdb": sorted(con.execute(f"SELECT * FROM delta_scan('{path}')").fetchall(), key=repr),
    }


def delete_commits_through(path: Path, version: int) -> None:
    for v in range(version + 1):
        (path / "_delta_log" / commit_name(v)).unlink(missing_ok=True)
    for compaction in (path / "_delta_log").glob("*.compacted.json"):
        compaction.unlink()


def _batch(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"n{i}" for i in ids]),
            "part": pa.array([i % 3 for i in ids], pa.int32()),
        }
    )


def build_table(path: Path, *, v2: bool) -> None:
    """Appends, a delete (tombstones), another append; V2 with ``v2Checkpoint``."""
    write = deltalake.write_deltalake
    config = {"delta.checkpointPolicy": "v2"} if v2 else None
    write(str(path), _batch(0, 9), partition_by=["part"], configuration=config)
    if v2:
        deltalake.DeltaTable(str(path)).alter.add_feature(
            [deltalake.TableFeatures.V2Checkpoint], allow_protocol_versions_increase=True
        )
    write(str(path), _batch(100, 6), partition_by=["part"], mode="append")
    deltalake.DeltaTable(str(path)).delete("id = 2 or id = 104")
    write(str(path), _batch(300, 4), partition_by=["part"], mode="append")


def sidecar_files(path: Path) -> set[str]:
    directory = path / "_delta_log" / "_sidecars"
    return {p.name for p in directory.iterdir()} if directory.exists() else set()


def top_level_files(path: Path, version: int) -> list[str]:
    names = []
    for p in (path / "_delta_log").iterdir():
        parsed = parse_log_file_name(p.name)
        if parsed is not None and parsed.is_checkpoint and parsed.version == version:
            names.append(p.name)
    return sorted(names)


# --- actors -----------------------------------------------------------------------------------


def kill_checkpoint_actors(prefix_uri: str) -> None:
    import ray

    for entry in ray.util.list_named_actors(all_namespaces=True):
        name = entry["name"]
        if entry["namespace"] == NAMESPACE and name.startswith(f"checkpoint:{prefix_uri}"):
            try:
                ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
            except ValueError:
                continue


@pytest.fixture
def checkpointers(ray_cluster: Any, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """``make(path, **options)`` -> the table's CheckpointActor; killed at teardown."""

    def make(path: Path, **options: Any) -> Any:
        return checkpoint_actor(str(path), **options)

    yield make
    kill_checkpoint_actors(normalize_uri(str(tmp_path)))


def _checkpoint(handle: Any, **kwargs: Any) -> Any:
    import ray

    return ray.get(handle.checkpoint.remote(**kwargs), timeout=120)


# --- V1 and V2 --------------------------------------------------------------------------------


def test_v1_checkpoint_is_one_classic_file_read_back_by_every_reader(
    tmp_path: Path, duck: Any, checkpointers: Callable[..., Any]
) -> None:
    path = tmp_path / "t"
    build_table(path, v2=False)
    before = all_views(path, duck)
    summary = _checkpoint(checkpointers(path, target_actions_per_sidecar=2))
    assert summary.kind == "classic" and summary.version == before["ours"]["version"]
    assert top_level_files(path, summary.version) == [summary.top_level]
    assert summary.top_level.endswith(".checkpoint.parquet")  # classic, never multi-part
    assert not sidecar_files(path)
    info = json.loads((path / "_delta_log" / "_last_checkpoint").read_text())
    assert info["version"] == summary.version and "parts" not in info
    delete_commits_through(path, summary.version)
    assert all_views(path, duck) == before


FAN_OUT_MIN = {"one_task": 10**9, "fan_out": 0}
"""``fan_out_min_actions`` that makes a checkpoint of these small tables run each way."""


@pytest.mark.parametrize("execution", sorted(FAN_OUT_MIN))
@pytest.mark.parametrize("top_level", ["json", "parquet"])
def test_v2_checkpoint_with_sidecars_read_back_by_every_reader(
    tmp_path: Path, duck: Any, checkpointers: Callable[..., Any], top_level: str, execution: str
) -> None:
    path = tmp_path / "t"
    build_table(path, v2=True)
    before = all_views(path, duck)
    handle = checkpointers(path, fan_out_min_actions=FAN_OUT_MIN[execution])
    summary = _checkpoint(handle, top_level=top_level, target_actions_per_sidecar=4)
    assert summary.kind == "v2" and summary.top_level.endswith(f".{top_level}")
    assert summary.execution == execution
    assert top_level_files(path, summary.version) == [summary.top_level]
    parsed = parse_log_file_name(summary.top_level)
    assert parsed is not None and parsed.kind is LogFileKind.CHECKPOINT_UUID
    store = log_store_for(str(path))
    sidecars = read_checkpoint_sidecars(store, parsed)
    assert len(sidecars) == summary.sidecars_written >= 2
    assert {s.path for s in sidecars} == sidecar_files(path)
    assert all((s.tags or {}).get(TAG_SHARD_HASH) == SHARD_HASH for s in sidecars)
    # a shard report per sidecar (each its own Ray task when fanned out)
    assert sum(t.kind == "shard" for t in summary.tasks) >= summary.sidecars_written
    info = json.loads((path / "_delta_log" / "_last_checkpoint").read_text())
    assert info["version"] == summary.version and info["numOfAddFiles"] == summary.num_adds
    delete_commits_through(path, summary.version)
    assert all_views(path, duck) == before


@pytest.mark.parametrize("execution", sorted(FAN_OUT_MIN))
def test_incremental_checkpoints_reuse_untouched_sidecars(
    tmp_path: Path, duck: Any, checkpointers: Callable[..., Any], execution: str
) -> None:
    path = tmp_path / "t"
    build_table(path, v2=True)
    handle = checkpointers(
        path, target_actions_per_sidecar=3, fan_out_min_actions=FAN_OUT_MIN[execution]
    )
    # a classic V1 first: the first V2 one reads it through map tasks (shuffle)
    first = _checkpoint(handle, kind="classic")
    assert first.kind == "classic"
    second = _checkpoint(handle)
    assert second.kind == "v2" and second.source == "shuffle" and second.sidecars_reused == 0
    assert sum(t.kind == "map" for t in second.tasks) >= 1
    # deltalake's file names are random, so a shard may hold nothing (and get no sidecar)
    at_second = load_snapshot(str(path), version=second.version)
    keys = table_keys(at_second.state.adds) + table_keys(at_second.all_tombstones)
    non_empty = shards_of_keys(keys, second.num_shards)
    assert second.overflow_actions == 0 and second.sidecars_written == len(non_empty)
    store = log_store_for(str(path))
    old = {s.path for s in read_checkpoint_sidecars(store, _top(second))}
    # a new file: its key is in no sidecar's key index, so it goes to the overflow
    # sidecar and every shard sidecar is reused
    deltalake.write_deltalake(str(path), _batch(500, 1), partition_by=["part"], mode="append")
    third = _checkpoint(handle, max_overflow_actions=10)
    assert third.version == second.version + 1 and third.num_shards == second.num_shards
    assert third.sidecars_written == 1 and third.overflow_actions == 1
    # the new key's shard index is checked only if that shard has a sidecar
    appended = parse_actions((path / "_delta_log" / commit_name(third.version)).read_bytes())
    (new_key,) = [(a.path, None) for a in appended if isinstance(a, AddFile)]
    checked = len(shards_of_keys([new_key], third.num_shards) & non_empty)
    assert third.sidecars_reused == len(old) and third.shards_checked == checked
    new = {s.path for s in read_checkpoint_sidecars(store, _top(third))}
    assert old < new and len(new - old) == 1
    # nothing new at all: every sidecar is reused, only a top-level file is written
    fourth = _checkpoint(handle, max_overflow_actions=10)
    assert fourth.sidecars_written == 0 and fourth.sidecars_reused == len(new)
    assert fourth.files_written == [fourth.top_level]
    # a delete touches keys that shard sidecars hold: those shards are rebuilt
    # from their own sidecar (no map tasks), the others reused
    deltalake.DeltaTable(str(path)).delete("id = 5")
    before = all_views(path, duck)
    fifth = _checkpoint(handle, max_overflow_actions=10)
    assert fifth.source == "sidecars" and not any(t.kind == "map" for t in fifth.tasks)
    deleted = parse_actions((path / "_delta_log" / commit_name(fifth.version)).read_bytes())
    touched = shards_of_keys(
        [(a.path, None) for a in deleted if isinstance(a, AddFile | RemoveFile)], fifth.num_shards
    )
    # only the touched shards are rewritten (plus, at most, the overflow sidecar)
    assert 1 <= fifth.sidecars_written <= len(touched) + 1
    in_fifth = read_checkpoint_sidecars(store, _top(fifth))
    assert fifth.sidecars_reused == len(in_fifth) - fifth.sidecars_written
    untouched = {
        s.path
        for s in read_checkpoint_sidecars(store, _top(fourth))
        if (located := sidecar_shard(s)) is not None and located[0] not in touched
    }
    assert untouched <= {s.path for s in in_fifth}, "untouched shard sidecars are reused"
    delete_commits_through(path, fifth.version)
    assert all_views(path, duck) == before


def _top(summary: Any) -> Any:
    parsed = parse_log_file_name(summary.top_level)
    assert parsed is not None
    return parsed


def _checkpoint_only_view(path: Path, version: int, tmp: Path) -> dict[str, Any]:
    """What the checkpoint of ``version`` alone says (a copy without the commits it covers)."""
    import shutil

    copy = tmp / f"only-{version}"
    shutil.copytree(path, copy)
    delete_commits_through(copy, version)
    snap = load_snapshot(str(copy), version=version)
    assert snap.log_segment is not None and snap.log_segment.checkpoint is not None
    return {
        "adds": sorted(table_keys(snap.files), key=repr),
        "tombstones": sorted(r.path for r in snap.tombstones()),
    }


def test_random_histories_checkpointed_incrementally_equal_the_replay(
    new_table: Any, make_add: Any, checkpointers: Callable[..., Any], tmp_path: Path
) -> None:
    """Rounds of random commits (new files, removes, re-adds of removed files,
    re-adds of live ones), each followed by a small-sharded incremental
    checkpoint with a tiny overflow: the checkpoint alone equals the replay of
    every commit, and no logical file is in two sidecars."""
    import random

    rng = random.Random(20240607)
    uri, table = new_table(properties={"delta.checkpointPolicy": "v2"})
    path = Path(uri[len("file://") :])
    handle = checkpointers(path)
    live: set[str] = set()
    removed: set[str] = set()
    counter = 0
    store = log_store_for(uri)
    kinds = set()
    for round_index in range(7):
        for _ in range(rng.randint(1, 3)):
            txn = table.transaction()
            touched: set[str] = set()
            for _ in range(rng.randint(0, 3)):
                if live and rng.random() < 0.6:
                    victim = rng.choice(sorted(live - touched or live))
                    if victim in touched:
                        continue
                    txn.remove(victim)
                    touched.add(victim)
                    live.discard(victim)
                    removed.add(victim)
            for _ in range(rng.randint(1, 4)):
                choice = rng.random()
                if removed - touched and choice < 0.2:
                    name = rng.choice(sorted(removed - touched))  # a re-add
                elif live - touched and choice < 0.3:
                    name = rng.choice(sorted(live - touched))  # a live file added again
                else:
                    counter += 1
                    name = f"date=2024-01-01/r{counter}.parquet"
                if name in touched:
                    continue
                txn.add(make_add(name))
                touched.add(name)
                live.add(name)
                removed.discard(name)
            txn.commit()
        summary = _checkpoint(handle, target_actions_per_sidecar=4, max_overflow_actions=3)
        kinds.add((summary.source, summary.overflow_actions > 0, summary.sidecars_reused > 0))
        full = load_snapshot(uri)
        assert sorted(a.path for a in full.add_files()) == sorted(live)
        alone = _checkpoint_only_view(path, summary.version, tmp_path)
        assert alone == {
            "adds": sorted(table_keys(full.files), key=repr),
            "tombstones": sorted(r.path for r in full.tombstones()),
        }, f"round {round_index}: {summary}"
        keys: list[str] = []
        for sidecar in read_checkpoint_sidecars(store, _top(summary)):
            with store.open_input(sidecar_path(store, sidecar)) as handle_:
                rows = pq.ParquetFile(handle_).read()
            for column in ("add", "remove"):
                values = rows.column(column).combine_chunks().field("path")
                keys.extend(v for v in values.to_pylist() if v is not None)
        assert len(keys) == len(set(keys)), f"a file is in two sidecars in round {round_index}"
    # the rounds went through the overflow and reused sidecars at least once
    assert any(has_overflow for _, has_overflow, _ in kinds)
    assert any(reused for _, _, reused in kinds)
    assert any(source == "sidecars" for source, _, _ in kinds)  # shards rebuilt


@pytest.mark.parametrize("v2", [False, True])
def test_checkpoints_drop_expired_tombstones_and_keep_recent_ones(
    new_table: Any, make_add: Any, checkpointers: Callable[..., Any], v2: bool
) -> None:
    properties = {"delta.checkpointPolicy": "v2"} if v2 else {}
    uri, table = new_table(properties=properties)
    now = int(time.time() * 1000)
    names = [f"date=2024-01-01/f{i}.parquet" for i in range(6)]
    table.transaction().add(*[make_add(n) for n in names]).commit()
    txn = table.transaction()
    txn.remove(names[0], deletion_timestamp=now - 30 * DAY_MS)  # past the 7-day retention
    txn.remove(names[1], deletion_timestamp=now - 2 * DAY_MS)
    txn.remove(names[2], deletion_timestamp=now - 1000)
    txn.commit()
    path = Path(uri[len("file://") :])
    summary = _checkpoint(checkpointers(path, target_actions_per_sidecar=2))
    assert summary.kind == ("v2" if v2 else "classic")
    delete_commits_through(path, summary.version)
    snap = load_snapshot(uri)
    assert sorted(r.path for r in snap.state.remove_files()) == sorted(names[1:3])
    assert sorted(a.path for a in snap.add_files()) == sorted(names[3:])
    assert {
        Path(f).relative_to(path).as_posix() for f in deltalake.DeltaTable(uri).file_uris()
    } == set(names[3:])


# --- policy -----------------------------------------------------------------------------------


def _wait_for(predicate: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting for the checkpoint actor")


def test_policy_checkpoints_every_interval_from_real_commits(
    new_table: Any, make_add: Any, checkpointers: Callable[..., Any]
) -> None:
    import ray

    uri, table = new_table(
        properties={"delta.checkpointInterval": "3", "raydelta.compactionInterval": "2"}
    )
    path = Path(uri[len("file://") :])
    handle = ensure_checkpointer(table)
    for i in range(7):
        table.transaction().add(make_add(f"date=2024-01-01/g{i}.parquet")).commit()
    log = path / "_delta_log"
    _wait_for(lambda: (log / "00000000000000000006.checkpoint.parquet").exists())
    # the file appears before the run that wrote it returns and records it
    _wait_for(lambda: not ray.get(handle.status.remote())["running"])
    assert (log / "00000000000000000003.checkpoint.parquet").exists()
    status = ray.get(handle.status.remote())
    assert status["lastCheckpointVersion"] == 6 and not status["errors"]
    assert compaction_name(4, 5) in status["compactions"]
    assert (log / compaction_name(4, 5)).exists()
    snap = load_snapshot(uri)
    assert snap.version == 7 and snap.num_files == 7
    # a commit that is only ratified (catalog-managed, not yet published) is never checkpointed
    event = CommitPublished(table_uri=uri, version=9, timestamp=0, published=False)
    ray.get(handle.on_commit.remote(event))
    assert ray.get(handle.status.remote())["lastCheckpointVersion"] == 6
    # the reader prefers the compaction file and still sees the same table
    (log / "00000000000000000006.checkpoint.parquet").unlink()
    (log / "_last_checkpoint").unlink()
    with_compaction = load_snapshot(uri)
    assert with_compaction.log_segment is not None and with_compaction.log_segment.compactions
    assert sorted(table_keys(with_compaction.files)) == sorted(table_keys(snap.files))


def test_policy_never_competes_with_another_engines_checkpoints(
    new_table: Any, make_add: Any, checkpointers: Callable[..., Any]
) -> None:
    """Issue 31: delta-spark checkpoints each version it commits at the table's
    interval. The policy leaves those versions to it and skips any version whose
    checkpoint is already in the log; an on-demand classic checkpoint leaves the
    one there (and its Hadoop checksum file) as it is, and says so."""
    import ray

    uri, table = new_table(properties={"delta.checkpointInterval": "2"})
    path = Path(uri[len("file://") :])
    log = path / "_delta_log"
    handle = checkpointers(path)  # not subscribed: the test sends the events
    me = normalize_uri(str(path))
    for i in range(4):
        table.transaction().add(make_add(f"date=2024-01-01/s{i}.parquet")).commit()

    spark = "Apache-Spark/4.2.0 Delta-Lake/4.4.0"
    by_spark = CommitPublished(table_uri=me, version=2, timestamp=0, engine_info=spark)
    ray.get(handle.on_commit.remote(by_spark))
    assert not (log / classic_checkpoint_name(2)).exists()  # delta-spark writes that one

    store = log_store_for(uri)
    write_v1_checkpoint(store, load_snapshot(uri).state, now_ms=int(time.time() * 1000))
    theirs = log / classic_checkpoint_name(4)
    pq.write_table(pq.read_table(theirs), theirs, compression="gzip")  # other bytes, same rows
    crc = write_crc(theirs)
    before = theirs.read_bytes()
    ray.get(handle.on_commit.remote(CommitPublished(table_uri=me, version=4, timestamp=0)))
    assert ray.get(handle.status.remote())["last"] is None  # no run at all
    summary = _checkpoint(handle, kind="classic")
    assert summary.version == 4 and summary.skipped and summary.files_written == []
    assert summary.top_level == theirs.name
    assert theirs.read_bytes() == before and crc_matches(crc)

    for i in range(4, 6):
        table.transaction().add(make_add(f"date=2024-01-01/s{i}.parquet")).commit()
    event = CommitPublished(table_uri=me, version=6, timestamp=0, engine_info="raydelta")
    ray.get(handle.on_commit.remote(event))
    assert (log / classic_checkpoint_name(6)).exists()
    assert ray.get(handle.status.remote())["last"]["trigger"] == "policy"
    hint = read_last_checkpoint(store)
    assert hint is not None and hint.version == 6


def test_log_compaction_is_read_like_the_commits_it_replaces(tmp_path: Path) -> None:
    path = tmp_path / "t"
    build_table(path, v2=False)
    before = our_view(path)
    store = log_store_for(str(path))
    assert write_log_compaction(store, 1, 3) == compaction_name(1, 3)
    assert write_log_compaction(store, 1, 3) is None  # already there: left alone
    body = parse_actions(store.read(compaction_name(1, 3)))
    assert not any(isinstance(a, CommitInfo) for a in body)
    snap = load_snapshot(str(path))
    assert snap.log_segment is not None and snap.log_segment.compactions
    assert our_view(path) == before


# --- crashes ----------------------------------------------------------------------------------


def _faulty(
    checkpointers: Callable[..., Any],
    path: Path,
    tmp_path: Path,
    *points: str,
    fan_out_min_actions: int = 0,
) -> Any:
    """The table's actor with ``points`` armed; its V2 checkpoints fan out
    (map and shard tasks) unless ``fan_out_min_actions`` says otherwise."""
    fault_file = tmp_path / f"faults-{path.name}.json"
    arm(str(fault_file), *points)
    return checkpointers(
        path,
        target_actions_per_sidecar=3,
        fan_out_min_actions=fan_out_min_actions,
        runtime_env={"env_vars": {FAULT_FILE_ENV: str(fault_file)}},
    ), fault_file


def test_actor_killed_mid_checkpoint_leaves_no_partial_checkpoint(
    tmp_path: Path, duck: Any, checkpointers: Callable[..., Any]
) -> None:
    import ray

    path = tmp_path / "t"
    build_table(path, v2=True)
    before = all_views(path, duck)
    version = before["ours"]["version"]
    handle, fault_file = _faulty(checkpointers, path, tmp_path, "after_sidecars")
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(handle.checkpoint.options(max_task_retries=0).remote(), timeout=120)
    assert json.loads(fault_file.read_text()) == []
    assert sidecar_files(path) and not top_level_files(path, version)  # orphans only
    assert all_views(path, duck) == before
    # the restarted actor completes the next run
    summary = _checkpoint(handle)
    assert summary.version == version
    assert top_level_files(path, version) == [summary.top_level]
    delete_commits_through(path, version)
    assert all_views(path, duck) == before


def test_actor_killed_before_last_checkpoint_and_retried_by_ray(
    tmp_path: Path, duck: Any, checkpointers: Callable[..., Any]
) -> None:
    path = tmp_path / "t"
    build_table(path, v2=True)
    before = all_views(path, duck)
    version = before["ours"]["version"]
    handle, fault_file = _faulty(checkpointers, path, tmp_path, "before_last_checkpoint")
    # the call survives the crash: Ray restarts the actor and retries it
    summary = _checkpoint(handle)
    assert json.loads(fault_file.read_text()) == []
    assert summary.version == version
    # the first attempt's complete top-level file is there too, named by nobody
    assert len(top_level_files(path, version)) == 2
    info = json.loads((path / "_delta_log" / "_last_checkpoint").read_text())
    assert info["v2Checkpoint"]["path"] == summary.top_level
    delete_commits_through(path, version)
    assert all_views(path, duck) == before


@pytest.mark.parametrize("execution", ["fan_out", "one_task"])
@pytest.mark.parametrize("point", [SHARD_TASK_FAULT, MAP_TASK_FAULT])
def test_killed_task_is_retried_and_its_sidecar_never_referenced(
    tmp_path: Path, duck: Any, checkpointers: Callable[..., Any], point: str, execution: str
) -> None:
    path = tmp_path / "t"
    build_table(path, v2=True)
    fan_out_min = 0 if execution == "fan_out" else 10**9
    handle, fault_file = _faulty(
        checkpointers, path, tmp_path, point, fan_out_min_actions=fan_out_min
    )
    if point == MAP_TASK_FAULT:  # map tasks read a V1 checkpoint
        assert _checkpoint(handle, kind="classic").kind == "classic"
        assert json.loads(fault_file.read_text()) == [point]
    before = all_views(path, duck)
    summary = _checkpoint(handle, kind="v2")
    assert summary.execution == execution
    assert json.loads(fault_file.read_text()) == []  # the point was reached (and crashed)
    store = log_store_for(str(path))
    referenced = {s.path for s in read_checkpoint_sidecars(store, _top(summary))}
    assert len(referenced) == summary.sidecars_written
    orphans = sidecar_files(path) - referenced
    if point == SHARD_TASK_FAULT and execution == "fan_out":
        assert len(orphans) == 1  # the dead shard task's sidecar
    elif point == SHARD_TASK_FAULT:
        # the one task died after a sidecar (its other thread may have written
        # more): the dead attempt's sidecars are all orphans, none referenced
        assert 1 <= len(orphans) <= summary.sidecars_written
    delete_commits_through(path, summary.version)
    assert all_views(path, duck) == before


# --- command line and job ---------------------------------------------------------------------


def test_cli_and_job_print_a_json_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], checkpointers: Callable[..., Any]
) -> None:
    from raydelta import cli
    from raydelta.actors.checkpoint import job as checkpoint_job

    path = tmp_path / "t"
    build_table(path, v2=True)
    checkpointers(path)  # the fixture reaps the actor the commands use
    assert (
        cli.main(["checkpoint", str(path), "--json", "--top-level", "parquet", "--progress"]) == 0
    )
    captured = capsys.readouterr()
    document = json.loads(captured.out)
    assert document["kind"] == "v2" and document["topLevel"].endswith(".parquet")
    for key in (
        "version",
        "filesWritten",
        "sidecarsWritten",
        "sidecarsReused",
        "bytesWritten",
        "seconds",
    ):
        assert key in document
    assert "checkpoint v" in captured.err  # progress on stderr
    assert checkpoint_job.main([str(path), "--classic", "--json", "--quiet"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["kind"] == "classic" and document["trigger"] == "job"
    assert document["filesWritten"] == [document["topLevel"]]
    # a V2 checkpoint on a table without the feature is a Delta error, exit code 1
    plain = tmp_path / "plain"
    build_table(plain, v2=False)
    checkpointers(plain)
    assert cli.main(["checkpoint", str(plain), "--v2"]) == 1
    assert capsys.readouterr().err.startswith("CheckpointWriteError")


def test_ensure_checkpointer_subscribes_to_the_table_actor(
    new_table: Any, make_add: Any, checkpointers: Callable[..., Any]
) -> None:
    import ray

    uri, table = new_table(
        properties={"delta.checkpointPolicy": "v2", "delta.checkpointInterval": "2"}
    )
    handle = ensure_checkpointer(table)
    assert ray.get(handle.ping.remote()) == uri
    assert ray.get_actor(actor_name(uri), namespace=NAMESPACE)
    table.transaction().add(make_add("date=2024-01-02/a.parquet")).commit()
    table.transaction().add(make_add("date=2024-01-02/b.parquet")).commit()
    log = Path(uri[len("file://") :]) / "_delta_log"
    _wait_for(
        lambda: any(p.name.startswith("00000000000000000002.checkpoint.") for p in log.iterdir())
    )
    # the file appears before the run that wrote it returns and records it
    _wait_for(lambda: not ray.get(handle.status.remote())["running"])
    summary = ray.get(handle.status.remote())["last"]
    assert summary["kind"] == "v2" and summary["trigger"] == "policy" and summary["version"] == 2


def test_a_remove_spelled_file_colon_finds_its_add_in_a_reused_sidecar(
    tmp_path: Path, checkpointers: Callable[..., Any]
) -> None:
    """``/x`` and ``file:/x`` are one file: an incremental V2 checkpoint must
    rebuild the shard holding ``/x`` when a commit removes ``file:/x``."""
    path = tmp_path / "t"
    build_table(path, v2=True)
    handle = checkpointers(path, target_actions_per_sidecar=3)
    store = log_store_for(str(path))
    absolute = str(path / "outside-partitions.parquet")

    def commit(*actions: Action) -> None:
        version = load_snapshot(str(path)).version + 1
        info = CommitInfo.model_validate(
            {"operation": "WRITE", "timestamp": int(time.time() * 1e3)}
        )
        store.put_if_absent(commit_name(version), serialize_actions([info, *actions]))

    now = int(time.time() * 1000)
    commit(AddFile(path=absolute, size=1, modificationTime=now, dataChange=True))
    _checkpoint(handle, kind="classic")
    first = _checkpoint(handle)
    assert first.kind == "v2" and first.overflow_actions == 0
    commit(RemoveFile(path=f"file:{absolute}", deletionTimestamp=now, dataChange=True))
    expected = {f.path for f in load_snapshot(str(path)).add_files()}
    assert absolute not in expected
    second = _checkpoint(handle, max_overflow_actions=10)
    assert second.source == "sidecars" and second.sidecars_reused >= 1
    delete_commits_through(path, second.version)
    assert {f.path for f in load_snapshot(str(path)).add_files()} == expected
