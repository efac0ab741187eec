"""PySpark's Python Data Source API, backed by raydelta: the ``raydelta`` format.

>>> from raydelta.spark import register                                 # doctest: +SKIP
>>> register(spark)                                                   # doctest: +SKIP
>>> df.write.format("raydelta").partitionBy("day").save("/data/events")   # doctest: +SKIP
>>> spark.read.format("raydelta").load("/data/events").where("day = '2026-11-21'")  # doctest: +SKIP

Modules, one concern each: :mod:`~raydelta.spark.source` (the data source),
:mod:`~raydelta.spark.front_door` (the driver side of ``df.write``),
:mod:`~raydelta.spark.write_plan` (the driver's plan of a batch write),
:mod:`~raydelta.spark.writer` (batch writes' tasks and their one commit),
:mod:`~raydelta.spark.reader` (batch reads, filter pushdown),
:mod:`~raydelta.spark.changes` (``readChangeFeed``),
:mod:`~raydelta.spark.streaming` (Structured Streaming source and sink),
:mod:`~raydelta.spark.options` (option names and parsing).

Invariants:
- :func:`register` registers ``raydelta`` always, and ``delta`` only when the
  session has no JVM Delta source: where delta-spark's jars are present,
  ``format("delta")`` stays delta-spark's.
- Every commit goes through the table's ``TableActor`` in the Ray cluster
  :func:`register` was given (or this process is attached to).
"""

from __future__ import annotations

from typing import Any

from raydelta.spark.source import RaydeltaDataSource

__all__ = ["RaydeltaDataSource", "has_jvm_delta", "register"]

PUSHDOWN_CONF = "spark.sql.python.filterPushdown.enabled"


def has_jvm_delta(spark: Any) -> bool:
    """Whether the session resolves ``format("delta")`` to a JVM source
    (delta-spark's jars on its class path)."""
    jvm = spark._jvm
    try:
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            "delta", spark._jsparkSession.sessionState().conf()
        )
    except Exception:  # py4j raises the JVM's ClassNotFound / DATA_SOURCE_NOT_FOUND
        return False
    return True


def _default_parallelism(spark: Any) -> int:
    """The session's default parallelism (Spark's minimum split count for file
    sources), or 8 where the session has no SparkContext (Spark Connect)."""
    try:
        return max(1, int(spark.sparkContext.defaultParallelism))
    except Exception:  # Spark Connect sessions have no SparkContext
        return 8


def register(spark: Any, *, ray_address: str | None = None) -> list[str]:
    """Register the ``raydelta`` format (and the ``delta`` alias when the
    session has no JVM Delta source) with ``spark``; returns the names.

    ``ray_address``: the Ray cluster Spark's Python workers commit through;
    default: the cluster this process is attached to, else ``RAYDELTA_RAY_ADDRESS``,
    else a new local one per worker process. Also turns on Spark's filter
    pushdown for Python data sources and wraps ``DataFrameWriter`` so that
    every save mode and ``partitionBy`` work (:mod:`raydelta.spark.front_door`).
    """
    import ray

    from raydelta.spark import front_door
    from raydelta.spark.source import bound_source

    if ray_address is None and ray.is_initialized():
        ray_address = ray.get_runtime_context().gcs_address
    names = sorted(front_door.registered_formats(spark) | {"raydelta"})
    if "delta" not in names and not has_jvm_delta(spark):
        names.append("delta")
    min_splits = _default_parallelism(spark)
    for name in names:
        spark.dataSource.register(
            bound_source(name=name, ray_address=ray_address, min_splits=min_splits)
        )
    spark.conf.set(front_door.FORMATS_CONF, ",".join(names))
    if ray_address:
        spark.conf.set(front_door.RAY_ADDRESS_CONF, ray_address)
    spark.conf.set(PUSHDOWN_CONF, "true")
    front_door.install()
    return names
