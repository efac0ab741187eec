"""Unknown fields and unknown actions in a log are ignored by readers.

The protocol grows by adding fields to actions and whole new actions; a
reader of today must read a log written tomorrow (delta-spark's
schema-evolvability suites write exactly such logs). Each test copies a
delta-spark golden table, adds unknown keys to it — next to known actions in
JSON commits, as lines of their own, as extra columns and extra struct
fields of parquet checkpoints and sidecars — and asserts that the snapshot
equals the snapshot of the untouched copy (itself checked against delta-spark
and deltalake by the conformance suite).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raydelta.protocol.actions import AddFile, UnknownAction, parse_actions
from raydelta.storage.snapshot import Snapshot, load_snapshot

EXTRA_FIELD = {"newField": 1, "newNested": {"a": [1, 2]}}


def fingerprint(snap: Snapshot) -> dict[str, Any]:
    """Everything a reader sees in a snapshot, as plain values."""
    return {
        "version": snap.version,
        # Unknown fields stay on the models (they are written back); compare
        # what the reader understands.
        "protocol": snap.protocol.model_dump(exclude=set(snap.protocol.model_extra or {})),
        "metadata_id": snap.metadata.id,
        "schema": snap.metadata.schema_string,
        "configuration": snap.metadata.configuration,
        "adds": sorted(snap.files.to_pylist(), key=lambda r: r["path"]),
        "removes": sorted(snap.all_tombstones.to_pylist(), key=lambda r: r["path"]),
        "txns": snap.txns,
        "domains": {k: d.configuration for k, d in snap.domains.items()},
    }


def _with_unknown_keys(line: str, index: int) -> list[str]:
    wrapper = json.loads(line)
    ((name, body),) = wrapper.items()
    if isinstance(body, dict):
        body = {**body, **EXTRA_FIELD}
    out = {name: body, "someFutureAction": {"index": index, "payload": ["x", None]}}
    if index % 2:  # the unknown key first, too
        out = {"someFutureAction": out["someFutureAction"], name: body}
    return [json.dumps(out), json.dumps({"anotherFutureAction": {"n": index}})]


def _rewrite_json(path: Path) -> None:
    lines = [line for line in path.read_text().split("\n") if line.strip()]
    out: list[str] = []
    for index, line in enumerate(lines):
        out.extend(_with_unknown_keys(line, index))
    path.write_text("\n".join(out) + "\n")


def _with_extra_child(column: pa.ChunkedArray) -> pa.Array:
    combined = column.combine_chunks()
    if not pa.types.is_struct(combined.type):
        return combined
    children = [combined.field(i) for i in range(combined.type.num_fields)]
    fields = list(combined.type)
    children.append(pa.array(range(len(combined)), type=pa.int64()))
    fields.append(pa.field("newField", pa.int64()))
    return pa.StructArray.from_arrays(
        children, fields=fields, mask=combined.is_null() if combined.null_count else None
    )


def _rewrite_parquet(path: Path) -> None:
    table = pq.read_table(path)
    columns = [_with_extra_child(table.column(name)) for name in table.column_names]
    names = list(table.column_names)
    future = pa.array(
        [{"x": i} if i % 3 == 0 else None for i in range(table.num_rows)],
        type=pa.struct([pa.field("x", pa.int64())]),
    )
    columns.append(future)
    names.append("someFutureAction")
    pq.write_table(pa.Table.from_arrays(columns, names=names), path)


def _strip_checkpoints(log: Path) -> None:
    for file in log.iterdir():
        if ".checkpoint" in file.name or file.name == "_last_checkpoint":
            file.unlink()


def test_a_line_with_a_known_action_and_unknown_keys_reads_both() -> None:
    line = (
        '{"add":{"path":"a","partitionValues":{},"size":1,"modificationTime":2,'
        '"dataChange":true,"newField":1},"someFutureAction":{"x":[1]}}'
    )
    add, unknown = parse_actions(line)
    assert isinstance(add, AddFile) and add.model_extra == {"newField": 1}
    assert unknown == UnknownAction(name="someFutureAction", body={"x": [1]})


@pytest.mark.parametrize(
    "table",
    ["basic-with-inserts-deletes-checkpoint", "delete-re-add-same-file-different-transactions"],
)
def test_commits_with_unknown_fields_and_actions_read_like_the_original(
    golden_copy: Callable[[str], Path], table: str
) -> None:
    original = golden_copy(table)
    _strip_checkpoints(original / "_delta_log")
    mutated = original.parent / f"{table}-future"
    shutil.copytree(original, mutated)
    for commit in (mutated / "_delta_log").glob("*.json"):
        _rewrite_json(commit)
    expected = load_snapshot(str(original))
    assert fingerprint(load_snapshot(str(mutated))) == fingerprint(expected)
    for version in range(expected.version):
        assert fingerprint(load_snapshot(str(mutated), version=version)) == fingerprint(
            load_snapshot(str(original), version=version)
        )


@pytest.mark.parametrize(
    "table",
    ["basic-with-inserts-deletes-checkpoint", "v2-checkpoint-parquet", "multi-part-checkpoint"],
)
def test_parquet_checkpoints_with_extra_columns_read_like_the_original(
    golden_copy: Callable[[str], Path], table: str
) -> None:
    original = golden_copy(table)
    mutated = original.parent / f"{table}-future"
    shutil.copytree(original, mutated)
    rewritten = 0
    for part in (mutated / "_delta_log").rglob("*.parquet"):
        _rewrite_parquet(part)
        rewritten += 1
    assert rewritten
    expected = load_snapshot(str(original))
    assert expected.log_segment is not None and expected.log_segment.checkpoint is not None
    assert fingerprint(load_snapshot(str(mutated))) == fingerprint(expected)


def test_json_v2_checkpoint_with_unknown_lines_reads_like_the_original(
    golden_copy: Callable[[str], Path],
) -> None:
    original = golden_copy("v2-checkpoint-json")
    mutated = original.parent / "v2-checkpoint-json-future"
    shutil.copytree(original, mutated)
    checkpoints = list((mutated / "_delta_log").glob("*.checkpoint.*.json"))
    assert checkpoints
    for checkpoint in checkpoints:
        _rewrite_json(checkpoint)
    for sidecar in (mutated / "_delta_log").rglob("*.parquet"):
        _rewrite_parquet(sidecar)
    expected = load_snapshot(str(original))
    assert expected.log_segment is not None and expected.log_segment.checkpoint is not None
    assert fingerprint(load_snapshot(str(mutated))) == fingerprint(expected)
