"""DELETE's and UPDATE's reports: the fields they share are declared once, yet
each report keeps delta-spark's field names, aliases, defaults and order.

The expected lists below are the reports' fields as they were declared one by
one (before the shared fields moved to common bases); the order matters,
since ``commitInfo.operationMetrics`` is written in it.
"""

from __future__ import annotations

import json

import pytest
from pydantic.alias_generators import to_camel

from raydelta.protocol.dml_metrics import DeleteMetrics, DmlMetrics, UpdateMetrics

DELETE_FIELDS = (
    "num_deleted_rows",
    "num_added_files",
    "num_removed_files",
    "num_copied_rows",
    "num_added_change_files",
    "change_file_bytes",
    "num_added_bytes",
    "num_removed_bytes",
    "num_deletion_vectors_added",
    "num_deletion_vectors_removed",
    "num_deletion_vectors_updated",
    "num_files_before_skipping",
    "num_files_after_skipping",
    "execution_time_ms",
    "scan_time_ms",
    "rewrite_time_ms",
)
UPDATE_FIELDS = (
    "num_updated_rows",
    "num_added_files",
    "num_removed_files",
    "num_copied_rows",
    "num_added_change_files",
    "change_file_bytes",
    "num_added_bytes",
    "num_removed_bytes",
    "num_deletion_vectors_added",
    "num_deletion_vectors_removed",
    "num_deletion_vectors_updated",
    "execution_time_ms",
    "scan_time_ms",
    "rewrite_time_ms",
)
CASES = [(DeleteMetrics, DELETE_FIELDS), (UpdateMetrics, UPDATE_FIELDS)]


@pytest.mark.parametrize(("kind", "names"), CASES)
def test_fields_names_aliases_and_defaults_are_as_declared_before(
    kind: type[DmlMetrics], names: tuple[str, ...]
) -> None:
    assert tuple(kind.model_fields) == names
    for name, info in kind.model_fields.items():
        assert info.alias == to_camel(name)
        assert info.annotation is int
        assert info.default == 0
    assert kind().model_dump() == dict.fromkeys(names, 0)


@pytest.mark.parametrize(("kind", "names"), CASES)
def test_a_filled_in_report_serializes_as_before(
    kind: type[DmlMetrics], names: tuple[str, ...]
) -> None:
    values = {name: 1000 + index for index, name in enumerate(names)}
    report = kind(**values)
    by_alias = {to_camel(name): value for name, value in values.items()}
    assert list(report.model_dump().items()) == list(values.items())
    assert list(report.model_dump(by_alias=True).items()) == list(by_alias.items())
    assert report.model_dump_json() == json.dumps(values, separators=(",", ":"))
    assert report.model_dump_json(by_alias=True) == json.dumps(by_alias, separators=(",", ":"))
    assert list(report.operation_metrics().items()) == [(k, str(v)) for k, v in by_alias.items()]
    assert report.to_dict() == values
    assert kind(**by_alias) == report  # populated by alias too
    assert kind.model_validate_json(report.model_dump_json(by_alias=True)) == report
