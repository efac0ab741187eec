"""Date and time functions: parts (``year`` ... ``second``, ``dayofweek``,
``dayofyear``, ``weekofyear``, ``quarter``), arithmetic (``date_add``,
``date_sub``, ``datediff``, ``add_months``, ``months_between``,
``last_day``, ``next_day``), truncation (``date_trunc``, ``trunc``),
conversion (``to_date``, ``to_timestamp``, ``date_format``,
``unix_timestamp``, ``from_unixtime``, ``make_date``, ``timestamp_seconds``,
``unix_date``, ``unix_seconds``...) and the clock (``current_date``,
``current_timestamp``, ``now``).

Invariants:
- The session time zone is UTC (raydelta's): zoned timestamps are read and
  written in UTC, as Spark with ``spark.sql.session.timeZone=UTC``.
- The clock is the ``now`` of the operation, passed in, the same for every
  row and every expression of one operation (Spark fixes it once per query).
- ANSI (Spark 4's default): text that is not a date in the pattern, or a
  date that does not exist, raises :class:`InvalidExpressionError`; a unit
  ``date_trunc``/``trunc`` does not know is NULL, as in Spark.
"""

from __future__ import annotations

import calendar
import datetime as dt
import math
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
from sqlglot import exp

from raydelta.protocol.errors import InvalidExpressionError
from raydelta.protocol.expression_types import Value, cast
from raydelta.protocol.functions import datetime_patterns as patterns
from raydelta.protocol.functions.registry import TEMPORAL, Monotonic, Registry
from raydelta.protocol.functions.values import arguments, as_type, constant, rowwise

if TYPE_CHECKING:
    from raydelta.protocol.expression_evaluation import Evaluator

REGISTRY = Registry("dates")
UTC = dt.UTC
TIMESTAMP = pa.timestamp("us", tz="UTC")
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)

_PARTS: dict[type[exp.Expr], str] = {
    exp.Year: "year",
    exp.Month: "month",
    exp.Day: "day",
    exp.DayOfMonth: "day",
    exp.Hour: "hour",
    exp.Minute: "minute",
    exp.Second: "second",
    exp.Quarter: "quarter",
    exp.DayOfYear: "day_of_year",
    exp.WeekOfYear: "iso_week",
}


def _temporal(ev: Evaluator, node: exp.Expr) -> Value:
    value = ev.value(node)
    if pa.types.is_string(value.type):
        return cast(value, pa.timestamp("us"))
    if pa.types.is_null(value.type):
        return value.cast(pa.timestamp("us"))
    return value


@REGISTRY.function("year", nodes=(exp.Year,), monotonic=Monotonic("this", TEMPORAL))
def year(ev: Evaluator, node: exp.Year) -> Value:
    """The year of a date or timestamp (int); non-decreasing in its argument."""
    return date_part(ev, node)


@REGISTRY.function(
    "month",
    "day",
    "dayofmonth",
    "hour",
    "minute",
    "second",
    "quarter",
    "dayofyear",
    "weekofyear",
    nodes=tuple(p for p in _PARTS if p is not exp.Year),
)
def date_part(ev: Evaluator, node: exp.Expr) -> Value:
    """A field of a date or timestamp (int)."""
    return getattr(pc, _PARTS[type(node)])(_temporal(ev, node.this)).cast(pa.int32())


@REGISTRY.function("dayofweek", nodes=(exp.DayOfWeek,))
def dayofweek(ev: Evaluator, node: exp.DayOfWeek) -> Value:
    """The day of the week, 1 (Sunday) to 7 (Saturday)."""
    days = pc.day_of_week(_temporal(ev, node.this), count_from_zero=False, week_start=7)
    return days.cast(pa.int32())


@REGISTRY.function("weekday", anonymous=("weekday",), arity=(1, 1))
def weekday(ev: Evaluator, node: exp.Anonymous) -> Value:
    """The day of the week, 0 (Monday) to 6 (Sunday)."""
    return pc.day_of_week(_temporal(ev, arguments(node)[0])).cast(pa.int32())


def _date(ev: Evaluator, node: exp.Expr) -> Value:
    return as_type(ev, node, pa.date32())


def _timestamp(ev: Evaluator, node: exp.Expr) -> Value:
    value = ev.value(node)
    if pa.types.is_timestamp(value.type) and value.type.tz is not None:
        return value
    return as_type(ev, node, TIMESTAMP)


@REGISTRY.function(
    "date_add", "date_sub", "dateadd", nodes=(exp.TsOrDsAdd,), monotonic=Monotonic("this", TEMPORAL)
)
def date_add(ev: Evaluator, node: exp.TsOrDsAdd) -> Value:
    """``date_add(d, n)``/``date_sub(d, n)``: ``d`` plus (minus) ``n`` days."""
    unit = node.args.get("unit")
    if unit is not None and unit.name.upper() != "DAY":
        raise ev.refuse(f"date_add by {unit.name}")
    days = as_type(ev, node.expression, pa.int32())
    return rowwise(lambda d, n: d + dt.timedelta(days=n), [_date(ev, node.this), days], pa.date32())


@REGISTRY.function("datediff", nodes=(exp.DateDiff,))
def datediff(ev: Evaluator, node: exp.DateDiff) -> Value:
    """``datediff(end, start)``: the days from ``start`` to ``end`` (int)."""
    if node.args.get("unit") is not None:
        raise ev.refuse("datediff with a unit")
    end = _date(ev, node.this).cast(pa.int32())
    start = _date(ev, node.expression).cast(pa.int32())
    return pc.subtract(end, start)


def _add_months(day: dt.date, months: int) -> dt.date:
    total = day.year * 12 + day.month - 1 + months
    year, month = divmod(total, 12)
    last = calendar.monthrange(year, month + 1)[1]
    return dt.date(year, month + 1, min(day.day, last))


@REGISTRY.function("add_months", nodes=(exp.AddMonths,), monotonic=Monotonic("this", TEMPORAL))
def add_months(ev: Evaluator, node: exp.AddMonths) -> Value:
    """``add_months(d, n)``: ``d`` plus ``n`` months (the day clamped to the month)."""
    months = as_type(ev, node.expression, pa.int32())
    return rowwise(_add_months, [_date(ev, node.this), months], pa.date32())


def _is_last_day(v: dt.datetime) -> bool:
    return v.day == calendar.monthrange(v.year, v.month)[1]


def _months_between(a: dt.datetime, b: dt.datetime, round_off: bool) -> float:
    """Spark's ``monthsBetween``: whole seconds of the day, 31-day months,
    ``Math.round(diff * 1e8) / 1e8``."""
    a, b = a.astimezone(UTC), b.astimezone(UTC)
    months = float((a.year * 12 + a.month) - (b.year * 12 + b.month))
    if a.day == b.day or (_is_last_day(a) and _is_last_day(b)):
        return months
    seconds_a = a.hour * 3600 + a.minute * 60 + a.second
    seconds_b = b.hour * 3600 + b.minute * 60 + b.second
    seconds = (a.day - b.day) * 86400 + seconds_a - seconds_b
    diff = months + seconds / float(31 * 86400)
    if not round_off:
        return diff
    return math.floor(diff * 1e8 + 0.5) / 1e8


@REGISTRY.function("months_between", nodes=(exp.MonthsBetween,))
def months_between(ev: Evaluator, node: exp.MonthsBetween) -> Value:
    """``months_between(a, b[, roundOff])``: months from ``b`` to ``a`` (double;
    31-day months for the fraction, rounded to 8 digits unless roundOff is false)."""
    round_off = node.args.get("roundoff")
    flag = True if round_off is None else bool(constant(ev, round_off, "roundOff"))
    values = [_timestamp(ev, node.this), _timestamp(ev, node.expression)]
    return rowwise(lambda a, b: _months_between(a, b, flag), values, pa.float64())


@REGISTRY.function("last_day", nodes=(exp.LastDay,))
def last_day(ev: Evaluator, node: exp.LastDay) -> Value:
    """The last day of the month of ``d``."""
    return rowwise(
        lambda d: d.replace(day=calendar.monthrange(d.year, d.month)[1]),
        [_date(ev, node.this)],
        pa.date32(),
    )


_DAYS = {
    "MO": 0,
    "MON": 0,
    "MONDAY": 0,
    "TU": 1,
    "TUE": 1,
    "TUESDAY": 1,
    "WE": 2,
    "WED": 2,
    "WEDNESDAY": 2,
    "TH": 3,
    "THU": 3,
    "THURSDAY": 3,
    "FR": 4,
    "FRI": 4,
    "FRIDAY": 4,
    "SA": 5,
    "SAT": 5,
    "SATURDAY": 5,
    "SU": 6,
    "SUN": 6,
    "SUNDAY": 6,
}


@REGISTRY.function("next_day", nodes=(exp.NextDay,))
def next_day(ev: Evaluator, node: exp.NextDay) -> Value:
    """``next_day(d, 'Mon')``: the first such weekday after ``d``."""

    def one(day: dt.date, name: str) -> dt.date:
        wanted = _DAYS.get(name.strip().upper())
        if wanted is None:
            raise InvalidExpressionError(f"{name!r} is not a day of the week in {ev.sql!r}")
        return day + dt.timedelta(days=(wanted - day.weekday() - 1) % 7 + 1)

    return rowwise(one, [_date(ev, node.this), ev.string(node.expression)], pa.date32())


_TRUNC_UNITS = {
    "YEAR": "year",
    "YYYY": "year",
    "YY": "year",
    "QUARTER": "quarter",
    "MONTH": "month",
    "MM": "month",
    "MON": "month",
    "WEEK": "week",
    "DAY": "day",
    "DD": "day",
    "HOUR": "hour",
    "MINUTE": "minute",
    "SECOND": "second",
    "MILLISECOND": "millisecond",
    "MICROSECOND": "microsecond",
}


def _floor(value: Value, unit: str) -> Value:
    return pc.floor_temporal(value, unit=unit, week_starts_monday=True)


@REGISTRY.function("date_trunc", nodes=(exp.TimestampTrunc,), monotonic=Monotonic("this", TEMPORAL))
def date_trunc(ev: Evaluator, node: exp.TimestampTrunc) -> Value:
    """``date_trunc(unit, ts)``: ``ts`` truncated to the unit (timestamp);
    NULL for an unknown unit."""
    unit_node = node.args["unit"]
    name = unit_node.name if isinstance(unit_node, exp.Var) else constant(ev, unit_node, "unit")
    unit = _TRUNC_UNITS.get(str(name).upper())
    value = ev.array(_timestamp(ev, node.this))
    if unit is None:
        return pa.scalar(None, TIMESTAMP)
    return _floor(value, unit)


@REGISTRY.function("trunc", nodes=(exp.DateTrunc,), monotonic=Monotonic("this", TEMPORAL))
def trunc(ev: Evaluator, node: exp.DateTrunc) -> Value:
    """``trunc(d, fmt)``: ``d`` truncated to the year, quarter, month or week
    (date); NULL for another format."""
    name = constant(ev, node.args["unit"], "the format of trunc")
    unit = _TRUNC_UNITS.get(str(name).upper()) if name is not None else None
    value = ev.array(_date(ev, node.this))
    if unit not in ("year", "quarter", "month", "week"):
        return pa.scalar(None, pa.date32())
    return _floor(value, unit)


def _parse(ev: Evaluator, text: Value, strftime: str | None, out: pa.DataType) -> Value:
    regex = patterns.parser(patterns.tokens(strftime, ev.sql))

    def one(value: str) -> Any:
        parsed = patterns.parse_datetime(value, regex)
        if parsed is None:
            raise InvalidExpressionError(
                f"{value!r} does not match the datetime pattern in {ev.sql!r}", ev.sql
            )
        return parsed.date() if out == pa.date32() else parsed.replace(tzinfo=UTC)

    return rowwise(one, [text], out)


def _format_of(node: exp.Expr) -> tuple[bool, str | None]:
    """Whether a pattern was given, and its strftime text."""
    fmt = node.args.get("format")
    if fmt is None:
        return False, None
    return True, fmt.name if isinstance(fmt, exp.Literal) else None


@REGISTRY.function(
    "to_date", "date", nodes=(exp.TsOrDsToDate,), monotonic=Monotonic("this", TEMPORAL)
)
def to_date(ev: Evaluator, node: exp.TsOrDsToDate) -> Value:
    """``to_date(x[, fmt])``: ``x`` as a date, read in the pattern when given."""
    given, strftime = _format_of(node)
    if not given:
        return cast(ev.value(node.this), pa.date32())
    return _parse(ev, ev.string(node.this), strftime, pa.date32())


@REGISTRY.function("to_timestamp", "timestamp", nodes=(exp.StrToTime, exp.TimeStrToTime))
def to_timestamp(ev: Evaluator, node: exp.Expr) -> Value:
    """``to_timestamp(x[, fmt])``: ``x`` as a timestamp, read in the pattern when given."""
    given, strftime = _format_of(node)
    value = ev.value(node.this)
    if not given:
        return value if pa.types.is_timestamp(value.type) else cast(value, TIMESTAMP)
    return _parse(ev, ev.string(node.this), strftime, TIMESTAMP)


def _formatted(ev: Evaluator, value: Value, strftime: str | None) -> Value:
    pattern = patterns.tokens(strftime, ev.sql)
    return rowwise(
        lambda v: patterns.format_datetime(v.astimezone(UTC), pattern), [value], pa.string()
    )


@REGISTRY.function("date_format", nodes=(exp.TimeToStr,))
def date_format(ev: Evaluator, node: exp.TimeToStr) -> Value:
    """``date_format(ts, fmt)``: ``ts`` written in the pattern (string)."""
    _, strftime = _format_of(node)
    return _formatted(ev, _timestamp(ev, node.this), strftime)


@REGISTRY.function("from_unixtime", nodes=(exp.UnixToStr,))
def from_unixtime(ev: Evaluator, node: exp.UnixToStr) -> Value:
    """``from_unixtime(secs[, fmt])``: seconds since the epoch written in the
    pattern (``yyyy-MM-dd HH:mm:ss`` by default)."""
    given, strftime = _format_of(node)
    seconds = as_type(ev, node.this, pa.int64())
    moments = rowwise(lambda s: EPOCH + dt.timedelta(seconds=s), [seconds], TIMESTAMP)
    return _formatted(ev, moments, strftime if given else patterns.DEFAULT)


@REGISTRY.function("unix_timestamp", "to_unix_timestamp", nodes=(exp.StrToUnix,))
def unix_timestamp(ev: Evaluator, node: exp.StrToUnix) -> Value:
    """``unix_timestamp([x[, fmt]])``: seconds since the epoch (bigint) of a
    timestamp, a date or text in the pattern."""
    value = ev.value(node.this)
    if pa.types.is_string(value.type):
        _, strftime = _format_of(node)
        value = _parse(ev, value, strftime or patterns.DEFAULT, TIMESTAMP)
    elif not pa.types.is_timestamp(value.type):
        value = as_type(ev, node.this, TIMESTAMP)
    # Spark divides the microseconds as Java longs do: toward zero.
    return pc.divide(cast(value, TIMESTAMP).cast(pa.int64()), 1_000_000)


@REGISTRY.function("make_date", anonymous=("make_date",), arity=(3, 3))
def make_date(ev: Evaluator, node: exp.Anonymous) -> Value:
    """``make_date(y, m, d)``; a date that does not exist raises (ANSI)."""
    values = [as_type(ev, a, pa.int32()) for a in arguments(node)]

    def one(y: int, m: int, d: int) -> dt.date:
        try:
            return dt.date(y, m, d)
        except ValueError as error:
            raise InvalidExpressionError(f"no date {y}-{m}-{d} in {ev.sql!r}", ev.sql) from error

    return rowwise(one, values, pa.date32())


@REGISTRY.function("timestamp_seconds", anonymous=("timestamp_seconds",), arity=(1, 1))
def timestamp_seconds(ev: Evaluator, node: exp.Anonymous) -> Value:
    """Seconds since the epoch as a timestamp."""
    seconds = as_type(ev, arguments(node)[0], pa.int64())
    return pc.multiply_checked(seconds, 1_000_000).cast(pa.int64()).cast(TIMESTAMP)


@REGISTRY.function(
    "unix_date", nodes=(exp.UnixDate,), monotonic=Monotonic("this", frozenset({"date"}))
)
def unix_date(ev: Evaluator, node: exp.UnixDate) -> Value:
    """Days since 1970-01-01 (int)."""
    return _date(ev, node.this).cast(pa.int32())


_UNIX_UNITS: dict[type[exp.Expr], int] = {
    exp.UnixSeconds: 1_000_000,
    exp.UnixMillis: 1000,
    exp.UnixMicros: 1,
}


@REGISTRY.function(
    "unix_seconds",
    "unix_millis",
    "unix_micros",
    nodes=tuple(_UNIX_UNITS),
    monotonic=Monotonic("this", frozenset({"timestamp"})),
)
def unix_units(ev: Evaluator, node: exp.Expr) -> Value:
    """Seconds, milliseconds or microseconds since the epoch (bigint, floored)."""
    micros = _timestamp(ev, node.this).cast(pa.int64())
    divisor = _UNIX_UNITS[type(node)]
    return micros if divisor == 1 else floor_divide(micros, divisor)


def floor_divide(value: Value, divisor: int) -> Value:
    """Integer division rounding toward negative infinity (``divisor > 0``)."""
    negative = pc.less(value, 0)
    shifted = pc.if_else(negative, pc.subtract(value, divisor - 1), value)
    return pc.divide(shifted, divisor)


@REGISTRY.function(
    "current_date",
    "current_timestamp",
    "now",
    nodes=(exp.CurrentDate, exp.CurrentTimestamp),
    anonymous=("now",),
    arity=(0, 0),
)
def clock(ev: Evaluator, node: exp.Expr) -> Value:
    """The operation's date or time (fixed once per operation)."""
    if ev.now is None:
        raise ev.fail("current_timestamp()/current_date() need the write's time")
    now = ev.now if ev.now.tzinfo is not None else ev.now.replace(tzinfo=UTC)
    if isinstance(node, exp.CurrentDate):
        return pa.scalar(now.astimezone(UTC).date(), pa.date32())
    return pa.scalar(now, TIMESTAMP)
