"""The values a commit's file actions (``add``/``remove``/``cdc``) may carry.

:func:`file_path_keys` and :func:`check_file_values` are called by
:func:`raydelta.protocol.commit_rules.validate_commit`; it judges every file
action's own fields against the table configuration after the commit and
raises an :class:`~raydelta.protocol.errors.InvalidFileActionError` (or its
subclasses :class:`UnsafePathError`, :class:`InvalidStatisticsError`) whose
message names ``<action>.<field>``, the action's path and the reason.

Invariants (PROTOCOL.md sections in brackets):

- paths (``path``, a ``p`` deletion vector's path, a ``u`` one's random
  prefix) stay under the table root (:mod:`raydelta.protocol.commit_paths`);
  :func:`file_path_keys` returns the key of every file action's path, so
  the duplicate rule sees two spellings of one file as one file;
- ``size`` ≥ 0 and, like every Long field (``modificationTime``,
  ``deletionTimestamp``, ``baseRowId``, ``defaultRowCommitVersion``), fits a
  signed 64-bit integer ["Add File and Remove File"]; row ids and row commit
  versions are ≥ 0 ["Row Tracking"];
- ``stats`` (when present) is a JSON object (standard JSON: no bare ``NaN``)
  whose ``numRecords`` is an integer ≥ 0, ``tightBounds`` a boolean,
  ``nullCount`` values integers ≥ 0, and every ``minValues``/``maxValues``
  value of a column of the schema fits that column's type (the coercions of
  :mod:`raydelta.protocol.statistics`, strictly: a value that would read as
  null is refused). Keys naming no column are left alone (readers ignore
  them) ["Per-file Statistics"];
- ``partitionValues`` of ``add`` (and of ``remove``/``cdc`` when non-empty)
  have exactly the partition columns' physical names as keys and values that
  parse as the columns' types ["Partition Value Serialization"];
- a deletion vector has a known ``storageType`` (``u``/``i``/``p``),
  ``sizeInBytes`` > 0 and, like ``offset``, within a signed 32-bit integer (the
  checkpoint schema's ``int``), ``cardinality`` ≥ 0; no ``offset`` inline; an
  inline bitmap decodes to ``sizeInBytes`` bytes holding ``cardinality``
  rows; a ``u`` descriptor names a UUID; an ``add``'s ``cardinality`` is at
  most its ``numRecords`` ["Deletion Vectors"].

Cost: per-file work is attribute reads and, for ``stats``, one JSON decode
and a walk of the decoded values; paths are checked in one Arrow pass; the
partition values of a commit are parsed once per distinct value.
"""

from __future__ import annotations

import json
import json.scanner
import uuid
from collections.abc import Callable, Sequence
from decimal import Decimal
from operator import attrgetter
from typing import Any

import pyarrow as pa

from raydelta.protocol import z85
from raydelta.protocol.actions import Action, AddCDCFile, AddFile, RemoveFile
from raydelta.protocol.commit_paths import canonical_root, check_file_paths, check_path
from raydelta.protocol.deletion_vectors import DeletionVectorDescriptor, decode_bitmap
from raydelta.protocol.errors import (
    CorruptLogError,
    DeletionVectorError,
    InvalidFileActionError,
    InvalidStatisticsError,
    SchemaError,
)
from raydelta.protocol.partition_values import parse_partition_value
from raydelta.protocol.schema import DataType
from raydelta.protocol.statistics import (
    MAX_VALUES,
    MIN_VALUES,
    NULL_COUNT,
    NUM_RECORDS,
    TIGHT_BOUNDS,
    stats_schema,
    value_coercer,
)
from raydelta.protocol.stats_columnar import ColumnarStatsCheck
from raydelta.protocol.table_configuration import TableConfiguration

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
_NO_ROOT = "\x00no table root"
"""Stands for an unknown table root: no URI lies under it."""

FileAction = AddFile | RemoveFile | AddCDCFile


def _refuse(action: FileAction, name: str, reason: str) -> InvalidFileActionError:
    field = f"{action.action_name}.{name}"
    return InvalidFileActionError(
        f"{field} of {action.path!r} {reason}", field=field, path=action.path
    )


def _long(action: FileAction, name: str, value: Any, *, minimum: int | None) -> None:
    if value is None:
        return
    if type(value) is not int:
        raise _refuse(action, name, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise _refuse(action, name, f"must be at least {minimum}, got {value}")
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise _refuse(action, name, f"{value} does not fit a 64-bit Long")


# --- stats ------------------------------------------------------------------------------


class StatsChecker:
    """Strict checks of ``stats`` JSON against one table schema (built once per commit).

    Column at a time: every file's ``stats`` is decoded (the C scanner, one
    call per file), then the values of one column across all files are
    checked together (their set of Python types, then ``min``/``max`` for
    integers); only columns whose values are not all of the plain JSON type
    (dates, timestamps, decimals, floats, ints beyond range) are checked one
    value at a time, and an error is located by a scan of that column only.
    """

    def __init__(self, config: TableConfiguration) -> None:
        struct = stats_schema(
            config.schema,
            physical=True,
            partition_columns=config.partition_columns,
            num_indexed_cols=-1,
        )
        decoder = json.JSONDecoder(
            parse_float=Decimal if _has_decimal(struct) else None,
            parse_constant=_refuse_constant,
        )
        self._decoder = decoder
        self._scan = json.scanner.make_scanner(decoder)  # type: ignore[arg-type]
        self._min_max = _child_checks(struct, MIN_VALUES)
        self._null_count = _child_checks(struct, NULL_COUNT, counts=True)
        self._columnar = ColumnarStatsCheck(struct)

    def check_all(self, files: Sequence[FileAction]) -> list[int | None]:
        """Refuse bad ``stats`` among ``files`` (each has a non-empty ``stats``);
        their ``numRecords`` (None when absent), in order.

        One Arrow parse of all of them decides the common case
        (:mod:`raydelta.protocol.stats_columnar`); whatever it declines is
        decoded and checked here, file by file, which names a bad field."""
        if len(files) >= _COLUMNAR_FROM:
            records = self._columnar.check([a.stats for a in files])  # type: ignore[union-attr,misc]
            if records is not None:
                return records
        return self.check_each(files)

    def check_each(self, files: Sequence[FileAction]) -> list[int | None]:
        """:meth:`check_all` without the columnar fast path."""
        raws = [self._decode(action) for action in files]
        records = [raw.get(NUM_RECORDS) for raw in raws]
        self._column(files, records, f"stats.{NUM_RECORDS}", _count, "must be a Long ≥ 0")
        tight = [raw.get(TIGHT_BOUNDS) for raw in raws]
        if not {type(v) for v in tight} <= {bool, _NONE}:
            index = next(i for i, v in enumerate(tight) if v is not None and type(v) is not bool)
            raise self._error(files[index], f"stats.{TIGHT_BOUNDS}", "must be a boolean")
        for key, checks in ((MIN_VALUES, self._min_max), (MAX_VALUES, self._min_max)):
            self._objects(files, [raw.get(key) for raw in raws], f"stats.{key}", checks)
        self._objects(
            files, [raw.get(NULL_COUNT) for raw in raws], f"stats.{NULL_COUNT}", self._null_count
        )
        return records

    def _decode(self, action: FileAction) -> dict[str, Any]:
        text: str = action.stats or ""  # type: ignore[union-attr]
        try:
            raw, end = self._scan(text, 0)
            if end != len(text) and text[end:].strip():
                raise ValueError(f"extra data after the object at character {end}")
        except StopIteration:  # leading blanks, or not a JSON value at all
            try:
                raw = self._decoder.decode(text)
            except ValueError as exc:
                raise self._error(action, "stats", f"is not JSON: {exc}") from None
        except (ValueError, RecursionError) as exc:
            raise self._error(action, "stats", f"is not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise self._error(action, "stats", "is not a JSON object")
        return raw

    def _objects(
        self,
        files: Sequence[FileAction],
        values: list[Any],
        where: str,
        checks: _Checks | None,
    ) -> None:
        """``values[i]`` (of ``files[i]``) must each be null or an object of columns."""
        kinds = {type(v) for v in values}
        kinds.discard(_NONE)
        if not kinds:
            return
        if kinds != {dict}:
            index = next(i for i, v in enumerate(values) if v is not None and type(v) is not dict)
            raise self._error(
                files[index], where, f"must be an object of columns, got {values[index]!r}"
            )
        if checks is None:
            return
        for name, check in checks.items():
            column = [None if v is None else v.get(name) for v in values]
            if isinstance(check, dict):
                self._objects(files, column, f"{where}.{name}", check)
            else:
                self._leaves(files, column, f"{where}.{name}", check)

    def _leaves(
        self, files: Sequence[FileAction], values: list[Any], where: str, check: _Check
    ) -> None:
        kinds = {type(v) for v in values}
        kinds.discard(_NONE)
        if not kinds:
            return
        if kinds == {str} and check is _STRING_CHECK:
            return
        if kinds == {int} and check in _INT_BOUNDS:
            low, high = _INT_BOUNDS[check]
            present = [v for v in values if v is not None]
            if low <= min(present) and max(present) <= high:
                return
        for i, v in enumerate(values):  # the slow path, and where the error is
            if v is not None and (isinstance(v, dict) or check(v) is None):
                raise self._error(files[i], where, f"value {v!r} does not fit the column's type")

    def _column(
        self,
        files: Sequence[FileAction],
        values: list[Any],
        where: str,
        check: _Check,
        reason: str,
    ) -> None:
        present = [v for v in values if v is not None]
        if not present:
            return
        if {type(v) for v in present} == {int} and min(present) >= 0 and max(present) <= INT64_MAX:
            return
        for i, v in enumerate(values):
            if v is not None and check(v) is None:
                raise self._error(files[i], where, f"{reason}, got {v!r}")

    @staticmethod
    def _error(action: FileAction, name: str, reason: str) -> InvalidStatisticsError:
        field = f"{action.action_name}.{name}"
        return InvalidStatisticsError(
            f"{field} of {action.path!r} {reason}", field=field, path=action.path
        )


_COLUMNAR_FROM = 64
"""Below this many files the per-file path is as fast as one Arrow parse."""

_CHECKERS: dict[tuple[str | None, tuple[str, ...], str], StatsChecker] = {}
_MAX_CHECKERS = 64


def stats_checker(config: TableConfiguration) -> StatsChecker:
    """The :class:`StatsChecker` of a table schema, built once per schema (a 1-file
    commit must not pay for building the statistics schema)."""
    key = (
        config.metadata.schema_string,
        tuple(config.partition_columns),
        str(config.column_mapping_mode),
    )
    checker = _CHECKERS.get(key)
    if checker is None:
        if len(_CHECKERS) >= _MAX_CHECKERS:
            _CHECKERS.clear()
        checker = _CHECKERS[key] = StatsChecker(config)
    return checker


_NONE = type(None)
_Check = Callable[[Any], Any]
_Checks = dict[str, "_Check | _Checks"]


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _has_decimal(arrow_type: pa.DataType) -> bool:
    if pa.types.is_decimal(arrow_type):
        return True
    if pa.types.is_struct(arrow_type):
        return any(_has_decimal(arrow_type.field(i).type) for i in range(arrow_type.num_fields))
    return False


def _child_checks(struct: pa.StructType, name: str, *, counts: bool = False) -> _Checks | None:
    index = struct.get_field_index(name)
    return None if index < 0 else _checks_of(struct.field(index).type, counts=counts)


def _count(value: Any) -> Any:
    """A null count: an integer ≥ 0 that fits a Long (None otherwise)."""
    return value if type(value) is int and 0 <= value <= INT64_MAX else None


def _string_value(value: Any) -> Any:
    return value if isinstance(value, str) else None


_STRING_CHECK: _Check = _string_value
_INT_BOUNDS: dict[_Check, tuple[int, int]] = {_count: (0, INT64_MAX)}


def _leaf_check(arrow_type: pa.DataType) -> _Check:
    """The check of one leaf; integer checks are registered with their bounds
    and the string check is :data:`_STRING_CHECK`, so whole columns of plain
    values are checked without calling them."""
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return _STRING_CHECK
    check = value_coercer(arrow_type)
    if pa.types.is_integer(arrow_type):
        bound = 2 ** (arrow_type.bit_width - 1)
        _INT_BOUNDS[check] = (-bound, bound - 1)
    return check


def _checks_of(struct: pa.DataType, *, counts: bool) -> _Checks:
    out: _Checks = {}
    for i in range(struct.num_fields):
        child = struct.field(i)
        if pa.types.is_struct(child.type):
            out[child.name] = _checks_of(child.type, counts=counts)
        else:
            out[child.name] = _count if counts else _leaf_check(child.type)
    return out


# --- deletion vectors ---------------------------------------------------------------


def _check_deletion_vector(
    action: AddFile | RemoveFile,
    dv: DeletionVectorDescriptor,
    *,
    table_root: str | None,
    root: str,
    allow_external: bool,
    num_records: int | None,
) -> None:
    def refuse(name: str, reason: str) -> InvalidFileActionError:
        return _refuse(action, f"deletionVector.{name}", reason)

    kind = dv.storage_type
    if kind not in ("u", "i", "p"):
        raise refuse("storageType", f"{kind!r} is not one of 'u', 'i', 'p'")
    size, cardinality, offset = dv.size_in_bytes, dv.cardinality, dv.offset
    if type(size) is not int or not 0 < size <= INT32_MAX:
        raise refuse("sizeInBytes", f"must be an Int > 0, got {size!r}")
    if type(cardinality) is not int or not 0 <= cardinality <= INT64_MAX:
        raise refuse("cardinality", f"must be a Long ≥ 0, got {cardinality!r}")
    if offset is not None and (type(offset) is not int or not 0 <= offset <= INT32_MAX):
        raise refuse("offset", f"must be an Int ≥ 0, got {offset!r}")
    if num_records is not None and cardinality > num_records:
        raise refuse(
            "cardinality", f"{cardinality} deleted rows exceed the file's {num_records} records"
        )
    text = dv.path_or_inline_dv
    if not isinstance(text, str) or not text:
        raise refuse("pathOrInlineDv", "is empty")
    if kind == "i":
        if offset is not None:
            raise refuse("offset", "must be absent for an inline deletion vector")
        try:
            rows = decode_bitmap(z85.decode_padded(text, size))
        except (DeletionVectorError, CorruptLogError, ValueError) as exc:
            raise refuse(
                "pathOrInlineDv", f"is not an inline bitmap of {size} bytes: {exc}"
            ) from None
        if len(rows) != cardinality:
            raise refuse("cardinality", f"is {cardinality} but the bitmap holds {len(rows)} rows")
    elif kind == "u":
        cut = len(text) - z85.UUID_ENCODED_LENGTH
        try:
            uuid_ok = cut >= 0 and isinstance(z85.decode_uuid(text[cut:]), uuid.UUID)
        except (DeletionVectorError, ValueError):
            uuid_ok = False
        if not uuid_ok:
            raise refuse("pathOrInlineDv", f"{text!r} does not end in a Z85-encoded UUID")
        if cut:
            check_path(
                text[:cut],
                field=f"{action.action_name}.deletionVector.pathOrInlineDv",
                table_root=table_root or _NO_ROOT,
                allow_external=False,
                root=root,
            )
    else:
        check_path(
            text,
            field=f"{action.action_name}.deletionVector.pathOrInlineDv",
            table_root=table_root or _NO_ROOT,
            allow_external=allow_external,
            root=root,
        )


# --- partition values ---------------------------------------------------------------


class _PartitionChecker:
    def __init__(self, config: TableConfiguration) -> None:
        self.types: dict[str, DataType] = {
            config.physical_name(f): f.type for f in config.partition_fields
        }
        self.keys = set(self.types)
        self._parsed: set[tuple[str, str | None]] = set()

    def check(self, action: FileAction, values: dict[str, str | None]) -> None:
        if values.keys() != self.keys:
            keys = set(values)
            missing, extra = sorted(self.keys - keys), sorted(keys - self.keys)
            raise _refuse(
                action,
                "partitionValues",
                f"has keys {sorted(keys)}, expected the partition columns "
                f"{sorted(self.keys)} (missing {missing}, unexpected {extra})",
            )
        for key, text in values.items():
            if (key, text) in self._parsed:
                continue
            try:
                parse_partition_value(text, self.types[key])
            except (CorruptLogError, SchemaError, ValueError, ArithmeticError) as exc:
                raise _refuse(
                    action,
                    f"partitionValues.{key}",
                    f"value {text!r} does not parse as {self.types[key]}: {exc}",
                ) from None
            self._parsed.add((key, text))

    def parse_all(self, pairs: set[tuple[str, str | None]]) -> None:
        """Parse each distinct ``(key, value)`` once; raise InvalidFileActionError
        (with no action to name) on the first that does not parse."""
        for key, text in pairs - self._parsed:
            try:
                parse_partition_value(text, self.types[key])
            except (CorruptLogError, SchemaError, ValueError, ArithmeticError) as exc:
                raise InvalidFileActionError(
                    f"partition value {text!r} of {key!r} does not parse: {exc}"
                ) from None
            self._parsed.add((key, text))


# --- the whole commit ---------------------------------------------------------------


def files_by_kind(actions: Sequence[Action]) -> dict[str, list[FileAction]]:
    """The commit's ``add``, ``remove`` and ``cdc`` actions, each kind in commit order."""
    out: dict[str, list[FileAction]] = {"add": [], "remove": [], "cdc": []}
    for kind in (AddFile, RemoveFile, AddCDCFile):
        out[kind.action_name] = [a for a in actions if type(a) is kind]
    return out


def file_path_keys(
    files: dict[str, list[FileAction]],
    *,
    table_root: str | None,
    allow_external: bool,
) -> dict[str, list[str]]:
    """Check every file action's ``path`` (:mod:`raydelta.protocol.commit_paths`);
    the key of each, per kind, in the order of ``files`` (:func:`files_by_kind`).

    ``table_root`` None: no absolute URI is under the root (each needs
    ``allow_external``).
    """
    root_text = table_root if table_root is not None else _NO_ROOT
    return {
        kind: check_file_paths(
            [a.path for a in chosen],
            field=f"{kind}.path",
            table_root=root_text,
            allow_external=allow_external,
        )
        for kind, chosen in files.items()
    }


def check_file_values(
    by_kind: dict[str, list[FileAction]],
    config: TableConfiguration,
    *,
    table_root: str | None,
    allow_external: bool,
) -> None:
    """Check every file action's values other than ``path`` (module doc) against
    the table configuration after the commit (``by_kind``: :func:`files_by_kind`)."""
    files = [a for chosen in by_kind.values() for a in chosen]
    if not files:
        return
    root = canonical_root(table_root if table_root is not None else _NO_ROOT)
    with_stats = [a for a in files if not isinstance(a, AddCDCFile) and a.stats]
    counted = stats_checker(config).check_all(with_stats) if with_stats else []
    partitions = _PartitionChecker(config)
    adds: list[AddFile] = by_kind["add"]  # type: ignore[assignment]
    if len(adds) == len(files) and _plain_adds(adds, partitions):
        return  # every add passed the column-at-a-time checks: nothing left to look at
    records_of = {id(a): n for a, n in zip(with_stats, counted, strict=True)}
    for action in files:
        _long(action, "size", action.size, minimum=0)
        if isinstance(action, AddCDCFile):
            if action.partition_values:
                partitions.check(action, action.partition_values)
            continue
        records = records_of.get(id(action))
        _long(action, "baseRowId", action.base_row_id, minimum=0)
        _long(action, "defaultRowCommitVersion", action.default_row_commit_version, minimum=0)
        if isinstance(action, AddFile):
            _long(action, "modificationTime", action.modification_time, minimum=None)
            partitions.check(action, action.partition_values)
        else:
            _long(action, "deletionTimestamp", action.deletion_timestamp, minimum=None)
            if action.partition_values:
                partitions.check(action, action.partition_values)
        if action.deletion_vector is not None:
            _check_deletion_vector(
                action,
                action.deletion_vector,
                table_root=table_root,
                root=root,
                allow_external=allow_external,
                num_records=records,
            )


def _plain_longs(values: list[Any], *, minimum: int | None) -> bool:
    """Whether every value is None or an int in ``[minimum, INT64_MAX]``
    (``minimum`` None: the signed 64-bit range), decided a column at a time."""
    nulls = values.count(None)
    if nulls == len(values):
        return True
    present = [v for v in values if v is not None] if nulls else values
    low = -INT64_MAX - 1 if minimum is None else minimum
    return set(map(type, present)) == {int} and low <= min(present) and max(present) <= INT64_MAX


def _plain_adds(adds: list[AddFile], partitions: _PartitionChecker) -> bool:
    """The per-file rules of :func:`check_file_values` for a commit of adds only,
    a column at a time. True: all pass. False: some value needs the per-file
    walk, which then names it (no error is raised here)."""
    if any(map(attrgetter("deletion_vector"), adds)):
        return False
    for name, minimum in (
        ("size", 0),
        ("modification_time", None),
        ("base_row_id", 0),
        ("default_row_commit_version", 0),
    ):
        if not _plain_longs(list(map(attrgetter(name), adds)), minimum=minimum):
            return False
    keys = partitions.keys
    # Each distinct spelling of partitionValues once (a commit has few).
    spellings = set(map(tuple, map(dict.items, map(attrgetter("partition_values"), adds))))
    if not all(len(items) == len(keys) and {k for k, _ in items} == keys for items in spellings):
        return False
    try:
        partitions.parse_all({pair for items in spellings for pair in items})
    except InvalidFileActionError:
        return False
    return True
