"""The data rules of a table's writer features, as raydelta's data writer
applies them to the rows it writes.

PROTOCOL.md: "Column Invariants", "CHECK Constraints", "Generated Columns",
"Default Columns", "Identity Columns", "Column Mapping", "Timestamp without
timezone", and the "Writer Requirements" of every other feature.

Invariants:
- :data:`DATA_WRITER_FEATURES` lists the features whose data duties the
  writer implements (or which lay none on a writer that adds new files).
  :func:`table_write_rules` refuses a table supporting any other feature
  (known or unknown) with :class:`UnsupportedTableFeatureException`: a duty
  we cannot honour refuses the write, it is never written around.
- Every SQL expression of the table (invariants, CHECK constraints,
  generation and default expressions) is parsed and dry-run on an empty
  table of the table's schema when the rules are built, so a table with an
  expression raydelta cannot evaluate is refused before a row is written.
- Null semantics follow delta-spark (``CheckDeltaInvariant``): a CHECK
  constraint or an invariant is violated when it evaluates to false *or*
  NULL; a generated column is violated unless ``value <=> expression``; a
  non-nullable field is violated when it is null while none of its nullable
  ancestors is (``Invariants.traverseNullCheckExpressions``), array elements
  with ``containsNull=false`` and map values with ``valueContainsNull=false``
  included.
- Computed columns (top level only, as Delta allows them): a column absent
  from the data with a ``CURRENT_DEFAULT`` gets its default, then generated
  columns absent from the data get their expression's value, then identity
  columns absent from the data get ``start + k * step`` values above the
  high-water mark. An identity column present in the data is refused unless
  ``delta.identity.allowExplicitInsert`` is true; explicit values do not move
  the high-water mark (it records generated values, spec).
- Everything here takes values and returns values; the write's time is an
  argument.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import Metadata, Protocol
from raydelta.protocol.errors import (
    DeltaInvariantViolationException,
    IdentityColumnError,
    InvalidTableError,
    RaydeltaError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.expressions import SqlExpression, evaluate, parse_expression
from raydelta.protocol.schema import (
    ArrayType,
    ColumnMappingMode,
    DataType,
    MapType,
    StructField,
    StructType,
    contains_type,
)
from raydelta.protocol.schema_arrow import to_arrow
from raydelta.protocol.schema_enforcement import writer_arrow_schema
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.protocol.table_features import (
    ALLOW_COLUMN_DEFAULTS,
    APPEND_ONLY,
    CATALOG_MANAGED,
    CHANGE_DATA_FEED,
    CHECK_CONSTRAINTS,
    CHECKPOINT_PROTECTION,
    CLUSTERING,
    COLUMN_MAPPING,
    DELETION_VECTORS,
    DOMAIN_METADATA,
    GENERATED_COLUMNS,
    IDENTITY_COLUMNS,
    IN_COMMIT_TIMESTAMP,
    IN_COMMIT_TIMESTAMPS_SPEC_TYPO,
    INVARIANTS,
    MATERIALIZE_PARTITION_COLUMNS,
    ROW_TRACKING,
    TIMESTAMP_NTZ,
    TYPE_WIDENING,
    TYPE_WIDENING_PREVIEW,
    V2_CHECKPOINT,
    VACUUM_PROTOCOL_CHECK,
    ensure_writable,
    supported_features,
)

INVARIANTS_KEY = "delta.invariants"
GENERATION_EXPRESSION_KEY = "delta.generationExpression"
CURRENT_DEFAULT_KEY = "CURRENT_DEFAULT"
IDENTITY_START_KEY = "delta.identity.start"
IDENTITY_STEP_KEY = "delta.identity.step"
IDENTITY_HIGH_WATER_MARK_KEY = "delta.identity.highWaterMark"
IDENTITY_ALLOW_EXPLICIT_INSERT_KEY = "delta.identity.allowExplicitInsert"
CONSTRAINTS_PREFIX = "delta.constraints."
GENERATED_COLUMN_CONSTRAINT = "Generated Column"

# Features whose data duties the writer implements, and why each is safe.
DATA_WRITER_FEATURES: frozenset[str] = frozenset(
    {
        APPEND_ONLY,  # no data duty; the commit rules refuse data-changing removes
        INVARIANTS,  # delta.invariants evaluated on every row
        CHECK_CONSTRAINTS,  # delta.constraints.* evaluated on every row
        GENERATED_COLUMNS,  # computed when absent, checked (<=>) when given
        ALLOW_COLUMN_DEFAULTS,  # CURRENT_DEFAULT filled in for absent columns
        IDENTITY_COLUMNS,  # values from the high-water mark, new mark in the metadata
        COLUMN_MAPPING,  # physical names and field ids in files, stats and partition values
        TIMESTAMP_NTZ,  # naive timestamps kept naive; feature added when a schema gains one
        # A commit of new files (and of whole-file removes) needs no cdc files:
        # readers take its adds as inserts (spec, "Add CDC File").
        CHANGE_DATA_FEED,
        DELETION_VECTORS,  # new files carry no DV; tightBounds written as delta-spark does
        ROW_TRACKING,  # baseRowId/defaultRowCommitVersion assigned at commit by the TableActor
        DOMAIN_METADATA,
        # Clustering columns need statistics: on clustered tables every column
        # gets them (the clustering domain is not part of the metadata we see).
        CLUSTERING,
        # The writer writes the current (widest) types.
        TYPE_WIDENING,
        TYPE_WIDENING_PREVIEW,
        # Partition values are also written into the data files.
        MATERIALIZE_PARTITION_COLUMNS,
        # Log-level features: no rule on data files.
        V2_CHECKPOINT,
        IN_COMMIT_TIMESTAMP,
        IN_COMMIT_TIMESTAMPS_SPEC_TYPO,
        VACUUM_PROTOCOL_CHECK,
        CHECKPOINT_PROTECTION,
        CATALOG_MANAGED,
    }
)
# Refused, among the known ones: icebergCompatV1/V2/V3 (materialized
# partitions, nested field ids and type allow-lists), variantType and
# variantShredding (variant encodings are not validated), collations (stats
# and comparisons under a collation), coordinatedCommits-preview and
# catalogOwned-preview (commit protocols raydelta does not follow).


@dataclass(frozen=True)
class Identity:
    """An identity column's parameters."""

    column: str
    start: int
    step: int
    high_water_mark: int | None
    allow_explicit_insert: bool

    def next_values(self, count: int, high_water_mark: int | None) -> tuple[pa.Array, int | None]:
        """``count`` fresh values above ``high_water_mark``; the new mark."""
        if count == 0:
            return pa.array([], pa.int64()), high_water_mark
        if high_water_mark is None:
            k = 0
        else:
            k = max(0, math.floor((high_water_mark - self.start) / self.step) + 1)
        first = self.start + k * self.step
        last = first + (count - 1) * self.step
        if not -(2**63) <= last < 2**63 or not -(2**63) <= first < 2**63:
            raise IdentityColumnError(
                f"identity column {self.column!r} overflows: {count} values from {first} "
                f"by {self.step} exceed the long range",
                self.column,
            )
        values = pa.array(range(first, last + self.step, self.step), pa.int64())
        return values, last


@dataclass(frozen=True)
class TableWriteRules:
    """Everything the writer must do to the rows of one table (see the module)."""

    configuration: TableConfiguration
    invariants: tuple[tuple[str, SqlExpression], ...] = ()
    checks: tuple[tuple[str, SqlExpression], ...] = ()
    generated: tuple[tuple[str, SqlExpression], ...] = ()
    defaults: tuple[tuple[str, SqlExpression], ...] = ()
    identities: tuple[Identity, ...] = ()
    features: frozenset[str] = field(default_factory=frozenset)

    @property
    def schema(self) -> StructType:
        return self.configuration.schema

    @property
    def mapping_mode(self) -> ColumnMappingMode:
        return self.configuration.column_mapping_mode

    @property
    def computed_columns(self) -> frozenset[str]:
        """Columns the writer can fill in when the data lacks them."""
        names = [c for c, _ in self.generated] + [c for c, _ in self.defaults]
        return frozenset(names + [i.column for i in self.identities])

    @property
    def materialize_partition_columns(self) -> bool:
        return MATERIALIZE_PARTITION_COLUMNS in self.features

    @property
    def tight_bounds(self) -> bool:
        return DELETION_VECTORS in self.features

    @property
    def clustered(self) -> bool:
        return CLUSTERING in self.features


def table_write_rules(protocol: Protocol, metadata: Metadata) -> TableWriteRules:
    """The validated rules of a table raydelta can write; refuse any other table."""
    ensure_writable(protocol)
    features = supported_features(protocol)
    refused = sorted(features - DATA_WRITER_FEATURES)
    if refused:
        raise UnsupportedTableFeatureException(
            f"raydelta's data writer does not implement the data rules of {refused}; "
            "the table cannot be written by raydelta"
        )
    configuration = TableConfiguration(protocol, metadata)
    schema = configuration.schema
    if contains_type(schema, "timestamp_ntz") and TIMESTAMP_NTZ not in features:
        raise InvalidTableError(
            "the schema has a timestamp_ntz column but the protocol lacks the timestampNtz feature"
        )
    rules = TableWriteRules(
        configuration=configuration,
        invariants=tuple(_invariants(schema)),
        checks=tuple(
            (key[len(CONSTRAINTS_PREFIX) :], parse_expression(value))
            for key, value in sorted(metadata.configuration.items())
            if key.startswith(CONSTRAINTS_PREFIX)
        ),
        generated=tuple(_column_expressions(schema, GENERATION_EXPRESSION_KEY)),
        defaults=tuple(_column_expressions(schema, CURRENT_DEFAULT_KEY)),
        identities=tuple(_identity(f) for f in schema.fields if _is_identity(f)),
        features=features,
    )
    _dry_run(rules)
    return rules


def _invariants(schema: StructType) -> list[tuple[str, SqlExpression]]:
    from raydelta.protocol.schema import walk_fields

    found = []
    for path, f in walk_fields(schema):
        raw = f.metadata.get(INVARIANTS_KEY)
        if raw is None:
            continue
        try:
            sql = json.loads(raw)["expression"]["expression"] if isinstance(raw, str) else None
        except (ValueError, KeyError, TypeError):
            sql = None
        if not isinstance(sql, str):
            raise InvalidTableError(
                f"column {'.'.join(path)!r} has an unrecognised delta.invariants value {raw!r}"
            )
        found.append((".".join(path), parse_expression(sql)))
    return found


def _column_expressions(schema: StructType, key: str) -> list[tuple[str, SqlExpression]]:
    out = []
    for f in schema.fields:
        sql = f.metadata.get(key)
        if sql is not None:
            if not isinstance(sql, str):
                raise InvalidTableError(f"column {f.name!r} has a non-string {key}: {sql!r}")
            out.append((f.name, parse_expression(sql)))
    return out


def _is_identity(f: StructField) -> bool:
    return any(k in f.metadata for k in (IDENTITY_START_KEY, IDENTITY_STEP_KEY))


def _identity(f: StructField) -> Identity:
    def number(key: str, default: int | None) -> int | None:
        value = f.metadata.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise InvalidTableError(f"identity column {f.name!r}: {key} is not a long: {value!r}")
        try:
            return int(value)
        except ValueError as error:
            raise InvalidTableError(f"identity column {f.name!r}: {key}={value!r}") from error

    start, step = number(IDENTITY_START_KEY, 1), number(IDENTITY_STEP_KEY, 1)
    assert start is not None and step is not None
    if step == 0:
        raise IdentityColumnError(f"identity column {f.name!r} has step 0", f.name)
    explicit = f.metadata.get(IDENTITY_ALLOW_EXPLICIT_INSERT_KEY, False)
    if isinstance(explicit, str):
        explicit = explicit.strip().lower() == "true"
    return Identity(f.name, start, step, number(IDENTITY_HIGH_WATER_MARK_KEY, None), bool(explicit))


def _dry_run(rules: TableWriteRules) -> None:
    empty = to_arrow(rules.schema).empty_table()
    now = dt.datetime(2000, 1, 1, tzinfo=dt.UTC)
    for _, expression in (*rules.invariants, *rules.checks, *rules.generated, *rules.defaults):
        evaluate(expression, empty, now=now)


# --- applying the rules ---------------------------------------------------------------------


def complete_rows(
    data: pa.Table,
    rules: TableWriteRules,
    *,
    now: dt.datetime,
    high_water_marks: MutableMapping[str, int | None],
) -> pa.Table:
    """``data`` (the table's columns, computed ones possibly absent) with every
    column present, in the schema's order. ``high_water_marks`` (identity
    column → mark) is read and advanced."""
    target = writer_arrow_schema(rules.schema)
    columns: dict[str, pa.Array | pa.ChunkedArray] = {n: data.column(n) for n in data.column_names}
    for name, expression in rules.defaults:
        if name not in columns:
            columns[name] = _typed(evaluate(expression, data, now=now), target.field(name).type)
    for name, expression in rules.generated:
        if name not in columns:
            view = pa.table(columns)
            columns[name] = _typed(evaluate(expression, view, now=now), target.field(name).type)
    for identity in rules.identities:
        if identity.column in columns:
            if not identity.allow_explicit_insert:
                raise IdentityColumnError(
                    f"identity column {identity.column!r} does not allow explicit values "
                    "(delta.identity.allowExplicitInsert is false); leave it out of the data",
                    identity.column,
                )
            continue
        mark = high_water_marks.get(identity.column, identity.high_water_mark)
        values, mark = identity.next_values(data.num_rows, mark)
        high_water_marks[identity.column] = mark
        columns[identity.column] = _typed(values, target.field(identity.column).type)
    return pa.Table.from_arrays([columns[f.name] for f in target], schema=target)


def _typed(values: pa.Array, target: pa.DataType) -> pa.Array:
    try:
        return values.cast(target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as error:
        raise DeltaInvariantViolationException(
            f"a computed value does not fit the column type {target}: {error}"
        ) from error


def check_rows(data: pa.Table, rules: TableWriteRules) -> None:
    """Raise :class:`DeltaInvariantViolationException` for the first broken rule."""
    for f in rules.schema.fields:
        _check_not_null(data.column(f.name), f.type, f.nullable, f.name, data)
    for column, expression in rules.invariants:
        _check_expression(data, expression, f"EXPRESSION({expression.sql})", column, "invariant")
    for name, expression in rules.checks:
        _check_expression(data, expression, name, None, "CHECK constraint")
    target = writer_arrow_schema(rules.schema)
    for name, expression in rules.generated:
        expected = _typed(evaluate(expression, data), target.field(name).type)
        actual = _flat(data.column(name))
        same = pc.or_(
            pc.fill_null(pc.equal(actual, expected), False),
            pc.and_(pc.is_null(actual), pc.is_null(expected)),
        )
        if not pc.all(same).as_py() and len(same):
            row = pc.index(same, False).as_py()
            raise DeltaInvariantViolationException(
                f"generated column {name!r}: the value {actual[row].as_py()!r} is not "
                f"{expression.sql} = {expected[row].as_py()!r} (CHECK constraint "
                f"{GENERATED_COLUMN_CONSTRAINT} ({name} <=> {expression.sql}) violated)",
                GENERATED_COLUMN_CONSTRAINT,
                name,
                expression.sql,
                {name: actual[row].as_py()},
            )


def _flat(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return pa.concat_arrays(column.chunks) if column.num_chunks else pa.array([], column.type)
    return column


def _check_expression(
    data: pa.Table, expression: SqlExpression, name: str, column: str | None, kind: str
) -> None:
    result = evaluate(expression, data)
    passed = pc.fill_null(result, False)
    if len(passed) == 0 or pc.all(passed).as_py():
        return
    row = pc.index(passed, False).as_py()
    values = _row_values(data, expression, row)
    shown = ", ".join(f"{k} = {v!r}" for k, v in sorted(values.items()))
    raise DeltaInvariantViolationException(
        f"{kind} {name} violated by row {row} ({shown}): {expression.sql} is "
        f"{'NULL' if not result[row].is_valid else 'false'}",
        name,
        column,
        expression.sql,
        values,
    )


def _row_values(data: pa.Table, expression: SqlExpression, row: int) -> dict[str, object]:
    values: dict[str, object] = {}
    one = data.slice(row, 1)
    for path in expression.columns:
        try:
            value = evaluate(parse_expression(".".join(f"`{p}`" for p in path)), one)[0].as_py()
        except RaydeltaError:  # the values only decorate the message
            continue
        values[".".join(path)] = value
    return values


def _check_not_null(
    column: pa.ChunkedArray | pa.Array,
    dtype: DataType,
    nullable: bool,
    path: str,
    data: pa.Table,
) -> None:
    array = _flat(column)
    if not nullable and array.null_count:
        raise DeltaInvariantViolationException(
            f"NOT NULL constraint violated for column: {path}",
            f"{path} NOT NULL",
            path,
            None,
            {path: None},
        )
    if not _has_non_nullable(dtype):
        return
    present = array.filter(pc.is_valid(array)) if array.null_count else array
    if isinstance(dtype, StructType):
        names = [present.type.field(i).name for i in range(present.type.num_fields)]
        for child in dtype.fields:
            values = pc.struct_field(present, [names.index(child.name)])
            _check_not_null(values, child.type, child.nullable, f"{path}.{child.name}", data)
    elif isinstance(dtype, ArrayType):
        elements = pc.list_flatten(present)
        _check_not_null(elements, dtype.element_type, dtype.contains_null, f"{path}.element", data)
    elif isinstance(dtype, MapType):
        _check_not_null(present.keys, dtype.key_type, False, f"{path}.key", data)
        _check_not_null(
            present.items, dtype.value_type, dtype.value_contains_null, f"{path}.value", data
        )


def _has_non_nullable(dtype: DataType) -> bool:
    if isinstance(dtype, StructType):
        return any(not f.nullable or _has_non_nullable(f.type) for f in dtype.fields)
    if isinstance(dtype, ArrayType):
        return not dtype.contains_null or _has_non_nullable(dtype.element_type)
    if isinstance(dtype, MapType):
        return (
            not dtype.value_contains_null
            or _has_non_nullable(dtype.key_type)
            or _has_non_nullable(dtype.value_type)
        )
    return False


def with_high_water_marks(schema: StructType, marks: Mapping[str, int | None]) -> StructType:
    """``schema`` with each identity column's ``delta.identity.highWaterMark`` set."""
    fields = []
    for f in schema.fields:
        mark = marks.get(f.name)
        if mark is not None:
            metadata = {**f.metadata, IDENTITY_HIGH_WATER_MARK_KEY: mark}
            f = StructField(f.name, f.type, f.nullable, metadata, f.extra)
        fields.append(f)
    return StructType(tuple(fields), schema.extra)
