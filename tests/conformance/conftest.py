"""Shared oracle for the conformance suite: raydelta vs deltalake (delta-rs).

``assert_matches_deltalake(path, version=None)`` loads the table with both
engines at the same version and asserts they agree on:

- the version;
- the protocol: min reader/writer versions and the reader/writer feature
  *sets* (``None`` and ``[]`` both mean "no features");
- the metadata: id, name, description, partition columns, configuration,
  createdTime, and the schema compared as parsed JSON;
- the live files: the set of paths, and per path size, modificationTime,
  ``numRecords`` and the typed partition values. Paths are compared after
  ``urllib.parse.unquote`` on both sides: the log holds URI-encoded paths,
  and delta-rs may hand back either form;
- deletion vectors: deltalake 1.x exposes no descriptor (hence no
  ``uniqueId``), only a per-file selection vector, so the *deleted row
  indexes* it reports must equal the rows our DV reader decodes
  (``storage.deletion_vector_files.read_deletion_vector``). Which files carry
  a DV must agree as well (a file deltalake omits has no deleted rows).

This directory is also put on ``sys.path`` so the test modules can import
``golden_expectations`` (the suite runs with ``--import-mode=importlib``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

DeltalakeCheck = Callable[..., None]


def _typed_partition_value(raw: str | None, data_type: pa.DataType) -> Any:
    """Our raw partition string cast to the Arrow type deltalake reports."""
    if raw is None:
        return None
    array = pa.array([raw], pa.string())
    try:
        return pc.cast(array, data_type)[0].as_py()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        if pa.types.is_timestamp(data_type) and data_type.tz is not None:
            # "2021-09-08 11:11:11": a zone-less value of a UTC-adjusted timestamp.
            naive = pc.cast(array, pa.timestamp(data_type.unit))
            return pc.cast(naive, data_type)[0].as_py()
        raise


def _deleted_rows_by_deltalake(dt: Any, table_root: Path) -> dict[str, set[int]]:
    reader = dt.deletion_vectors()
    table = pa.table(reader.read_all()) if hasattr(reader, "read_all") else pa.table(reader)
    prefix = unquote(table_root.resolve().as_uri()).rstrip("/") + "/"
    out: dict[str, set[int]] = {}
    for row in table.to_pylist():
        location = unquote(row["filepath"])
        assert location.startswith(prefix), (location, prefix)
        deleted = {i for i, keep in enumerate(row["selection_vector"]) if not keep}
        if deleted:
            out[location[len(prefix) :]] = deleted
    return out


def _our_deleted_rows(snap: Any, table_root: Path) -> dict[str, set[int]]:
    from raydelta.storage.data.deletion_vectors import read_deletion_vector

    out: dict[str, set[int]] = {}
    for add in snap.add_files():
        if add.deletion_vector is not None:
            rows = read_deletion_vector(add.deletion_vector, str(table_root))
            assert len(rows) == add.deletion_vector.cardinality, add.path
            out[unquote(add.path)] = {int(r) for r in rows.to_pylist()}
    return out


def check_matches_deltalake(path: Path, version: int | None = None) -> None:
    import deltalake

    from raydelta.storage.snapshot import load_snapshot

    dt = deltalake.DeltaTable(str(path), version=version)
    snap = load_snapshot(str(path), version=version)
    assert snap.version == dt.version()

    theirs_p = dt.protocol()
    ours_p = snap.protocol
    assert (ours_p.min_reader_version, ours_p.min_writer_version) == (
        theirs_p.min_reader_version,
        theirs_p.min_writer_version,
    )
    assert set(ours_p.reader_features or []) == set(theirs_p.reader_features or [])
    assert set(ours_p.writer_features or []) == set(theirs_p.writer_features or [])

    theirs_m = dt.metadata()
    ours_m = snap.metadata
    assert ours_m.id == str(theirs_m.id)  # deltalake types it as int; it is the string id
    assert ours_m.name == theirs_m.name
    assert ours_m.description == theirs_m.description
    assert list(ours_m.partition_columns) == list(theirs_m.partition_columns)
    assert dict(ours_m.configuration) == dict(theirs_m.configuration)
    assert ours_m.created_time == theirs_m.created_time
    assert ours_m.schema_string is not None
    assert json.loads(ours_m.schema_string) == json.loads(dt.schema().to_json())

    actions = pa.table(dt.get_add_actions(flatten=False))
    partition_type = (
        actions.schema.field("partition").type if "partition" in actions.column_names else None
    )
    # Under column mapping the log keys partitionValues by physical column name.
    physical = {
        f["name"]: f["metadata"]["delta.columnMapping.physicalName"]
        for f in json.loads(ours_m.schema_string)["fields"]
        if "delta.columnMapping.physicalName" in f.get("metadata", {})
    }
    theirs: dict[str, dict[str, Any]] = {}
    for row in actions.to_pylist():
        theirs[unquote(row["path"])] = row
    ours = {unquote(add.path): add for add in snap.add_files()}
    assert len(ours) == snap.num_files, "two live files decode to the same path"
    assert set(ours) == set(theirs)
    for key, add in ours.items():
        row = theirs[key]
        assert (add.size, add.modification_time, add.num_records) == (
            row["size_bytes"],
            row["modification_time"],
            row["num_records"],
        ), key
        if partition_type is not None:
            typed = {
                field.name: _typed_partition_value(
                    add.partition_values.get(physical.get(field.name, field.name)), field.type
                )
                for field in partition_type
            }
            assert typed == row["partition"], key

    has_dvs = any(add.deletion_vector is not None for add in ours.values())
    if has_dvs or "deletionVectors" in (ours_p.reader_features or []):
        assert _our_deleted_rows(snap, path) == _deleted_rows_by_deltalake(dt, path)


@pytest.fixture
def assert_matches_deltalake() -> DeltalakeCheck:
    """``check(path, version=None)``: raydelta and deltalake agree (module doc)."""
    return check_matches_deltalake
