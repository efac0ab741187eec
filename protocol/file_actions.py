"""Arrow layout of file actions (``add`` / ``remove``) and conversions to it.

Invariants:
- :data:`ADD_TYPE` / :data:`REMOVE_TYPE` are the one canonical Arrow layout of
  reconciled file actions; every source (JSON commits, V1/V2 checkpoints,
  sidecars) is normalised to it before reconciliation, so the rest of the
  code never sees writer-specific column orders or integer widths.
- Normalising never invents data: a field absent at the source is null.
- The logical-file key is ``(canonical path, deletionVector.uniqueId)``;
  :func:`file_key` / :func:`action_key` / :func:`table_keys` are the only
  places that form it, and :func:`canonical_path` is the one spelling of a
  path everywhere paths are compared (reconciliation, conflicts, checkpoint
  keys; VACUUM resolves paths with the same decoding in
  ``cleanup_rules.resolve_path``): percent-decoded once, local ``file:``
  URIs folded to ``/x``, absolute paths inside the table root made relative.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, unquote

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from raydelta.protocol.actions import AddFile, RemoveFile
from raydelta.protocol.deletion_vectors import unique_id_of

STRING_MAP = pa.map_(pa.string(), pa.string())

DV_TYPE = pa.struct(
    [
        pa.field("storageType", pa.string()),
        pa.field("pathOrInlineDv", pa.string()),
        pa.field("offset", pa.int32()),
        pa.field("sizeInBytes", pa.int32()),
        pa.field("cardinality", pa.int64()),
    ]
)

ADD_TYPE = pa.struct(
    [
        pa.field("path", pa.string()),
        pa.field("partitionValues", STRING_MAP),
        pa.field("size", pa.int64()),
        pa.field("modificationTime", pa.int64()),
        pa.field("dataChange", pa.bool_()),
        pa.field("stats", pa.string()),
        pa.field("tags", STRING_MAP),
        pa.field("deletionVector", DV_TYPE),
        pa.field("baseRowId", pa.int64()),
        pa.field("defaultRowCommitVersion", pa.int64()),
        pa.field("clusteringProvider", pa.string()),
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

ADD_SCHEMA = pa.schema(list(ADD_TYPE))
REMOVE_SCHEMA = pa.schema(list(REMOVE_TYPE))

FileKey = tuple[str, str | None]


_SCHEME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
_ODD_PATH_PATTERN = r"%|^/|^[A-Za-z][A-Za-z0-9+.-]+:"
"""Raw paths that :func:`canonical_path` may respell: encoded, absolute or URIs."""


def canonical_path(path: str, table_root: str | None = None) -> str:
    """The one spelling of a log ``path`` used wherever paths are compared.

    The spec makes ``path`` a URI "which needs to be decoded to get the data
    file path": percent-encoding is decoded exactly once, here, for every
    spelling (so ``%61.parquet`` is ``a.parquet`` and ``a%2520b`` is
    ``a%20b``). ``file:/x``, ``file:///x``, ``file://localhost/x`` and ``/x``
    are the local file ``/x``; other schemes keep ``scheme://authority/``
    (scheme lower-cased). With ``table_root`` (a spelling made by
    :func:`table_root_key`), an absolute path inside the root becomes the
    path relative to it, so a file referenced relatively and by an absolute
    URI under the root is one file. Without it, relative and absolute
    spellings stay distinct (the caller does not know the root).
    """
    if "%" not in path and ":" not in path:
        # The common plain path (no encoding, no scheme): decoding is the identity.
        # Checked before the regex and unquote, which are most of the cost when a
        # checkpoint's paths are keyed one by one (load_snapshot, VACUUM).
        if table_root and path.startswith(table_root + "/"):
            return path[len(table_root) + 1 :]
        return path
    match = _SCHEME_RE.match(path)
    if match is None:
        decoded = unquote(path)
    else:
        scheme = match.group(1).lower()
        rest = path[match.end() :]
        if scheme == "file":
            if rest.startswith("//"):
                authority, slash, tail = rest[2:].partition("/")
                if authority not in ("", "localhost"):
                    return f"file://{authority}/{unquote(tail)}"
                rest = "/" + tail if slash or authority else rest[2:]
            decoded = unquote(rest)
        else:
            decoded = f"{scheme}:{unquote(rest)}"
    if table_root and decoded.startswith(table_root + "/"):
        return decoded[len(table_root) + 1 :]
    return decoded


def table_root_key(root_uri: str) -> str:
    """The spelling of a table root that :func:`canonical_path` compares
    against: decoded, without a trailing slash (``file:///data/t/`` and
    ``/data/t`` give ``/data/t``). ``root_uri`` must be absolute."""
    canonical = canonical_path(root_uri.rstrip("/") or "/")
    return canonical.rstrip("/")


def path_spellings(path: str, table_root: str | None = None) -> tuple[str, ...]:
    """Common raw spellings of the file whose canonical path is ``path``: the
    fast, exact-match candidates of a lookup. Not every spelling (any byte
    may be percent-encoded): :func:`rows_with_canonical_paths` finds the rest."""
    spellings = {path, quote(path, safe="/=:")}
    absolute = f"{table_root}/{path}" if table_root and not _SCHEME_RE.match(path) else path
    if absolute.startswith("/"):
        for variant in (absolute, quote(absolute, safe="/=")):
            spellings.update((variant, "file:" + variant, "file://" + variant))
    return tuple(sorted(spellings))


def may_have_odd_paths(paths: pa.Array | pa.ChunkedArray) -> bool:
    """False only if no value can be odd (:func:`odd_path_rows`): every odd
    path has a ``%`` or a ``:`` somewhere or starts with ``/``.

    The bytes of all values are scanned at once (``memchr``) and the first
    byte of each value is read through the offsets, far cheaper than the
    regex per row (whose per-call cost alone is ~0.2 ms); a ``%`` or ``:``
    anywhere, a leading ``/`` or an unusual array type sends the caller to
    the exact per-row test.
    """
    chunks = paths.chunks if isinstance(paths, pa.ChunkedArray) else [paths]
    for chunk in chunks:
        if len(chunk) == 0:
            continue
        data = string_values_bytes(chunk)
        if data is None or b"%" in data or b":" in data:
            return True
        if _any_value_starts_with_slash(chunk, data):
            return True
    return False


def _any_value_starts_with_slash(values: pa.Array, data: bytes) -> bool:
    """Whether a non-null, non-empty value of ``values`` (a (large) string
    array whose value bytes are ``data``) starts with ``/``."""
    if b"/" not in data:
        return False
    offset_dtype = np.dtype(np.int64 if pa.types.is_large_string(values.type) else np.int32)
    offsets = np.frombuffer(
        values.buffers()[1],
        dtype=offset_dtype,
        count=len(values) + 1,
        offset=values.offset * offset_dtype.itemsize,
    ).astype(np.int64)
    starts = offsets[:-1] - offsets[0]
    nonempty = offsets[1:] > offsets[:-1]
    if values.null_count:
        nonempty &= values.is_valid().to_numpy(zero_copy_only=False)
    first_bytes = np.frombuffer(data, dtype=np.uint8)[starts[nonempty]]
    return bool((first_bytes == ord("/")).any())


def odd_path_rows(paths: pa.Array | pa.ChunkedArray) -> list[int]:
    """Rows whose raw path is percent-encoded, absolute or a URI: the only
    rows whose canonical spelling can differ from the raw one."""
    if not may_have_odd_paths(paths):
        return []
    mask = pc.match_substring_regex(paths, _ODD_PATH_PATTERN)
    return pc.indices_nonzero(pc.fill_null(mask, False)).to_pylist()  # type: ignore[no-any-return]


COMBINE_MAX_ROWS = 131_072
"""Up to this many rows, a chunked path column is copied into one chunk
before a probe (:func:`contiguous`)."""


def contiguous(paths: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """``paths`` as one array when it is a small column of several chunks.

    A state that commits are folded into gains a chunk per fold, and every
    kernel runs once per chunk (with a regex, ~0.2 ms of setup each): one
    copy of a small column is cheaper than that. Large columns, and columns
    of one chunk, are returned as they are (no copy).
    """
    several = isinstance(paths, pa.ChunkedArray) and paths.num_chunks > 1
    if several and len(paths) <= COMBINE_MAX_ROWS:
        return paths.combine_chunks()
    return paths


def rows_with_canonical_paths(
    paths: pa.Array | pa.ChunkedArray, wanted: set[str], table_root: str | None = None
) -> list[int]:
    """Row numbers of ``paths`` whose canonical spelling is in ``wanted``
    (vectorized for plain relative paths, one decode per odd row)."""
    if not wanted or len(paths) == 0:
        return []
    paths = contiguous(paths)
    plain = pc.indices_nonzero(
        pc.fill_null(pc.is_in(paths, value_set=pa.array(sorted(wanted), pa.string())), False)
    ).to_pylist()
    rows = set(plain)
    odd = odd_path_rows(paths)
    if odd:
        values = pc.take(paths, pa.array(odd, pa.int64())).to_pylist()
        rows.update(
            r for r, p in zip(odd, values, strict=True) if canonical_path(p, table_root) in wanted
        )
    return sorted(rows)


def file_key(path: str, dv: dict[str, Any] | None, table_root: str | None = None) -> FileKey:
    """The logical-file key of an action given its path and DV descriptor dict."""
    path = canonical_path(path, table_root)
    if dv is None:
        return (path, None)
    return (path, unique_id_of(dv["storageType"], dv["pathOrInlineDv"], dv.get("offset")))


def action_key(action: AddFile | RemoveFile, table_root: str | None = None) -> FileKey:
    return (canonical_path(action.path, table_root), action.dv_unique_id)


def _conform(array: pa.Array, target: pa.DataType) -> pa.Array:
    """Reshape ``array`` to ``target``: select/append struct fields by name, cast leaves."""
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([_conform(c, target) for c in array.chunks], type=target)
    if pa.types.is_struct(target):
        if not pa.types.is_struct(array.type):
            return pa.nulls(len(array), target)
        names = {array.type.field(i).name for i in range(array.type.num_fields)}
        children = []
        for field in target:
            if field.name in names:
                children.append(_conform(array.field(field.name), field.type))
            else:
                children.append(pa.nulls(len(array), field.type))
        return pa.StructArray.from_arrays(
            children, fields=list(target), mask=array.is_null() if array.null_count else None
        )
    if array.type == target:
        return array
    if pa.types.is_struct(array.type) and pa.types.is_map(target):
        # A JSON-inferred struct cannot stand for a map; only null structs can.
        return pa.nulls(len(array), target)
    return array.cast(target)


def conform_table(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with exactly ``schema``'s columns, missing ones null."""
    columns = []
    for field in schema:
        if field.name in table.column_names:
            columns.append(_conform(table.column(field.name), field.type))
        else:
            columns.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=schema)


def drop_rows(data: Any, drop: Sequence[int]) -> Any:
    """``data`` (an Array or Table) without the rows at ascending ``drop`` indices.

    Few dropped rows are cut out by zero-copy slicing (a checkpoint's ``add``
    column has a handful of null rows among a million); many, by a filter.
    """
    if not drop:
        return data
    length = len(data)
    if len(drop) * 20 > length:
        keep = pc.invert(pc.is_in(pa.array(range(length), type=pa.int64()), pa.array(drop)))
        return data.filter(keep)
    pieces = []
    start = 0
    for index in drop:
        if index > start:
            pieces.append(data.slice(start, index - start))
        start = index + 1
    if start < length:
        pieces.append(data.slice(start))
    if isinstance(data, pa.Table):
        return pa.concat_tables(pieces) if pieces else data.slice(0, 0)
    return pieces


def struct_column_to_table(column: pa.ChunkedArray | pa.Array, schema: pa.Schema) -> pa.Table:
    """Non-null rows of a struct column (``add`` of a checkpoint) as a flat table."""
    if isinstance(column, pa.ChunkedArray):
        chunks = column.chunks or [pa.nulls(0, column.type)]
    else:
        chunks = [column]
    tables = []
    for whole in chunks:
        if not pa.types.is_struct(whole.type):
            continue
        if whole.null_count == len(whole):
            continue
        if whole.null_count:
            nulls = pc.indices_nonzero(whole.is_null()).to_pylist()
            parts = drop_rows(whole, nulls)
            parts = parts if isinstance(parts, list) else [parts]
        else:
            parts = [whole]
        for chunk in parts:
            flat = pa.Table.from_arrays(chunk.flatten(), names=[f.name for f in chunk.type])
            tables.append(conform_table(flat, schema))
    if not tables:
        return schema.empty_table()
    return pa.concat_tables(tables)


def actions_to_table(actions: Sequence[AddFile | RemoveFile], schema: pa.Schema) -> pa.Table:
    """Models to the canonical layout (unknown fields are not carried)."""
    return pa.Table.from_pylist([a.to_json_dict() for a in actions], schema=schema)


def table_keys(
    table: pa.Table, indices: Iterable[int] | None = None, table_root: str | None = None
) -> list[FileKey]:
    """Logical-file keys of rows of a canonical table (all rows, or ``indices``)."""
    if indices is not None:
        rows = list(indices)
        table = table.select(["path", "deletionVector"])
        if len(rows) * 64 < table.num_rows:
            # a take from chunked columns first concatenates every chunk (a copy
            # of the whole path column); a few rows are sliced out instead
            table = pa.concat_tables([table.slice(r, 1) for r in rows] or [table.slice(0, 0)])
        else:
            table = table.take(pa.array(rows, type=pa.int64()))
    paths = table.column("path").to_pylist()
    if table.column("deletionVector").null_count == table.num_rows:
        return [(canonical_path(p, table_root), None) for p in paths]
    dvs = table.column("deletionVector").to_pylist()
    return [file_key(p, dv, table_root) for p, dv in zip(paths, dvs, strict=True)]


def arrow_to_json(value: Any, data_type: pa.DataType) -> Any:
    """A ``to_pylist`` value back to the JSON the log holds, guided by its type.

    Maps become objects, struct fields that are null are dropped (absent in
    JSON), map values that are null are kept (a null partition value).
    """
    if value is None:
        return None
    if pa.types.is_map(data_type):
        item_type = data_type.item_type
        return {k: arrow_to_json(v, item_type) for k, v in value}
    if pa.types.is_struct(data_type):
        out = {}
        for child in data_type:
            item = value.get(child.name)
            if item is not None:
                out[child.name] = arrow_to_json(item, child.type)
        return out
    if pa.types.is_list(data_type) or pa.types.is_large_list(data_type):
        return [arrow_to_json(v, data_type.value_type) for v in value]
    return value


def column_as_json(column: pa.ChunkedArray | pa.Array) -> list[Any]:
    """Non-null rows of a (struct) column as JSON action bodies."""
    if column.null_count:
        column = column.filter(pc.is_valid(column))
    return [arrow_to_json(v, column.type) for v in column.to_pylist()]


def row_to_add(row: dict[str, Any]) -> AddFile:
    return AddFile.model_validate(arrow_to_json(row, ADD_TYPE))


def row_to_remove(row: dict[str, Any]) -> RemoveFile:
    return RemoveFile.model_validate(arrow_to_json(row, REMOVE_TYPE))


def string_values_bytes(values: pa.Array) -> bytes | None:
    """The UTF-8 bytes of every value of a (large) string array, back to back
    (None for any other type): one buffer to scan with ``in`` (``memchr``)
    instead of a test per row."""
    if pa.types.is_string(values.type):
        offset_type = pa.int32()
    elif pa.types.is_large_string(values.type):
        offset_type = pa.int64()
    else:
        return None
    _, offsets_buffer, data_buffer = values.buffers()
    if data_buffer is None or offsets_buffer is None:
        return b""
    offsets = pa.Array.from_buffers(
        offset_type, len(values) + 1, [None, offsets_buffer], offset=values.offset
    )
    first, last = offsets[0].as_py(), offsets[len(values)].as_py()
    data: bytes = data_buffer.slice(first, last - first).to_pybytes()
    return data
