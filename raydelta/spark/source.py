"""The ``raydelta`` Python data source: which reader or writer serves a call.

Invariants:
- The path is the table URI; every call reads the log itself (no state
  survives between Spark's calls except the planning worker's snapshot cache).
- Writes without a driver plan (Spark's own append/overwrite, reached
  without :mod:`raydelta.spark.front_door`) are planned here with the same
  rules, so no write path skips schema enforcement.
- Commits connect to the Ray cluster the registered class carries
  (:attr:`RaydeltaDataSource.ray_address`), so Spark's Python workers
  commit through the same ``TableActor`` as every other writer.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
)
from pyspark.sql.types import StructType as SparkStructType

from raydelta.protocol.errors import InvalidArgumentError
from raydelta.spark import options as opt


class RaydeltaDataSource(DataSource):
    """``spark.read/write.format("raydelta")``; subclasses made by
    :func:`raydelta.spark.register` carry the Ray address and the name."""

    ray_address: ClassVar[str | None] = None
    format_name: ClassVar[str] = "raydelta"
    min_splits: ClassVar[int] = 8
    """Minimum read splits: the registering session's default parallelism."""

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def _uri(self) -> str:
        path = opt.option(self.options, "path")
        if not path:
            raise InvalidArgumentError(
                f"the {self.format_name} format needs a path: .load(uri) / .save(uri)"
            )
        return path

    def schema(self) -> SparkStructType:
        from raydelta.spark.reader import cached_snapshot, spark_schema_json

        read = opt.ReadOptions.parse(self.options)
        if read.change_feed:
            from raydelta.spark.changes import change_feed_schema_json

            return SparkStructType.fromJson(json.loads(change_feed_schema_json(self._uri(), read)))
        snapshot = cached_snapshot(self._uri(), read)
        return SparkStructType.fromJson(json.loads(spark_schema_json(snapshot.schema)))

    def reader(self, schema: SparkStructType) -> DataSourceReader:
        read = opt.ReadOptions.parse(self.options)
        if read.change_feed:
            from raydelta.spark.changes import ChangeFeedReader

            return ChangeFeedReader(self._uri(), read)
        from raydelta.spark.reader import SnapshotReader

        return SnapshotReader(self._uri(), read, min_splits=self.min_splits)

    def writer(self, schema: SparkStructType, overwrite: bool) -> DataSourceArrowWriter:
        from raydelta.spark.write_plan import WritePlan, plan_write
        from raydelta.spark.writer import BatchWriter

        planned = opt.option(self.options, opt.PLAN_OPTION)
        if planned is not None:
            return BatchWriter(WritePlan.from_json(planned))
        from pyspark.sql.pandas.types import to_arrow_schema

        plan = plan_write(
            self._uri(),
            spark_schema_json=schema.json(),
            arrow_schema=to_arrow_schema(schema),
            save_mode="Overwrite" if overwrite else "Append",
            partition_by=None,
            options=self.options,
            ray_address=opt.ray_address(self.options, self.ray_address),
        )
        if plan is None:  # txnVersion already written
            from raydelta.spark.writer import NothingToWrite

            return NothingToWrite()
        return BatchWriter(plan)

    def streamWriter(self, schema: SparkStructType, overwrite: bool) -> DataSourceStreamArrowWriter:
        from raydelta.spark.streaming import StreamSink

        return StreamSink(
            self._uri(),
            schema_json=schema.json(),
            complete=overwrite,
            options=dict(self.options),
            ray_address=opt.ray_address(self.options, self.ray_address),
        )

    def streamReader(self, schema: SparkStructType) -> DataSourceStreamReader:
        from raydelta.spark.streaming import StreamSource

        return StreamSource(self._uri(), dict(self.options))


def bound_source(
    *, name: str, ray_address: str | None, min_splits: int = 8
) -> type[RaydeltaDataSource]:
    """A subclass named ``name`` carrying ``ray_address`` and ``min_splits``. A
    class that is not importable by name is pickled by value, so the address
    travels with it to Spark's Python workers."""
    qualname = f"RaydeltaDataSource_{name}"
    body: dict[str, Any] = {
        "ray_address": ray_address,
        "format_name": name,
        "min_splits": min_splits,
        "__qualname__": qualname,
        "__module__": "__raydelta_bound__",
    }
    return type(qualname, (RaydeltaDataSource,), body)
