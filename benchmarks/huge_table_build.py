"""Build (and cache) synthetic Delta tables of any size for ``benchmarks.huge_table``.

The table looks like a long-lived, partitioned delta-spark table after log
cleanup: ``0.json`` (protocol + metaData), a classic checkpoint at version
``checkpoint_version`` holding every file, and ``num_commits`` JSON commits
after it. Rows reuse :mod:`benchmarks.table_builder` (same paths, partition
values, stats and checkpoint schema); this module adds what a huge table
needs on top:

- the checkpoint is written in chunks of :data:`CHUNK_FILES` files (or of
  ``rows_per_group``, when larger) through one ``ParquetWriter`` per part,
  so building a 10M-file table holds one chunk at a time;
- its layout is a parameter (issue 32): ``rows_per_group`` (None: row groups
  sized by bytes, as ``benchmarks.table_builder`` does; 65,536 or 1,000,000:
  what writers with those settings produce) and ``checkpoint_parts`` (1: one
  classic file; more: a multi-part checkpoint of that many parts, rows cut
  in order into parts of equal size);
- layout ``"dv"``: every :data:`DV_EVERY`-th file carries a deletion vector
  (``storageType`` ``u``; its stats then say ``"tightBounds":false``), the
  protocol is (3, 7) with ``deletionVectors`` and ``domainMetadata`` (delta-rs
  1.6 opens such a log and lists its files, it only cannot read DV data);
  layout ``"plain"``: no deletion vectors, protocol (1, 2);
- every commit after the checkpoint adds ``adds_per_commit`` files, removes
  ``removes_per_commit`` checkpoint files (a removed file's ``remove`` carries
  its deletion vector, so it matches its ``add``) and sets a ``txn`` for one
  of :data:`NUM_APPS` applications; in layout ``"dv"`` the first one also
  sets :data:`DOMAIN`.

Invariants:
- Everything is a pure function of the parameters (``seed``) except file
  modification times on disk; no data files are written (log benchmarks).
- No Python object per checkpoint file: the columns are built with pyarrow
  compute; Python objects exist only for the ``num_commits`` small commits.
- :func:`cached_table` rebuilds only when the parameters or
  :data:`BUILDER_REVISION` change; a table is complete once ``built.json``
  exists next to it (written last).
- ``built.json`` states what a full replay must give (version, live files,
  live records, live files with a DV, txns, domains), for checks.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from benchmarks.table_builder import (
    ADD_TYPE,
    BASE_TIME_MS,
    CHECKPOINT_SCHEMA,
    _add_action,
    _add_struct,
    _checkpoint_table,
    _commit_file_name,
    _commit_info,
    _Files,
    _files,
    _hex_uuids,
    _metadata_body,
    _partition_map,
    _remove_action,
    _row_group_size,
    _write_lines,
)

BUILDER_REVISION = 1
"""Bump when the output changes, to invalidate cached tables."""
CACHE_DIR = Path(os.environ.get("RAYDELTA_BENCH_CACHE", Path.home() / ".cache" / "raydelta-bench"))
CHUNK_FILES = 500_000
DV_EVERY = 20
"""In layout ``"dv"``, files whose index is a multiple of this carry a deletion vector."""
NUM_APPS = 4
DOMAIN = "bench.clustering"
LAYOUTS = ("dv", "plain")


def table_params(
    num_files: int,
    *,
    layout: str = "dv",
    num_commits: int = 100,
    num_partitions: int = 1000,
    seed: int = 15,
    rows_per_group: int | None = None,
    checkpoint_parts: int = 1,
) -> dict[str, Any]:
    """The parameters (and cache key) of one table. The checkpoint layout
    (``rows_per_group``, ``checkpoint_parts``) is in them only when it is not
    the default, so tables cached before it existed keep their key."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if rows_per_group is not None and rows_per_group < 1:
        raise ValueError(f"rows_per_group must be >= 1, got {rows_per_group}")
    if checkpoint_parts < 1:
        raise ValueError(f"checkpoint_parts must be >= 1, got {checkpoint_parts}")
    layout_params: dict[str, Any] = {}
    if rows_per_group is not None:
        layout_params["rows_per_group"] = rows_per_group
    if checkpoint_parts != 1:
        layout_params["checkpoint_parts"] = checkpoint_parts
    return {
        **layout_params,
        "num_files": num_files,
        "layout": layout,
        "num_commits": num_commits,
        "num_partitions": num_partitions,
        "seed": seed,
        "checkpoint_version": 10,
        "adds_per_commit": 10,
        "removes_per_commit": 5,
        "max_records_per_file": 1000,
    }


def _protocol(layout: str) -> dict[str, Any]:
    if layout == "plain":
        return {"minReaderVersion": 1, "minWriterVersion": 2}
    return {
        "minReaderVersion": 3,
        "minWriterVersion": 7,
        "readerFeatures": ["deletionVectors"],
        "writerFeatures": ["deletionVectors", "domainMetadata"],
    }


def _metadata(layout: str, seed: int) -> dict[str, Any]:
    body = _metadata_body(seed, True)
    if layout == "dv":
        body["configuration"] = {"delta.enableDeletionVectors": "true"}
    return body


def _with_deletion_vectors(adds: pa.StructArray, first_index: int) -> pa.StructArray:
    """``adds`` with a ``u`` deletion vector on every :data:`DV_EVERY`-th file
    (by absolute index) and ``"tightBounds":false`` in those files' stats."""
    count = len(adds)
    index = pa.array(range(first_index, first_index + count), type=pa.int64())
    has_dv = pc.equal(pc.subtract(index, pc.multiply(pc.divide(index, DV_EVERY), DV_EVERY)), 0)
    # 20 hex digits are valid Z85 (hex is a subset of its alphabet): a 16-byte UUID.
    rng = random.Random(f"dv:{first_index}:{count}")
    z85_ids = pc.utf8_slice_codeunits(pc.replace_substring(_hex_uuids(rng, count), "-", ""), 0, 20)
    cardinality = pc.add(pc.divide(pc.subtract(index, first_index), DV_EVERY), 1)
    cardinality = pc.add(pc.subtract(cardinality, pc.multiply(pc.divide(cardinality, 50), 50)), 1)
    dv_type = ADD_TYPE.field("deletionVector").type
    dv = pa.StructArray.from_arrays(
        [
            pa.repeat(pa.scalar("u"), count),
            z85_ids,
            pa.repeat(pa.scalar(1, pa.int32()), count),
            pa.repeat(pa.scalar(34, pa.int32()), count),
            pc.cast(cardinality, pa.int64()),
            pc.cast(pc.add(cardinality, 100), pa.int64()),
        ],
        fields=list(dv_type),
        mask=pc.invert(has_dv),
    )
    stats = adds.field("stats")
    loose = pc.binary_join_element_wise(
        pc.utf8_slice_codeunits(stats, 0, -1), ',"tightBounds":false}', ""
    )
    children = []
    for position, field in enumerate(ADD_TYPE):
        if field.name == "deletionVector":
            children.append(dv)
        elif field.name == "stats":
            children.append(pc.if_else(has_dv, loose, stats))
        else:
            children.append(adds.field(position))
    return pa.StructArray.from_arrays(children, fields=list(ADD_TYPE))


def _chunk(params: dict[str, Any], start: int, count: int) -> tuple[_Files, pa.StructArray]:
    files = _files(
        start,
        count,
        seed=params["seed"],
        num_partitions=params["num_partitions"],
        partitioned=True,
        max_records_per_file=params["max_records_per_file"],
    )
    adds = _add_struct(files)
    if params["layout"] == "dv":
        adds = _with_deletion_vectors(adds, start)
    return files, adds


def _dv_dict(row: dict[str, Any]) -> dict[str, Any] | None:
    dv = row.get("deletionVector")
    return None if dv is None else {k: v for k, v in dv.items() if v is not None}


class _CheckpointSink:
    """The checkpoint's rows, in order, into ``parts`` files of equal row counts
    (the last one shorter), row groups of ``rows_per_group`` rows (None: sized
    by bytes); one writer open at a time."""

    def __init__(
        self, log: Path, version: int, total_rows: int, parts: int, rows_per_group: int | None
    ) -> None:
        if parts == 1:
            self.names = [f"{version:020d}.checkpoint.parquet"]
        else:
            self.names = [
                f"{version:020d}.checkpoint.{i:010d}.{parts:010d}.parquet"
                for i in range(1, parts + 1)
            ]
        self.log = log
        self.per_part = -(-total_rows // parts)
        self.rows_per_group = rows_per_group
        self.written = 0
        self.part = -1
        self.writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        while table.num_rows:
            part = self.written // self.per_part
            if part != self.part:
                self.close()
                self.part = part
                self.writer = pq.ParquetWriter(
                    self.log / self.names[part], CHECKPOINT_SCHEMA, compression="snappy"
                )
            room = (part + 1) * self.per_part - self.written
            head, table = table.slice(0, room), table.slice(room)
            assert self.writer is not None
            self.writer.write_table(
                head, row_group_size=self.rows_per_group or _row_group_size(head)
            )
            self.written += head.num_rows

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def build(root: Path, params: dict[str, Any]) -> dict[str, Any]:
    """Write the table of ``params`` at ``root`` (absent or empty); describe it."""
    log = root / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    if any(log.iterdir()):
        raise FileExistsError(f"{log} is not empty")
    num_files, layout = params["num_files"], params["layout"]
    protocol, metadata = _protocol(layout), _metadata(layout, params["seed"])
    _write_lines(
        log / _commit_file_name(0),
        [
            _commit_info(BASE_TIME_MS, "CREATE TABLE"),
            {"protocol": protocol},
            {"metaData": metadata},
        ],
    )
    num_commits = params["num_commits"]
    removes, adds_per_commit = params["removes_per_commit"], params["adds_per_commit"]
    removed = random.Random(f"removes:{params['seed']}").sample(
        range(num_files), num_commits * removes
    )
    removed_index = pa.array(sorted(removed), type=pa.int64())
    removed_rows: dict[str, dict[str, Any]] = {}
    path_of_index: dict[int, str] = {}
    checkpoint_version = params["checkpoint_version"]
    rows_per_group = params.get("rows_per_group")
    parts = params.get("checkpoint_parts", 1)
    sink = _CheckpointSink(log, checkpoint_version, num_files + 2, parts, rows_per_group)
    # a write_table call ends its last row group: a chunk holds whole row groups
    chunk_files = max(CHUNK_FILES, rows_per_group or 0)
    records = dv_files = 0
    try:
        for start in range(0, num_files, chunk_files):
            count = min(chunk_files, num_files - start)
            files, adds = _chunk(params, start, count)
            records += files.record_total
            dv_files += int(pc.sum(pc.is_valid(adds.field("deletionVector"))).as_py() or 0)
            table = _checkpoint_table(adds, protocol, metadata)
            if start:
                table = table.slice(2)
            sink.write(table)
            # the checkpoint files the commits remove, with their actions' fields
            local = pc.subtract(
                removed_index.filter(
                    pc.and_(
                        pc.greater_equal(removed_index, start),
                        pc.less(removed_index, start + count),
                    )
                ),
                start,
            )
            chosen = pa.Table.from_arrays(
                [
                    adds.field("path"),
                    _partition_map(files.partition_values, count),
                    adds.field("size"),
                    adds.field("deletionVector"),
                    files.num_records,
                ],
                names=["path", "partitionValues", "size", "deletionVector", "numRecords"],
            ).take(local)
            for offset, row in zip(local.to_pylist(), chosen.to_pylist(), strict=True):
                path_of_index[start + offset] = row["path"]
                removed_rows[row["path"]] = row
    finally:
        sink.close()
    checkpoint_rows = num_files + 2
    hint: dict[str, Any] = {
        "version": checkpoint_version,
        "size": checkpoint_rows,
        "sizeInBytes": sum((log / n).stat().st_size for n in sink.names),
        "numOfAddFiles": num_files,
    }
    if parts > 1:
        hint["parts"] = parts
    (log / "_last_checkpoint").write_text(json.dumps(hint), encoding="utf-8")
    txns: dict[str, int] = {}
    domains: dict[str, str] = {}
    next_file = num_files
    for k in range(num_commits):
        version = checkpoint_version + 1 + k
        when = BASE_TIME_MS + num_files + 1000 * (k + 1)
        files, _ = _chunk({**params, "layout": "plain"}, next_file, adds_per_commit)
        records += files.record_total
        new_rows = pa.Table.from_arrays(
            [
                files.paths,
                _partition_map(files.partition_values, adds_per_commit),
                files.sizes,
                files.modification_times,
                files.stats,
            ],
            names=["path", "partitionValues", "size", "modificationTime", "stats"],
        ).to_pylist()
        actions: list[dict[str, Any]] = [_commit_info(when, "WRITE")]
        app = f"app-{k % NUM_APPS}"
        txns[app] = version
        actions.append({"txn": {"appId": app, "version": version, "lastUpdated": when}})
        if layout == "dv" and k == 0:
            config = json.dumps({"clusteringColumns": [["id"]]}, separators=(",", ":"))
            domains[DOMAIN] = config
            actions.append(
                {"domainMetadata": {"domain": DOMAIN, "configuration": config, "removed": False}}
            )
        for index in removed[k * removes : (k + 1) * removes]:
            row = removed_rows[path_of_index[index]]
            records -= row["numRecords"]
            action = _remove_action(row, True, when)
            dv = _dv_dict(row)
            if dv is not None:
                action["remove"]["deletionVector"] = dv
                dv_files -= 1
            actions.append(action)
        actions += [_add_action(r, True) for r in new_rows]
        _write_lines(log / _commit_file_name(version), actions)
        next_file += adds_per_commit
    return {
        "path": str(root),
        "uri": root.resolve().as_uri(),
        "version": checkpoint_version + num_commits,
        "checkpoint": str(log / sink.names[0]),
        "checkpoint_files": [str(log / n) for n in sink.names],
        "checkpoint_layout": checkpoint_layout(log, sink.names),
        "checkpoint_version": checkpoint_version,
        "num_checkpoint_files": num_files,
        "num_live_files": num_files + num_commits * (adds_per_commit - removes),
        "num_live_records": records,
        "num_live_dv_files": dv_files,
        "txns": txns,
        "domains": domains,
        "protocol": protocol,
        "log_bytes": sum(p.stat().st_size for p in log.iterdir()),
    }


def checkpoint_layout(log: Path, names: list[str]) -> dict[str, Any]:
    """What the checkpoint's files look like (read from their footers)."""
    groups = []
    for name in names:
        metadata = pq.ParquetFile(log / name).metadata
        groups += [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
    return {
        "parts": len(names),
        "row_groups": len(groups),
        "max_rows_per_group": max(groups, default=0),
        "bytes": sum((log / n).stat().st_size for n in names),
    }


def cache_root(params: dict[str, Any]) -> Path:
    key = json.dumps({"builder": BUILDER_REVISION, **params}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return CACHE_DIR / f"huge-{params['layout']}-{params['num_files']}-{digest}"


def cached_table(params: dict[str, Any], *, rebuild: bool = False) -> dict[str, Any]:
    """The table of ``params``, built once under :data:`CACHE_DIR`; its description
    (``build_seconds`` says how long the build took, when it was built)."""
    root = cache_root(params)
    marker = root / "built.json"
    if rebuild or not marker.exists():
        shutil.rmtree(root, ignore_errors=True)
        started = time.perf_counter()
        description = build(root / "table", params)
        description["build_seconds"] = time.perf_counter() - started
        description["params"] = params
        marker.write_text(json.dumps(description), encoding="utf-8")
    described: dict[str, Any] = json.loads(marker.read_text(encoding="utf-8"))
    return described


def _link_or_copy(source: str, target: str) -> object:
    """Hard-link the checkpoint parquet files (nobody writes into them), copy the rest
    (``_last_checkpoint`` is rewritten by checkpoint writers)."""
    if source.endswith(".parquet"):
        os.link(source, target)
        return target
    return shutil.copy2(source, target)


def table_copy(described: dict[str, Any], target: Path) -> Path:
    """A private, writable copy of a cached table at ``target`` (replaced if present)."""
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(described["path"], target, copy_function=_link_or_copy)
    return target.resolve()
