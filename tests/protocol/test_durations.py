"""Retention has one spelling: a timedelta or a duration string."""

from __future__ import annotations

from datetime import timedelta

import pytest

from raydelta.protocol.durations import duration_ms, parse_duration
from raydelta.protocol.errors import InvalidArgumentError, RaydeltaError


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7 days", timedelta(days=7)),
        ("interval 7 days", timedelta(days=7)),
        ("168 hours", timedelta(hours=168)),
        ("1 week", timedelta(weeks=1)),
        ("1 day 12 hours", timedelta(days=1, hours=12)),
        ("0 days", timedelta(0)),
        ("90 MINUTES", timedelta(minutes=90)),
    ],
)
def test_strings_parse_to_the_same_duration_as_table_properties(
    text: str, expected: timedelta
) -> None:
    assert parse_duration(text) == expected
    assert duration_ms(text) == expected // timedelta(milliseconds=1)


def test_timedeltas_pass_through_and_none_stays_none() -> None:
    assert parse_duration(timedelta(hours=2)) == timedelta(hours=2)
    assert duration_ms(None) is None


@pytest.mark.parametrize(
    ("value", "fragment"),
    [
        (timedelta(days=-1), "must not be negative"),
        ("-1 days", "duration"),
        ("3 months", "duration"),
        ("soon", "duration"),
        (168, "timedelta"),
        (None, "timedelta"),
    ],
)
def test_bad_durations_raise_a_typed_error_saying_what_was_expected(
    value: object, fragment: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=fragment) as caught:
        parse_duration(value)  # type: ignore[arg-type]
    assert isinstance(caught.value, RaydeltaError) and isinstance(caught.value, ValueError)
    assert "retention" in str(caught.value)
