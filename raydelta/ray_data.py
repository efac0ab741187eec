"""Ray Data integration: read a Delta table as a ``ray.data.Dataset``, write one into a table.

>>> import ray, raydelta.ray_data as rd                                  # doctest: +SKIP
>>> ds = ray.data.from_items([{"id": i, "day": "2026-11-24"} for i in range(3)])
>>> rd.write_delta(ds, "/data/events", partition_by=["day"])            # doctest: +SKIP
0
>>> rd.read_delta("/data/events", filter="id > 0").count()             # doctest: +SKIP
2

Reading (:func:`read_delta`): the snapshot is read from the log on the
driver (no actor needed); the files a filter may need are chosen there
(partition pruning and statistics skipping, :func:`raydelta.storage.scan.select_files`)
and split into groups of about equal bytes, one Ray Data read task per group.
Each task reads its files with :func:`raydelta.storage.scan.scan`.

Writing (:func:`write_delta`): a :class:`ray.data.Datasink`. Its write tasks
write parquet files in parallel through the one data writer
(:func:`raydelta.storage.data.writer.write_data`: schema enforcement, NOT
NULL, invariants, CHECK constraints, generated and default columns, column
mapping, full statistics) and return their ``add`` actions; the driver then
commits them all as ONE transaction through the table's ``TableActor``.

Invariants:
- A read returns exactly the live rows of the chosen version that satisfy the
  filter: deletion vectors applied, partition columns filled from the log,
  logical column names under column mapping; rows the filter rejects are
  removed, not only the files it prunes. Each file is read by one task.
- A write commits once, at the version it read when it started (its read
  version): concurrent appends are rebased by the actor, a concurrent
  metadata or protocol change fails it with delta-spark's exception. Several
  jobs writing one table at once each land every row exactly once.
- A write that fails (a task raises, a row breaks a rule, the commit is
  refused) commits nothing; files its tasks already wrote stay unreferenced
  until VACUUM removes them, as with Spark's failed jobs.
- A missing table is created from the dataset's schema (the first block's;
  ``partition_by`` and ``properties`` as given) in the same commit as the
  data: version 0 holds protocol, metadata and files, so a failed write
  leaves no table behind. When another job creates the table first, this
  job's files are appended to it if it has exactly the schema, partitioning
  and configuration they were written for, else the write fails with
  ``MetadataChangedException``. An existing table keeps its schema and
  partitioning: data that does not fit is refused.
- The driver reads the table's head from storage when the job starts, so
  the ``TableActor`` starts while the tasks write; only the commit waits
  for it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from raydelta.actors.table.transaction import Transaction
from raydelta.arguments import check_version
from raydelta.protocol.actions import AddFile
from raydelta.protocol.errors import (
    InvalidArgumentError,
    RaydeltaError,
    UnsupportedTableFeatureException,
)
from raydelta.protocol.events import IsolationLevel
from raydelta.protocol.file_actions import row_to_add
from raydelta.protocol.schema import StructType, contains_type
from raydelta.protocol.schema_arrow import to_arrow
from raydelta.storage.scan import Filter, scan, select_files

if TYPE_CHECKING:
    import ray.data
    from ray.data.block import Block

WriteMode = Literal["append", "overwrite"]
TASK_CHUNK_BYTES = 64 * 1024 * 1024
"""A read task yields one block per run of files of about this many bytes on disk."""
_SCAN_COLUMNS = ["path", "partitionValues", "deletionVector", "stats", "size"]


# --- reading ------------------------------------------------------------------------------


def read_delta(
    uri: str,
    *,
    columns: Sequence[str] | None = None,
    filter: Filter | None = None,
    version: int | None = None,
    storage_options: dict[str, Any] | None = None,
    override_num_blocks: int | None = None,
    concurrency: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
) -> ray.data.Dataset:
    """The live rows of the Delta table at ``uri`` as a ``ray.data.Dataset``.

    ``version`` time-travels. ``filter`` is Spark SQL text (it also prunes
    files by partition values and statistics when it is made of comparisons,
    ``IN``, ``IS NULL`` and ``AND``/``OR``/``NOT``), a
    :class:`~raydelta.protocol.predicates.Predicate`, or a pyarrow compute
    expression (rows only). ``ds.input_files()`` lists the data files read.

    Raises :class:`~raydelta.TableNotFoundError`,
    :class:`~raydelta.VersionNotFoundError` or
    :class:`~raydelta.InvalidArgumentError` (bad columns or filter) at once,
    before any task runs.
    """
    import ray.data

    source = DeltaDatasource(
        uri, columns=columns, filter=filter, version=version, storage_options=storage_options
    )
    dataset: ray.data.Dataset = ray.data.read_datasource(
        source,
        override_num_blocks=override_num_blocks,
        concurrency=concurrency,
        ray_remote_args=ray_remote_args,
    )
    return dataset


def _datasource_base() -> type:
    from ray.data import Datasource

    return Datasource


class DeltaDatasource(_datasource_base()):  # type: ignore[misc]
    """A ``ray.data.Datasource`` over one version of a Delta table."""

    def __init__(
        self,
        uri: str,
        *,
        columns: Sequence[str] | None = None,
        filter: Filter | None = None,
        version: int | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        from raydelta.storage.snapshot import load_snapshot
        from raydelta.storage.table_location import normalize_uri

        check_version(version)
        if isinstance(columns, str):
            raise InvalidArgumentError("columns must be a list of column names, not a string")
        self.uri = normalize_uri(uri)
        self.storage_options = storage_options
        snapshot = load_snapshot(self.uri, version=version, storage_options=storage_options)
        self.version = snapshot.version
        self.schema: StructType = snapshot.schema
        self.partition_columns = list(snapshot.metadata.partition_columns)
        self.mapping_mode = str(snapshot.table_configuration.column_mapping_mode.value)
        names = [f.name for f in self.schema.fields]
        self.columns = list(columns) if columns is not None else names
        unknown = [c for c in self.columns if c not in names]
        if unknown:
            raise InvalidArgumentError(f"unknown columns {unknown}; the table has {names}")
        self.filter = filter
        self.files = select_files(
            snapshot.files.select(_SCAN_COLUMNS),
            filter,
            self.schema,
            self.partition_columns,
            column_mapping_mode=self.mapping_mode,
        )

    def get_name(self) -> str:
        return "ReadDelta"

    def estimate_inmemory_data_size(self) -> int | None:
        return int(pc.sum(self.files.column("size")).as_py() or 0)

    def output_schema(self) -> pa.Schema | None:
        """The Arrow schema of the rows read (None when a variant column's
        stored form varies by file)."""
        wanted = StructType(tuple(f for f in self.schema.fields if f.name in self.columns))
        if any(contains_type(f.type, "variant") for f in wanted.fields):
            return None
        by_name = {f.name: f for f in to_arrow(wanted)}
        return pa.schema([by_name[c] for c in self.columns])

    def get_read_tasks(
        self,
        parallelism: int,
        per_task_row_limit: int | None = None,
        data_context: Any = None,
    ) -> list[Any]:
        from ray.data.block import BlockMetadata
        from ray.data.datasource import ReadTask

        schema = self.output_schema()
        groups = _balanced_groups(self.files.column("size").to_pylist(), max(1, parallelism))
        if not groups:  # no file to read: one task yields the empty result
            groups = [[]]
        tasks = []
        for indices in groups:
            files = self.files.take(pa.array(indices, type=pa.int64()))
            metadata = BlockMetadata(
                num_rows=None if self.filter is not None else _live_rows(files),
                size_bytes=int(pc.sum(files.column("size")).as_py() or 0),
                input_files=tuple(str(p) for p in files.column("path").to_pylist()),
                exec_stats=None,
            )
            tasks.append(
                ReadTask(
                    _FileGroupRead(self, files),
                    metadata,
                    schema=schema,
                    per_task_row_limit=per_task_row_limit,
                )
            )
        return tasks


class _FileGroupRead:
    """The work of one read task: scan its files a chunk at a time."""

    def __init__(self, source: DeltaDatasource, files: pa.Table) -> None:
        self.uri = source.uri
        self.storage_options = source.storage_options
        self.schema = source.schema
        self.partition_columns = source.partition_columns
        self.mapping_mode = source.mapping_mode
        self.columns = source.columns
        self.filter = source.filter
        self.files = files

    def __call__(self) -> Iterator[pa.Table]:
        if self.files.num_rows == 0:
            yield self._scan(self.files)
            return
        sizes = self.files.column("size").to_pylist()
        start, chunk_bytes = 0, 0
        for index, size in enumerate(sizes):
            chunk_bytes += size or 0
            if chunk_bytes >= TASK_CHUNK_BYTES or index == len(sizes) - 1:
                yield self._scan(self.files.slice(start, index + 1 - start))
                start, chunk_bytes = index + 1, 0

    def _scan(self, files: pa.Table) -> pa.Table:
        return scan(
            self.uri,
            files,
            self.schema,
            self.partition_columns,
            column_mapping_mode=self.mapping_mode,
            columns=self.columns,
            filter=self.filter,
            storage_options=self.storage_options,
        )


def _balanced_groups(sizes: Sequence[int | None], count: int) -> list[list[int]]:
    """File indexes in at most ``count`` groups of about equal total size (largest
    file first into the lightest group); each group keeps the files' log order."""
    groups: list[list[int]] = [[] for _ in range(min(count, len(sizes)))]
    if not groups:
        return []
    loads = [0] * len(groups)
    for index in sorted(range(len(sizes)), key=lambda i: -(sizes[i] or 0)):
        lightest = loads.index(min(loads))
        groups[lightest].append(index)
        loads[lightest] += sizes[index] or 0
    return [sorted(group) for group in groups if group]


def _live_rows(files: pa.Table) -> int | None:
    """Rows the files hold minus the rows their deletion vectors mark, or None
    when a file's statistics lack ``numRecords``."""
    from raydelta.protocol.statistics import parse_stats

    total = 0
    for stats_text, dv in zip(
        files.column("stats").to_pylist(), files.column("deletionVector").to_pylist(), strict=True
    ):
        stats = parse_stats(stats_text)
        if stats is None or stats.num_records is None:
            return None
        total += stats.num_records - int((dv or {}).get("cardinality") or 0)
    return total


# --- writing ------------------------------------------------------------------------------


def write_delta(
    dataset: ray.data.Dataset,
    uri: str,
    *,
    mode: WriteMode = "append",
    partition_by: Sequence[str] = (),
    properties: Mapping[str, str] | None = None,
    storage_options: dict[str, Any] | None = None,
    target_file_size: int | None = None,
    concurrency: int | None = None,
    ray_remote_args: dict[str, Any] | None = None,
) -> int:
    """Write ``dataset`` into the Delta table at ``uri`` in one commit; return its version.

    ``mode="append"`` adds the rows; ``"overwrite"`` replaces every row of the
    table. When there is no table, one is created from the dataset's schema,
    partitioned by ``partition_by``, with table ``properties``; an existing
    table's partitioning must match ``partition_by`` when it is given.
    The table's schema is enforced: a missing, extra or mistyped column, or a
    row that breaks a rule, fails the write and nothing is committed.
    Each write task receives about ``target_file_size`` bytes of rows (128 MiB
    by default) and writes files of at most that size, so a dataset of many
    small blocks makes a few files, not one per block.
    """
    sink = DeltaDatasink(
        uri,
        mode=mode,
        partition_by=partition_by,
        properties=properties,
        storage_options=storage_options,
        target_file_size=target_file_size,
    )
    try:
        dataset.write_datasink(sink, concurrency=concurrency, ray_remote_args=ray_remote_args)
    except Exception as exc:
        typed = _raydelta_cause(exc)
        if typed is not None and typed is not exc:
            raise typed from None
        raise
    if sink.committed_version is None:  # pragma: no cover - Ray always calls on_write_complete
        raise RaydeltaError("the Ray Data write finished without committing")
    return sink.committed_version


def _raydelta_cause(error: BaseException) -> RaydeltaError | None:
    """The raydelta error a Ray Data failure wraps (task errors arrive as
    ``RayTaskError`` / ``UserCodeException`` around the original), if any."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RaydeltaError):
            cause = getattr(current, "cause", None)  # RayTaskError(RaydeltaError) subclasses
            return cause if isinstance(cause, RaydeltaError) else current
        cause = getattr(current, "cause", None)
        current = cause if isinstance(cause, BaseException) else current.__cause__
    return None


def _datasink_base() -> type:
    from ray.data import Datasink

    return Datasink


class DeltaDatasink(_datasink_base()):  # type: ignore[misc]
    """A ``ray.data.Datasink`` that writes a Delta table and commits once.

    ``on_write_start`` (driver) opens the table, creating it when absent, and
    records the read version; ``write`` (tasks) writes data files and returns
    their ``add`` actions as JSON dicts; ``on_write_complete`` (driver) commits
    them through the ``TableActor``. Only the first part is shipped to tasks.
    """

    def __init__(
        self,
        uri: str,
        *,
        mode: WriteMode = "append",
        partition_by: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
        storage_options: dict[str, Any] | None = None,
        target_file_size: int | None = None,
    ) -> None:
        from raydelta.storage.data.writer import DEFAULT_TARGET_FILE_SIZE
        from raydelta.storage.table_location import normalize_uri

        if mode not in ("append", "overwrite"):
            raise InvalidArgumentError(f"mode must be 'append' or 'overwrite', got {mode!r}")
        if isinstance(partition_by, str):
            partition_by = (partition_by,)
        if target_file_size is not None and (
            not isinstance(target_file_size, int) or target_file_size <= 0
        ):
            raise InvalidArgumentError(
                f"target_file_size must be a positive int, got {target_file_size!r}"
            )
        self.uri = normalize_uri(uri)
        self.mode: WriteMode = mode
        self.partition_by = list(partition_by)
        self.properties = dict(properties or {})
        self.storage_options = storage_options
        self.target_file_size: int = target_file_size or DEFAULT_TARGET_FILE_SIZE
        self.protocol: Any = None
        self.metadata: Any = None
        self.committed_version: int | None = None
        self._driver: dict[str, Any] = {}
        """Driver-only state (table handle, transaction snapshot): never shipped."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_driver"] = {}
        return state

    def get_name(self) -> str:
        return "WriteDelta"

    @property
    def min_bytes_per_write(self) -> int:
        """Ray Data gathers blocks until a ``write`` call has about one target
        file's worth of rows (in memory; the file is smaller once encoded), as
        its parquet sink does with ``min_bytes_per_file``: a dataset of many
        small blocks becomes a few files, not one file per block."""
        return self.target_file_size

    # --- driver: start -----------------------------------------------------------------

    def on_write_start(self, schema: pa.Schema | None = None) -> None:
        """Read the table's head from storage (the ``TableActor`` starts meanwhile:
        nothing waits for it until the commit); a missing table gets the
        protocol and metadata of its version 0, committed with the data."""
        from raydelta.actors.table.client import TableClient, new_table_actions
        from raydelta.protocol.errors import TableNotFoundError
        from raydelta.protocol.schema_arrow import from_arrow
        from raydelta.storage.data.writer import check_writable
        from raydelta.storage.snapshot import load_snapshot, load_table_head

        table = TableClient.open(self.uri, storage_options=self.storage_options)
        try:
            head: Any = load_table_head(self.uri, storage_options=self.storage_options)
        except TableNotFoundError:
            head = None
        snapshot = None
        if head is None:
            if schema is None:
                raise InvalidArgumentError(
                    f"no Delta table at {self.uri} and the dataset has no schema to create one"
                ) from None
            protocol, metadata = new_table_actions(
                from_arrow(_table_schema(schema)),
                partition_by=self.partition_by,
                properties=self.properties,
            )
        else:
            protocol, metadata = head.protocol, head.metadata
            existing = list(metadata.partition_columns)
            if self.partition_by and self.partition_by != existing:
                raise InvalidArgumentError(
                    f"partition_by={self.partition_by} does not match the table's partition"
                    f" columns {existing}"
                )
            if self.mode == "overwrite":
                snapshot = load_snapshot(
                    self.uri, version=head.version, storage_options=self.storage_options
                )
        check_writable(protocol, metadata)
        _refuse_identity_columns(metadata.schema_string)
        self.protocol, self.metadata = protocol, metadata
        self._driver = {"table": table, "head": head, "snapshot": snapshot}

    # --- tasks: write ------------------------------------------------------------------

    def write(self, blocks: Iterable[Block], ctx: Any) -> list[dict[str, Any]]:
        from raydelta.storage.data.writer import write_data

        tables = _arrow_blocks(blocks)
        first = next(tables, None)
        if first is None:
            return []
        reader = pa.RecordBatchReader.from_batches(first.schema, _batches_of(first, tables))
        result = write_data(
            self.uri,
            reader,
            protocol=self.protocol,
            metadata=self.metadata,
            storage_options=self.storage_options,
            target_file_size=self.target_file_size,
        )
        if result.metadata is not None or result.protocol is not None:
            raise RaydeltaError("a Ray Data write task would change the table's metadata")
        return [add.to_json_dict() for add in result.adds]

    # --- driver: commit ----------------------------------------------------------------

    def on_write_complete(self, write_result: Any) -> None:
        if not self._driver:  # no block ever arrived: Ray skipped on_write_start
            self.on_write_start(None)
        adds = [
            AddFile.model_validate(body)
            for returned in write_result.write_returns
            for body in (returned or [])
        ]
        try:
            self.committed_version = self._commit(adds)
        finally:
            self._driver = {}

    def _commit(self, adds: list[AddFile]) -> int:
        from raydelta.actors.table.client import TableClient
        from raydelta.protocol.errors import MetadataChangedException, TableAlreadyExistsError
        from raydelta.protocol.events import CommitRequest, ReadSet

        table, head, snapshot = (self._driver[k] for k in ("table", "head", "snapshot"))
        parameters = {
            "mode": "Overwrite" if self.mode == "overwrite" else "Append",
            "partitionBy": json.dumps(list(self.metadata.partition_columns)),
        }
        if head is None:  # a new table: version 0 holds its protocol, metadata and data
            request = CommitRequest(
                txn_id=str(uuid.uuid4()),
                read_set=ReadSet(read_version=-1),
                actions=(self.protocol, self.metadata, *adds),
                operation="WRITE",
                operation_parameters=parameters,
                commit_time_ms=int(time.time() * 1000),
            )
            try:
                return TableClient._check(table._call("create", request))
            except TableAlreadyExistsError:
                # another job created it first: our files fit its table only if it
                # has exactly the schema, partitioning and configuration we wrote for
                head = table.head()
                winner = head.metadata
                if (
                    winner.schema_string != self.metadata.schema_string
                    or list(winner.partition_columns) != list(self.metadata.partition_columns)
                    or dict(winner.configuration) != dict(self.metadata.configuration)
                    or head.protocol != self.protocol
                ):
                    raise MetadataChangedException(
                        f"the table at {self.uri} was created by another writer with a"
                        " different schema, partitioning or configuration while this job wrote"
                    ) from None
                if self.mode == "overwrite":
                    snapshot = table.snapshot()
                    head = snapshot.state.head()
        txn = Transaction(table, head, isolation_level=IsolationLevel.WRITE_SERIALIZABLE)
        if snapshot is not None:
            txn.read_whole_table()
            for row in snapshot.files.to_pylist():
                txn.remove(row_to_add(row))
        txn.add(*adds)
        return int(txn.commit(operation="WRITE", operation_parameters=parameters))

    def on_write_failed(self, error: Exception) -> None:
        """Nothing was committed; files the tasks wrote stay unreferenced (VACUUM)."""
        self._driver = {}


def _table_schema(schema: pa.Schema) -> pa.Schema:
    """The dataset's schema as a table schema: Ray's large types become the
    Delta-mappable ones (strings and binaries are one type in Delta)."""
    fields = []
    for f in schema:
        kind = f.type
        if pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
            kind = pa.string()
        elif pa.types.is_large_binary(kind) or pa.types.is_binary_view(kind):
            kind = pa.binary()
        fields.append(f.with_type(kind))
    return pa.schema(fields)


def _refuse_identity_columns(schema_string: str | None) -> None:
    from raydelta.protocol.schema import parse_schema

    schema = parse_schema(schema_string or '{"type":"struct","fields":[]}')
    identity = [
        f.name for f in schema.fields if any(k.startswith("delta.identity.") for k in f.metadata)
    ]
    if identity:
        # Tasks write in parallel from one high-water mark: their values would collide.
        raise UnsupportedTableFeatureException(
            f"write_delta cannot write identity columns {identity}; use raydelta.Table.append"
        )


def _arrow_blocks(blocks: Iterable[Block]) -> Iterator[pa.Table]:
    from ray.data.block import BlockAccessor

    for block in blocks:
        table = BlockAccessor.for_block(block).to_arrow()
        if table.num_rows:
            yield table


def _batches_of(first: pa.Table, rest: Iterator[pa.Table]) -> Iterator[pa.RecordBatch]:
    schema = first.schema
    yield from first.to_batches()
    for table in rest:
        if table.schema != schema:
            table = table.cast(schema) if table.schema.names == schema.names else table
        yield from table.to_batches()


__all__ = ["DeltaDatasink", "DeltaDatasource", "read_delta", "write_delta"]
