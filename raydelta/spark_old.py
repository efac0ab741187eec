"""Spark integration through PySpark's Python Data Source API (no Delta JVM jars).

>>> from raydelta.spark import register                                 # doctest: +SKIP
>>> register(spark)                                                   # doctest: +SKIP
>>> df.write.format("raydelta").mode("append").save("/data/events")   # doctest: +SKIP
>>> spark.read.format("raydelta").load("/data/events").count()        # doctest: +SKIP

Writing: each Spark task writes its rows through raydelta's one data writer
(schema enforcement, NOT NULL, invariants, CHECK constraints, generated and
default columns, column mapping, full statistics) as parquet files straight
into the table directory and returns their ``add`` actions; a violating row
fails its task and so the job, which then commits nothing. The job's
``commit`` sends all adds as ONE transaction through the table's
``TableActor`` (a blind append, or for ``overwrite`` a whole-table read
that removes every live file). A failed job commits nothing; its files
are unreferenced and VACUUM removes them later.

Reading: the snapshot's live files become Spark input partitions; each is
read with pyarrow, deletion vectors applied, partition columns filled from
the log. Option ``versionAsOf`` time-travels.

Invariants:
- The commit runs where Spark runs the data source's ``commit`` (a Python
  worker on the driver host), which connects to the Ray cluster named by the
  ``rayAddress`` option (default: the cluster of the process that called
  :func:`register`, else ``RAY_ADDRESS``, else a new local one).
- Column-mapped tables (``name`` and ``id`` mode) are read and written with
  physical names and field ids in the data files, logical names in Spark.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType as SparkStructType

from raydelta.protocol.errors import RaydeltaError, UnsupportedTableFeatureException
from raydelta.protocol.schema import StructType, parse_schema

_RAY_ADDRESS_ENV = "RAYDELTA_RAY_ADDRESS"


def register(spark: Any, *, ray_address: str | None = None) -> None:
    """Register the ``raydelta`` format with ``spark``.

    The registered class carries the Ray cluster address (``ray_address``, or
    the cluster this process is connected to): Spark runs the data source in
    its own Python workers, which must commit through the same ``TableActor``.
    """
    import ray

    if ray_address is None and ray.is_initialized():
        ray_address = ray.get_runtime_context().gcs_address
    # A class that is not importable by name is pickled by value, so the
    # address travels with it to Spark's Python workers.
    bound = type(
        "RaydeltaDataSourceBoundToCluster",
        (RaydeltaDataSource,),
        {"ray_address": ray_address, "__qualname__": "RaydeltaDataSourceBoundToCluster"},
    )
    spark.dataSource.register(bound)


def _option(options: dict[str, str], name: str) -> str | None:
    """Spark option keys are case-insensitive (and arrive lower-cased)."""
    wanted = name.lower()
    for key, value in options.items():
        if key.lower() == wanted:
            return value
    return None


def _ray_address(options: dict[str, str], bound: str | None) -> str | None:
    return _option(options, "rayAddress") or bound or os.environ.get(_RAY_ADDRESS_ENV) or None


def _table_schema(metadata_schema: str | None) -> StructType:
    return parse_schema(metadata_schema or '{"type":"struct","fields":[]}')


def _mapping_mode(configuration: dict[str, str]) -> str:
    return configuration.get("delta.columnMapping.mode", "none")


class RaydeltaDataSource(DataSource):
    """``spark.read/write.format("raydelta")``; the path is the table URI."""

    ray_address: str | None = None

    @classmethod
    def name(cls) -> str:
        return "raydelta"

    def _uri(self) -> str:
        path = self.options.get("path")
        if not path:
            raise RaydeltaError("the raydelta data source needs a path: .load(uri) / .save(uri)")
        return str(path)

    def schema(self) -> SparkStructType:
        from raydelta.storage.snapshot import load_snapshot

        snapshot = load_snapshot(self._uri())
        schema_string = snapshot.metadata.schema_string or '{"type":"struct","fields":[]}'
        return SparkStructType.fromJson(json.loads(schema_string))

    def reader(self, schema: SparkStructType) -> DataSourceReader:
        return _Reader(self._uri(), dict(self.options))

    def writer(self, schema: SparkStructType, overwrite: bool) -> DataSourceArrowWriter:
        return _Writer(self._uri(), dict(self.options), overwrite, self.ray_address)


@dataclass
class _FilePartition(InputPartition):
    add: dict[str, Any]


class _Reader(DataSourceReader):
    def __init__(self, uri: str, options: dict[str, str]) -> None:
        from raydelta.storage.snapshot import load_snapshot

        version = _option(options, "versionAsOf")
        snapshot = load_snapshot(uri, version=int(version) if version is not None else None)
        self.uri = uri
        self.schema_string = snapshot.metadata.schema_string
        self.configuration = dict(snapshot.metadata.configuration)
        self.partition_columns = list(snapshot.metadata.partition_columns)
        from raydelta.protocol.file_actions import ADD_TYPE, arrow_to_json

        self.adds = [arrow_to_json(row, ADD_TYPE) for row in snapshot.files.to_pylist()]

    def partitions(self) -> Sequence[InputPartition]:
        return [_FilePartition(add) for add in self.adds]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        from raydelta.storage.data_files import read_logical_file

        assert isinstance(partition, _FilePartition)
        schema = _table_schema(self.schema_string)
        table = read_logical_file(
            self.uri,
            partition.add,
            schema,
            self.partition_columns,
            column_mapping_mode=_mapping_mode(self.configuration),
        )
        yield from table.to_batches()


@dataclass
class _WrittenFiles(WriterCommitMessage):
    adds: list[str]
    """``AddFile`` actions as JSON bodies."""


class _Writer(DataSourceArrowWriter):
    """Each task writes its rows through the one data writer
    (:func:`raydelta.storage.data_writer.write_data`): the same schema
    enforcement, data rules and statistics as ``Table.append``."""

    def __init__(
        self, uri: str, options: dict[str, str], overwrite: bool, ray_address: str | None
    ) -> None:
        from raydelta.storage.data_writer import check_writable
        from raydelta.storage.snapshot import load_snapshot

        snapshot = load_snapshot(uri)
        self.uri = uri
        self.options = options
        self.ray_address = _ray_address(options, ray_address)
        self.overwrite = overwrite
        self.read_version = snapshot.version
        self.protocol = snapshot.protocol
        self.metadata = snapshot.metadata
        self.partition_columns = list(snapshot.metadata.partition_columns)
        check_writable(self.protocol, self.metadata)
        identity = [
            f.name
            for f in _table_schema(self.metadata.schema_string).fields
            if any(key.startswith("delta.identity.") for key in f.metadata)
        ]
        if identity:
            # Tasks write in parallel from one high-water mark: their values
            # would collide. Refuse rather than write duplicates.
            raise UnsupportedTableFeatureException(
                f"the raydelta Spark sink cannot write identity columns {identity}; "
                "use raydelta.Table.append"
            )

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        from raydelta.storage.data_writer import write_data

        batches = list(iterator)
        if not batches:
            return _WrittenFiles(adds=[])
        result = write_data(
            self.uri,
            pa.Table.from_batches(batches),
            protocol=self.protocol,
            metadata=self.metadata,
        )
        if result.metadata is not None or result.protocol is not None:
            raise RaydeltaError("a Spark task's write would change the table's metadata")
        return _WrittenFiles(adds=[json.dumps(add.to_json_dict()) for add in result.adds])

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        import ray

        from raydelta.actors.client import open_table
        from raydelta.protocol.actions import AddFile

        if not ray.is_initialized():
            ray.init(address=self.ray_address, log_to_driver=False)
        table = open_table(self.uri)
        adds = [
            AddFile.model_validate(json.loads(body))
            for message in messages
            if isinstance(message, _WrittenFiles)
            for body in message.adds
        ]
        if self.overwrite:
            snapshot = table.snapshot()
            txn = table.transaction(snapshot=snapshot).read_whole_table()
            for live in snapshot.add_files():
                txn.remove(live)
            operation, mode = "WRITE", "Overwrite"
        else:
            txn = table.transaction()
            operation, mode = "WRITE", "Append"
        txn.add(*adds)
        txn.commit(
            operation=operation,
            operation_parameters={"mode": mode, "partitionBy": json.dumps(self.partition_columns)},
        )

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing was committed; the written files stay unreferenced (VACUUM)."""
