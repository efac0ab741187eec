"""Build large synthetic Delta tables for log benchmarks, fast.

The table is written the way a long-lived delta-spark table looks after log
cleanup: ``0.json`` (protocol + metaData), a checkpoint at version ``C``
holding every live file, and ``num_commits`` JSON commits after it that each
add and remove a few files, plus ``_last_checkpoint``. Commits ``1 .. C`` are
absent (cleaned up); both raydelta and delta-rs only need the checkpoint and
the commits after it.

Invariants:
- The checkpoint uses delta-spark's checkpoint layout: one row per action,
  top-level struct columns ``txn``, ``add``, ``remove``, ``metaData``,
  ``protocol`` (PROTOCOL.md "Checkpoint Schema"), ``add.stats`` as a JSON
  string, snappy compression, row groups of about 128 MiB (parquet-mr's
  default block size).
- The million-row columns are built column-wise with pyarrow compute; no
  Python object per file is created for checkpoint rows.
- Everything is a pure function of the arguments (``seed``), except file
  modification times on disk.
- With ``write_data_files=True`` every live and removed file exists as a
  real parquet file whose row count, ``size`` and min/max/nullCount stats are
  exactly what the log says, so a reader of the data (delta-rs
  ``to_pyarrow_table``) works. Use it for small tables only (one Python call
  per file).
"""

from __future__ import annotations

import functools
import json
import os
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

CHECKPOINT_KINDS = ("classic", "multipart")
PARTITION_COLUMN = "part"
ID_WIDTH = 15
"""``value`` is ``"v"`` + the id zero-padded to this width, so string order is id order."""
BASE_TIME_MS = 1_700_000_000_000
ROW_GROUP_BYTES = 128 * 1024 * 1024

STRING_MAP = pa.map_(pa.string(), pa.string())
DV_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32()),
        pa.field("cardinality", pa.int64()),
        pa.field("maxRowIndex", pa.int64()),
    ]
)
TXN_TYPE = pa.struct(
    [
        pa.field("appId", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("lastUpdated", pa.int64()),
    ]
)
ADD_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DV_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("stats", pa.string()),
    ]
)
REMOVE_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("deletionTimestamp", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("extendedFileMetadata", pa.bool_()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("deletionVector", DV_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
    ]
)
METADATA_TYPE = pa.struct(
    [
        pa.field("id", pa.string()),
        pa.field("name", pa.string()),
        pa.field("description", pa.string()),
        pa.field(
            "format",
            pa.struct([pa.field("provider", pa.string()), pa.field("options", STRING_MAP)]),
        ),
        pa.field("schemaString", pa.string()),
        pa.field("partitionColumns", pa.list_(pa.string())),
        pa.field("configuration", STRING_MAP),
        pa.field("createdTime", pa.int64()),
    ]
)
PROTOCOL_TYPE = pa.struct(
    [
        pa.field("minReaderVersion", pa.int32()),
        pa.field("minWriterVersion", pa.int32()),
        pa.field("readerFeatures", pa.list_(pa.string())),
        pa.field("writerFeatures", pa.list_(pa.string())),
    ]
)
CHECKPOINT_SCHEMA = pa.schema(
    [
        pa.field("txn", TXN_TYPE),
        pa.field("add", ADD_TYPE),
        pa.field("remove", REMOVE_TYPE),
        pa.field("metaData", METADATA_TYPE),
        pa.field("protocol", PROTOCOL_TYPE),
    ]
)


@dataclass(frozen=True)
class BuiltTable:
    """What :func:`build_large_table` wrote, for benchmarks and tests to check against."""

    path: str
    version: int
    checkpoint_version: int
    checkpoint_files: tuple[str, ...]
    num_checkpoint_files: int
    """``add`` rows in the checkpoint."""
    num_live_files: int
    """Live files at ``version``: checkpoint adds + commit adds - commit removes."""
    num_live_records: int
    """Sum of ``numRecords`` over the live files."""
    partitioned: bool

    @property
    def uri(self) -> str:
        return Path(self.path).resolve().as_uri()


@dataclass(frozen=True)
class _Files:
    """Column-wise description of files ``start .. start + count``."""

    paths: pa.Array
    partition_values: pa.Array | None
    sizes: pa.Array
    modification_times: pa.Array
    num_records: pa.Array
    min_ids: pa.Array
    stats: pa.Array
    record_total: int


def _index_array(start: int, count: int) -> pa.Array:
    return pa.array(range(start, start + count), type=pa.int64())


def _hex_uuids(rng: random.Random, count: int) -> pa.Array:
    """``count`` random UUID-shaped strings, built from one hex buffer."""
    data = pa.py_buffer(rng.randbytes(16 * count).hex().encode("ascii"))
    offsets = pa.array(range(0, 32 * (count + 1), 32), type=pa.int32()).buffers()[1]
    hex32 = pa.Array.from_buffers(pa.string(), count, [None, offsets, data])
    pieces = [
        pc.utf8_slice_codeunits(hex32, start, stop)
        for start, stop in ((0, 8), (8, 12), (12, 16), (16, 20), (20, 32))
    ]
    return pc.binary_join_element_wise(*pieces, "-")


def _zero_padded(values: pa.Array, width: int) -> pa.Array:
    return pc.utf8_lpad(pc.cast(values, pa.string()), width, "0")


def _modulo(values: pa.Array, divisor: int) -> pa.Array:
    return pc.subtract(values, pc.multiply(pc.divide(values, divisor), divisor))


def _partition_map(values: pa.Array | None, count: int) -> pa.Array:
    if values is None:
        offsets = pa.array([0] * (count + 1), type=pa.int32())
        empty = pa.array([], type=pa.string())
        return pa.MapArray.from_arrays(offsets, empty, empty, type=STRING_MAP)
    offsets = pa.array(range(count + 1), type=pa.int32())
    keys = pa.array([PARTITION_COLUMN] * count, type=pa.string())
    return pa.MapArray.from_arrays(offsets, keys, values, type=STRING_MAP)


def _value_of(ids: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise("v", _zero_padded(ids, ID_WIDTH), "")


def _stats_json(num_records: pa.Array, min_ids: pa.Array, max_ids: pa.Array) -> pa.Array:
    return pc.binary_join_element_wise(
        '{"numRecords":',
        pc.cast(num_records, pa.string()),
        ',"minValues":{"id":',
        pc.cast(min_ids, pa.string()),
        ',"value":"',
        _value_of(min_ids),
        '"},"maxValues":{"id":',
        pc.cast(max_ids, pa.string()),
        ',"value":"',
        _value_of(max_ids),
        '"},"nullCount":{"id":0,"value":0}}',
        "",
    )


def _files(
    start: int,
    count: int,
    *,
    seed: int,
    num_partitions: int,
    partitioned: bool,
    max_records_per_file: int,
) -> _Files:
    rng = random.Random(f"{seed}:{start}:{count}")
    index = _index_array(start, count)
    names = pc.binary_join_element_wise(
        "part-",
        _zero_padded(_modulo(index, 100_000), 5),
        "-",
        _hex_uuids(rng, count),
        "-c000.snappy.parquet",
        "",
    )
    partition_values = None
    if partitioned:
        partition_values = _zero_padded(_modulo(index, num_partitions), 5)
        names = pc.binary_join_element_wise(
            f"{PARTITION_COLUMN}=", partition_values, "/", names, ""
        )
    uniform = pc.random(count, initializer=rng.getrandbits(63))
    num_records = pc.cast(
        pc.add(pc.floor(pc.multiply(uniform, max_records_per_file)), 1.0), pa.int64()
    )
    min_ids = pc.multiply(index, max_records_per_file)
    max_ids = pc.subtract(pc.add(min_ids, num_records), 1)
    sizes = pc.cast(
        pc.add(pc.floor(pc.multiply(uniform, 127 * 1024 * 1024)), 1024 * 1024), pa.int64()
    )
    return _Files(
        paths=names,
        partition_values=partition_values,
        sizes=sizes,
        modification_times=pc.add(index, BASE_TIME_MS),
        num_records=num_records,
        min_ids=min_ids,
        stats=_stats_json(num_records, min_ids, max_ids),
        record_total=int(pc.sum(num_records).as_py() or 0),
    )


def _write_data_files(root: Path, files: _Files) -> _Files:
    """Write one real parquet file per entry; return ``files`` with true sizes."""
    sizes = []
    paths = files.paths.to_pylist()
    counts = files.num_records.to_pylist()
    firsts = files.min_ids.to_pylist()
    for rel, count, first in zip(paths, counts, firsts, strict=True):
        ids = pa.array(range(first, first + count), type=pa.int64())
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.table({"id": ids, "value": _value_of(ids)}), target)
        sizes.append(target.stat().st_size)
    return _Files(
        paths=files.paths,
        partition_values=files.partition_values,
        sizes=pa.array(sizes, type=pa.int64()),
        modification_times=files.modification_times,
        num_records=files.num_records,
        min_ids=files.min_ids,
        stats=files.stats,
        record_total=files.record_total,
    )


def _add_struct(files: _Files) -> pa.StructArray:
    count = len(files.paths)
    children: dict[str, pa.Array] = {
        "path": files.paths,
        "partitionValues": _partition_map(files.partition_values, count),
        "size": files.sizes,
        "modificationTime": files.modification_times,
        "dataChange": pa.repeat(pa.scalar(False), count),
        "stats": files.stats,
    }
    arrays = [children.get(f.name, pa.nulls(count, f.type)) for f in ADD_TYPE]
    return pa.StructArray.from_arrays(arrays, fields=list(ADD_TYPE))


def _schema_string(partitioned: bool) -> str:
    fields: list[dict[str, Any]] = [
        {"name": "id", "type": "long", "nullable": True, "metadata": {}},
        {"name": "value", "type": "string", "nullable": True, "metadata": {}},
    ]
    if partitioned:
        fields.append(
            {"name": PARTITION_COLUMN, "type": "string", "nullable": True, "metadata": {}}
        )
    return json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))


def _protocol_body() -> dict[str, Any]:
    return {"minReaderVersion": 1, "minWriterVersion": 2}


def _metadata_body(seed: int, partitioned: bool) -> dict[str, Any]:
    table_id = str(uuid.UUID(int=random.Random(f"table-id:{seed}").getrandbits(128), version=4))
    return {
        "id": table_id,
        "format": {"provider": "parquet", "options": {}},
        "schemaString": _schema_string(partitioned),
        "partitionColumns": [PARTITION_COLUMN] if partitioned else [],
        "configuration": {},
        "createdTime": BASE_TIME_MS,
    }


def _single_row(body: dict[str, Any], type_: pa.StructType) -> pa.Array:
    row = dict(body)
    if isinstance(row.get("configuration"), dict):
        row["configuration"] = list(row["configuration"].items())
    if "format" in row:
        row["format"] = {**row["format"], "options": list(row["format"]["options"].items())}
    return pa.array([row], type=type_)


def _column(type_: pa.DataType, total: int, at: int, rows: pa.Array) -> pa.Array:
    """A column of ``total`` nulls with ``rows`` placed from row ``at``."""
    parts = []
    if at:
        parts.append(pa.nulls(at, type_))
    parts.append(rows)
    if total - at - len(rows):
        parts.append(pa.nulls(total - at - len(rows), type_))
    return pa.concat_arrays(parts)


def _checkpoint_table(
    adds: pa.StructArray, protocol: dict[str, Any], metadata: dict[str, Any]
) -> pa.Table:
    total = len(adds) + 2
    columns = {
        "txn": pa.nulls(total, TXN_TYPE),
        "add": _column(ADD_TYPE, total, 2, adds),
        "remove": pa.nulls(total, REMOVE_TYPE),
        "metaData": _column(METADATA_TYPE, total, 1, _single_row(metadata, METADATA_TYPE)),
        "protocol": _column(PROTOCOL_TYPE, total, 0, _single_row(protocol, PROTOCOL_TYPE)),
    }
    return pa.table(columns, schema=CHECKPOINT_SCHEMA)


def _commit_file_name(version: int) -> str:
    return f"{version:020d}.json"


def _write_lines(path: Path, actions: list[dict[str, Any]]) -> None:
    text = "".join(json.dumps(a, separators=(",", ":")) + "\n" for a in actions)
    path.write_text(text, encoding="utf-8")


def _add_action(row: dict[str, Any], partitioned: bool) -> dict[str, Any]:
    return {
        "add": {
            "path": row["path"],
            "partitionValues": dict(row["partitionValues"]) if partitioned else {},
            "size": row["size"],
            "modificationTime": row["modificationTime"],
            "dataChange": True,
            "stats": row["stats"],
        }
    }


def _remove_action(row: dict[str, Any], partitioned: bool, when_ms: int) -> dict[str, Any]:
    return {
        "remove": {
            "path": row["path"],
            "deletionTimestamp": when_ms,
            "dataChange": True,
            "extendedFileMetadata": True,
            "partitionValues": dict(row["partitionValues"]) if partitioned else {},
            "size": row["size"],
        }
    }


def _commit_info(timestamp_ms: int, operation: str) -> dict[str, Any]:
    return {
        "commitInfo": {
            "timestamp": timestamp_ms,
            "operation": operation,
            "operationParameters": {},
            "isBlindAppend": operation == "CREATE TABLE",
            "engineInfo": "raydelta-benchmarks",
        }
    }


def _row_group_size(table: pa.Table) -> int:
    per_row = max(1, int(table.nbytes) // max(1, int(table.num_rows)))
    return max(1024, ROW_GROUP_BYTES // per_row)


def _checkpoint_names(version: int, kind: str, parts: int) -> list[str]:
    if kind == "classic":
        return [f"{version:020d}.checkpoint.parquet"]
    return [f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet" for i in range(1, parts + 1)]


def build_large_table(
    path: str | os.PathLike[str],
    *,
    num_files: int = 1_000_000,
    num_commits: int = 100,
    partitioned: bool = False,
    seed: int = 0,
    checkpoint_kind: str = "classic",
    checkpoint_version: int = 10,
    checkpoint_parts: int = 4,
    adds_per_commit: int = 10,
    removes_per_commit: int = 5,
    num_partitions: int = 100,
    max_records_per_file: int = 1000,
    write_data_files: bool = False,
) -> BuiltTable:
    """Write a Delta table at ``path`` (must be empty or absent) and describe it.

    The latest version is ``checkpoint_version + num_commits``. Commit ``k``
    (after the checkpoint) adds ``adds_per_commit`` new files and removes
    ``removes_per_commit`` distinct checkpoint files. ``checkpoint_kind`` is
    ``"classic"`` (one parquet file) or ``"multipart"`` (``checkpoint_parts``
    files, add rows split evenly).
    """
    if checkpoint_kind not in CHECKPOINT_KINDS:
        raise ValueError(
            f"checkpoint_kind must be one of {CHECKPOINT_KINDS}, got {checkpoint_kind!r}"
        )
    if checkpoint_version < 1:
        raise ValueError("checkpoint_version must be >= 1 (version 0 is the create commit)")
    if num_commits * removes_per_commit > num_files:
        raise ValueError("cannot remove more files than the checkpoint holds")
    root = Path(path)
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    if any(log.iterdir()):
        raise FileExistsError(f"{log} is not empty")

    protocol = _protocol_body()
    metadata = _metadata_body(seed, partitioned)
    make_files = functools.partial(
        _files,
        seed=seed,
        num_partitions=num_partitions,
        partitioned=partitioned,
        max_records_per_file=max_records_per_file,
    )
    _write_lines(
        log / _commit_file_name(0),
        [
            _commit_info(BASE_TIME_MS, "CREATE TABLE"),
            {"protocol": protocol},
            {"metaData": metadata},
        ],
    )

    base = make_files(0, num_files)
    if write_data_files:
        base = _write_data_files(root, base)
    adds = _add_struct(base)
    parts = 1 if checkpoint_kind == "classic" else checkpoint_parts
    names = _checkpoint_names(checkpoint_version, checkpoint_kind, parts)
    total_rows = 0
    total_bytes = 0
    per_part = -(-len(adds) // parts)
    for index, name in enumerate(names):
        chunk = adds.slice(index * per_part, per_part)
        table = _checkpoint_table(chunk, protocol, metadata)
        if index:  # protocol and metaData live in the first part only
            table = table.slice(2)
        pq.write_table(
            table, log / name, compression="snappy", row_group_size=_row_group_size(table)
        )
        total_rows += table.num_rows
        total_bytes += (log / name).stat().st_size
    last_checkpoint: dict[str, Any] = {
        "version": checkpoint_version,
        "size": total_rows,
        "sizeInBytes": total_bytes,
        "numOfAddFiles": num_files,
    }
    if checkpoint_kind == "multipart":
        last_checkpoint["parts"] = parts
    (log / "_last_checkpoint").write_text(json.dumps(last_checkpoint), encoding="utf-8")

    removed = random.Random(f"removes:{seed}").sample(
        range(num_files), num_commits * removes_per_commit
    )
    removed_rows = (
        pa.Table.from_arrays(
            [base.paths, _partition_map(base.partition_values, num_files), base.sizes],
            names=["path", "partitionValues", "size"],
        )
        .take(pa.array(removed, type=pa.int64()))
        .to_pylist()
    )
    record_total = base.record_total - sum(
        base.num_records.take(pa.array(removed, type=pa.int64())).to_pylist()
    )
    next_file = num_files
    for k in range(num_commits):
        version = checkpoint_version + 1 + k
        when = BASE_TIME_MS + num_files + 1000 * (k + 1)
        new = make_files(next_file, adds_per_commit)
        if write_data_files:
            new = _write_data_files(root, new)
        record_total += new.record_total
        new_rows = pa.Table.from_arrays(
            [
                new.paths,
                _partition_map(new.partition_values, adds_per_commit),
                new.sizes,
                new.modification_times,
                new.stats,
            ],
            names=["path", "partitionValues", "size", "modificationTime", "stats"],
        ).to_pylist()
        gone = removed_rows[k * removes_per_commit : (k + 1) * removes_per_commit]
        _write_lines(
            log / _commit_file_name(version),
            [_commit_info(when, "WRITE")]
            + [_remove_action(r, partitioned, when) for r in gone]
            + [_add_action(r, partitioned) for r in new_rows],
        )
        next_file += adds_per_commit

    return BuiltTable(
        path=str(root),
        version=checkpoint_version + num_commits,
        checkpoint_version=checkpoint_version,
        checkpoint_files=tuple(names),
        num_checkpoint_files=num_files,
        num_live_files=num_files + num_commits * (adds_per_commit - removes_per_commit),
        num_live_records=record_total,
        partitioned=partitioned,
    )
