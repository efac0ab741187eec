"""The driver-side front door of ``df.write.format("raydelta")...save()``.

PySpark's Python Data Source API refuses, in the JVM and before any Python
code of the source runs, the save modes ``errorifexists`` (Spark's default)
and ``ignore``, and any ``partitionBy(...)``. :func:`install` wraps
:class:`pyspark.sql.readwriter.DataFrameWriter` so that, for the formats
:func:`raydelta.spark.register` registered in the writer's session, ``save``
plans the write on the driver (:func:`raydelta.spark.write_plan.plan_write`) and
hands Spark only what it accepts: mode append or overwrite, and the plan as
an internal option.

Invariants:
- Writers of any other format behave exactly as without the wrapper: the
  wrapped methods record what they were given and call the originals.
- Refusals of the plan (schema mismatch, existing table under
  ErrorIfExists, bad options) are raised on the driver as one-line typed
  errors before Spark starts a job. A job that fails in a task or in the
  commit is re-raised as the raydelta error class its worker raised, with
  its one-line message (the Spark error is its ``__cause__``).
- Top-level table columns the DataFrame lacks are added as NULLs when they
  are nullable and not computed by the writer (delta-spark fills them the
  same way); a missing NOT NULL column is the data writer's error.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from raydelta.protocol import errors as error_classes
from raydelta.spark import options as opt

FORMATS_CONF = "spark.raydelta.formats"
RAY_ADDRESS_CONF = "spark.raydelta.rayAddress"
_STATE = "_raydelta_writer_state"
_ERROR_LINE = re.compile(r"raydelta\.protocol\.errors\.(\w+): ([^\n]*)")
_originals: dict[str, Callable[..., Any]] = {}


def registered_formats(spark: Any) -> set[str]:
    value = spark.conf.get(FORMATS_CONF, "") or ""
    return {name.strip().lower() for name in value.split(",") if name.strip()}


def _state(writer: Any) -> dict[str, Any]:
    state: dict[str, Any] | None = writer.__dict__.get(_STATE)
    if state is None:
        state = {"format": None, "mode": None, "options": {}, "partition_by": None}
        writer.__dict__[_STATE] = state
    return state


def install() -> None:
    """Wrap ``DataFrameWriter`` once per process (idempotent)."""
    from pyspark.sql.readwriter import DataFrameWriter

    if _originals:
        return
    for name in ("format", "mode", "option", "options", "partitionBy", "save"):
        _originals[name] = getattr(DataFrameWriter, name)

    def format(self: Any, source: str) -> Any:
        _state(self)["format"] = source
        return _originals["format"](self, source)

    def mode(self: Any, save_mode: str | None) -> Any:
        if save_mode is not None:
            _state(self)["mode"] = save_mode
        return _originals["mode"](self, save_mode)

    def option(self: Any, key: str, value: Any) -> Any:
        _state(self)["options"][key] = value
        return _originals["option"](self, key, value)

    def options(self: Any, **values: Any) -> Any:
        _state(self)["options"].update(values)
        return _originals["options"](self, **values)

    def partition_by(self: Any, *cols: Any) -> Any:
        if len(cols) == 1 and isinstance(cols[0], list | tuple):
            cols = tuple(cols[0])
        _state(self)["partition_by"] = [str(c) for c in cols]
        return _originals["partitionBy"](self, *cols)

    def save(
        self: Any,
        path: str | None = None,
        format: str | None = None,
        mode: str | None = None,
        partitionBy: Any = None,
        **values: Any,
    ) -> None:
        self.mode(mode).options(**values)
        if partitionBy is not None:
            self.partitionBy(partitionBy)
        if format is not None:
            self.format(format)
        state = _state(self)
        chosen = (state["format"] or "").lower()
        if chosen and chosen in registered_formats(self._spark):
            save_through_raydelta(self, path, state)
            return
        _originals["save"](self, path)

    wrappers = {
        "format": format,
        "mode": mode,
        "option": option,
        "options": options,
        "partitionBy": partition_by,
        "save": save,
    }
    for name, wrapper in wrappers.items():
        setattr(DataFrameWriter, name, wrapper)


def save_through_raydelta(writer: Any, path: str | None, state: dict[str, Any]) -> None:
    """Plan on the driver, then run Spark's append/overwrite with the plan."""
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.readwriter import DataFrameWriter

    from raydelta.spark.write_plan import plan_write, save_mode_name

    spark, frame = writer._spark, writer._df
    options = {str(k): v for k, v in state["options"].items() if v is not None}
    uri = path or opt.option(options, "path")
    if not uri:
        raise error_classes.InvalidArgumentError(
            "the raydelta format needs a path: .save(uri) or .option('path', uri)"
        )
    options.pop("path", None)
    plan = plan_write(
        str(uri),
        spark_schema_json=frame.schema.json(),
        arrow_schema=to_arrow_schema(frame.schema),
        save_mode=save_mode_name(state["mode"]),
        partition_by=state["partition_by"],
        options=options,
        ray_address=opt.ray_address(options, spark.conf.get(RAY_ADDRESS_CONF, None) or None),
        default_user_metadata=spark.conf.get(
            "spark.databricks.delta.commitInfo.userMetadata", None
        ),
        dynamic_default=(
            str(spark.conf.get("spark.sql.sources.partitionOverwriteMode", "static")).lower()
            == "dynamic"
        ),
    )
    if plan is None:
        return
    if not plan.create:
        frame = with_missing_columns(frame, plan.metadata.schema_string or "")
    fresh = DataFrameWriter(frame)
    _originals["format"](fresh, state["format"])
    _originals["mode"](fresh, "overwrite" if plan.overwrite else "append")
    for key, value in options.items():
        _originals["option"](fresh, key, value)
    _originals["option"](fresh, opt.PLAN_OPTION, plan.to_json())
    # Python data sources are looked up through the JVM thread's active
    # session; a Python thread of its own (concurrent writers) has none.
    spark._jvm.org.apache.spark.sql.SparkSession.setActiveSession(spark._jsparkSession)
    try:
        _originals["save"](fresh, str(uri))
    except Exception as error:
        typed = raydelta_error_in(error)
        if typed is None:
            raise
        raise typed from error


def raydelta_error_in(error: BaseException) -> error_classes.RaydeltaError | None:
    """The raydelta error a Spark worker raised, found in Spark's error text."""
    found = _ERROR_LINE.findall(str(error))
    for name, message in reversed(found):
        cls = getattr(error_classes, name, None)
        if isinstance(cls, type) and issubclass(cls, error_classes.RaydeltaError):
            try:
                return cls(message.strip())
            except TypeError:
                continue
    return None


def with_missing_columns(frame: Any, schema_string: str) -> Any:
    """``frame`` plus NULL columns for nullable table columns it lacks."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType as SparkStructType

    from raydelta.spark.write_plan import missing_nullable_fields

    missing = missing_nullable_fields(schema_string, frame.columns)
    if not missing:
        return frame
    spark_fields = SparkStructType.fromJson({"type": "struct", "fields": missing}).fields
    return frame.select("*", *[F.lit(None).cast(f.dataType).alias(f.name) for f in spark_fields])
