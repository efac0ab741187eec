"""RESTORE: one commit that brings back the files of an earlier version.

Invariants:
- The commit adds (``dataChange=true``) every logical file of the target
  version the latest version lacks, and removes every logical file of the
  latest version the target lacks; files are compared by (path, deletion
  vector), so a file whose DV changed since is swapped back. Restored adds
  keep ``baseRowId``/``defaultRowCommitVersion`` (stable row ids come back).
- The target's metadata comes back when it differs; the protocol is never
  downgraded (delta-spark keeps the newer protocol).
- A restore whose files were vacuumed away is refused (typed error naming
  a missing file) and commits nothing; one that changes nothing commits an
  empty RESTORE as delta-spark does.
- ``commitInfo``: operation ``RESTORE``, ``operationParameters`` ``version``
  and ``timestamp``, delta-spark's RESTORE metrics.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from raydelta.protocol.dml_metrics import RestoreMetrics
from raydelta.protocol.errors import InvalidArgumentError, VersionNotFoundError
from raydelta.protocol.events import IsolationLevel
from raydelta.protocol.file_actions import canonical_path, row_to_add
from raydelta.storage.log.store import log_store_for

if TYPE_CHECKING:
    from raydelta.actors.table.client import TableClient


def _key(row: dict[str, Any]) -> tuple[str, str | None]:
    dv = row.get("deletionVector")
    dv_id = None
    if dv:
        add = row_to_add(row)
        dv_id = add.dv_unique_id
    return canonical_path(row["path"]), dv_id


def restore(table: TableClient, target: int | str | datetime) -> RestoreMetrics:
    if isinstance(target, bool) or not isinstance(target, (int, str, datetime)):
        raise InvalidArgumentError(
            f"restore target must be a version (int) or a timestamp, got {target!r}"
        )
    if isinstance(target, int) and target < 0:
        raise InvalidArgumentError(f"restore version must be >= 0, got {target}")
    latest = table.snapshot()
    if isinstance(target, int):
        if target > latest.version:
            raise VersionNotFoundError(
                f"cannot restore to version {target}: the latest version is {latest.version}"
            )
        old = table.snapshot(version=target)
    else:
        old = table.snapshot(timestamp=target)
    current_rows = {_key(r): r for r in latest.files.to_pylist()}
    old_rows = {_key(r): r for r in old.files.to_pylist()}
    to_add = [old_rows[k] for k in old_rows if k not in current_rows]
    to_remove = [current_rows[k] for k in current_rows if k not in old_rows]
    store = log_store_for(table.uri, table.storage_options)
    for row in to_add:
        if not store.exists(store.data_path(row["path"])):
            raise VersionNotFoundError(
                f"cannot restore to version {old.version}: its data file {row['path']!r} "
                "no longer exists (vacuumed?)"
            )
    txn = table.transaction(snapshot=latest, isolation_level=IsolationLevel.SERIALIZABLE)
    txn.read_whole_table()
    for row in to_remove:
        txn.remove(row_to_add(row))
    adds = [row_to_add(r).model_copy(update={"data_change": True}) for r in to_add]
    txn.add(*adds)
    if old.metadata != latest.metadata:
        txn.replace_metadata(old.metadata)
    metrics = RestoreMetrics(
        table_size_after_restore=sum(int(r.get("size") or 0) for r in old_rows.values()),
        num_of_files_after_restore=len(old_rows),
        num_removed_files=len(to_remove),
        num_restored_files=len(to_add),
        removed_files_size=sum(int(r.get("size") or 0) for r in to_remove),
        restored_files_size=sum(int(r.get("size") or 0) for r in to_add),
    )
    txn.set_operation_metrics(metrics.operation_metrics())
    parameters: dict[str, Any] = {
        "version": old.version if isinstance(target, int) else None,
        "timestamp": None if isinstance(target, int) else str(target),
    }
    txn.commit(operation="RESTORE", operation_parameters=parameters)
    return metrics
