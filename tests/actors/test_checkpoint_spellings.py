"""Sharded V2 checkpoints of a log that names one file in several spellings.

The spec makes ``add.path``/``remove.path`` a relative path or an absolute
URI, percent-encoded; a file referenced relatively and by an absolute URI
under the table root is one logical file. Here a raw log adds files by
``file://`` URIs under the root and by relative paths (plain and
percent-encoded), then removes and re-adds them in the *other* spelling.
Every checkpoint (Ray runner: the first one, the aligned/incremental one
with its overflow sidecar, a shuffle after a V1 checkpoint and one after a
change of shard count; the single-process writer with reuse) must describe
exactly the replay of the commits: the same live files and tombstones,
every logical file in one row of one sidecar, in the shard its
root-relative key hashes to, and indexed in that sidecar's footer.

The tables are written as raw commit JSON into ``_delta_log`` (no data
files are needed to checkpoint a log), under a root without and with a
space in its name (the absolute URIs then percent-encode the root too).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raydelta.actors.checkpoint.runner import CheckpointRunner
from raydelta.protocol.actions import Sidecar, parse_actions
from raydelta.protocol.checkpoint_plan import (
    SHARD_HASH_ROOTED,
    SHARD_HASH_WORDS,
    TAG_NUM_SHARDS,
    TAG_SHARD_HASH,
    checkpoint_view,
    key_strings,
    shard_hash,
    shard_of,
    shard_tags,
    sidecar_shard,
    split_by_shard,
    table_configuration,
    touched_keys_of,
)
from raydelta.protocol.checkpoint_schema import CheckpointLayout
from raydelta.protocol.file_actions import table_keys
from raydelta.protocol.file_names import LogFile, LogFileKind, commit_name
from raydelta.protocol.reconciliation import TableState, apply_commits
from raydelta.storage.checkpoint.fingerprints import (
    FOOTER_FINGERPRINT_HASH,
    FOOTER_KEY_FINGERPRINTS,
    decode_fingerprints,
    encode_fingerprints,
    fingerprints_of_hashes,
    key_fingerprints,
)
from raydelta.storage.checkpoint.incremental import TAG_OVERFLOW, overflow_shards
from raydelta.storage.checkpoint.sources import SourcePiece, read_file_actions
from raydelta.storage.checkpoint.writer import (
    read_checkpoint_sidecars,
    write_sidecar,
    write_v2_checkpoint,
    write_v2_checkpoint_single_process,
)
from raydelta.storage.log.reader import checkpoint_state, sidecar_path
from raydelta.storage.log.store import LogStore, log_store_for
from raydelta.storage.snapshot import load_snapshot

SCHEMA = {
    "type": "struct",
    "fields": [{"name": "value", "type": "long", "nullable": True, "metadata": {}}],
}


# --- a raw log ---------------------------------------------------------------------------------


class RawTable:
    """A table whose commits are written as raw JSON lines."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.log = path / "_delta_log"
        self.log.mkdir(parents=True)
        self.version = -1
        self.root_uri = path.as_uri()  # file:///..., the root percent-encoded
        self.commit(
            [
                {
                    "protocol": {
                        "minReaderVersion": 3,
                        "minWriterVersion": 7,
                        "readerFeatures": ["v2Checkpoint"],
                        "writerFeatures": ["v2Checkpoint"],
                    }
                },
                {
                    "metaData": {
                        "id": "5b7e2c4e-1f0a-4c39-9d7e-4b1c7f6d2a10",
                        "format": {"provider": "parquet", "options": {}},
                        "schemaString": json.dumps(SCHEMA),
                        "partitionColumns": [],
                        "configuration": {"delta.checkpointPolicy": "v2"},
                        "createdTime": 0,
                    }
                },
            ]
        )

    def absolute(self, encoded_name: str) -> str:
        """The absolute ``file://`` URI of a file under the root."""
        return f"{self.root_uri}/{encoded_name}"

    def commit(self, actions: list[dict[str, Any]]) -> int:
        self.version += 1
        body = "".join(json.dumps(a) + "\n" for a in actions)
        (self.log / commit_name(self.version)).write_text(body)
        return self.version

    def replay(self, version: int) -> TableState:
        """The state at ``version`` folded from the commit files alone."""
        store = log_store_for(str(self.path))
        root = store.table_root_key
        commits = [
            (v, parse_actions((self.log / commit_name(v)).read_bytes())) for v in range(version + 1)
        ]
        return apply_commits(TableState(table_root=root), commits)


def add(path: str) -> dict[str, Any]:
    return {
        "add": {
            "path": path,
            "partitionValues": {},
            "size": 100,
            "modificationTime": 1,
            "dataChange": True,
        }
    }


def remove(path: str) -> dict[str, Any]:
    now = int(time.time() * 1000)
    return {"remove": {"path": path, "deletionTimestamp": now, "dataChange": True}}


def build_history(table: RawTable) -> list[int]:
    """Files added in one spelling, then touched in another; the versions to
    checkpoint after each step."""
    a = table.absolute
    first = [add(a(f"f{i}.parquet")) if i % 2 == 0 else add(f"f{i}.parquet") for i in range(40)]
    first += [
        add("a%20b.parquet"),  # encoded relative: the file "a b.parquet"
        add(a("c%20d.parquet")),  # encoded absolute under the root: "c d.parquet"
        add("file:" + a("e.parquet")[len("file://") :]),  # file:/root/e.parquet
        add("g%2Eparquet"),  # "g.parquet", one character encoded
    ]
    checkpoints = [table.commit(first)]
    # removes and re-adds, each in a spelling other than the one that added the file
    table.commit(
        [
            remove("f0.parquet"),  # added absolute
            remove(a("f1.parquet")),  # added relative
            remove("a b.parquet"),  # added as a%20b.parquet
            remove("c%20d.parquet"),  # added absolute and encoded
            remove("e.parquet"),  # added as file:/root/e.parquet
            add(a("f3.parquet")),  # a live file (relative) added again, absolute
            add("f4.parquet"),  # a live file (absolute) added again, relative
            add(a("g.parquet")),  # added as g%2Eparquet
            add("n1.parquet"),  # new files
            add(a("n2.parquet")),
        ]
    )
    table.commit(
        [
            add(a("f0.parquet")),  # re-added in its first spelling
            add("f1.parquet"),
            remove(a("f5.parquet")),  # added relative
            remove("f6.parquet"),  # added absolute
            remove(a("a%20b.parquet")),  # a tombstone replaced by another tombstone
        ]
    )
    checkpoints.append(table.version)
    table.commit(
        [
            remove(a("f0.parquet")),
            add(a("a%20b.parquet")),  # the removed file back, absolute and encoded
            remove("f8.parquet"),  # added absolute
            add(a("f9.parquet")),  # added relative
            add(a("f5.parquet")),  # removed relative
        ]
    )
    checkpoints.append(table.version)
    table.commit([remove(a("f10.parquet")), add("f12.parquet"), remove("n2.parquet")])
    checkpoints.append(table.version)
    return checkpoints


# --- what a checkpoint holds -----------------------------------------------------------------


def checkpoint_files(store: LogStore, version: int) -> list[LogFile]:
    found = [f for f in store.list_from(version) if f.version == version and f.is_checkpoint]
    assert found, f"no checkpoint of v{version}"
    return found


def state_of_checkpoint(store: LogStore, version: int, root: str) -> TableState:
    """The state the checkpoint of ``version`` alone describes (no commit read)."""
    files = checkpoint_files(store, version)
    uuid_named = [f for f in files if f.kind is LogFileKind.CHECKPOINT_UUID]
    return checkpoint_state(store, version, uuid_named[-1:] or files, table_root=root)


def file_view(state: TableState, root: str) -> dict[str, Any]:
    """Live files and tombstones: root-relative keys, and the raw paths of the
    newest action of each."""
    return {
        "adds": sorted(table_keys(state.adds, None, root), key=repr),
        "removes": sorted(table_keys(state.removes, None, root), key=repr),
        "add_paths": sorted(state.adds.column("path").to_pylist()),
        "remove_paths": sorted(state.removes.column("path").to_pylist()),
    }


def sidecar_rows(store: LogStore, sidecar: Sidecar) -> tuple[pa.Table, pa.Table]:
    return read_file_actions(store, SourcePiece(sidecar_path(store, sidecar)))


def assert_sidecars_keyed_by_the_root(
    store: LogStore, sidecars: Sequence[Sidecar], root: str, *, indexed: bool
) -> None:
    """Each logical file in one row of one sidecar; a shard sidecar's rows hash
    (root-relative key) to its shard and, when ``indexed`` (the Ray runner
    writes a key index, the single-process writer does not), its footer
    indexes those keys."""
    keys: Counter[str] = Counter()
    for sidecar in sidecars:
        adds, removes = sidecar_rows(store, sidecar)
        tags = sidecar.tags or {}
        hash_name = tags[TAG_SHARD_HASH]
        assert hash_name is not None
        num_shards = int(tags[TAG_NUM_SHARDS] or "")
        strings = [key_strings(t, root) for t in (adds, removes) if t.num_rows]
        if not strings:
            continue
        rooted = pa.concat_arrays([s.cast(pa.string()) for s in strings])
        keys.update(rooted.to_pylist())
        shards = set(shard_of(rooted, num_shards, hash_name=hash_name).to_pylist())
        if tags.get(TAG_OVERFLOW) == "true":
            assert shards <= overflow_shards(sidecar), sidecar
            continue
        located = sidecar_shard(sidecar, hash_name=hash_name)
        assert located is not None and shards == {located[0]}, (sidecar, shards)
        if not indexed:
            continue
        with store.open_input(sidecar_path(store, sidecar)) as handle:
            footer = pq.read_metadata(handle).metadata or {}
        assert footer[FOOTER_FINGERPRINT_HASH.encode()] == hash_name.encode()
        index = decode_fingerprints(footer[FOOTER_KEY_FINGERPRINTS.encode()].decode("ascii"))
        expected = fingerprints_of_hashes(shard_hash(rooted, hash_name))
        assert index.to_pylist() == expected.to_pylist(), sidecar
    twice = sorted(k for k, n in keys.items() if n > 1)
    assert not twice, f"files in two sidecar rows: {twice}"


def assert_checkpoint_is_the_replay(
    table: RawTable, version: int, *, indexed: bool
) -> list[Sidecar]:
    store = log_store_for(str(table.path))
    root = store.table_root_key
    replayed = table.replay(version)
    from_checkpoint = state_of_checkpoint(store, version, root)
    assert file_view(from_checkpoint, root) == file_view(replayed, root), f"v{version}"
    uuid_named = [
        f for f in checkpoint_files(store, version) if f.kind is LogFileKind.CHECKPOINT_UUID
    ]
    sidecars = read_checkpoint_sidecars(store, uuid_named[-1]) if uuid_named else []
    assert_sidecars_keyed_by_the_root(store, sidecars, root, indexed=indexed)
    return sidecars


ROOT_NAMES = ["t", "my table"]


# --- the Ray runner --------------------------------------------------------------------------


@pytest.mark.parametrize("root_name", ROOT_NAMES)
def test_incremental_and_shuffled_checkpoints_key_files_relative_to_the_root(
    ray_cluster: Any, tmp_path: Path, root_name: str
) -> None:
    table = RawTable(tmp_path / root_name)
    versions = build_history(table)
    runner = CheckpointRunner(str(table.path), target_actions_per_sidecar=4)

    def checkpoint(version: int, **kwargs: Any) -> Any:
        summary = runner.run(version, **kwargs)
        assert summary.version == version
        assert_checkpoint_is_the_replay(table, version, indexed=True)
        return summary

    first = checkpoint(versions[0])
    assert first.kind == "v2" and first.num_shards >= 4 and first.sidecars_written >= 3
    # the aligned path: shards rebuilt from their own sidecar, new keys in the overflow
    runner.max_overflow_actions = 4
    second = checkpoint(versions[1])
    assert second.source == "sidecars" and second.num_shards == first.num_shards
    assert second.sidecars_reused >= 1
    third = checkpoint(versions[2])
    assert third.source == "sidecars" and third.num_shards == first.num_shards
    assert second.overflow_actions + third.overflow_actions > 0  # the overflow sidecar was used
    # a shuffle from the sidecars: another shard count
    runner.target_actions_per_sidecar = 1
    fourth = checkpoint(versions[3])
    assert fourth.source == "shuffle" and fourth.num_shards != first.num_shards
    # a shuffle from a classic V1 checkpoint
    table.commit([remove(table.absolute("f12.parquet")), add("f14.parquet"), add("f2.parquet")])
    runner.target_actions_per_sidecar = 4
    classic = checkpoint(table.version, kind="classic")
    assert classic.kind == "classic"
    table.commit([add("f10.parquet"), remove(table.absolute("f13.parquet"))])
    shuffled = checkpoint(table.version)
    assert shuffled.source == "shuffle"
    # and an incremental one after it
    table.commit([remove("f14.parquet"), add(table.absolute("f6.parquet"))])
    last = checkpoint(table.version)
    assert last.source in ("sidecars", "none") and last.num_shards == shuffled.num_shards
    # the latest snapshot, through the checkpoint, is the replay
    snap = load_snapshot(str(table.path))
    store = log_store_for(str(table.path))
    root = store.table_root_key
    assert file_view(snap.state, root) == file_view(table.replay(table.version), root)


def write_root_free_checkpoint(table: RawTable, version: int, num_shards: int) -> list[Sidecar]:
    """A V2 checkpoint as earlier versions sharded it: root-free keys, tagged
    ``words64-fmix64``, with a footer key index of the same keys."""
    store = log_store_for(str(table.path))
    now = int(time.time() * 1000)
    state = table.replay(version)
    config = table_configuration(state)
    layout = CheckpointLayout.for_table(config)
    view = checkpoint_view(state, config, now_ms=now)
    add_parts = split_by_shard(view.adds, num_shards, hash_name=SHARD_HASH_WORDS)
    remove_parts = split_by_shard(view.removes, num_shards, hash_name=SHARD_HASH_WORDS)
    sidecars = []
    for shard, (adds, removes) in enumerate(zip(add_parts, remove_parts, strict=True)):
        if not (adds.num_rows or removes.num_rows):
            continue
        index = pa.concat_arrays(
            [key_fingerprints(t, hash_name=SHARD_HASH_WORDS) for t in (adds, removes)]
        )
        tags = shard_tags(
            shard,
            num_shards,
            layout=layout.fingerprint,
            adds=adds,
            removes=removes,
            hash_name=SHARD_HASH_WORDS,
        )
        footer = {
            FOOTER_KEY_FINGERPRINTS: encode_fingerprints(index),
            FOOTER_FINGERPRINT_HASH: SHARD_HASH_WORDS,
        }
        sidecars.append(
            write_sidecar(
                store, adds, removes, layout=layout, tags=tags, now_ms=now, footer_metadata=footer
            )
        )
    write_v2_checkpoint(store, view, sidecars, now_ms=now)
    return sidecars


@pytest.mark.parametrize("root_name", ROOT_NAMES)
def test_sidecars_keyed_root_free_are_shuffled_once(
    ray_cluster: Any, tmp_path: Path, root_name: str
) -> None:
    """Sidecars written by the root-free keying (``words64-fmix64``) are never
    taken for aligned ones: the next checkpoint reads them through map tasks,
    the one after is incremental again."""
    table = RawTable(tmp_path / root_name)
    versions = build_history(table)
    old = write_root_free_checkpoint(table, versions[0], 11)
    assert len(old) > 1
    runner = CheckpointRunner(str(table.path), target_actions_per_sidecar=4)
    shards = set()
    for follow_up, source in ((versions[1], "shuffle"), (versions[2], "sidecars")):
        summary = runner.run(follow_up)
        assert summary.source == source
        shards.add(summary.num_shards)
        sidecars = assert_checkpoint_is_the_replay(table, follow_up, indexed=True)
        assert all((s.tags or {}).get(TAG_SHARD_HASH) == SHARD_HASH_ROOTED for s in sidecars)
    assert len(shards) == 1  # the incremental one kept the shuffle's sharding


# --- the single-process writer ------------------------------------------------------------------


@pytest.mark.parametrize("root_name", ROOT_NAMES)
def test_single_process_reuse_keys_files_relative_to_the_root(
    tmp_path: Path, root_name: str
) -> None:
    table = RawTable(tmp_path / root_name)
    versions = build_history(table)
    store = log_store_for(str(table.path))
    now = int(time.time() * 1000)
    previous: list[Sidecar] = []
    reused = 0
    for before, version in zip([None, *versions], versions, strict=False):
        state = table.replay(version)
        touched = None
        if before is not None:
            touched = touched_keys_of(
                parse_actions((table.log / commit_name(v)).read_bytes())
                for v in range(before + 1, version + 1)
            )
        write_v2_checkpoint_single_process(
            store,
            state,
            now_ms=now,
            target_actions_per_sidecar=4,
            previous_sidecars=previous,
            touched_keys=touched,
        )
        sidecars = assert_checkpoint_is_the_replay(table, version, indexed=False)
        reused += len({s.path for s in previous} & {s.path for s in sidecars})
        previous = sidecars
    assert reused, "no checkpoint reused a sidecar"
