"""Appends and overwrites of a :class:`~raydelta.table.Table`: one data write,
one ``WRITE`` commit, and delta-spark's ``replaceWhere`` rules.

Invariants:
- The write reads the protocol and metadata (an append) or the whole
  snapshot (an overwrite) in the transaction that commits it, so a concurrent
  metadata change fails the commit rather than landing files written for an
  older schema.
- ``where`` names partition columns only, and every file written must lie in
  the partitions it selects; otherwise the files written are deleted and the
  write refused with :class:`~raydelta.protocol.errors.InvalidArgumentError`,
  committing nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from raydelta.protocol.errors import InvalidArgumentError
from raydelta.protocol.file_actions import row_to_add
from raydelta.protocol.predicate_evaluation import matches
from raydelta.protocol.predicates import Predicate
from raydelta.protocol.schema import physical_name
from raydelta.protocol.table_configuration import TableConfiguration
from raydelta.storage.scan import as_predicate, prune_files

if TYPE_CHECKING:
    from raydelta.storage.data.writer import WriteResult
    from raydelta.table import SchemaMode, Table


def write_rows(
    table: Table, data: Any, *, mode: str, schema_mode: SchemaMode | None, where: str | None
) -> int:
    """Write ``data`` and commit it as one ``WRITE`` (``mode`` ``"Append"`` or
    ``"Overwrite"``, the latter replacing every file, or with ``where`` the
    files of the partitions it selects); returns the version committed."""
    from raydelta.progress import Bar
    from raydelta.storage.data.writer import check_writable, write_data

    # an append needs the protocol and metadata only; an overwrite the files too
    snapshot = table.snapshot() if mode == "Overwrite" else None
    txn = table.transaction(snapshot=snapshot)
    check_writable(txn.protocol, txn.metadata)
    config = TableConfiguration(txn.protocol, txn.metadata)
    partition_by = list(txn.metadata.partition_columns)
    predicate = None if where is None else where_predicate(where, partition_by)
    with Bar(desc=f"{mode.lower()} rows", unit="rows") as bar:
        result: WriteResult = write_data(
            table.uri,
            data,
            protocol=txn.protocol,
            metadata=txn.metadata,
            schema_mode=schema_mode,
            storage_options=table.storage_options,
            on_rows_written=bar.update,
        )
    if predicate is not None:
        check_rows_match(table, result, predicate, config, where or "")
    if snapshot is not None:
        if predicate is None:
            txn.read_whole_table()
            doomed = snapshot.files
        else:
            txn.read(predicate)
            doomed = prune_files(
                snapshot.files,
                predicate,
                config.schema,
                partition_by,
                config.column_mapping_mode,
            )
        for row in doomed.to_pylist():  # models for the replaced files only
            txn.remove(row_to_add(row))
    if result.protocol is not None:
        txn.upgrade_protocol(
            reader_features=result.protocol.reader_features or (),
            writer_features=result.protocol.writer_features or (),
        )
    if result.metadata is not None:
        txn.replace_metadata(result.metadata)
    txn.add(*result.adds)
    parameters: dict[str, Any] = {"mode": mode, "partitionBy": partition_by}
    if where is not None:
        parameters["predicate"] = where
    version = txn.commit(operation="WRITE", operation_parameters=parameters)
    table.last_commit = txn.committed
    return version


def where_predicate(where: str, partition_by: list[str]) -> Predicate:
    from raydelta.protocol.predicates import references

    predicate = as_predicate(where)
    outside = sorted(c for c in references(predicate) if c not in partition_by)
    if outside:
        raise InvalidArgumentError(
            f"where may name partition columns only ({partition_by}); it names {outside}"
        )
    return predicate


def check_rows_match(
    table: Table, result: WriteResult, predicate: Predicate, config: TableConfiguration, where: str
) -> None:
    """Every file written must lie in the partitions ``where`` selects
    (delta-spark's replaceWhere check); otherwise its files are deleted."""
    partition_by = config.partition_columns
    fields = [f for f in config.schema.fields if f.name in partition_by]
    types = {f.name: f.type for f in fields}
    by_physical = {physical_name(f, config.column_mapping_mode): f.name for f in fields}
    for add in result.adds:
        logical = {by_physical.get(k, k): v for k, v in add.partition_values.items()}
        if not matches(predicate, logical, types):
            delete_written(result, table.uri, table.storage_options)
            raise InvalidArgumentError(
                f"data written does not match where={where!r}: partition {logical}"
            )


def delete_written(
    result: WriteResult, table_uri: str, storage_options: dict[str, Any] | None
) -> None:
    """Remove the data files of a write that will not be committed."""
    from raydelta.storage.data.files import remove_data_files

    remove_data_files(table_uri, [add.path for add in result.adds], storage_options=storage_options)
