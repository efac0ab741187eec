"""Durations: the one spelling of a retention (API, CLI and table properties).

A duration is a :class:`datetime.timedelta` or a string of ``<number> <unit>``
pairs such as ``"7 days"``, ``"168 hours"``, ``"interval 1 week"`` (Spark's
calendar-interval syntax, which Delta's ``delta.logRetentionDuration`` and
``delta.deletedFileRetentionDuration`` use).

Invariants:
- :func:`parse_duration` is the only parser of user-given durations; table
  properties go through :func:`raydelta.protocol.table_configuration.parse_interval_ms`,
  which accepts the same strings.
- A duration is never negative; months and years (no fixed length) are refused.
"""

from __future__ import annotations

from datetime import timedelta

from raydelta.protocol.errors import InvalidArgumentError, InvalidTableError
from raydelta.protocol.table_configuration import parse_interval_ms


def parse_duration(value: timedelta | str, *, name: str = "retention") -> timedelta:
    """``value`` as a non-negative :class:`timedelta`.

    >>> parse_duration("7 days")
    datetime.timedelta(days=7)
    >>> parse_duration(timedelta(hours=1))
    datetime.timedelta(seconds=3600)

    Raises :class:`InvalidArgumentError` naming ``name`` for a negative
    duration, an unparsable string or a value of another type.
    """
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise InvalidArgumentError(f"{name} must not be negative, got {value}")
        return value
    if isinstance(value, str):
        try:
            return timedelta(milliseconds=parse_interval_ms(value))
        except InvalidTableError as exc:
            raise InvalidArgumentError(
                f"{name}: expected a duration such as '7 days' or '168 hours', got {value!r}"
                f" ({exc})"
            ) from exc
    raise InvalidArgumentError(
        f"{name}: expected a datetime.timedelta or a duration string such as '7 days',"
        f" got {type(value).__name__}"
    )


def duration_ms(value: timedelta | str | None, *, name: str = "retention") -> int | None:
    """:func:`parse_duration` in whole milliseconds (None stays None)."""
    if value is None:
        return None
    return int(parse_duration(value, name=name) / timedelta(milliseconds=1))
