"""The columnar ``stats`` fast path never accepts what the per-file checker refuses.

:mod:`raydelta.protocol.stats_columnar` may decline good input (the caller
then checks file by file) but must never accept bad input, and when it
accepts it returns the same ``numRecords``. Hypothesis generates commits of
statistics, many with defects spliced into their JSON text, and compares
the two paths.
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import event, given, settings
from hypothesis import strategies as st

from raydelta.protocol.actions import AddFile, Metadata, Protocol
from raydelta.protocol.errors import InvalidFileActionError
from raydelta.protocol.file_action_rules import StatsChecker
from raydelta.protocol.table_configuration import TableConfiguration


def _field(name: str, type_: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": True, "metadata": {}}


SCHEMA = {
    "type": "struct",
    "fields": [
        _field("i", "integer"),
        _field("l", "long"),
        _field("b", "byte"),
        _field("d", "double"),
        _field("s", "string"),
        _field("day", "date"),
        _field("ts", "timestamp"),
        _field("flag", "boolean"),
        _field("nested", {"type": "struct", "fields": [_field("x", "long")]}),
    ],
}
CONFIG = TableConfiguration(
    Protocol(minReaderVersion=1, minWriterVersion=2),
    Metadata(id="t", schemaString=json.dumps(SCHEMA), partitionColumns=[]),
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=6),
    st.sampled_from(["2024-01-02", "2024-01-02T03:04:05.000Z", "NaN", "Infinity", "x"]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=2), st.dictionaries(st.text(max_size=3), inner, max_size=2)
    ),
    max_leaves=4,
)
plain_values = {
    "i": st.integers(min_value=-(2**31), max_value=2**31 - 1),
    "l": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "b": st.integers(min_value=-128, max_value=127),
    "d": st.floats(allow_nan=False, allow_infinity=False),
    "s": st.text(max_size=8),
    "day": st.dates().map(str),
    "ts": st.datetimes().map(lambda t: t.strftime("%Y-%m-%dT%H:%M:%S.000Z")),
}


@st.composite
def stats_texts(draw: st.DrawFn) -> str:
    columns = draw(st.lists(st.sampled_from(sorted(plain_values)), unique=True, max_size=4))
    values = {c: draw(plain_values[c]) for c in columns}
    stats: dict[str, Any] = {
        "numRecords": draw(st.integers(min_value=0, max_value=10**6)),
        "minValues": dict(values),
        "maxValues": dict(values),
        "nullCount": {c: draw(st.integers(min_value=0, max_value=10)) for c in columns},
    }
    if draw(st.booleans()):
        stats["minValues"]["nested"] = {"x": draw(plain_values["l"])}
    if draw(st.booleans()):
        stats["tightBounds"] = draw(st.booleans())
    defect = draw(st.integers(min_value=0, max_value=9))
    if defect == 1:  # a value of any JSON shape in a typed place
        where = draw(st.sampled_from(["numRecords", "minValues", "maxValues", "nullCount"]))
        if where == "numRecords" or not columns:
            stats["numRecords"] = draw(json_values)
        else:
            stats[where][draw(st.sampled_from(columns))] = draw(json_values)
    elif defect == 2:
        stats["tightBounds"] = draw(json_values)
    elif defect == 3 and columns:
        stats["nullCount"][columns[0]] = draw(st.integers(min_value=-5, max_value=-1))
    elif defect == 4:
        stats["numRecords"] = -draw(st.integers(min_value=1, max_value=5))
    text = json.dumps(stats, separators=(",", ":"))
    if defect == 5:  # damage the text itself
        cut = draw(st.integers(min_value=0, max_value=len(text)))
        text = (
            text[:cut]
            + draw(st.sampled_from(["}", "{", "}\n{", "\n", ",", '"', "}{}"]))
            + text[cut:]
        )
    elif defect == 6:
        text = text[: draw(st.integers(min_value=1, max_value=len(text)))]
    elif defect == 7:  # a key given twice
        text = text[:-1] + ',"numRecords":' + json.dumps(draw(json_scalars)) + "}"
    return text


def _add(i: int, stats: str) -> AddFile:
    return AddFile(
        path=f"part-{i}.parquet",
        partitionValues={},
        size=1,
        modificationTime=0,
        dataChange=True,
        stats=stats,
    )


@settings(max_examples=400, deadline=None)
@given(st.lists(stats_texts(), min_size=1, max_size=8))
def test_fast_path_accepts_only_what_the_per_file_checker_accepts(texts: list[str]) -> None:
    texts = [t for t in texts if t]
    if not texts:
        return
    checker = StatsChecker(CONFIG)
    fast = checker._columnar.check(texts)
    files = [_add(i, t) for i, t in enumerate(texts)]
    try:
        slow: list[int | None] | None = checker.check_each(files)
    except InvalidFileActionError:
        slow = None
    event(f"fast path {'declined' if fast is None else 'accepted'}")
    event(f"per-file checker {'refused' if slow is None else 'accepted'}")
    if fast is not None:
        assert slow is not None, f"fast path accepted what the per-file checker refuses: {texts}"
        assert fast == slow


def test_plain_stats_are_decided_by_the_fast_path() -> None:
    stats = json.dumps(
        {
            "numRecords": 3,
            "minValues": {"l": 1, "day": "2024-01-01", "ts": "2024-01-01T00:00:00.000Z"},
            "maxValues": {"l": 9, "day": "2024-02-01", "ts": "2024-01-02T00:00:00.000Z"},
            "nullCount": {"l": 0, "day": 1, "ts": 0},
        }
    )
    assert StatsChecker(CONFIG)._columnar.check([stats, stats]) == [3, 3]


def test_a_bad_date_is_declined_by_the_fast_path_and_named_by_the_per_file_checker() -> None:
    good = json.dumps({"numRecords": 1, "minValues": {"day": "2024-01-01"}})
    bad = json.dumps({"numRecords": 1, "minValues": {"day": "yesterday"}})
    checker = StatsChecker(CONFIG)
    assert checker._columnar.check([good, bad]) is None
    files = [_add(0, good), _add(1, bad)] * 40  # above the fast path's threshold
    try:
        checker.check_all(files)
    except InvalidFileActionError as exc:
        assert "stats.minValues.day" in str(exc)
    else:
        raise AssertionError("a date that does not parse was accepted")
