"""The public table API: :class:`Table` and the functions that create and open one.

>>> import pyarrow as pa, raydelta                                   # doctest: +SKIP
>>> table = raydelta.create_table("/tmp/events", pa.schema([("id", pa.int64())]))
>>> table.append(pa.table({"id": [1, 2, 3]}))                        # doctest: +SKIP
1
>>> table.to_arrow(filter="id > 1").num_rows                         # doctest: +SKIP
2

Invariants:
- Every write goes through the table's one ``TableActor`` (conflicts checked
  and rebased there); data files are written by the one data writer
  (:mod:`raydelta.storage.data.writer`), which enforces the schema and the
  data rules of every writer feature the table has. A failed write commits
  nothing.
- A write records the version it read: a concurrent metadata or protocol
  change makes it fail with delta-spark's exception instead of committing
  files written for an older schema.
- Maintenance (checkpoint, metadata cleanup, VACUUM) runs in the table's
  maintenance actors and returns their typed reports, never actor refs.
- Options are keyword-only; bad arguments raise
  :class:`~raydelta.protocol.errors.InvalidArgumentError` saying what was expected.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Self

import pyarrow as pa

from raydelta.actors.table.client import TableClient, commit_create
from raydelta.actors.table.client import release_table as release_table
from raydelta.actors.table.transaction import Transaction
from raydelta.arguments import check_bool as _check_bool
from raydelta.arguments import check_choice as _check_choice
from raydelta.arguments import check_version as check_version
from raydelta.history import History
from raydelta.protocol.errors import (
    InvalidArgumentError,
    TableAlreadyExistsError,
    TableNotFoundError,
)
from raydelta.protocol.events import CommitCommitted, IsolationLevel
from raydelta.storage.history import load_history
from raydelta.storage.scan import Filter, scan
from raydelta.writes import write_rows

if TYPE_CHECKING:
    from raydelta.actors.checkpoint.results import CheckpointSummary
    from raydelta.dml.merge import TableMerger
    from raydelta.dml.optimize import TableOptimizer
    from raydelta.protocol.actions import AddFile
    from raydelta.protocol.dml_metrics import DeleteMetrics, RestoreMetrics, UpdateMetrics
    from raydelta.protocol.reconciliation import TableHead
    from raydelta.storage.cleanup.metadata import MetadataCleanupReport
    from raydelta.storage.cleanup.vacuum import VacuumReport
    from raydelta.storage.snapshot import Snapshot


SchemaMode = Literal["merge", "overwrite"]
CheckpointKind = Literal["auto", "v2", "classic"]
_SCHEMA_MODES = (None, "merge", "overwrite")


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    mode: Literal["error", "ignore"] = "error",
    name: str | None = None,
    description: str | None = None,
    storage_options: dict[str, Any] | None = None,
    use_channel: bool | None = None,
) -> Table:
    """Create a Delta table at ``uri`` (version 0) and return its handle.

    ``mode="error"`` raises :class:`TableAlreadyExistsError` when a table is
    there; ``mode="ignore"`` returns the existing table unchanged.
    """
    _check_choice("mode", mode, ("error", "ignore"))
    if not isinstance(schema, pa.Schema):
        raise InvalidArgumentError(f"schema must be a pyarrow.Schema, got {type(schema).__name__}")
    if isinstance(partition_by, str):
        partition_by = (partition_by,)
    missing = [c for c in partition_by if c not in schema.names]
    if missing:
        raise InvalidArgumentError(f"partition columns {missing} are not in the schema")
    table = Table.open(uri, storage_options=storage_options, use_channel=use_channel)
    try:
        commit_create(
            table.client,
            schema,
            partition_by=partition_by,
            properties=properties,
            name=name,
            description=description,
        )
    except TableAlreadyExistsError:
        if mode == "error":
            raise
    return table


def open_table(
    uri: str, *, storage_options: dict[str, Any] | None = None, use_channel: bool | None = None
) -> Table:
    """The handle of the existing table at ``uri`` (its actor is started if none
    runs); raises :class:`TableNotFoundError` when there is no table.

    ``use_channel=True`` sends the small hot calls (commit, head) over the
    actor's direct, authenticated socket instead of Ray (opt-in; also
    ``RAYDELTA_CHANNEL=1``): faster commits, and every call falls back to Ray
    when the socket fails (exactly once by the commit's ``txnId``)."""
    import ray

    table = Table.open(uri, storage_options=storage_options, use_channel=use_channel)
    try:
        version = table.version()
    except ray.exceptions.ActorDiedError:
        # the actor refused to start: a catalog-managed table is the usual reason, and
        # reading it by path says so with the typed error (reads, writes and maintenance
        # of such a table go through its catalog)
        from raydelta.storage.snapshot import load_snapshot

        load_snapshot(table.uri, storage_options=storage_options)
        raise
    if version < 0:
        raise TableNotFoundError(f"no Delta table at {table.uri}")
    return table


class Table:
    """A Delta table: write and read data, change it, keep it healthy.

    It holds its log-level :attr:`client` (a
    :class:`~raydelta.actors.table.client.TableClient`, the transport to the
    table's ``TableActor``); the client's log-level methods
    (``transaction()``, ``append_files()``, ``snapshot()``) are offered here
    too, and :attr:`actor` is the named Ray handle of the table's actor.
    """

    last_commit: CommitCommitted | None = None
    """The actor's reply to this handle's latest write (``version``,
    ``rebased_over``: the winners it was rebased over, ...)."""

    def __init__(self, client: TableClient) -> None:
        self.client = client

    @classmethod
    def open(
        cls,
        uri: str,
        *,
        storage_options: dict[str, Any] | None = None,
        use_channel: bool | None = None,
    ) -> Self:
        """A handle on the table at ``uri``, starting its actor if none runs."""
        return cls(TableClient.open(uri, storage_options=storage_options, use_channel=use_channel))

    # --- the client's log-level face ----------------------------------------------------

    @property
    def uri(self) -> str:
        return self.client.uri

    @property
    def storage_options(self) -> dict[str, Any] | None:
        return self.client.storage_options

    @property
    def use_channel(self) -> bool:
        """Whether hot calls go over the actor's direct socket (``open_table``)."""
        return self.client.use_channel

    @property
    def actor(self) -> Any:
        """The Ray handle of the table's actor (a fresh one after a restart)."""
        return self.client.actor

    def version(self) -> int:
        """Latest committed version (-1 when the table does not exist)."""
        return self.client.version()

    def head(self) -> TableHead:
        """Protocol, metadata, txns and domains at the latest version; no files."""
        return self.client.head()

    def snapshot(
        self, *, version: int | None = None, timestamp: int | str | datetime | None = None
    ) -> Snapshot:
        """The latest snapshot, or one at ``version`` / ``timestamp`` (time travel)."""
        return self.client.snapshot(version=version, timestamp=timestamp)

    def transaction(
        self,
        *,
        isolation_level: IsolationLevel | str = IsolationLevel.WRITE_SERIALIZABLE,
        snapshot: Snapshot | None = None,
    ) -> Transaction:
        """A new log-level transaction (:meth:`TableClient.transaction`)."""
        return self.client.transaction(isolation_level=isolation_level, snapshot=snapshot)

    def append_files(
        self,
        *files: AddFile,
        operation: str = "WRITE",
        operation_parameters: Mapping[str, Any] | None = None,
        txn_id: str | None = None,
    ) -> int:
        """Blind-append ``files`` in one commit (:meth:`TableClient.append_files`)."""
        return self.client.append_files(
            *files, operation=operation, operation_parameters=operation_parameters, txn_id=txn_id
        )

    def record_operation(
        self,
        operation: str,
        *,
        parameters: Mapping[str, Any] | None = None,
        metrics: Mapping[str, Any] | None = None,
    ) -> int:
        """A commit holding only a ``commitInfo`` (:meth:`TableClient.record_operation`)."""
        return self.client.record_operation(operation, parameters=parameters, metrics=metrics)

    # --- writing ----------------------------------------------------------------------

    def append(self, data: Any, *, schema_mode: SchemaMode | None = None) -> int:
        """Append ``data`` (a ``pyarrow.Table``, a ``RecordBatchReader`` or a
        pandas DataFrame); returns the version committed.

        The schema is enforced (:class:`SchemaMismatchError` names the
        column); ``schema_mode="merge"`` adds new columns to the table.
        """
        _check_choice("schema_mode", schema_mode, (None, "merge"))
        return write_rows(self, data, mode="Append", schema_mode=schema_mode, where=None)

    def overwrite(
        self,
        data: Any,
        *,
        where: str | None = None,
        schema_mode: SchemaMode | None = None,
    ) -> int:
        """Replace the table's rows with ``data`` (or, with ``where``, only the
        rows of the partitions the predicate selects: every row of ``data``
        must satisfy it). ``schema_mode="overwrite"`` replaces the schema too."""
        _check_choice("schema_mode", schema_mode, _SCHEMA_MODES)
        if where is not None and not isinstance(where, str):
            raise InvalidArgumentError(f"where must be SQL text, got {type(where).__name__}")
        return write_rows(self, data, mode="Overwrite", schema_mode=schema_mode, where=where)

    # --- changing rows (DML) -----------------------------------------------------------

    def delete(self, predicate: Filter | None = None) -> DeleteMetrics:
        """Delete the rows ``predicate`` selects (all rows without one); returns
        the metrics (``num_deleted_rows``, ``num_removed_files``...).

        ``predicate``: SQL text or a pyarrow compute expression. With
        ``delta.enableDeletionVectors`` the rows are marked in deletion
        vectors; otherwise their files are rewritten. Files are handled by
        Ray tasks; one commit through the TableActor."""
        from raydelta.dml.operations import stage_delete

        staged = stage_delete(self.client, predicate)
        metrics = staged.commit()
        self.last_commit = None if staged.version is None else self._last_reply(staged)
        return metrics  # type: ignore[return-value]

    def update(
        self,
        updates: Mapping[str, str] | None = None,
        *,
        new_values: Mapping[str, Any] | None = None,
        predicate: Filter | None = None,
    ) -> UpdateMetrics:
        """Set columns of the rows ``predicate`` selects: ``updates`` maps a
        column to a SQL expression over the row (``{"x": "x + 1"}``),
        ``new_values`` to a literal (as deltalake's). Returns the metrics
        (``num_updated_rows``, ``num_copied_rows``...)."""
        from raydelta.dml.operations import stage_update

        staged = stage_update(self.client, updates, new_values=new_values, predicate=predicate)
        metrics = staged.commit()
        self.last_commit = None if staged.version is None else self._last_reply(staged)
        return metrics  # type: ignore[return-value]

    def merge(
        self,
        source: Any,
        predicate: str,
        *,
        source_alias: str = "source",
        target_alias: str = "target",
        merge_schema: bool = False,
    ) -> TableMerger:
        """Start a MERGE of ``source`` (Arrow, pandas or a Ray Dataset) into
        this table on ``predicate`` (SQL over ``source_alias``/``target_alias``);
        add clauses (``when_matched_update_all()``...) and ``execute()`` it.

        >>> table.merge(new_rows, "target.id = source.id") \\
        ...     .when_matched_update_all().when_not_matched_insert_all().execute()
        ...                                                  # doctest: +SKIP
        """
        from raydelta.dml.merge import TableMerger

        return TableMerger(
            self.client,
            source,
            predicate,
            source_alias=source_alias,
            target_alias=target_alias,
            merge_schema=merge_schema,
        )

    @property
    def optimize(self) -> TableOptimizer:
        """Compaction (``optimize.compact()``) and z-ordering
        (``optimize.z_order(columns)``), as deltalake's ``TableOptimizer``."""
        from raydelta.dml.optimize import TableOptimizer

        return TableOptimizer(self.client, on_committed=self._committed)

    def restore(self, target: int | str | datetime) -> RestoreMetrics:
        """Bring back the table as it was at version ``target`` (or at a
        timestamp: a datetime or ISO text) in a new commit; returns the
        metrics (``num_restored_files``, ``num_removed_files``...)."""
        from raydelta.dml.restore import restore

        return restore(self.client, target)

    def changes(self, starting_version: int, ending_version: int | None = None) -> pa.Table:
        """The change data feed from ``starting_version`` to ``ending_version``
        (the latest by default) as Arrow: the table's columns plus
        ``_change_type``, ``_commit_version`` and ``_commit_timestamp``."""
        from raydelta.dml.changes import read_changes

        return read_changes(self.client, starting_version, ending_version)

    def _committed(self, reply: CommitCommitted | None) -> None:
        self.last_commit = reply

    @staticmethod
    def _last_reply(staged: Any) -> CommitCommitted | None:
        return staged.committed  # type: ignore[no-any-return]

    # --- reading ----------------------------------------------------------------------

    def to_arrow(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: Filter | None = None,
        version: int | None = None,
    ) -> pa.Table:
        """The table's rows (deletion vectors applied, column mapping resolved),
        reading only the files ``filter`` may need (partition pruning and
        statistics skipping). ``filter``: SQL text or a pyarrow expression."""
        check_version(version)
        snapshot = self.snapshot(version=version)
        from raydelta.progress import Bar

        with Bar(desc="reading files", total=snapshot.num_files, unit="files") as bar:
            return scan(
                self.uri,
                snapshot.files,
                snapshot.schema,
                list(snapshot.metadata.partition_columns),
                column_mapping_mode=snapshot.table_configuration.column_mapping_mode,
                columns=columns,
                filter=filter,
                storage_options=self.storage_options,
                on_file_read=bar.update,
            )

    def to_pandas(
        self,
        *,
        columns: Sequence[str] | None = None,
        filter: Filter | None = None,
        version: int | None = None,
    ) -> Any:
        """:meth:`to_arrow` as a pandas DataFrame (needs pandas)."""
        return self.to_arrow(columns=columns, filter=filter, version=version).to_pandas()

    def history(self, *, limit: int | None = None) -> History:
        """One row per retained commit, newest first (an Arrow table:
        ``history.to_arrow()`` or ``pa.table(history)``)."""
        if limit is not None and (not isinstance(limit, int) or limit < 1):
            raise InvalidArgumentError(f"limit must be a positive int, got {limit!r}")
        return History(load_history(self.uri, limit=limit, storage_options=self.storage_options))

    # --- maintenance ------------------------------------------------------------------

    @property
    def checkpoint_actor(self) -> Any:
        """The named Ray handle of this table's ``CheckpointActor`` (started and
        subscribed to the table's commits if none runs)."""
        from raydelta.actors.checkpoint.actor import ensure_checkpointer

        return ensure_checkpointer(self.client)

    @property
    def cleanup_actor(self) -> Any:
        """The named Ray handle of this table's ``CleanupActor`` (started and
        subscribed to the table's commits if none runs)."""
        from raydelta.actors.cleanup.actor import ensure_cleaner

        return ensure_cleaner(self.client)

    def checkpoint(self, *, kind: CheckpointKind = "auto") -> CheckpointSummary:
        """Write a checkpoint of the latest version now: ``"v2"`` (sidecars
        written by Ray tasks: one task under 1.5M file actions, map and shard
        tasks in parallel above), ``"classic"`` (one V1 file), or ``"auto"``
        (V2 when the table has the ``v2Checkpoint`` feature)."""
        _check_choice("kind", kind, ("auto", "v2", "classic"))
        from raydelta.progress import wait_with_progress

        handle = self.checkpoint_actor

        def read() -> tuple[str, int, int] | None:
            import ray

            now = ray.get(handle.progress.remote(), timeout=1)
            return (
                None
                if now is None
                else (f"checkpoint {now.phase}", now.shards_done, now.shards_total)
            )

        summary: CheckpointSummary = wait_with_progress(
            handle.checkpoint.remote(kind=kind), read, desc="checkpoint"
        )
        return summary

    def cleanup_metadata(
        self, *, retention: timedelta | str | None = None, dry_run: bool = False
    ) -> MetadataCleanupReport:
        """Delete log files older than ``retention`` (default: the table's
        ``delta.logRetentionDuration``) that no retained version needs."""
        from raydelta.protocol.durations import parse_duration

        _check_bool("dry_run", dry_run)
        if retention is not None:
            parse_duration(retention)
        report: MetadataCleanupReport = self._maintain(
            "cleanup", {"retention": retention, "dry_run": dry_run}
        )
        return report

    def vacuum(
        self,
        *,
        retention: timedelta | str | None = None,
        dry_run: bool = True,
        lite: bool = False,
        enforce_retention_duration: bool = True,
    ) -> VacuumReport:
        """Delete data files the table no longer references and that are older
        than ``retention`` (default: ``delta.deletedFileRetentionDuration``).

        A dry run by default (as deltalake's): pass ``dry_run=False`` to delete.
        ``lite=True`` deletes only the files of expired tombstones (no listing).
        A retention shorter than the table's is refused unless
        ``enforce_retention_duration=False``.
        """
        from raydelta.protocol.durations import parse_duration

        for option, value in (
            ("dry_run", dry_run),
            ("lite", lite),
            ("enforce_retention_duration", enforce_retention_duration),
        ):
            _check_bool(option, value)
        if retention is not None:
            parse_duration(retention)
        report: VacuumReport = self._maintain(
            "vacuum",
            {
                "retention": retention,
                "lite": lite,
                "dry_run": dry_run,
                "force": not enforce_retention_duration,
            },
        )
        return report

    def _maintain(self, method: str, kwargs: dict[str, Any]) -> Any:
        from raydelta.progress import wait_with_progress

        handle = self.cleanup_actor

        def read() -> tuple[str, int, int] | None:
            import ray

            status = ray.get(handle.progress.remote(), timeout=1)
            if status.get("state") == "idle":
                return None
            return (
                f"{method}: {status.get('stage')}",
                status.get("done", 0),
                status.get("total", 0),
            )

        return wait_with_progress(getattr(handle, method).remote(**kwargs), read, desc=method)

    # --- notebook manners -------------------------------------------------------------

    def __repr__(self) -> str:
        return f"raydelta.Table({self.uri!r})"

    def _repr_html_(self) -> str:
        try:
            snap = self.snapshot()
        except TableNotFoundError:
            return f"<b>raydelta.Table</b> <code>{html.escape(self.uri)}</code> (no table yet)"
        return f"<b>raydelta.Table</b><br>{snap._repr_html_()}"


__all__ = ["History", "Table", "Transaction", "create_table", "open_table", "release_table"]
