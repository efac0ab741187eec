"""Batch reads of the ``raydelta`` format: plan on the driver, read per file.

Invariants:
- The snapshot (version, or time travel by ``versionAsOf``/``timestampAsOf``)
  is resolved once, when Spark creates the reader on the driver; every task
  reads that version, never a later one.
- The file list is planned on the driver (:meth:`SnapshotReader.partitions`):
  filters Spark pushes (:meth:`SnapshotReader.pushFilters`) prune files by
  partition values and by min/max/null-count statistics
  (:func:`raydelta.storage.scan.prune_files`). Each input partition carries
  only its own ``add`` actions; the reader object Spark ships to tasks holds
  no file list.
- A pushed filter is applied to every row read as well (SQL semantics: NULL
  is not true), so Spark drops it from the plan; filters that cannot be
  translated exactly (nested columns, string patterns, null-safe equality,
  timestamps, ...) are handed back to Spark and prune nothing.
- Deletion vectors are applied and column-mapped files are read by physical
  name, partition columns filled from the log
  (:func:`raydelta.storage.data.files.read_logical_file`).
- A task hands Spark few, large Arrow batches (:data:`BATCH_ROWS` rows; the
  files of one split are concatenated), not one small batch per file and
  row group: each batch crosses the Python worker's pipe and becomes a
  ``ColumnarBatch`` in the JVM, a fixed cost per batch.
- Splits follow Spark's file-source rule with the session's default
  parallelism as the minimum split count (``register`` records it), so a
  ``local[2]`` session plans about as many tasks as delta-spark does; every
  Python task has a fixed cost (its worker round trip) a JVM task has not.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    InputPartition,
    IsNotNull,
    IsNull,
    LessThan,
    LessThanOrEqual,
    Not,
)
from pyspark.sql.datasource import Filter as SparkFilter
from pyspark.sql.datasource import In as SparkIn

from raydelta.protocol import predicates as p
from raydelta.protocol.schema import PrimitiveType, StructType, parse_schema
from raydelta.spark.options import ReadOptions
from raydelta.storage.snapshot import Snapshot, load_snapshot

MAX_SPLIT_BYTES = 128 * 1024 * 1024
OPEN_COST_BYTES = 4 * 1024 * 1024
MIN_SPLITS = 8
"""The minimum split count when the session's default parallelism is unknown."""
BATCH_ROWS = 131_072
"""Rows per Arrow batch a read task yields (the last of a split may be smaller)."""
_PUSHABLE_TYPES = frozenset(
    {"byte", "short", "integer", "long", "float", "double", "string", "date", "boolean"}
)
_COMPARISONS: dict[type, str] = {
    EqualTo: "=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}
_snapshots: OrderedDict[tuple[str, int], Snapshot] = OrderedDict()


def cached_snapshot(uri: str, options: ReadOptions | None = None) -> Snapshot:
    """The snapshot ``options`` select, kept for the planning worker's next call
    (Spark asks the source for its schema, then creates the reader, then plans)."""
    version = options.version if options is not None else None
    timestamp = options.timestamp if options is not None else None
    if version is not None:
        found = _snapshots.get((uri, version))
        if found is not None:
            return found
    snapshot = load_snapshot(uri, version=version, timestamp=timestamp)
    remember_snapshot(snapshot)
    return snapshot


def remember_snapshot(snapshot: Snapshot) -> None:
    _snapshots[(snapshot.table_uri, snapshot.version)] = snapshot
    while len(_snapshots) > 4:
        _snapshots.popitem(last=False)


def spark_schema_json(schema: StructType) -> str:
    """The table schema as Spark reads it: logical names, no column-mapping
    or other Delta field metadata (Spark's JSON and Delta's are the same format)."""
    raw = json.loads(schema_json_of(schema))
    _strip_metadata(raw)
    return json.dumps(raw)


def schema_json_of(schema: StructType) -> str:
    from raydelta.protocol.schema import serialize_schema

    return serialize_schema(schema)


def _strip_metadata(node: Any) -> None:
    if isinstance(node, dict):
        if "metadata" in node and isinstance(node.get("metadata"), dict):
            node["metadata"] = {}
        for value in node.values():
            _strip_metadata(value)
    elif isinstance(node, list):
        for value in node:
            _strip_metadata(value)


# --- filter pushdown ------------------------------------------------------------------------


def _literal(value: Any, type_name: str) -> p.Scalar | None:
    """A Spark filter value as a predicate literal, or None when not exact."""
    if value is None:
        return None
    if type_name == "boolean":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if type_name == "date":
        return value.isoformat() if isinstance(value, dt.date) else None
    if type_name == "string":
        return value if isinstance(value, str) else None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value and abs(value) != float("inf"):
        return value
    if isinstance(value, decimal.Decimal) and value == value.to_integral_value():
        return int(value)
    return None


def translate_filter(spark_filter: SparkFilter, types: Mapping[str, str]) -> p.Predicate | None:
    """``spark_filter`` as a raydelta predicate over a top-level column of a
    pushable type, or None when it cannot be translated exactly."""
    if isinstance(spark_filter, Not):
        child = translate_filter(spark_filter.child, types)
        return None if child is None else p.Not(child=child)
    attribute = getattr(spark_filter, "attribute", None)
    if not isinstance(attribute, tuple) or len(attribute) != 1:
        return None
    column = attribute[0]
    type_name = types.get(column)
    if type_name is None or type_name not in _PUSHABLE_TYPES:
        return None
    if isinstance(spark_filter, IsNull):
        return p.IsNull(column=column)
    if isinstance(spark_filter, IsNotNull):
        return p.Not(child=p.IsNull(column=column))
    if isinstance(spark_filter, SparkIn):
        values = [_literal(v, type_name) for v in spark_filter.value]
        if not values or any(v is None for v in values):
            return None
        return p.In(column=column, values=tuple(v for v in values if v is not None))
    op = _COMPARISONS.get(type(spark_filter))
    if op is None:
        return None
    if type_name == "boolean" and op != "=":
        return None
    value = _literal(getattr(spark_filter, "value", None), type_name)
    if value is None:
        return None
    return p.Comparison(column=column, op=op, value=value)  # type: ignore[arg-type]


def top_level_types(schema: StructType) -> dict[str, str]:
    return {
        f.name: f.type.name
        for f in schema.fields
        if isinstance(f.type, PrimitiveType) and f.type.name in _PUSHABLE_TYPES
    }


# --- planning -------------------------------------------------------------------------------


@dataclass
class FileSplit(InputPartition):
    """The ``add`` actions (log dicts) one task reads."""

    adds: list[dict[str, Any]] = field(default_factory=list)

    def __init__(self, adds: list[dict[str, Any]]) -> None:
        self.adds = adds


def plan_splits(adds: Sequence[dict[str, Any]], *, min_splits: int = MIN_SPLITS) -> list[FileSplit]:
    """Files packed into splits of at most ``maxSplitBytes`` (Spark's rule for
    file sources: ``min(128 MiB, max(4 MiB, total / min_splits))``, each file
    costing ``4 MiB`` more to open), in the order given; big files alone."""
    if not adds:
        return []
    total = sum(int(a.get("size") or 0) + OPEN_COST_BYTES for a in adds)
    limit = min(MAX_SPLIT_BYTES, max(OPEN_COST_BYTES, total // max(1, min_splits)))
    splits: list[FileSplit] = []
    current: list[dict[str, Any]] = []
    current_bytes = 0
    for add in sorted(adds, key=lambda a: -int(a.get("size") or 0)):
        cost = int(add.get("size") or 0) + OPEN_COST_BYTES
        if current and current_bytes + cost > limit:
            splits.append(FileSplit(current))
            current, current_bytes = [], 0
        current.append(add)
        current_bytes += cost
    if current:
        splits.append(FileSplit(current))
    return splits


def adds_of(files: pa.Table) -> list[dict[str, Any]]:
    """Canonical ``add`` rows as the dicts :func:`read_logical_file` takes."""
    columns = [
        c for c in ("path", "partitionValues", "deletionVector", "size") if c in files.schema.names
    ]
    rows: list[dict[str, Any]] = files.select(columns).to_pylist()
    for row in rows:
        row["partitionValues"] = dict(row.get("partitionValues") or [])
    return rows


def read_rows(
    uri: str,
    adds: Iterable[Mapping[str, Any]],
    schema: StructType,
    partition_columns: Sequence[str],
    mapping_mode: str,
    row_filter: p.Predicate | None,
) -> Iterator[pa.RecordBatch]:
    """The live rows of ``adds`` that satisfy ``row_filter``, as record batches."""
    from raydelta.storage.data.files import read_logical_file
    from raydelta.storage.scan import to_arrow_expression

    expression = None if row_filter is None else to_arrow_expression(row_filter, schema)
    pending: list[pa.Table] = []
    pending_rows = 0
    for add in adds:
        table = read_logical_file(
            uri, add, schema, partition_columns, column_mapping_mode=mapping_mode
        )
        if expression is not None:
            table = table.filter(expression)
        if table.num_rows == 0:
            continue
        pending.append(table)
        pending_rows += table.num_rows
        if pending_rows >= BATCH_ROWS:
            yield from _large_batches(pending)
            pending, pending_rows = [], 0
    yield from _large_batches(pending)


def _large_batches(tables: list[pa.Table]) -> Iterator[pa.RecordBatch]:
    """The rows of ``tables`` in batches of :data:`BATCH_ROWS` rows; tables whose
    Arrow types differ (a variant column stored differently per file) each keep
    their own batches."""
    if not tables:
        return
    first = tables[0].schema
    if any(not t.schema.equals(first, check_metadata=False) for t in tables[1:]):
        for table in tables:
            yield from table.combine_chunks().to_batches(max_chunksize=BATCH_ROWS)
        return
    joined = pa.concat_tables([t.replace_schema_metadata(first.metadata) for t in tables])
    yield from joined.combine_chunks().to_batches(max_chunksize=BATCH_ROWS)


class SnapshotReader(DataSourceReader):
    """One snapshot of the table: pushed filters, planned splits, rows."""

    def __init__(self, uri: str, options: ReadOptions, *, min_splits: int = MIN_SPLITS) -> None:
        snapshot = cached_snapshot(uri, options)
        self.uri = uri
        self.min_splits = max(1, min_splits)
        self.version = snapshot.version
        self.schema_string = snapshot.metadata.schema_string or '{"type":"struct","fields":[]}'
        self.partition_columns = list(snapshot.metadata.partition_columns)
        self.mapping_mode = snapshot.table_configuration.column_mapping_mode
        self.pushed: list[p.Predicate] = []

    @property
    def table_schema(self) -> StructType:
        return parse_schema(self.schema_string)

    def pushFilters(self, filters: list[SparkFilter]) -> Iterable[SparkFilter]:
        types = top_level_types(self.table_schema)
        for spark_filter in filters:
            predicate = translate_filter(spark_filter, types)
            if predicate is None:
                yield spark_filter
            else:
                self.pushed.append(predicate)

    @property
    def predicate(self) -> p.Predicate | None:
        if not self.pushed:
            return None
        return self.pushed[0] if len(self.pushed) == 1 else p.And(children=tuple(self.pushed))

    def planned_files(self) -> pa.Table:
        """The live files the pushed filters may need (read on the driver)."""
        from raydelta.storage.scan import prune_files

        snapshot = cached_snapshot(self.uri, ReadOptions.parse({"versionAsOf": str(self.version)}))
        return prune_files(
            snapshot.files,
            self.predicate,
            self.table_schema,
            self.partition_columns,
            self.mapping_mode,
        )

    def partitions(self) -> Sequence[InputPartition]:
        splits = plan_splits(adds_of(self.planned_files()), min_splits=self.min_splits)
        # Spark wants at least one partition; an empty split reads no file.
        return list(splits) or [FileSplit([])]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FileSplit)
        yield from read_rows(
            self.uri,
            partition.adds,
            self.table_schema,
            self.partition_columns,
            self.mapping_mode,
            self.predicate,
        )
